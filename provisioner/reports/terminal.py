"""The terminal table of a verify run: a row per node, then what failed on each node.

Rich on a terminal, plain aligned text otherwise; node text is shown escaped and never read as
Rich markup (provisioner.sanitize). The document it renders: :func:`.model.build_report`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from provisioner.reports.model import (
    RESULT_COMPLIANT,
    RESULT_ERROR,
    RESULT_NOT_COMPLIANT,
    RESULT_UNREACHABLE,
    node_result,
    simulated_line,
    summarize,
)
from provisioner.sanitize import printable


def _gbps(value: Any) -> str:
    """A throughput cell; "-" when absent or not a finite number (a node's NaN or Infinity
    once showed as nan/inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    try:
        f = float(value)
    except OverflowError:  # a node's 10**400
        return "-"
    return f"{f:.2f}" if math.isfinite(f) else "-"


def _failing(n: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in n.get("checks") or [] if c.get("status") in ("fail", "warn")]


def node_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for n in doc.get("nodes") or []:
        io = n.get("io_test") or {}
        bad = [str(c.get("id")) for c in _failing(n) if c.get("status") == "fail"]
        warn = [str(c.get("id")) for c in _failing(n) if c.get("status") == "warn"]
        note = ", ".join(bad) + (f" (warn: {', '.join(warn)})" if warn else "")
        if not n.get("reachable"):
            note = str(n.get("error") or "")
        rows.append([printable(cell) for cell in (
            str(n.get("name")),
            node_result(n),
            str(n.get("route") or "-"),
            str(io.get("path_taken") or "-"),
            f"{_gbps(io.get('write_gbps'))}/{_gbps(io.get('read_gbps'))}",
            note.strip(),
        )])
    return rows


HEADERS = ["NODE", "RESULT", "ROUTE", "I/O PATH", "W/R GB/s", "FAILING CHECKS / ERROR"]


def render(doc: Mapping[str, Any], stream: TextIO | None = None, *, details: bool = False,
           color: bool | None = None) -> None:
    """Print the report: a row per node, then what failed on each node and how to fix it.

    Rich when ``stream`` is a terminal (or ``color`` is True), plain aligned text otherwise.
    Node text is shown with its control characters escaped and never read as Rich markup
    (provisioner.sanitize).
    """
    stream = stream or sys.stdout
    tty = stream.isatty() if color is None else color
    if tty:
        _render_rich(doc, stream, details)
    else:
        _render_plain(doc, stream, details)


def _detail_lines(n: Mapping[str, Any], details: bool) -> list[tuple[str, str]]:
    out = []
    checks = n.get("checks") or []
    for c in checks:
        st = str(c.get("status"))
        if not details and st not in ("fail", "warn"):
            continue
        line = f"{st.upper():4} {c.get('id')}: {c.get('message') or ''}".rstrip()
        exp, obs = c.get("expected"), c.get("observed")
        if st in ("fail", "warn") and (exp or obs):
            line += f" [expected {exp!s}; observed {obs!s}]"
        out.append((st, printable(line)))
    return out


def _render_plain(doc: Mapping[str, Any], stream: TextIO, details: bool) -> None:
    rows = node_rows(doc)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(HEADERS)]
    widths[-1] = len(HEADERS[-1])

    def fmt(cells: Sequence[str]) -> str:
        head = "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1]))
        return f"{head}  {cells[-1]}".rstrip()

    stream.write(fmt(HEADERS) + "\n")
    for r in rows:
        stream.write(fmt(r) + "\n")
    for n in doc.get("nodes") or []:
        lines = _detail_lines(n, details)
        if lines:
            stream.write(f"\n{printable(n.get('name'))}:\n")
            for _, line in lines:
                stream.write(f"  {line}\n")
    stream.write("\n" + summary_line(doc) + "\n")


def _render_rich(doc: Mapping[str, Any], stream: TextIO, details: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, force_terminal=True, highlight=False, markup=False,
                      emoji=False)
    styles = {RESULT_COMPLIANT: "bold green", RESULT_NOT_COMPLIANT: "bold red",
              RESULT_UNREACHABLE: "bold yellow", RESULT_ERROR: "bold magenta"}
    # the run id is the ledger's (another writer's row may hold any text): escaped, literal
    table = Table(title=Text(printable(f"gdsfleet verify - run {doc.get('run_id')}")),
                  title_justify="left")
    for h in HEADERS:
        table.add_column(h, overflow="fold")
    for r in node_rows(doc):  # Text: node text is never read as markup ("[/x]")
        table.add_row(Text(r[0]), Text(r[1], style=styles.get(r[1], "")),
                      *(Text(c) for c in r[2:]))
    console.print(table)
    sty = {"fail": "red", "warn": "yellow", "pass": "green", "skip": "dim"}
    for n in doc.get("nodes") or []:
        lines = _detail_lines(n, details)
        if lines:
            console.print(Text(f"{printable(n.get('name'))}:", style="bold"))
            for st, line in lines:
                console.print(Text("  " + line, style=sty.get(st, "")))
    console.print(Text(summary_line(doc)))


def summary_line(doc: Mapping[str, Any]) -> str:
    s = doc.get("summary") or summarize(doc.get("nodes") or [])
    parts = [f"{s['total']} node(s): {s['compliant']} compliant",
             f"{s['not_compliant']} not compliant", f"{s['unreachable']} unreachable"]
    if s.get("errors"):
        parts.append(f"{s['errors']} internal error(s)")
    line = ", ".join(parts) + f" (exit {s['exit_code']})"
    why = doc.get("incomplete") or s.get("incomplete")
    if why:  # said first: the counts of an interrupted run are not the fleet's
        line = f"{printable(why)}\n{line}"
    sim = simulated_line(doc.get("nodes") or [])
    return f"{line}\n{sim}" if sim else line


__all__ = ["HEADERS", "node_rows", "render", "summary_line"]
