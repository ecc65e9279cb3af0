"""``provisioner rollout``: provision the fleet in gated waves (canary first), resumable.

Every input is checked before any node is touched: bad input exits 64 and touches nothing.
The options (wave spec, budgets, hook templates, --confirm without a terminal, the playbook)
are checked first; then the fleet lock is taken (exit 75 when another rollout holds it), the
first wave's playbook run is started, held at a gate until the plan gives it its hosts
(:mod:`provisioner.rollout.prestart`), and the inventory and host pattern are read and checked
(refused: that run is dropped before its first play, and a runner folder it made is removed).
An unfinished run of the same fleet is resumed or a new one planned, and the engine walks the
waves. Exit codes: docs/rollout.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from provisioner.commands.plan import add_selection_arguments
from provisioner.errors import UsageError

HELP = "provision the fleet in gated waves (canary first), resumable"

_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    # the five an operator needs first lead the help (issue 30 item 4); the rest follow in
    # groups, every one with its default (docs/cli.md has them all)
    p.usage = ("%(prog)s -i INVENTORY [--waves SPEC] [--max-failures N|P%%] [--allow-reboot] "
               "[--ledger PATH|URL] [more options below; all of them: docs/cli.md]")
    top = p.add_argument_group("the options that matter most")
    add_selection_arguments(p, top=top)
    top.add_argument("--max-failures", default="0", metavar="N|P%",
                     help="failures tolerated per wave after the canary (default 0); any canary "
                          "failure stops the rollout")
    top.add_argument("--allow-reboot", action="store_true",
                     help="reboot nodes that report a reboot required (gdsfleet.gds.reboot), "
                          "then verify them (default off: they end as 'reboot_pending')")
    from provisioner.commands.plan import add_ledger_option

    add_ledger_option(top)
    g = p.add_argument_group("gates and budgets")
    g.add_argument("--max-parallel", "-f", type=int, default=10, metavar="N",
                   help="nodes in flight within a wave: Ansible forks and parallel "
                        "verifications (default 10)")
    g.add_argument("--max-total-failures", default=None, metavar="N|P%",
                   help="failures tolerated over the whole rollout (default: no overall cap)")
    g.add_argument("--health-threshold", default="1.0", metavar="FRACTION|P%",
                   help="share of already-rolled nodes that must still verify compliant before "
                        "each next wave (default 1.0 = all)")
    g.add_argument("--no-health-gate", action="store_true",
                   help="do not re-verify already-rolled nodes before each wave (default: "
                        "re-verify)")
    g.add_argument("--pause-between-waves", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long between waves (Ctrl-C stops; the command resumes; "
                        "default 0)")
    g.add_argument("--confirm", action="store_true",
                   help="ask before each wave after the canary (needs a terminal; default off)")
    g.add_argument("--wait-lock", type=float, default=0.0, metavar="SECONDS",
                   help="when another rollout of this fleet holds the lock, wait up to this "
                        "long for it (a standby coordinator: when the holder dies, this one "
                        "fences its dispatches and resumes its run); default 0: refuse at once")
    g.add_argument("--restart", action="store_true",
                   help="abandon an unfinished rollout of this fleet and plan a new one "
                        "(default: resume it)")

    c = p.add_argument_group("what runs")
    c.add_argument("--playbook", metavar="FILE|FQCN",
                   help="playbook file or collection playbook FQCN (default gdsfleet.gds.site, "
                        "from the installed collection)")
    c.add_argument("--reboot-playbook", metavar="FILE|FQCN",
                   help="playbook --allow-reboot runs (default gdsfleet.gds.reboot, from the "
                        "installed collection)")
    c.add_argument("-e", "--extra-var", action="append", default=[],
                   metavar="KEY=VALUE|@FILE|JSON",
                   help="extra variable for the playbook (repeatable), or @FILE or a JSON "
                        "object: a mapping of them (@FILE keeps secrets off the command "
                        "line). They reach "
                        "ansible-playbook through a 0600 file, never its command line "
                        "(default: none)")
    c.add_argument("--no-verify", action="store_true",
                   help="provision only; no verification, no health gate (benchmarks; nodes "
                        "are then recorded as 'skipped', never 'compliant'; default: verify)")
    from provisioner.validate import DEFAULT_PLAYBOOK_TIMEOUT_S

    c.add_argument("--playbook-timeout", type=int, default=DEFAULT_PLAYBOOK_TIMEOUT_S,
                   metavar="SECONDS",
                   help="deadline of one wave's playbook run (default %(default)s = 4 h; "
                        "0: no deadline)")
    c.add_argument("--no-pipelining", action="store_true",
                   help="run the playbooks without SSH pipelining and connection reuse (for "
                        "nodes whose sudo requires a tty; default: pipelined); see "
                        "docs/performance.md")

    x = p.add_argument_group("where the playbooks run (docs/scale.md)")
    x.add_argument("--executor", choices=("local", "ssh"), default="local",
                   help="local: ansible-playbook on this machine (default); ssh: each wave in "
                        "shards on the execution nodes of --exec-inventory")
    x.add_argument("--exec-inventory", metavar="FILE",
                   help="Ansible inventory whose group gdsfleet_exec lists the execution nodes "
                        "(needed by --executor ssh; default: none)")
    x.add_argument("--shard-by", metavar="hash|var:NAME", default=None,
                   help="how a wave is split over execution nodes (default: a stable hash of "
                        "the host name; var:NAME keeps hosts with one value together)")
    x.add_argument("--forks-per-exec-node", type=int, default=None, metavar="N",
                   help="Ansible forks on each execution node (default: --max-parallel)")

    v = p.add_argument_group("verification (the gate)")
    v.add_argument("--policy", metavar="FILE",
                   help="verification policy YAML: the expected route, the minimum nvidia-fs "
                        "version, the I/O test size and thresholds (default: the built-in "
                        "policy, docs/cli.md)")
    v.add_argument("--io-size", metavar="SIZE",
                   help="I/O test size after provisioning, e.g. 64M, 1G (default: the node's "
                        "gds_verify_io_size, else the policy's io_test_size, 1G)")
    v.add_argument("--health-io-size", metavar="SIZE", default="4M",
                   help="I/O test size of the health gate's cheap re-verification (default 4M)")
    v.add_argument("--io-path", metavar="DIR",
                   help="directory for the I/O test file (default: the NVMe-backed mount, "
                        "else the policy's gds_mount)")
    v.add_argument("--io-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="deadline of a node's I/O test command (default 600)")
    v.add_argument("--known-hosts", metavar="FILE", action="append", default=[],
                   help="extra known_hosts file for verification, checked first (repeatable; "
                        "default: none extra)")
    v.add_argument("--accept-new-host-keys", action="store_true",
                   help="add unknown host keys to the project-managed known_hosts (default "
                        "off: an unknown key refuses the node)")
    v.add_argument("--ssh-config", metavar="FILE", default="~/.ssh/config",
                   help="OpenSSH client config verification honours (default ~/.ssh/config; "
                        "'none' to skip)")
    v.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="verification's TCP connect timeout; banner/auth timeouts are 1.5x "
                        "(default 10)")

    d = p.add_argument_group("drain hooks (e.g. Slurm); {node} and {address} are substituted, "
                                "shell-quoted")
    d.add_argument("--drain-cmd", metavar="TEMPLATE",
                   help="run before a node is provisioned; a failure skips the node "
                        "(default: none)")
    d.add_argument("--drain-wait-cmd", metavar="TEMPLATE",
                   help="polled after --drain-cmd until it exits 0 (default: none)")
    d.add_argument("--drain-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long --drain-wait-cmd may take before the node is skipped "
                        "(default 600)")
    d.add_argument("--drain-poll", type=float, default=5.0, metavar="SECONDS",
                   help="time between two runs of --drain-wait-cmd (default 5)")
    d.add_argument("--resume-cmd", metavar="TEMPLATE",
                   help="run after the node verified compliant (default: none)")

    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE",
                   help="write the JSON report ('-' for stdout; default: none)")
    o.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (default: none)")
    o.add_argument("--html", metavar="FILE",
                   help="write a self-contained HTML report (opens without network; default: "
                        "none)")
    o.add_argument("--events-log", metavar="FILE",
                   help="append per-host playbook events as JSON lines (default: runner/"
                        "events.jsonl beside a SQLite ledger)")
    o.add_argument("--plain", action="store_true",
                   help="plain lines even on a terminal (default: a live view on a terminal)")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="no progress output (default off)")


def _extravars_mapping(item: str) -> dict[str, Any]:
    """``-e @FILE`` or ``-e '{"k": "v"}'``: a YAML/JSON mapping (never echoed: secrets)."""
    import yaml

    from provisioner.redact import register_mapping

    label = item if item.startswith("@") else "{...}"
    try:
        text = (Path(item[1:]).expanduser().read_text(encoding="utf-8")
                if item.startswith("@") else item)
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not YAML/JSON"
        raise UsageError(f"-e {label}: cannot read it ({why}); give a YAML or JSON mapping "
                         f"of variables") from None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and _VAR_RE.match(k)
                                            for k in doc):
        raise UsageError(f"-e {label}: give a YAML or JSON mapping of plain variable names")
    register_mapping(doc)  # its secrets are masked in every message from here on
    return doc


def _extravars(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if item.startswith(("@", "{")):
            out.update(_extravars_mapping(item))
            continue
        key, sep, value = item.partition("=")
        if not sep or not _VAR_RE.match(key):
            # never the value: it may be a secret
            shown = key if _VAR_RE.match(key) else "<not a variable name>"
            raise UsageError(f"-e {shown}{'=...' if sep else ''}: give NAME=VALUE with a plain "
                             f"variable name, or @FILE")
        if any(c in value for c in "`\n\r") or "$(" in value:
            raise UsageError(f"-e {key}: the value holds command substitution or a newline")
        out[key] = value
    return out


def _validate(args: argparse.Namespace) -> dict[str, Any]:
    """Everything that can be refused is refused here, before any node or lock is touched."""
    from provisioner.rollout.drain import DrainHooks
    from provisioner.rollout.planner import parse_budget, parse_threshold, parse_wave_spec

    parse_wave_spec(args.waves)
    if args.max_parallel < 1:
        raise UsageError(f"--max-parallel must be at least 1 (got {args.max_parallel})")
    if args.pause_between_waves < 0:
        raise UsageError("--pause-between-waves must be 0 or more")
    if args.confirm and not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(
            "--confirm asks a person before each wave, but there is no terminal here; run it "
            "from a terminal, or use --pause-between-waves / budgets in unattended runs"
        )
    if args.json == "-":
        args.quiet = True
    from provisioner.outputs import check_output_path

    check_output_path("--json", args.json)
    check_output_path("--junit", args.junit, stdout_ok=False)
    check_output_path("--html", getattr(args, "html", None), stdout_ok=False)
    from provisioner.rollout import playbooks

    env = playbooks.run_env(pipelining=not getattr(args, "no_pipelining", False))
    # the installed collection's playbooks by FQCN unless told otherwise; refused here, before
    # any change, when they cannot be found (the message says how to install the collection)
    playbook = playbooks.resolve(args.playbook or playbooks.SITE, env=env)
    reboot_spec = args.reboot_playbook or playbooks.REBOOT
    if args.allow_reboot:
        reboot_spec = playbooks.resolve(reboot_spec, env=env).spec
    from provisioner.validate import check_io_size, check_seconds

    sizes = {}
    for opt in ("io_size", "health_io_size"):
        val = getattr(args, opt)
        if val:
            sizes[opt] = check_io_size(f"--{opt.replace('_', '-')}", val)
    for opt in ("connect_timeout", "io_timeout", "drain_timeout", "drain_poll"):
        check_seconds(f"--{opt.replace('_', '-')}", getattr(args, opt))
    check_seconds("--pause-between-waves", args.pause_between_waves, allow_zero=True)
    args.wait_lock = check_seconds("--wait-lock", args.wait_lock, allow_zero=True)
    executor = _check_executor(args, env)
    if args.playbook_timeout is None or args.playbook_timeout < 0:
        raise UsageError(f"--playbook-timeout {args.playbook_timeout}: give seconds (0 for no "
                         f"deadline)")
    return {
        "max_failures": parse_budget(args.max_failures, option="--max-failures"),
        "max_total_failures": parse_budget(args.max_total_failures,
                                           option="--max-total-failures")
        if args.max_total_failures is not None else None,
        "health_threshold": parse_threshold(args.health_threshold),
        "drain": DrainHooks.from_options(args.drain_cmd, args.resume_cmd, args.drain_wait_cmd,
                                         args.drain_timeout, args.drain_poll),
        "extravars": _extravars(args.extra_var),
        "playbook": playbook.spec,
        "always_provision": playbooks.always_provisions(playbook),
        "allow_local": args.allow_local_connection,
        "reboot_playbook": reboot_spec,
        "ansible_env": env,
        "sizes": sizes,
        "executor": executor,
    }


def _check_executor(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any] | None:
    """--executor ssh: the execution nodes loaded, their host keys known, each reachable and
    running this controller's versions; refused (exit 64, nothing changed) otherwise."""
    ssh_only = [opt for opt, val in (("--exec-inventory", args.exec_inventory),
                                     ("--shard-by", args.shard_by),
                                     ("--forks-per-exec-node", args.forks_per_exec_node))
                if val is not None]
    if args.executor != "ssh":
        if ssh_only:
            raise UsageError(f"{', '.join(ssh_only)} only apply to --executor ssh; add "
                             f"--executor ssh or drop them")
        return None
    if not args.exec_inventory:
        raise UsageError("--executor ssh needs --exec-inventory FILE: an Ansible inventory "
                         "whose group gdsfleet_exec lists the execution nodes (docs/scale.md)")
    if args.forks_per_exec_node is not None and args.forks_per_exec_node < 1:
        raise UsageError(f"--forks-per-exec-node must be at least 1 (got "
                         f"{args.forks_per_exec_node})")
    from provisioner.commands.exec_nodes import probe
    from provisioner.rollout.executors.check import refusal
    from provisioner.rollout.executors.shard import ShardBy

    shard_by = ShardBy.parse(args.shard_by)
    nodes, opts, infos, _ctl = probe(args, env)
    why = refusal(infos)
    if why:
        raise UsageError(why)
    return {"nodes": nodes, "opts": opts, "shard_by": shard_by}


