"""``provisioner exec-nodes check``: per execution node of ``--exec-inventory``, reachable or
not, its ``ansible-runner worker --worker-info``, ansible-core and gdsfleet.gds versions (and
the collection's MANIFEST.json hash) against this controller's. Exit 0 when every node
matches, 1 when one does not (the table says which and why), 64 for bad input.

``provisioner exec-nodes fence --run RUN``: for every dispatch of the run recorded in the
ledger that did not end cleanly (not ``done``, ``failed``, ``fenced`` or ``redispatched``),
over SSH kill every process on its execution node tagged with its token and confirm none is
left (executors.fence), e.g. after the coordinator was killed with ``kill -9``. The ledger is
only read. Exit 0 when every one is fenced, 1 when one is still running or unreachable, 64 for
bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

HELP = ("check the execution nodes of --executor ssh against this controller, or fence a run's "
        "dispatches there")
# dispatches that ended cleanly: the worker side swept what they left when their worker ended


def add_exec_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    g = p.add_argument_group("execution nodes (--executor ssh; docs/scale.md)")
    g.add_argument("--exec-inventory", metavar="FILE", required=required,
                   help="Ansible inventory whose group gdsfleet_exec lists the execution nodes")
    if not any(a.dest == "known_hosts" for a in p._actions):
        g.add_argument("--known-hosts", metavar="FILE", action="append", default=[],
                       help="extra known_hosts file (repeatable)")
        g.add_argument("--ssh-config", metavar="FILE", default="~/.ssh/config",
                       help="OpenSSH client config to honour (default ~/.ssh/config; 'none' "
                            "to skip)")
        g.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                       help="TCP connect timeout to an execution node (default 10)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from provisioner.commands.status import add_ledger_arguments

    p.add_argument("action", choices=["check", "fence"],
                   help="check: probe every execution node; fence: kill what a run's "
                        "unfinished dispatches left on them (--run)")
    add_exec_arguments(p, required=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--run", metavar="RUN_ID", help="fence: the run whose dispatches to fence")
    add_ledger_arguments(p)


def ssh_options(args: argparse.Namespace) -> Any:
    from provisioner.rollout.executors.ssh import SshOptions

    cfg = getattr(args, "ssh_config", "~/.ssh/config")
    return SshOptions(known_hosts=tuple(os.path.expanduser(k) for k in args.known_hosts),
                      ssh_config=None if str(cfg).lower() == "none" else cfg,
                      connect_timeout=float(args.connect_timeout))


def probe(args: argparse.Namespace, env: dict[str, str] | None = None) -> tuple[Any, ...]:
    """(nodes, options, known_hosts folder, infos, controller info); UsageError for bad input
    (missing/empty/unreadable inventory, no group, unknown host key)."""
    import tempfile

    from provisioner.rollout.executors.check import check_nodes, controller_info
    from provisioner.rollout.executors.ssh import load_exec_inventory, pinned_known_hosts

    nodes = load_exec_inventory(args.exec_inventory)
    opts = ssh_options(args)
    tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-check-"))
    try:
        known = {n.name: pinned_known_hosts(n, opts, tmp / f"known_hosts.{n.name}")
                 for n in nodes}
        ctl = controller_info(env)
        infos = check_nodes(nodes, known, opts, ctl)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return nodes, opts, infos, ctl


def fence_run(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from provisioner.commands.status import open_ledger
    from provisioner.errors import UsageError
    from provisioner.rollout.executors.fence import fence
    from provisioner.rollout.executors.resume import unfinished
    from provisioner.rollout.executors.ssh import (
        load_exec_inventory,
        pinned_known_hosts,
        ssh_argv,
    )
    from provisioner.sanitize import printable

    if not args.run:
        raise UsageError("exec-nodes fence needs --run RUN_ID (provisioner history lists runs)")
    nodes = {n.name: n for n in load_exec_inventory(args.exec_inventory)}
    with open_ledger(args) as led:
        if led.get_run(args.run) is None:
            raise UsageError(f"--run {printable(args.run)[:80]}: no such run in the ledger; "
                             f"give a run id from provisioner history")
        rows = unfinished(led.dispatches(args.run))
    missing = sorted({r["exec_node"] for r in rows} - set(nodes))
    if missing:
        raise UsageError(f"--exec-inventory {args.exec_inventory}: no execution node "
                         f"{printable(', '.join(missing))[:200]}; give the exec inventory the "
                         f"run used")
    opts = ssh_options(args)
    tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-fence-"))
    out = []
    try:
        known = {name: pinned_known_hosts(nodes[name], opts, tmp / f"known_hosts.{name}")
                 for name in sorted({r["exec_node"] for r in rows})}
        for r in rows:
            res = fence(nodes[r["exec_node"]], str(r["token"]),
                        lambda n, remote: ssh_argv(n, known[n.name], opts, remote),
                        connect_timeout=opts.connect_timeout)
            out.append({"id": r["id"], "wave": r["wave"], "shard": r["shard"],
                        "exec_node": r["exec_node"], "was": r["state"], **res.as_detail()})
    except ValueError as exc:  # a token in the ledger that is not ours
        raise UsageError(f"the ledger's dispatches of {printable(args.run)[:80]}: {exc}; "
                         f"check the ledger") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        json.dump({"run": args.run, "dispatches": out}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if not out:
            sys.stdout.write("no dispatch of this run to fence\n")
        for d in out:
            sys.stdout.write(f"dispatch {d['id']} (wave {d['wave']}, shard {d['shard']}, "
                             f"{printable(d['exec_node'])}, was {printable(d['was'])}): "
                             f"{d['fence']}, killed {d['killed']}, left {d['left']}"
                             + (f" ({printable(str(d['why']))})" if d["why"] else "") + "\n")
    return 0 if all(d["fence"] == "fenced" for d in out) else 1


def run(args: argparse.Namespace) -> int:
    from provisioner.exitcodes import Exit

    if args.action == "fence":
        return fence_run(args)
    from provisioner.rollout import playbooks
    from provisioner.rollout.playbooks import checkout_collections
    from provisioner.sanitize import printable

    env = playbooks.ansible_env()
    lab = checkout_collections()
    if "ANSIBLE_COLLECTIONS_PATH" not in env and lab is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(lab)
    _nodes, _opts, infos, ctl = probe(args, env)
    bad = [i for i in infos if i.problems]
    if args.json:
        json.dump({"controller": ctl.to_dict(), "exec_nodes": [i.to_dict() for i in infos],
                   "ok": not bad}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        c = ctl.to_dict()
        sys.stdout.write(f"controller: ansible-runner {c['runner_version']}, ansible-core "
                         f"{c['ansible_core']}, gdsfleet.gds {c['collection'] or 'missing'} "
                         f"({(c['collection_sha256'] or '-')[:12]})\n")
        for i in infos:
            d = i.to_dict()
            state = "ok" if not i.problems else "MISMATCH" if i.reachable and not i.error \
                else "UNREACHABLE" if not i.reachable else "BROKEN"
            facts = (f"ansible-runner {d['runner_version']}, cpu {d['cpu_count']}, mem "
                     f"{(d['mem_in_bytes'] or 0) >> 20} MiB, ansible-core {d['ansible_core']}, "
                     f"gdsfleet.gds {d['collection'] or 'missing'} "
                     f"({(d['collection_sha256'] or '-')[:12]})") if i.reachable and not i.error \
                else ""
            line = f"{printable(i.name)}: {state}"
            if facts:
                line += f": {facts}"
            if i.problems:
                line += f"; {'; '.join(i.problems)}"
            sys.stdout.write(line + "\n")
    return int(Exit.OK) if not bad else 1
