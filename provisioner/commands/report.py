"""``provisioner report RUN_ID``: render any run of the ledger, as a live run would have.

``--html``, ``--json``, ``--junit`` and ``--prom-textfile`` come from the same module and the
same ledger records as ``verify``'s and ``rollout``'s own reports; ``latest`` names the newest
complete run, passing over (and naming) newer runs that were interrupted, are still open or
recorded no node. A run that proves nothing about its fleet is rendered as it is, said so in
every format, and exits 1. The ledger is opened read-only. Without an output option the run is
printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from provisioner.commands.status import add_ledger_arguments
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.sanitize import printable
from provisioner.store import open_read_only
from provisioner.store.location import display_url, ledger_line, resolve_ledger

HELP = "render a run of the ledger as HTML, JSON, JUnit or a Prometheus textfile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN_ID",
                   help="a run id (as verify/rollout printed it), or 'latest'")
    add_ledger_arguments(p)
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--json", metavar="FILE", help="write the JSON report ('-' for stdout)")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--prom-textfile", metavar="DIR",
                   help="write DIR/gdsfleet.prom for node_exporter's textfile collector")


def run(args: argparse.Namespace) -> int:
    from provisioner.outputs import check_output_path
    from provisioner.reports import write_reports
    from provisioner.reports.cli import check_prom_dir
    from provisioner.reports.model import from_ledger

    check_output_path("--json", args.json)
    check_output_path("--junit", args.junit, stdout_ok=False)
    check_output_path("--html", args.html, stdout_ok=False)
    check_prom_dir(args.prom_textfile)
    location = resolve_ledger(args.ledger, args.inventory)
    skipped: list[str] = []
    with open_read_only(location) as ledger:  # never creates anything
        run_id = args.run_id
        if run_id == "latest":
            run_id, skipped = _latest_complete(ledger, display_url(location))
        doc = from_ledger(ledger, run_id, location=display_url(location))
    write_reports(doc, json_path=args.json, junit=args.junit, html=args.html,
                  prom_dir=args.prom_textfile)
    for line in skipped:  # said, never silent: which newer runs `latest` passed over
        sys.stderr.write(printable(f"provisioner report: latest: skipped {line}") + "\n")
    # a run that proves nothing about its fleet (interrupted, open, empty) is rendered as it
    # is, said in every format, and exits 1 (issue 47)
    code = Exit.NOT_COMPLIANT if doc.get("incomplete") else Exit.OK
    if doc.get("incomplete"):
        sys.stderr.write(printable(f"provisioner report: {doc['incomplete']}") + "\n")
    if args.json == "-":  # stdout is the document (it names the ledger): the line on stderr
        sys.stderr.write(ledger_line(location) + "\n")
        return int(code)
    sys.stdout.write(ledger_line(location) + "\n")  # the first line, as every command's
    if not (args.json or args.junit or args.html or args.prom_textfile):
        _print(doc)
    else:
        written = [f for f in (args.html, args.json, args.junit) if f]
        if args.prom_textfile:
            written.append(f"{args.prom_textfile.rstrip('/')}/gdsfleet.prom")
        sys.stdout.write(f"run {run_id} ({doc['kind']}): wrote {', '.join(written)}\n")
    return int(code)


# how far back `latest` looks for a run that is complete
LATEST_LOOKBACK = 100


def _latest_complete(ledger: Any, shown: str) -> tuple[str, list[str]]:
    """The newest run that finished with its nodes recorded, and a line for each newer one it
    passed over (interrupted, still open, empty: they prove nothing about the fleet). None
    complete: the newest run, rendered as incomplete (said in every format, exit 1)."""
    from provisioner.reports.model import incomplete_reason

    runs = ledger.runs(limit=LATEST_LOOKBACK)
    if not runs:
        raise UsageError(f"no runs in the ledger {shown}; run `provisioner verify` or "
                         f"`provisioner rollout` first")
    passed: list[str] = []
    for run in runs:
        count = ledger.run_node_count(run["id"], run["kind"])
        result = ledger.run_result(run["id"]) if run["kind"] == "rollout" else None
        why = incomplete_reason(run, count, result)
        if why is None:
            return run["id"], passed
        passed.append(f"{why}; `provisioner report {run['id']}` renders it")
    return runs[0]["id"], []


def _print(doc: dict[str, Any]) -> None:
    from provisioner.reports.model import node_view, summarize
    from provisioner.reports.terminal import render
    from provisioner.sanitize import printable

    if doc["kind"] == "verify":
        render(doc, sys.stdout)
        return
    nodes = node_view(doc)
    view = {"run_id": doc["run_id"], "nodes": nodes, "incomplete": doc.get("incomplete"),
            "summary": summarize(nodes, incomplete=doc.get("incomplete"))}
    sys.stdout.write(printable(f"rollout {doc['run_id']}: {doc.get('status')}") + "\n")
    for n in doc.get("nodes") or []:  # node text from the ledger: shown escaped
        sys.stdout.write(printable(f"  wave {n.get('wave')}  {n.get('name')}: {n.get('step')}"
                                   + (f" ({n['reason']})" if n.get("reason") else "")) + "\n")
    sys.stdout.write("\n")
    render(view, sys.stdout)