def _refuse_selection_problems(inventory: Any, checked: dict[str, Any]) -> None:
    """Duplicate machines and nodes the site playbook does not target: exit 64, nothing ran."""
    from provisioner.inventory import SITE_TARGET_DEFAULT, selection_problems
    from provisioner.rollout.playbooks import SITE

    spec = str(checked.get("playbook") or "")
    site = spec == SITE or Path(spec).name == "site.yml"
    target = checked.get("extravars", {}).get("gds_target") or SITE_TARGET_DEFAULT
    problems = selection_problems(inventory, target if site else None,
                                  allow_local=checked["allow_local"])
    if problems:
        raise UsageError("refused before anything ran: " + "; ".join(problems))


def _verifier(args: argparse.Namespace, nodes: dict[str, Any], sizes: dict[str, int]) -> Any:
    from dataclasses import replace

    from provisioner.rollout.adapters import SshVerifier
    from provisioner.ssh import SSHSettings, runner_factory
    from provisioner.verify.model import IoTestOptions
    from provisioner.verify.policy import Policy

    try:
        policy = Policy.from_file(args.policy) if args.policy else Policy.default()
    except (OSError, ValueError) as exc:
        raise UsageError(f"--policy {args.policy}: {exc}") from exc
    kwargs: dict[str, Any] = {
        "size_bytes": sizes.get("io_size") or policy.io_test_size,
        "size_explicit": "io_size" in sizes,
        "path": args.io_path,
        "timeout_s": args.io_timeout,
    }
    if getattr(policy, "gds_mount", None):
        kwargs["default_path"] = policy.gds_mount
    io = IoTestOptions(**kwargs)
    cheap = replace(io, size_bytes=min(io.size_bytes, sizes.get("health_io_size", 4 << 20)),
                    size_explicit=True)
    t = args.connect_timeout
    settings = SSHSettings(
        connect_timeout=t, banner_timeout=1.5 * t, auth_timeout=1.5 * t,
        channel_timeout=1.5 * t,
        known_hosts=tuple(os.path.expanduser(k) for k in args.known_hosts),
        accept_new_host_keys=args.accept_new_host_keys,
        ssh_config=None if str(args.ssh_config).lower() == "none" else args.ssh_config,
    )
    return SshVerifier(nodes, policy=policy, io=io, cheap_io=cheap,
                       parallel=args.max_parallel, make_runner=runner_factory(settings))


