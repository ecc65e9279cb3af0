"""``provisioner status``: the latest compliance state of every node in the ledger, with drift.

Drift: a node whose latest record differs from its last compliant one (compliance lost, route
changed, different failing/warning checks, or unreachable since), or whose attest found it
regressed since its latest verification. Plain ``status`` reads the ledger only (offline,
fast); ``--attest`` first asks every node of ``-i INVENTORY`` over SSH for its attest
(``gdsfleet-attest --json``, sent bundled: nothing installed needed) and the job proofs it kept,
and records them in the ledger (issue 44). Exit 0 unless ``--fail-on-drift`` is given and some
node drifted (then 1); with ``--attest``, 2 when a node could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from provisioner.exitcodes import Exit
from provisioner.reports.model import (
    RESULT_COMPLIANT,
    RESULT_NOT_COMPLIANT,
    node_result,
    simulated_line,
)
from provisioner.sanitize import printable
from provisioner.store import open_read_only
from provisioner.store.location import display_url, ledger_line, resolve_ledger
from provisioner.verify import proof
from provisioner.verify.model import IoTestResult

if TYPE_CHECKING:
    from provisioner.store.queries import LedgerQueries

HELP = "latest compliance state of every node in the ledger"


def add_ledger_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ledger", metavar="PATH|URL",
                   help="compliance ledger (SQLite path or postgresql+psycopg:// URL); default "
                        "$GDSFLEET_LEDGER, else .lab/ledger.sqlite for -i inventories/lab, else "
                        "~/.local/state/gdsfleet/ledger.sqlite")
    p.add_argument("-i", "--inventory", metavar="INVENTORY",
                   help="only used to find the default ledger of that inventory")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_ledger_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--drift", action="store_true", help="show only nodes that drifted")
    p.add_argument("--fail-on-drift", action="store_true",
                   help="exit 1 when any node drifted (for cron/CI)")
    p.add_argument("--attest", action="store_true",
                   help="first ask every node of -i INVENTORY over SSH whether it regressed "
                        "since its verify (attest, no I/O test) and record the answers and the "
                        "nodes' job proofs in the ledger; without it status never connects")
    p.add_argument("-l", "--limit", metavar="PATTERN",
                   help="with --attest: Ansible host pattern selecting nodes of the inventory")
    p.add_argument("--parallel", "-f", type=int, default=32, metavar="N",
                   help="with --attest: nodes asked at once (default 32)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="with --attest: TCP connect timeout (default 10)")


def open_ledger(args: argparse.Namespace) -> LedgerQueries:
    return open_read_only(resolve_ledger(args.ledger, args.inventory))


def proof_refused(x: dict[str, Any]) -> str | None:
    """Why a record's proof of the direct path does not count under today's rules (an old
    proof kind, or one its own facts contradict: provisioner.verify.proof); None otherwise."""
    report = x.get("report") or {}
    if not isinstance(report, dict):
        return None
    io = IoTestResult.from_dict(report.get("io_test") or None)
    facts = report.get("facts")
    return proof.unproven_reason(io, facts if isinstance(facts, dict) else {})


def _row(x: dict[str, Any]) -> dict[str, Any]:
    result = node_result(x)
    failing, warnings = split_checks(x)
    refused = proof_refused(x) if result == RESULT_COMPLIANT else None
    if refused:
        # Recorded as compliant on a proof that proves nothing today: not compliant.
        result = RESULT_NOT_COMPLIANT
        failing = sorted({*failing, "io.direct_path"})
    return {
        "node": x["node"],
        "result": result,
        "proof_refused": refused,
        "at": x["at"],
        "run_id": x["run_id"],
        "route": x["route"],
        "path_taken": x["path_taken"],
        "failing": failing,
        "warnings": warnings,
        "error": x["error"],
        "drift": x["drift"],
        # the inventory's gdsfleet_simulated when it was recorded: stand-in hardware
        "simulated": x.get("simulated") is True,
        "last_compliant_at": (x["baseline"] or {}).get("at")
        if x["compliant"] is False or refused else x["at"],
    }


def split_checks(x: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A record's failing checks and its warnings, apart: a warning leaves a node compliant and
    is never shown as a failure (``verify`` words them the same way)."""
    checks = x.get("checks") or []
    failing = sorted(str(c["id"]) for c in checks if c.get("status") == "fail")
    warnings = sorted(str(c["id"]) for c in checks if c.get("status") == "warn")
    return failing, warnings


def note_text(failing: list[str], warnings: list[str], drift: list[str] | None = None) -> str:
    """``failing: a, b; warning: c; drift: ...``: each kind in its own words."""
    parts = []
    if failing:
        parts.append("failing: " + ", ".join(failing))
    if warnings:
        parts.append(("warnings: " if len(warnings) > 1 else "warning: ") + ", ".join(warnings))
    if drift:
        parts.append("drift: " + "; ".join(drift))
    return "; ".join(parts)


def open_with_hint(args: argparse.Namespace, location: str, prog: str,
                   opener: Callable[[str], LedgerQueries] = open_read_only) -> LedgerQueries:
    """The ledger, read-only (``opener``: the command's own ``open_read_only``); with no
    ledger named in a checkout whose lab has one, a note on stderr says how to read the lab's
    (and a missing ledger's error says it too)."""
    from provisioner.errors import LedgerError
    from provisioner.store.location import lab_hint

    hint = lab_hint(args.ledger, args.inventory, location)
    try:
        ledger = opener(location)
    except LedgerError as exc:
        if hint:
            raise LedgerError(f"{exc}; {hint}") from None
        raise
    if hint:
        sys.stderr.write(printable(f"{prog}: note: read {display_url(location)}; {hint}") + "\n")
    return ledger


