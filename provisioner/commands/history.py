"""``provisioner history NODE``: one node's verifications, newest first, from the ledger, then
the job proofs its attest kept (``status --attest`` brings them in: which path each job's bytes
took, issue 44)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from provisioner.commands.status import add_ledger_arguments, note_text, split_checks
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.reports.model import node_result
from provisioner.sanitize import printable
from provisioner.store import open_read_only
from provisioner.store.location import display_url, ledger_line, resolve_ledger

HELP = "compliance history of one node"
MAX_LIMIT = 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("node", metavar="NODE", help="node name as in the inventory")
    p.add_argument("--limit", "-n", type=int, default=20, metavar="N",
                   help="show the N newest records (default 20)")
    add_ledger_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--checks", action="store_true", help="list every check of each record")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LIMIT:  # SQLite's integers stop at 2**63
        raise UsageError(f"--limit must be at least 1 and at most {MAX_LIMIT} (got {args.limit})")
    from provisioner.validate import check_node_name

    check_node_name("NODE", args.node)
    location = resolve_ledger(args.ledger, args.inventory)
    from provisioner.commands.status import open_with_hint

    with open_with_hint(args, location, "provisioner history",
                        open_read_only) as ledger:  # creates nothing
        records = ledger.history(args.node, args.limit)
        jobs = ledger.job_proofs(args.node, args.limit)
        known = [] if records or jobs else [str(x["node"]) for x in ledger.latest()]
    if not records and not jobs:
        # an error like every other (stderr, the command named, exit 64), not a table line
        import difflib

        close = difflib.get_close_matches(args.node, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"no verifications of {args.node!r} in {display_url(location)}{hint}")
    if args.json:
        for r in records:
            r.pop("report", None)
        from provisioner.sanitize import finite_document

        # another writer's row may hold NaN: strict JSON out, whatever the ledger holds
        json.dump(finite_document({"ledger": display_url(location), "node": args.node,
                                   "history": records, "jobs": jobs}),
                  sys.stdout, indent=2, allow_nan=False, default=str)
        sys.stdout.write("\n")
        return int(Exit.OK)
    out = sys.stdout
    headers = ["VERIFIED AT", "RUN", "RESULT", "ROUTE", "I/O PATH", "FAILING / WARNINGS / ERROR"]
    rows = []
    for r in records:
        note = (note_text(*split_checks(r)) if r["reachable"]
                else str(r["error"] or ""))
        if r.get("simulated"):  # the inventory's gdsfleet_simulated, as status says it
            note = f"SIMULATED; {note}" if note else "SIMULATED"
        # the ledger keeps what the node said; the terminal gets it escaped (ESC, CR...)
        rows.append([printable(c) for c in (
            str(r["at"])[:19].replace("T", " "), str(r["run_id"]), node_result(r),
            str(r["route"] or "-"), str(r["path_taken"] or "-"), note)])
    widths = [max([len(h), *(len(c[i]) for c in rows)]) for i, h in enumerate(headers)]
    out.write(ledger_line(location) + "\n")
    out.write(printable(f"{args.node}: {len(rows)} newest verification(s)") + "\n")
    for cells in [headers, *rows]:
        out.write(("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1]))
                   + "  " + cells[-1]).rstrip() + "\n")
    if jobs:
        print_jobs(out, jobs)
    if args.checks:
        for r in records:
            out.write(printable(f"\n{r['at']} (run {r['run_id']}):", multiline=True) + "\n")
            for c in r["checks"]:
                out.write(printable(f"  {str(c['status']).upper():4} {c['id']}: "
                                    f"{c['message'] or ''}") + "\n")
    return int(Exit.OK)


def print_jobs(out: Any, jobs: list[dict[str, Any]]) -> None:
    """The node's job proofs, newest first: which path each job's bytes took."""
    def size(n: Any) -> str:
        return "-" if not isinstance(n, int) else f"{n / (1 << 20):.0f} MiB"

    headers = ["JOB", "ENDED", "PATH", "NVFS", "P2PDMA", "COMPAT", "WHY"]
    rows = []
    for j in jobs:
        d = j.get("detail") or {}
        b = d.get("bytes") or {}
        rows.append([printable(str(c)) for c in (
            j.get("job"), str(j.get("checked_at") or "")[:19].replace("T", " "), j.get("status"),
            size(b.get("nvfs")), size(b.get("p2pdma")), size(b.get("compat")),
            d.get("why") or "")])
    widths = [max(len(h), *(len(c[i]) for c in rows)) for i, h in enumerate(headers)]
    out.write(f"\n{len(rows)} newest job proof(s) (whole-node nvidia-fs counters: exact for "
              "exclusive jobs)\n")
    for cells in [headers, *rows]:
        out.write(("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1]))
                   + "  " + cells[-1]).rstrip() + "\n")
