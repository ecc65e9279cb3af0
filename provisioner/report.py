"""Fleet verification reports: the JSON document, JUnit XML, and the terminal table.

JSON (docs/report-schema.md)::

    {"schema_version": 1, "run_id": "...", "started_at": "...", "finished_at": "...",
     "kind": "verify", "fleet": "...", "nodes": [NodeReport.to_dict(), ...],
     "summary": {"total", "compliant", "not_compliant", "unreachable", "errors",
                 "routes": {...}, "paths": {...}, "exit_code"}}

JUnit: one ``<testsuite>`` per node, one ``<testcase>`` per check (``<failure>`` for fail,
``<skipped>`` for skip; warn passes with its message in ``<system-out>``); an unreachable node is
one ``<testcase name="reachable">`` with an ``<error>``.

Files are written atomically (temp file in the same directory, fsync, rename).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from provisioner.exitcodes import Exit

SCHEMA_VERSION = 1

RESULT_COMPLIANT = "COMPLIANT"
RESULT_NOT_COMPLIANT = "NOT COMPLIANT"
RESULT_UNREACHABLE = "UNREACHABLE"
RESULT_ERROR = "ERROR"


def node_result(node: Mapping[str, Any]) -> str:
    """One word for a node: COMPLIANT, NOT COMPLIANT, UNREACHABLE or ERROR (a bug)."""
    if node.get("internal_error"):
        return RESULT_ERROR
    if not node.get("reachable"):
        return RESULT_UNREACHABLE
    return RESULT_COMPLIANT if node.get("compliant") else RESULT_NOT_COMPLIANT


def exit_code(nodes: Sequence[Mapping[str, Any]]) -> Exit:
    """INTERNAL if verifying a node hit a bug, else UNREACHABLE > NOT_COMPLIANT > OK."""
    results = {node_result(n) for n in nodes}
    if RESULT_ERROR in results:
        return Exit.INTERNAL
    if RESULT_UNREACHABLE in results:
        return Exit.UNREACHABLE
    if RESULT_NOT_COMPLIANT in results:
        return Exit.NOT_COMPLIANT
    return Exit.OK


def summarize(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    results = Counter(node_result(n) for n in nodes)
    return {
        "total": len(nodes),
        "compliant": results[RESULT_COMPLIANT],
        "not_compliant": results[RESULT_NOT_COMPLIANT],
        "unreachable": results[RESULT_UNREACHABLE],
        "errors": results[RESULT_ERROR],
        "routes": dict(sorted(Counter(str(n.get("route")) for n in nodes).items())),
        "paths": dict(
            sorted(Counter(str((n.get("io_test") or {}).get("path_taken")) for n in nodes).items())
        ),
        "exit_code": int(exit_code(nodes)),
    }


def build_report(
    *,
    run_id: str,
    started_at: str,
    finished_at: str,
    nodes: Sequence[Mapping[str, Any]],
    fleet: str | None = None,
    policy: Mapping[str, Any] | None = None,
    ledger: str | None = None,
) -> dict[str, Any]:
    ordered = sorted((dict(n) for n in nodes), key=lambda n: str(n.get("name")))
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "verify",
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": finished_at,
        "fleet": fleet,
        "ledger": ledger,
        "policy": dict(policy) if policy is not None else None,
        "nodes": ordered,
        "summary": summarize(ordered),
    }
    return doc


# --------------------------------------------------------------------------- files
def atomic_write(path: str | os.PathLike[str], data: str) -> None:
    """Write ``data`` to ``path`` through a temp file + rename; ``-`` writes to stdout."""
    if str(path) == "-":
        from provisioner.redact import redact_known

        sys.stdout.write(redact_known(data))
        sys.stdout.flush()
        return
    from provisioner.fsutil import write_private
    from provisioner.redact import redact_known

    write_private(path, redact_known(data))  # 0600: reports name nodes, paths and the ledger


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n"


def write_json(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    atomic_write(path, to_json(doc))


def to_junit(doc: Mapping[str, Any]) -> str:
    nodes = list(doc.get("nodes") or [])
    root = ET.Element("testsuites", name="gdsfleet verify", tests="0", failures="0",
                      errors="0", skipped="0")
    totals = Counter[str]()
    for n in nodes:
        name = str(n.get("name"))
        suite = ET.SubElement(root, "testsuite", name=name,
                              timestamp=str(n.get("started_at") or doc.get("started_at") or ""),
                              time=f"{float(n.get('duration_s') or 0):.3f}")
        props = ET.SubElement(suite, "properties")
        for key in ("route", "compliant", "reachable"):
            ET.SubElement(props, "property", name=key, value=str(n.get(key)))
        ET.SubElement(props, "property", name="run_id", value=str(doc.get("run_id")))
        counts = Counter[str]()
        checks = list(n.get("checks") or [])
        if not n.get("reachable") or n.get("internal_error"):
            case = ET.SubElement(suite, "testcase", name="reachable",
                                 classname=f"gdsfleet.verify.{name}")
            err = ET.SubElement(case, "error", message=str(n.get("error") or "unreachable"),
                                type="internal" if n.get("internal_error") else "unreachable")
            err.text = str(n.get("error") or "")
            counts["tests"] += 1
            counts["errors"] += 1
        for c in checks:
            cid = str(c.get("id"))
            case = ET.SubElement(suite, "testcase", name=cid, classname=f"gdsfleet.verify.{name}")
            counts["tests"] += 1
            status = c.get("status")
            detail = (
                f"expected: {c.get('expected', '')}\nobserved: {c.get('observed', '')}\n"
                f"{c.get('message', '')}"
            )
            if status == "fail":
                f = ET.SubElement(case, "failure", message=str(c.get("message") or cid),
                                  type="fail")
                f.text = detail
                counts["failures"] += 1
            elif status == "skip":
                ET.SubElement(case, "skipped", message=str(c.get("message") or ""))
                counts["skipped"] += 1
            elif status == "warn":
                out = ET.SubElement(case, "system-out")
                out.text = "WARNING\n" + detail
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
            totals[k] += counts[k]
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(totals[k]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    atomic_write(path, to_junit(doc))


# --------------------------------------------------------------------------- terminal
def _gbps(value: Any) -> str:
    return f"{float(value):.2f}" if isinstance(value, int | float) else "-"


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
        rows.append([
            str(n.get("name")),
            node_result(n),
            str(n.get("route") or "-"),
            str(io.get("path_taken") or "-"),
            f"{_gbps(io.get('write_gbps'))}/{_gbps(io.get('read_gbps'))}",
            note.strip(),
        ])
    return rows


HEADERS = ["NODE", "RESULT", "ROUTE", "I/O PATH", "W/R GB/s", "FAILING CHECKS / ERROR"]


def render(doc: Mapping[str, Any], stream: TextIO | None = None, *, details: bool = False,
           color: bool | None = None) -> None:
    """Print the report: a row per node, then what failed on each node and how to fix it.

    Rich when ``stream`` is a terminal (or ``color`` is True), plain aligned text otherwise.
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
        out.append((st, line))
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
            stream.write(f"\n{n.get('name')}:\n")
            for _, line in lines:
                stream.write(f"  {line}\n")
    stream.write("\n" + summary_line(doc) + "\n")