def _make_executor(args: argparse.Namespace, checked: dict[str, Any], inventory: Any,
                   ledger: Any, state_dir: Path) -> Any:
    """The ssh executor of a checked --executor ssh (None: the local default)."""
    ex = checked.get("executor")
    if not ex:
        return None
    from provisioner.rollout.executors.shard import inventory_values
    from provisioner.rollout.executors.ssh import SshExecutor

    value_of = inventory_values(inventory.manager) if ex["shard_by"].var else None
    return SshExecutor(ex["nodes"], opts=ex["opts"], forks_per_node=args.forks_per_exec_node,
                       shard_by=ex["shard_by"], value_of=value_of, ledger=ledger,
                       state_dir=state_dir)


def _confirm(wave: Any) -> bool:
    sys.stderr.write(f"\nproceed with {wave.label} ({len(wave)} node(s): "
                     f"{', '.join(wave.names()[:10])}{' ...' if len(wave) > 10 else ''})? "
                     f"[y/N] ")
    sys.stderr.flush()
    try:
        answer = input()
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _fence_earlier_dispatches(ledger: Any, fleet: str, executor: Any) -> None:
    """A run about to be resumed whose earlier coordinator died with dispatches out: fence
    them by token on their execution nodes (or wait for their deadlines) before anything is
    sent again (provisioner.rollout.executors.resume)."""
    from provisioner.errors import LockHeld
    from provisioner.rollout.executors.resume import fence_recorded, unfinished
    from provisioner.sanitize import printable

    run_id = ledger.last_unfinished_run("rollout", fleet)
    rows = unfinished(ledger.dispatches(run_id)) if run_id else []
    if not rows:
        return
    where = printable(", ".join(sorted({str(r["exec_node"]) for r in rows})))[:200]
    if executor is None or not hasattr(executor, "nodes"):
        raise UsageError(
            f"the unfinished run {run_id} has {len(rows)} dispatch(es) on execution nodes "
            f"({where}) that may still be running; resume it with --executor ssh "
            f"--exec-inventory FILE (the run's execution nodes) so they are fenced first, or "
            f"fence them with `provisioner exec-nodes fence --run {run_id} --exec-inventory "
            f"FILE`, or start afresh with --restart")
    sys.stderr.write(f"resuming {run_id}: fencing {len(rows)} earlier dispatch(es) on "
                     f"{where} before anything is sent again\n")
    problems = fence_recorded(executor, rows)
    if problems:
        raise LockHeld(
            f"the unfinished run {run_id} may still act on nodes: "
            f"{printable('; '.join(problems))[:600]}; stop those processes on the execution "
            f"node (provisioner exec-nodes fence --run {run_id}), then run the same command "
            f"again")


