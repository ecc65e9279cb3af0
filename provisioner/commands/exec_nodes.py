"""``provisioner exec-nodes check``: per execution node of ``--exec-inventory``, reachable or
not, its ``ansible-runner worker --worker-info``, ansible-core and gdsfleet.gds versions (and
the collection's MANIFEST.json hash) against this controller's. Exit 0 when every node
matches, 1 when one does not (the table says which and why), 64 for bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

HELP = "check the execution nodes of --executor ssh against this controller"


def add_exec_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    g = p.add_argument_group("execution nodes (--executor ssh; docs/scale.md)")
    g.add_argument("--exec-inventory", metavar="FILE", required=required,
                   help="Ansible inventory whose group gdsfleet_exec lists the execution nodes")
    if not any(a.dest == "known_hosts" for a in p._actions):
        g.add_argument("--known-hosts", metavar="FILE", action="append", default=[],
                       help="extra known_hosts file (repeatable)")
        g.add_argument("--ssh-config", metavar="FILE", default="~/.ssh/config")
        g.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["check"], help="check: probe every execution node")
    add_exec_arguments(p, required=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


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


def run(args: argparse.Namespace) -> int:
    from provisioner.exitcodes import Exit
    from provisioner.rollout import playbooks
    from provisioner.rollout.adapters import checkout_collections
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