def _render_rich(doc: Mapping[str, Any], stream: TextIO, details: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, force_terminal=True, highlight=False)
    styles = {RESULT_COMPLIANT: "bold green", RESULT_NOT_COMPLIANT: "bold red",
              RESULT_UNREACHABLE: "bold yellow", RESULT_ERROR: "bold magenta"}
    table = Table(title=f"gdsfleet verify - run {doc.get('run_id')}", title_justify="left")
    for h in HEADERS:
        table.add_column(h, overflow="fold")
    for r in node_rows(doc):
        table.add_row(r[0], Text(r[1], style=styles.get(r[1], "")), *r[2:])
    console.print(table)
    sty = {"fail": "red", "warn": "yellow", "pass": "green", "skip": "dim"}
    for n in doc.get("nodes") or []:
        lines = _detail_lines(n, details)
        if lines:
            console.print(Text(f"{n.get('name')}:", style="bold"))
            for st, line in lines:
                console.print(Text("  " + line, style=sty.get(st, "")))
    console.print(summary_line(doc))


def summary_line(doc: Mapping[str, Any]) -> str:
    s = doc.get("summary") or summarize(doc.get("nodes") or [])
    parts = [f"{s['total']} node(s): {s['compliant']} compliant",
             f"{s['not_compliant']} not compliant", f"{s['unreachable']} unreachable"]
    if s.get("errors"):
        parts.append(f"{s['errors']} internal error(s)")
    return ", ".join(parts) + f" (exit {s['exit_code']})"


__all__ = [
    "SCHEMA_VERSION",
    "atomic_write",
    "build_report",
    "exit_code",
    "node_result",
    "render",
    "summarize",
    "summary_line",
    "to_json",
    "to_junit",
    "write_json",
    "write_junit",
]
