"""``provisioner report RUN_ID``: render any run of the ledger, as a live run would have.

``--html``, ``--json``, ``--junit`` and ``--prom-textfile`` come from the same module and the
same ledger records as ``verify``'s and ``rollout``'s own reports; ``latest`` names the newest
run. The ledger is opened read-only. Without an output option the run is printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from provisioner.commands.status import add_ledger_arguments
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
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
    with open_read_only(location) as ledger:  # never creates anything
        run_id = args.run_id
        if run_id == "latest":
            newest = ledger.runs(limit=1)
            if not newest:
                raise UsageError(f"no runs in the ledger {display_url(location)}; run "
                                 f"`provisioner verify` or `provisioner rollout` first")
            run_id = newest[0]["id"]
        doc = from_ledger(ledger, run_id, location=display_url(location))
    write_reports(doc, json_path=args.json, junit=args.junit, html=args.html,
                  prom_dir=args.prom_textfile)
    if args.json == "-":  # stdout is the document (it names the ledger): the line on stderr
        sys.stderr.write(ledger_line(location) + "\n")
        return int(Exit.OK)
    sys.stdout.write(ledger_line(location) + "\n")  # the first line, as every command's
    if not (args.json or args.junit or args.html or args.prom_textfile):
        _print(doc)
    else:
        written = [f for f in (args.html, args.json, args.junit) if f]
        if args.prom_textfile:
            written.append(f"{args.prom_textfile.rstrip('/')}/gdsfleet.prom")
        sys.stdout.write(f"run {run_id} ({doc['kind']}): wrote {', '.join(written)}\n")
    return int(Exit.OK)


def _print(doc: dict[str, Any]) -> None:
    from provisioner.reports.model import node_view, summarize
    from provisioner.reports.terminal import render
    from provisioner.sanitize import printable

    if doc["kind"] == "verify":
        render(doc, sys.stdout)
        return
    nodes = node_view(doc)
    view = {"run_id": doc["run_id"], "nodes": nodes, "summary": summarize(nodes)}
    sys.stdout.write(printable(f"rollout {doc['run_id']}: {doc.get('status')}") + "\n")
    for n in doc.get("nodes") or []:  # node text from the ledger: shown escaped
        sys.stdout.write(printable(f"  wave {n.get('wave')}  {n.get('name')}: {n.get('step')}"
                                   + (f" ({n['reason']})" if n.get("reason") else "")) + "\n")
    sys.stdout.write("\n")
    render(view, sys.stdout)