def run(args: argparse.Namespace) -> int:
    from provisioner.rollout.lock import fleet_lock
    from provisioner.store import fleet_id, resolve_ledger  # not the Ledger: no SQLAlchemy yet

    checked = _validate(args)
    fleet = fleet_id(args.inventory)
    location = resolve_ledger(args.ledger, args.inventory)
    from provisioner.rollout.artifacts import prepare_runner

    # the ledger's and the runner folder are the caller's alone before anything is written in
    # them (issue 45); what a killed run's artifacts still hold is scrubbed (issue 17)
    pdd, fresh = prepare_runner(location)
    state_dir = pdd if pdd is not None else Path.cwd()
    events_log = args.events_log or (str(state_dir / "events.jsonl") if pdd else None)
    lock = fleet_lock(location, fleet, wait_s=args.wait_lock,
                      say=lambda text: sys.stderr.write(f"{text}\n"))
    with lock:
        # the first wave's playbook run starts now, held at a gate until the plan gives it
        # its hosts: its start overlaps the inventory read, the ledger and the plan below
        ahead = _start_ahead(args, checked, lock, pdd, events_log)
        try:
            return _run_locked(args, checked, lock, fleet, location, state_dir, pdd,
                               events_log, ahead)
        finally:
            if ahead is not None:
                ahead.drop_prestarted()  # no wave took it (refused input, a resumed run)
                if fresh and not ahead.ran and pdd is not None:
                    # refused before anything ran: no runner folder is left for nothing
                    shutil.rmtree(pdd, ignore_errors=True)


