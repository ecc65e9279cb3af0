"""One self-contained HTML page per run: inline CSS, an inline SVG chart, no script, no fetch.

It must open on an air-gapped bastion, so the page references nothing outside itself (the
browser test checks that). Order: fleet summary (by route and by I/O path), the nodes that are
not compliant with their failing checks and what to do, drift marked, throughput per node as a
bar chart, then every node's checks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from importlib import resources
from typing import Any

from provisioner.reports.model import (
    RESULT_COMPLIANT,
    RESULT_ERROR,
    RESULT_NOT_COMPLIANT,
    RESULT_UNREACHABLE,
    io_path,
    is_simulated,
    node_result,
    node_view,
    simulated_line,
)

GIB_IN_GB = (1 << 30) / 1e9
RESULTS = (RESULT_COMPLIANT, RESULT_NOT_COMPLIANT, RESULT_UNREACHABLE, RESULT_ERROR)
SERIES = (  # key, legend, colour
    ("io_write", "I/O test write", "#2b6cb0"),
    ("io_read", "I/O test read", "#63b3ed"),
    ("gdsio_gds", "gdsio GDS", "#2f855a"),
    ("gdsio_cpu", "gdsio CPU (bounce buffer)", "#a0aec0"),
)


def _css_class(word: str) -> str:
    return word.lower().replace(" ", "-")


def _gdsio(n: Mapping[str, Any]) -> dict[str, Any] | None:
    g = n.get("gdsio")
    if not isinstance(g, Mapping):
        return None
    by = {}
    for run in g.get("runs") or []:
        t = str(run.get("transfer"))
        if t not in by and isinstance(run.get("throughput_gibps"), int | float):
            by[t] = dict(run)
    return {"io_type": g.get("io_type"), "runs": by, "ratio": g.get("ratio"),
            "min_ratio": g.get("min_ratio"), "file": g.get("file"),
            "io_size_bytes": g.get("io_size_bytes"), "workers": g.get("workers")}


def _figures(n: Mapping[str, Any]) -> dict[str, float]:
    """Throughput of one node in GB/s (decimal) per chart series."""
    out: dict[str, float] = {}
    io = n.get("io_test") or {}
    for key, field in (("io_write", "write_gbps"), ("io_read", "read_gbps")):
        if isinstance(io.get(field), int | float):
            out[key] = float(io[field])
    g = _gdsio(n)
    if g:
        for t in ("gds", "cpu"):
            if t in g["runs"]:
                out[f"gdsio_{t}"] = float(g["runs"][t]["throughput_gibps"]) * GIB_IN_GB
    return out


def chart(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the horizontal bar chart (one group of bars per node)."""
    figures = {str(n.get("name")): _figures(n) for n in nodes}
    used = [s for s in SERIES if any(s[0] in f for f in figures.values())]
    top = max((v for f in figures.values() for v in f.values()), default=0.0)
    label_w, bar_h, gap, plot_w = 170, 14, 10, 560
    y = 30
    groups = []
    for name, f in figures.items():
        bars = []
        for key, legend, colour in used:
            if key in f:
                w = 0 if top <= 0 else max(1.0, plot_w * f[key] / top)
                bars.append({"y": y, "w": round(w, 1), "value": f[key], "legend": legend,
                             "colour": colour})
            y += bar_h + 2
        groups.append({"name": name, "y": y - (bar_h + 2) * len(used), "bars": bars,
                       "empty": not bars})
        y += gap
    return {"series": used, "groups": groups, "height": y + 10, "width": label_w + plot_w + 90,
            "label_w": label_w, "bar_h": bar_h, "top": top}


def _breakdown(nodes: list[dict[str, Any]], key: Any) -> list[dict[str, Any]]:
    table: dict[str, Counter[str]] = {}
    for n in nodes:
        table.setdefault(key(n), Counter())[node_result(n)] += 1
    return [{"name": k, "counts": [c[r] for r in RESULTS], "total": sum(c.values())}
            for k, c in sorted(table.items())]


def when(value: Any) -> str:
    """A timestamp as a person reads it: ``2026-11-22 05:00:00 UTC`` (to the second, the zone
    named) from the ledger's ISO text with microseconds; anything else as it came (escaped by
    the template), never an error."""
    from datetime import datetime, timezone

    if not isinstance(value, str) or not value.strip():
        return "-"
    text = value.strip()
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return text
    if t.tzinfo is None:  # the ledger writes UTC
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def context(doc: Mapping[str, Any]) -> dict[str, Any]:
    nodes = node_view(doc)
    for n in nodes:
        n["result"] = node_result(n)
        n["css"] = _css_class(n["result"])
        n["problems"] = [c for c in n.get("checks") or [] if c.get("status") in ("fail", "warn")]
        # a warning leaves a node compliant: shown apart from failures, never hidden
        n["warnings"] = [str(c.get("id")) for c in n.get("checks") or []
                         if c.get("status") == "warn"]
        n["passing"] = [c for c in n.get("checks") or []
                        if c.get("status") not in ("fail", "warn")]
        n["gdsio_view"] = _gdsio(n)
        n["io_path_taken"] = io_path(n) if n.get("io_test") else "-"
        n["simulated"] = is_simulated(n)
    counts = Counter(n["result"] for n in nodes)
    return {
        "doc": doc,
        "kind": doc.get("kind") or "verify",
        "nodes": nodes,
        "failing": [n for n in nodes if n["result"] != RESULT_COMPLIANT],
        "drifted": [n for n in nodes if n.get("drift")],
        "warned": [n for n in nodes if n["warnings"]],
        "simulated_banner": simulated_line(nodes),
        # an interrupted, open or empty run: said at the top, never "Every node is compliant"
        "incomplete": doc.get("incomplete"),
        "any_gdsio": any(n["gdsio_view"] for n in nodes),
        "counts": {r: counts[r] for r in RESULTS},
        "results": RESULTS,
        "by_route": _breakdown(nodes, lambda n: str(n.get("route") or "unknown")),
        "by_path": _breakdown(nodes, lambda n: n["io_path_taken"]),
        "chart": chart(nodes),
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "css_class": _css_class,
    }


def to_html(doc: Mapping[str, Any]) -> str:
    import jinja2

    source = resources.files("provisioner.reports").joinpath("templates/report.html.j2")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = when
    env.filters["num"] = lambda v, fmt="%.2f": (fmt % v) if isinstance(v, int | float) else "-"
    template = env.from_string(source.read_text(encoding="utf-8"))
    # autoescape handles <, >, &; control characters (ESC sequences, NUL) from a node are
    # shown escaped too (provisioner.sanitize)
    from provisioner.sanitize import printable_document

    return template.render(**context(printable_document(doc, multiline=True)))


__all__ = ["chart", "context", "to_html", "when"]
