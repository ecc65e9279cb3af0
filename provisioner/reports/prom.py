"""Prometheus text exposition for node_exporter's textfile collector (docs/reports.md).

Every metric is a gauge named ``gdsfleet_*`` with its unit in the name (base units: seconds,
bytes, bytes per second). A check's status is an enum: one series per possible status, 1 for
the one it has, 0 for the others (so ``gdsfleet_check_status{status="fail"} == 1`` alerts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from provisioner.reports.model import (
    RESULT_COMPLIANT,
    io_path,
    is_simulated,
    node_result,
    node_view,
)
from provisioner.sanitize import printable

FILENAME = "gdsfleet.prom"
STATUSES = ("pass", "warn", "skip", "fail")
GIB = 1 << 30
MIB = 1 << 20

# name -> help; every metric is a gauge
METRICS: dict[str, str] = {
    "gdsfleet_report_info": "The run this file was rendered from (value always 1).",
    "gdsfleet_report_generated_timestamp_seconds": "When this file was written (Unix time).",
    "gdsfleet_report_complete": "1 if the run finished with its nodes recorded, 0 if it was "
                                "interrupted, is still open or recorded no node (it then "
                                "proves nothing about the fleet).",
    "gdsfleet_node_compliant": "1 if the node is compliant (GDS proven on the direct path), "
                               "else 0; route, io_path and simulated (the inventory's "
                               "gdsfleet_simulated: stand-in hardware) as labels.",
    "gdsfleet_node_reachable": "1 if the node could be reached and verified, else 0.",
    "gdsfleet_node_drift": "1 if the node's record differs from its last compliant one.",
    "gdsfleet_node_checks": "Number of the node's checks per status.",
    "gdsfleet_node_verification_timestamp_seconds": "When the node's checks ran (Unix time).",
    "gdsfleet_check_status": "1 for the status the check has, 0 for the other statuses.",
    "gdsfleet_io_test_throughput_bytes_per_second": "The I/O test's measured throughput.",
    "gdsfleet_io_test_bytes": "Bytes the I/O test wrote and read back.",
    "gdsfleet_nvfs_io_test_operations": "nvidia-fs counters: I/O operations the node's "
                                        "nvidia-fs driver counted during the I/O test.",
    "gdsfleet_nvfs_io_test_bytes": "nvidia-fs counters: bytes the node's nvidia-fs driver "
                                   "counted during the I/O test (MiB counters x 2^20).",
    "gdsfleet_gdsio_throughput_bytes_per_second": "gdsio's measured throughput per transfer "
                                                  "type (gds: GPUDirect, cpu: bounce buffer).",
    "gdsfleet_gdsio_ratio": "gdsio throughput of the GDS transfer divided by the CPU one.",
    "gdsfleet_gdsio_min_ratio": "The policy's least acceptable gdsio ratio.",
    "gdsfleet_fleet_nodes": "Number of nodes per result in this run.",
}


def _escape(value: Any) -> str:
    """A label value: control characters, line and paragraph separators shown escaped first
    (:func:`provisioner.sanitize.printable`: a node's gdsio ``transfer`` once kept a raw CR,
    at which prometheus_client split the line, and ESC sequences that ``cat`` ran), then the
    exposition format's own escapes."""
    return (printable(value, multiline=True).replace("\\", "\\\\").replace("\n", "\\n")
            .replace('"', '\\"'))


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _fmt(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def timestamp(iso: Any) -> float | None:
    """ISO 8601 (``...Z``) to Unix seconds; None when absent or unreadable."""
    if not iso:
        return None
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def samples(doc: Mapping[str, Any], *, now: float) -> Iterable[tuple[str, dict[str, Any], float]]:
    yield ("gdsfleet_report_info",
           {"run_id": doc.get("run_id") or "", "kind": doc.get("kind") or "verify"}, 1)
    yield "gdsfleet_report_generated_timestamp_seconds", {}, now
    yield "gdsfleet_report_complete", {}, 0 if doc.get("incomplete") else 1
    nodes = node_view(doc)
    results: dict[str, int] = {"compliant": 0, "not_compliant": 0, "unreachable": 0,
                               "error": 0}
    for n in nodes:
        name = str(n.get("name"))
        word = node_result(n)
        key = {"COMPLIANT": "compliant", "NOT COMPLIANT": "not_compliant",
               "UNREACHABLE": "unreachable"}.get(word, "error")
        results[key] += 1
        yield ("gdsfleet_node_compliant",
               {"node": name, "route": n.get("route") or "unknown", "io_path": io_path(n),
                "simulated": "true" if is_simulated(n) else "false"},
               1 if word == RESULT_COMPLIANT else 0)
        yield "gdsfleet_node_reachable", {"node": name}, 1 if n.get("reachable") else 0
        if "drift" in n:
            yield "gdsfleet_node_drift", {"node": name}, 1 if n.get("drift") else 0
        ts = timestamp(n.get("started_at"))
        if ts is not None:
            yield "gdsfleet_node_verification_timestamp_seconds", {"node": name}, ts
        counts = dict.fromkeys(STATUSES, 0)
        for c in n.get("checks") or []:
            st = str(c.get("status"))
            counts[st] = counts.get(st, 0) + 1
        for st, k in counts.items():
            yield "gdsfleet_node_checks", {"node": name, "status": st}, k
        for c in n.get("checks") or []:
            for st in STATUSES:
                yield ("gdsfleet_check_status", {"node": name, "check": c.get("id"),
                                                 "status": st},
                       1 if c.get("status") == st else 0)
        io = n.get("io_test") or {}
        for direction in ("write", "read"):
            gbps = _num(io.get(f"{direction}_gbps"))
            if gbps is not None:
                yield ("gdsfleet_io_test_throughput_bytes_per_second",
                       {"node": name, "direction": direction}, gbps * 1e9)
        if _num(io.get("bytes")) and io.get("path_taken") in ("direct", "compat"):
            yield "gdsfleet_io_test_bytes", {"node": name}, float(io["bytes"])
        ev = io.get("evidence") or {}
        for attempt in ("direct", "compat"):
            delta = ev.get(f"counter_delta_{attempt}")
            if not isinstance(delta, Mapping):
                continue
            for op in ("read", "write"):
                ops = _num(delta.get(f"{op}s_n"))
                if ops is not None:
                    yield ("gdsfleet_nvfs_io_test_operations",
                           {"node": name, "attempt": attempt, "op": op}, ops)
                mib = _num(delta.get(f"{op}_mib"))
                if mib is not None:
                    yield ("gdsfleet_nvfs_io_test_bytes",
                           {"node": name, "attempt": attempt, "op": op}, mib * MIB)
        g = n.get("gdsio")
        if isinstance(g, Mapping):
            seen: set[str] = set()
            for run in g.get("runs") or []:
                transfer = str(run.get("transfer"))
                gib = _num(run.get("throughput_gibps"))
                if gib is None or transfer in seen:  # the first run of a transfer type
                    continue
                seen.add(transfer)
                yield ("gdsfleet_gdsio_throughput_bytes_per_second",
                       {"node": name, "transfer": transfer}, gib * GIB)
            for key in ("ratio", "min_ratio"):
                val = _num(g.get(key))
                if val is not None:
                    yield f"gdsfleet_gdsio_{key}", {"node": name}, val
    for key, count in results.items():
        yield "gdsfleet_fleet_nodes", {"result": key}, count


def to_prometheus(doc: Mapping[str, Any], *, now: float) -> str:
    """The text exposition (version 0.0.4) of ``doc``: HELP and TYPE before each family."""
    by_name: dict[str, list[str]] = {}
    for name, labels, value in samples(doc, now=now):
        by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_fmt(value)}")
    lines: list[str] = []
    for name, help_text in METRICS.items():
        if name not in by_name:
            continue
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(by_name[name])
    return "\n".join(lines) + "\n"


__all__ = ["FILENAME", "METRICS", "samples", "timestamp", "to_prometheus"]
