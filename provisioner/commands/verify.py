"""``provisioner verify``: prove, node by node, that GPUDirect Storage takes the direct path.

``--local`` checks this machine (no SSH); ``-i INVENTORY [--limit PATTERN]`` checks every
selected node over SSH in parallel (one connection per node). Every result is appended to the
compliance ledger; ``--json``/``--junit`` write reports. Exit codes: docs/cli.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from provisioner import interrupts
from provisioner.errors import ConnectError, LedgerError, UsageError
from provisioner.exitcodes import Exit
from provisioner.fleet import DEFAULT_PARALLEL, HostResult, run_parallel
from provisioner.identifiers import protect
from provisioner.reports import write_json, write_junit
from provisioner.reports.model import RESULT_COMPLIANT, build_report, exit_code, node_result
from provisioner.reports.terminal import render
from provisioner.sanitize import printable
from provisioner.store import display_url, fleet_id, new_run_id, resolve_ledger, utcnow
from provisioner.store.location import ledger_line
from provisioner.verify.usecase import NodeRequest, internal_error, unreachable_doc, verify_one

if TYPE_CHECKING:
    from provisioner.store import Ledger

HELP = "prove node by node that GPUDirect Storage takes the direct path"


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("which nodes")
    from provisioner.commands.plan import INVENTORY_HELP

    where.add_argument("-i", "--inventory", metavar="INVENTORY", help=INVENTORY_HELP)
    where.add_argument("-l", "--limit", metavar="PATTERN",
                       help="Ansible host pattern selecting nodes of the inventory")
    where.add_argument("--local", action="store_true",
                       help="verify this machine, without SSH")
    where.add_argument("--parallel", "-f", type=int, default=DEFAULT_PARALLEL, metavar="N",
                       help=f"nodes verified at once (default {DEFAULT_PARALLEL})")

    what = p.add_argument_group("what is checked")
    what.add_argument("--policy", metavar="FILE",
                      help="verification policy YAML: the expected route, the minimum "
                      "nvidia-fs version, the I/O test size and thresholds (default: the "
                      "built-in policy, docs/cli.md)")
    what.add_argument("--io-size", metavar="SIZE",
                      help="I/O test size, e.g. 64M, 1G (default: the policy's io_test_size)")
    what.add_argument("--io-path", metavar="DIR",
                      help="directory on the node's GDS filesystem for the I/O test file")
    what.add_argument("--io-timeout", type=float, default=600.0, metavar="SECONDS",
                      help="deadline of the I/O test command (default 600)")
    what.add_argument("--no-io-test", action="store_true",
                      help="skip the I/O test (a node then cannot prove the direct path)")
    what.add_argument("--nfd", action="store_true",
                      help="write the verified state as a Node Feature Discovery feature file "
                           "(/etc/kubernetes/node-feature-discovery/features.d/gdsfleet-gds) on "
                           "every node, so NFD labels it gds.feature.node.kubernetes.io/...; "
                           "per node also with the inventory variable gds_nfd_features: true")
    what.add_argument("--no-attest-record", action="store_true",
                      help="do not write the node's record for `attest` "
                           "(/var/lib/gdsfleet/verified.json; written by default, as root or "
                           "through sudo -n, for every verdict: docs/operations.md)")
    what.add_argument("--nfd-ttl", type=float, default=168.0, metavar="HOURS",
                      help="hours after which NFD ignores the feature file (# +expiry-time; "
                           "default 168, 0 = never)")

    bench = p.add_argument_group("gdsio benchmark (NVIDIA gds-tools)")
    bench.add_argument("--gdsio", action="store_true",
                       help="also run gdsio on the GDS mount: GPU Direct (-x 0) and CPU-only "
                            "(-x 1) on the same file; report both and their ratio (check "
                            "gdsio.ratio, floor: policy gdsio_min_ratio)")
    bench.add_argument("--gdsio-size", metavar="SIZE",
                       help="gdsio file size (default: the node's I/O test size, at most 128M)")
    bench.add_argument("--gdsio-io-size", metavar="SIZE", default="1M",
                       help="gdsio I/O size, -i (default 1M)")
    bench.add_argument("--gdsio-workers", type=int, default=4, metavar="N",
                       help="gdsio workers, -w (default 4)")
    bench.add_argument("--gdsio-io-type", choices=("write", "read"), default="write",
                       help="gdsio I/O type, -I 1 (write) or -I 0 (read) (default write)")

    ssh = p.add_argument_group("SSH")
    ssh.add_argument("--known-hosts", metavar="FILE", action="append", default=[],
                     help="extra known_hosts file (checked first; repeatable)")
    ssh.add_argument("--accept-new-host-keys", action="store_true",
                     help="add unknown host keys to the project-managed known_hosts "
                          "(~/.local/state/gdsfleet/known_hosts); a CHANGED key is always refused")
    ssh.add_argument("--ssh-config", metavar="FILE", default="~/.ssh/config",
                     help="OpenSSH client config to honour (default ~/.ssh/config; 'none' to skip)")
    ssh.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="TCP connect timeout; banner/auth timeouts are 1.5x (default 10)")
    ssh.add_argument("--retries", type=int, default=3, metavar="N",
                     help="retries for transient connect errors (default 3)")

    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the JSON report ('-' for stdout)")
    out.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    out.add_argument("--html", metavar="FILE",
                     help="write a self-contained HTML report (opens without network)")
    out.add_argument("--prom-textfile", metavar="DIR",
                     help="write DIR/gdsfleet.prom for node_exporter's textfile collector")
    out.add_argument("--details", action="store_true", help="list every check of every node")
    out.add_argument("-q", "--quiet", action="store_true", help="no per-node progress lines")
    out.add_argument("--ledger", metavar="PATH|URL",
                     help="compliance ledger (SQLite path or postgresql+psycopg:// URL); "
                          "default $GDSFLEET_LEDGER, .lab/ledger.sqlite for inventories/lab, "
                          "else ~/.local/state/gdsfleet/ledger.sqlite")
    out.add_argument("--no-ledger", action="store_true", help="do not record the results")


def _validate(args: argparse.Namespace) -> None:
    if args.local and args.inventory:
        raise UsageError("--local and -i/--inventory exclude each other: pick one")
    if args.limit and not args.inventory:
        raise UsageError("--limit selects nodes of an inventory: add -i INVENTORY")
    if not args.local and not args.inventory:
        raise UsageError("say which nodes: -i INVENTORY [--limit PATTERN], or --local")
    if args.parallel < 1:
        raise UsageError(f"--parallel must be at least 1 (got {args.parallel})")
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more (got {args.retries})")
    from provisioner.validate import check_seconds

    for name in ("connect_timeout", "io_timeout"):  # NaN, inf and <= 0 are refused
        check_seconds(f"--{name.replace('_', '-')}", getattr(args, name))
    if not (args.nfd_ttl >= 0 and args.nfd_ttl < float("inf")):
        raise UsageError(f"--nfd-ttl must be 0 (never expire) or a number of hours "
                         f"(got {args.nfd_ttl})")
    if args.ledger and args.no_ledger:
        raise UsageError("--ledger and --no-ledger exclude each other")
    if args.json == "-" and not args.quiet:
        args.quiet = True
    from provisioner.outputs import check_output_path

    check_output_path("--json", args.json)
    check_output_path("--junit", args.junit, stdout_ok=False)
    check_output_path("--html", getattr(args, "html", None), stdout_ok=False)
    from provisioner.reports.cli import check_prom_dir

    check_prom_dir(getattr(args, "prom_textfile", None))


def _policy_and_io(args: argparse.Namespace) -> tuple[Any, Any]:
    from provisioner.verify.model import IoTestOptions
    from provisioner.verify.policy import Policy

    try:
        policy = Policy.from_file(args.policy) if args.policy else Policy.default()
    except (OSError, ValueError) as exc:
        raise UsageError(f"--policy {args.policy}: {exc}") from exc
    from provisioner.validate import check_io_size

    # An explicit --io-size wins over everything; else the inventory's gds_verify_io_size
    # (per node, in verify_node); else the policy's io_test_size.
    size = check_io_size("--io-size", args.io_size) if args.io_size else policy.io_test_size
    kwargs: dict[str, Any] = {
        "size_bytes": size,
        "size_explicit": bool(args.io_size),
        "path": args.io_path,
        "timeout_s": args.io_timeout,
        "enabled": not args.no_io_test,
    }
    if getattr(policy, "gds_mount", None):
        kwargs["default_path"] = policy.gds_mount
    gdsio = _gdsio_options(args)
    if gdsio is not None:
        kwargs["gdsio"] = gdsio
    return policy, IoTestOptions(**kwargs)


def _gdsio_options(args: argparse.Namespace) -> Any:
    """--gdsio and its options -> GdsioOptions (None without --gdsio); bad values are refused
    with the fix named."""
    given = [f"--gdsio-{n.replace('_', '-')}" for n in ("size",)
             if getattr(args, f"gdsio_{n}", None)]
    if not getattr(args, "gdsio", False):
        if given:
            raise UsageError(f"{given[0]} sets up the gdsio benchmark: add --gdsio")
        return None
    from provisioner.validate import check_io_size
    from provisioner.verify.model import GdsioOptions
    from provisioner.verify.policy import parse_size

    size = check_io_size("--gdsio-size", args.gdsio_size) if args.gdsio_size else None
    try:
        io_size = parse_size(args.gdsio_io_size)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--gdsio-io-size {args.gdsio_io_size!r}: {exc}") from None
    if io_size < 4096 or io_size % 4096:
        raise UsageError(f"--gdsio-io-size {args.gdsio_io_size!r}: must be a multiple of 4 KiB "
                         "(GDS alignment), e.g. 1M")
    if size is not None and io_size > size:
        raise UsageError(f"--gdsio-io-size {args.gdsio_io_size!r} is larger than --gdsio-size "
                         f"{args.gdsio_size!r}: pick an I/O size no larger than the file")
    if not 1 <= args.gdsio_workers <= 256:
        raise UsageError(f"--gdsio-workers must be 1 to 256 (got {args.gdsio_workers})")
    return GdsioOptions(io_type=args.gdsio_io_type, size_bytes=size, io_size_bytes=io_size,
                        workers=args.gdsio_workers, timeout_s=args.io_timeout)


def run(args: argparse.Namespace) -> int:
    _validate(args)
    policy, io = _policy_and_io(args)

    names: list[str]
    make: Callable[[Any], Any]
    if args.local:
        from provisioner.local import LocalRunner

        host = socket.gethostname()
        items: list[Any] = [host]
        names = [host]
        fleet = f"local:{host}"

        def make(_n: Any) -> Any:
            return LocalRunner(host)

        def node_name(n: Any) -> str:
            return str(n)

        simulated: set[str] = set()  # --local: this host, never a simulation by inventory
    else:
        from provisioner.inventory import load_inventory
        from provisioner.ssh import SSHSettings, runner_factory

        inventory = load_inventory(args.inventory, args.limit)
        items = list(inventory.nodes)
        names = inventory.names()
    protect(names, "a node name")  # never masked in any output (issue 45)
    if not args.local:
        simulated = {n.name for n in inventory.nodes if n.simulated}
        fleet = fleet_id(args.inventory)
        t = args.connect_timeout
        settings = SSHSettings(
            connect_timeout=t,
            banner_timeout=1.5 * t,
            auth_timeout=1.5 * t,
            channel_timeout=1.5 * t,
            retries=args.retries,
            known_hosts=tuple(os.path.expanduser(k) for k in args.known_hosts),
            accept_new_host_keys=args.accept_new_host_keys,
            ssh_config=None if str(args.ssh_config).lower() == "none" else args.ssh_config,
        )
        make = runner_factory(settings)

        def node_name(n: Any) -> str:
            return str(n.name)

    ledger: Ledger | None = None
    location: str | None = None
    if not args.no_ledger:
        location = resolve_ledger(args.ledger, None if args.local else args.inventory)
        from provisioner.rollout.artifacts import scrub_artifacts, secure_beside_ledger
        from provisioner.store import Ledger  # SQLAlchemy only when recording

        # the ledger's and the runner folder: the caller's alone, before a write (issue 45)
        runner = secure_beside_ledger(location, create_runner=False)
        ledger = Ledger.open(location)
        scrub_artifacts(runner)  # what a killed rollout's artifacts still hold
    recorded = {
        k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)
    }
    # how many nodes the run set out to verify: an interrupted run's report says "after 3 of
    # 8 node(s)" (provisioner.reports.model.incomplete_reason)
    recorded["selected_nodes"] = len(items)
    started_at = utcnow()
    run_id = ledger.start_run("verify", fleet, recorded) if ledger else new_run_id()
    reports: dict[str, dict[str, Any]] = {}
    unrecorded: list[str] = []  # nodes whose result the ledger refused (never silent)
    left_open = False
    ledger_errors: list[str] = []
    done = 0
    quiet = args.quiet

    def on_result(res: HostResult[dict[str, Any]]) -> None:
        nonlocal done
        done += 1
        doc = res.value if res.value is not None else unreachable_doc(
            res.name, started_at, time.monotonic(), internal_error(res.error),
            internal=True)
        # the inventory's gdsfleet_simulated, on every record (unreachable ones too)
        doc["simulated"] = res.name in simulated
        reports[res.name] = doc
        if ledger is not None:
            try:
                ledger.record_verification(run_id, doc, step="verified")
            except LedgerError as exc:  # e.g. a full disk: keep going, say so at the end
                unrecorded.append(res.name)
                ledger_errors.append(str(exc))
        if not quiet:
            word = node_result(doc)
            why = ""
            if word != RESULT_COMPLIANT:
                fails = [c["id"] for c in doc.get("checks") or [] if c.get("status") == "fail"]
                why = f" ({', '.join(fails) or doc.get('error') or ''})"
            # node text (an error quoting a banner) is shown escaped, on one line
            sys.stderr.write(printable(f"[{done}/{len(items)}] {res.name}: {word}{why}") + "\n")
            sys.stderr.flush()
        rec = doc.get("attest_record")
        if isinstance(rec, dict) and not rec.get("written"):  # even with -q: never silent
            sys.stderr.write(printable(f"{res.name}: attest record {rec.get('path')} NOT "
                                       f"written: {rec.get('error')}; `attest` on this node will "
                                       f"say so (--no-attest-record skips it)") + "\n")
        feat = doc.get("nfd")
        if isinstance(feat, dict) and not feat.get("written"):  # even with -q: never silent
            sys.stderr.write(printable(f"{res.name}: NFD feature file {feat.get('path')} NOT "
                                       f"written: {feat.get('error')}") + "\n")

    status = "interrupted"
    try:
        def one(n: Any) -> dict[str, Any]:
            try:
                runner = make(n)
            except ConnectError as exc:
                return unreachable_doc(node_name(n), utcnow(), time.monotonic(), str(exc))
            req = NodeRequest.for_node(n, node_name(n), io, nfd=args.nfd,
                                       nfd_ttl_hours=args.nfd_ttl,
                                       attest_record=not args.no_attest_record)
            close = getattr(runner, "close", None)
            # SIGINT/SIGTERM: its SSH connection closes at once; the node's I/O test sees it
            # and stops, removing its test file (provisioner/remote/iotest.py)
            with interrupts.closing(close) if close else contextlib.nullcontext():
                # verify_one by this module's name: tests stand in for it here
                return verify_one(runner, req.name, policy, req.io, **req.options())

        run_parallel(
            items,
            one,
            parallel=args.parallel,
            name=node_name,
            on_result=on_result,
        )
        code = exit_code(list(reports.values()))
        status = {Exit.OK: "compliant", Exit.NOT_COMPLIANT: "not_compliant",
                  Exit.UNREACHABLE: "unreachable"}.get(code, "error")
    finally:
        if ledger is not None:
            try:
                ledger.finish_run(run_id, "ledger_error" if unrecorded else status)
            except LedgerError as exc:  # the run stays open (finished_at NULL) in the ledger
                ledger_errors.append(str(exc))
                left_open = True
            finally:
                ledger.close()

    policy_dict = policy.to_dict() if hasattr(policy, "to_dict") else None
    doc = build_report(
        run_id=run_id,
        started_at=started_at,
        finished_at=utcnow(),
        nodes=[reports[n] for n in names if n in reports],
        fleet=fleet,
        policy=policy_dict,
        ledger=display_url(location) if location else None,
    )
    if args.json:
        write_json(args.json, doc)
    if args.junit:
        write_junit(args.junit, doc)
    if getattr(args, "html", None) or getattr(args, "prom_textfile", None):
        from provisioner.reports.cli import write_live

        write_live(doc, html=args.html, prom_dir=args.prom_textfile,
                   location=location if not ledger_errors else None, run_id=run_id)
    if args.json != "-":
        sys.stdout.write(ledger_line(location) + "\n")  # the first line, as every command's
        render(doc, sys.stdout, details=args.details)
        if location and not ledger_errors:
            sys.stdout.write(f"recorded in the ledger {display_url(location)} (run {run_id})\n")
    if ledger_errors:
        lost = (f"the results of {len(unrecorded)} of {len(reports)} node(s) were NOT recorded: "
                f"{', '.join(sorted(unrecorded))} (they are in the report above"
                f"{' and in ' + args.json if args.json and args.json != '-' else ''}); "
                if unrecorded else "")
        run_state = ("is left open in the ledger" if left_open
                     else "is closed in the ledger as 'ledger_error'")
        raise LedgerError(f"{ledger_errors[0]}; {lost}run {run_id} {run_state}; free space (or "
                          f"fix the ledger) and run the same command again")
    return int(code)