def _provisioner(args: argparse.Namespace, checked: dict[str, Any], lock: Any,
                 pdd: Path | None, events_log: str | None, executor: Any,
                 run_tag: str = "") -> Any:
    from provisioner.rollout.adapters import AnsibleProvisioner

    return AnsibleProvisioner(
        inventory=args.inventory,
        playbook=checked["playbook"],
        reboot_playbook=checked["reboot_playbook"],
        forks=args.max_parallel,
        envvars=checked["ansible_env"],
        extravars=checked["extravars"],
        private_data_dir=pdd,
        events_log=events_log,
        timeout=args.playbook_timeout or None,  # 0: no deadline
        children_lock=lock.children_path,
        executor=executor,
        run_tag=run_tag,
    )


def _start_ahead(args: argparse.Namespace, checked: dict[str, Any], lock: Any,
                 pdd: Path | None, events_log: str | None) -> Any:
    """The provisioner whose first site playbook run started now, under the id a new run
    will get (its token names the run); None where no run is started ahead: execution nodes,
    drain hooks (they may skip a node), a single core (the two starts would compete)."""
    from provisioner.rollout import adapters
    from provisioner.store import new_run_id

    if (not adapters.START_AHEAD or checked["executor"] or checked["drain"].drain_cmd
            or adapters.cores() < 2):
        return None
    ahead = _provisioner(args, checked, lock, pdd, events_log, None, run_tag=new_run_id())
    return ahead if ahead.start_ahead() else None