def run(args: argparse.Namespace) -> int:
    location = resolve_ledger(args.ledger, args.inventory)
    unreachable: list[str] = []
    if getattr(args, "attest", False):
        # the one part of status that writes (attestations only), in the attest command
        from provisioner.commands.attest import pull_fleet

        unreachable = pull_fleet(args, location)
    elif getattr(args, "limit", None):
        from provisioner.errors import UsageError

        raise UsageError("--limit selects the nodes --attest asks: add --attest")
    with open_with_hint(args, location, "provisioner status") as ledger:  # creates nothing
        attests = ledger.latest_attestations()
        rows = [with_attest(_row(x), attests.get(str(x["node"]))) for x in ledger.latest()]
    if args.drift:
        rows = [r for r in rows if r["drift"]]
    drifted = sum(1 for r in rows if r["drift"])
    if args.json:
        from provisioner.sanitize import finite_document

        # another writer's row may hold NaN: strict JSON out, whatever the ledger holds
        json.dump(finite_document({"ledger": display_url(location), "nodes": rows}), sys.stdout,
                  indent=2, allow_nan=False, default=str)
        sys.stdout.write("\n")
    else:
        print_table(rows, location)
    if unreachable:
        sys.stderr.write(printable(f"provisioner status: {len(unreachable)} node(s) not asked: "
                                   f"{'; '.join(unreachable[:10])}") + "\n")
        return int(Exit.UNREACHABLE)
    return int(Exit.NOT_COMPLIANT) if args.fail_on_drift and drifted else int(Exit.OK)


def with_attest(row: dict[str, Any], attestation: dict[str, Any] | None) -> dict[str, Any]:
    """The row with the node's newest attest; a regression since its latest verification is
    drift (the rollout reconciles it: provisioner/rollout/planner.py)."""
    from provisioner.store.queries import attest_drift

    if attestation is None:
        row["attest"] = None
        return row
    detail = attestation.get("detail") or {}
    row["attest"] = {"status": attestation.get("status"), "at": attestation.get("at"),
                     "checked_at": attestation.get("checked_at"),
                     "regressions": [r.get("id") for r in detail.get("regressions") or []],
                     "error": detail.get("error")}
    drift = attest_drift(row.get("at"), attestation)
    if drift is not None:
        what = ("regressed since verified" if drift["status"] == "regressed"
                else "no usable record on the node")
        ids = ", ".join(i for i in drift["regressions"] if i) or "?"
        row["drift"] = [*(row.get("drift") or []), f"{what}: {ids} (attest {drift['at'][:19]})"]
    return row


def print_table(rows: list[dict[str, Any]], location: str) -> None:
    out = sys.stdout
    if not rows:
        out.write(f"{ledger_line(location)}\nno verifications recorded in it\n")
        return
    headers = ["", "NODE", "RESULT", "ROUTE", "I/O PATH", "VERIFIED AT",
               "FAILING / WARNINGS / DRIFT"]
    sim = simulated_line(rows)
    table = []
    for r in rows:
        note = note_text(r["failing"], r.get("warnings") or [], r["drift"])
        if r.get("simulated"):  # said on the node's own row, not only in the line above
            note = f"SIMULATED; {note}" if note else "SIMULATED"
        if r.get("proof_refused"):
            note = f"{note}; {r['proof_refused']}" if note else str(r["proof_refused"])
        if r["result"] == "UNREACHABLE":
            note = "; ".join(p for p in ("SIMULATED" if r.get("simulated") else "",
                                         str(r["error"] or ""),
                                         note_text([], [], r["drift"])) if p)
        # the ledger keeps what the node said; the terminal gets it escaped (ESC, CR...)
        table.append([printable(c) for c in (
            "!" if r["drift"] else " ", str(r["node"]), r["result"], str(r["route"] or "-"),
            str(r["path_taken"] or "-"), str(r["at"])[:19].replace("T", " "), note)])
    if out.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(f"{ledger_line(location)}  (! = drift)"),
                  title_justify="left")
        for h in headers:
            t.add_column(h, overflow="fold")
        style = {"COMPLIANT": "green", "NOT COMPLIANT": "red", "UNREACHABLE": "yellow"}
        for cells in table:
            # Text: never read as Rich markup ("[/x]" in a node's error)
            t.add_row(*(Text(c) for c in cells),
                      style="bold" if cells[0] == "!" else style.get(cells[2], ""))
        console = Console(file=out, markup=False, emoji=False, highlight=False)
        console.print(t)
        if sim:
            console.print(Text(sim, style="bold"))
        return
    widths = [max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(headers)]
    # the first line names the ledger read, as every command's does (issue 30)
    out.write(ledger_line(location) + "\n")
    if sim:
        out.write(sim + "\n")
    for cells in [headers, *table]:
        out.write(("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1]))
                   + "  " + cells[-1]).rstrip() + "\n")
    n_drift = sum(1 for c in table if c[0] == "!")
    out.write(f"\n{len(table)} node(s), {n_drift} drifted (marked !) - ledger "
              f"{display_url(location)}\n")