def _run_locked(args: argparse.Namespace, checked: dict[str, Any], lock: Any, fleet: str,
                location: str, state_dir: Path, pdd: Path | None, events_log: str | None,
                ahead: Any) -> int:
    from provisioner import interrupts
    from provisioner.identifiers import protect
    from provisioner.inventory import load_inventory
    from provisioner.rollout.engine import Engine, RolloutOptions
    from provisioner.rollout.progress import live_document, make_observer, summary_table
    from provisioner.store import Ledger, display_url

    inventory = load_inventory(args.inventory, args.limit)
    protect(inventory.names(), "a node name")  # never masked in any output (issue 45)
    _refuse_selection_problems(inventory, checked)
    nodes = {n.name: n for n in inventory.nodes}
    verifier = None if args.no_verify else _verifier(args, nodes, checked["sizes"])
    ledger = Ledger.open(location)
    try:
        if not args.quiet:  # the first line names the ledger, as every command's (stderr:
            # --json -); once open: a ledger that cannot be reached stays one error line
            from provisioner.store.location import ledger_line

            sys.stderr.write(ledger_line(location) + "\n")
        if checked["always_provision"] and not args.force and not args.quiet:
            sys.stderr.write(f"{checked['playbook']}: a change that verification cannot "
                             "see, so every selected node is provisioned (as with --force), "
                             "compliant ones too\n")
        if args.restart:
            old = ledger.last_unfinished_run("rollout", fleet)
            if old:
                ledger.finish_run(old, "abandoned")
        recorded = {k: v for k, v in vars(args).items()
                    if not k.startswith("_") and not callable(v)}
        # secrets never reach the ledger (provisioner.redact): secret-named extra vars,
        # URL passwords (--ledger), every -e/--extra-var form of the command line
        from provisioner.redact import display_url as shown_url
        from provisioner.redact import redact_argv
        from provisioner.rollout.runner import redact

        shown = redact(checked["extravars"])
        recorded["extra_var"] = [f"{k}={v}" for k, v in shown.items()]
        recorded["ledger"] = shown_url(args.ledger) if args.ledger else None
        recorded["argv"] = redact_argv(sys.argv[1:])
        # the inventory's gdsfleet_simulated, kept with the run: every report of it says so
        simulated = sorted(n.name for n in inventory.nodes if n.simulated)
        recorded["simulated"] = simulated
        options = RolloutOptions(
            waves=args.waves,
            max_parallel=args.max_parallel,
            max_failures=checked["max_failures"],
            max_total_failures=checked["max_total_failures"],
            health_threshold=checked["health_threshold"],
            health_gate=not args.no_health_gate,
            verify=not args.no_verify,
            force=args.force or checked["always_provision"],
            allow_reboot=args.allow_reboot,
            pause_between_waves=args.pause_between_waves,
            resume=True,
            args=recorded,
        )
        executor = _make_executor(args, checked, inventory, ledger, state_dir)
        if not args.restart:
            _fence_earlier_dispatches(ledger, fleet, executor)
        provisioner = (ahead if ahead is not None
                       else _provisioner(args, checked, lock, pdd, events_log, executor))
        observer = make_observer(quiet=args.quiet, plain=True if args.plain else None)
        engine = Engine(
            ledger=ledger,
            fleet=fleet,
            targets=inventory.names(),
            provisioner=provisioner,
            verifier=verifier,
            options=options,
            observer=observer,
            drain=checked["drain"],
            addresses={n.name: n.address for n in inventory.nodes},
            confirm=_confirm if args.confirm else None,
            sleep=interrupts.sleep,  # Ctrl-C during --pause-between-waves stops at once
            new_run_id=provisioner.run_tag or None,
        )
        try:
            def started(rid: str) -> None:
                if rid != provisioner.run_tag:
                    provisioner.drop_ahead()  # resumed: its token names another run
                provisioner.run_tag = rid
                lock.set_run_id(rid)  # the lock file names the run (never the command)

            result = engine.run_with(started)
        finally:
            if executor is not None:
                executor.close()
            close = getattr(observer, "close", None)
            if close is not None:
                close()
    finally:
        ledger.close()
    if not args.quiet:
        summary_table(result, inventory=str(args.inventory), simulated=simulated)
        sys.stderr.write(f"ledger: {display_url(location)} (run {result.run_id})\n")
    if args.json or args.junit or getattr(args, "html", None):
        from provisioner.reports import write_reports

        # the run as the ledger holds it: what `provisioner report RUN` writes (issue 47)
        doc = live_document(result, location, inventory=str(args.inventory),
                            simulated=simulated)
        write_reports(doc, json_path=args.json, junit=args.junit,
                      html=getattr(args, "html", None))
    return int(result.exit_code)
