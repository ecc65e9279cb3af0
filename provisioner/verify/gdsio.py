"""``verify --gdsio``, controller side: run NVIDIA's gdsio on the node's GDS mount with the GPU
Direct transfer (``-x 0``) and the CPU-only baseline (``-x 1``), same file, size, I/O size and
workers; report both runs and their throughput ratio, and judge the policy's floor
(``gdsio_min_ratio``) in the check ``gdsio.ratio`` (docs/checks.md).

gdsio prints ``XferType: GPUD`` also when cuFile served the I/O in compat mode: the ratio says how
the GPU transfer compares with the CPU one, not which path it took (the I/O test proves that).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from provisioner.remote import load_script
from provisioner.verify.iotest import last_json
from provisioner.verify.model import (
    FAIL,
    GDSIO_DEFAULT_SIZE,
    PASS,
    PATH_DIRECT,
    SKIP,
    WARN,
    CheckResult,
    CommandRunner,
    GdsioOptions,
    GdsioResult,
    GdsioRun,
    IoTestResult,
)
from provisioner.verify.parsers import gdsio as gdsio_parser

SCRIPT = "gdsio.py"
CHECK_ID = "gdsio.ratio"
_SLACK_S = 60.0
_ALIGN = 4096


def effective(opts: GdsioOptions, io_test_size: int) -> GdsioOptions:
    """The options for one node: the size defaults to the node's I/O test size (which respects
    the inventory's gds_verify_io_size) capped at GDSIO_DEFAULT_SIZE; the I/O size is a 4 KiB
    multiple no larger than the file, and the file a whole number of I/Os (pure)."""
    from dataclasses import replace

    size = opts.size_bytes if opts.size_bytes else min(int(io_test_size), GDSIO_DEFAULT_SIZE)
    io = max(_ALIGN, (int(opts.io_size_bytes) // _ALIGN) * _ALIGN)
    io = min(io, max(_ALIGN, size // _ALIGN * _ALIGN))
    size = max(io, size // io * io)
    return replace(opts, size_bytes=size, io_size_bytes=io)


def command(opts: GdsioOptions, directory: str) -> str:
    args = {"dir": directory, "size_bytes": opts.size_bytes, "io_size_bytes": opts.io_size_bytes,
            "workers": opts.workers, "io_type": opts.io_type, "gpu_index": opts.gpu_index,
            "timeout_s": opts.timeout_s}
    return "python3 - " + shlex.quote(json.dumps(args, sort_keys=True))


def _last_json(text: str) -> dict[str, Any] | None:
    return last_json(text, "gdsfleet_gdsio")


def _expected(floor: float | None) -> str:
    return (f"GDS/CPU throughput ratio >= {floor:g} (policy gdsio_min_ratio)" if floor is not None
            else "gdsio runs with GDS and CPU-only transfers (no floor: policy gdsio_min_ratio "
            "unset)")


def _run_failure(run: dict[str, Any]) -> str | None:
    """Why one run produced no result line (None when it did)."""
    if run.get("error"):
        return str(run["error"])
    parsed = gdsio_parser.parse(str(run.get("stdout") or ""))
    if run.get("rc") == 0 and parsed.first is not None:
        return None
    said = "; ".join(parsed.other[-2:]) or str(run.get("stderr") or "").strip()[-300:]
    return f"exit {run.get('rc')}" + (f": {said}" if said else ", no result line")


def evaluate(doc: dict[str, Any] | None, opts: GdsioOptions, floor: float | None, *,
             io_test: IoTestResult | None = None, exit_status: int | None = None,
             stderr: str = "") -> tuple[GdsioResult | None, CheckResult]:
    """The node script's document -> (result, the ``gdsio.ratio`` check) (pure)."""
    expected = _expected(floor)
    if doc is None:
        why = ("python3 is not installed on the node" if exit_status == 127 else
               f"the gdsio script produced no report (exit {exit_status}): "
               f"{stderr.strip()[-300:]}")
        return None, CheckResult(CHECK_ID, FAIL if floor is not None else WARN, expected,
                                 "no report", why)
    if doc.get("status") == "skipped":
        reason = str(doc.get("reason") or "skipped")
        return None, CheckResult(CHECK_ID, SKIP, expected, "not run", reason)
    result_runs: list[GdsioRun] = []
    problems: list[str] = []
    runs = doc.get("runs")
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):  # a node's document: any type anywhere
            problems.append(f"a run that is not an object: {str(run)[:80]}")
            continue
        transfer = str(run.get("transfer"))
        failure = _run_failure(run)
        if failure is not None:
            problems.append(f"the {transfer} run (-x {run.get('xfer_type')}) failed: {failure}")
            continue
        line = gdsio_parser.parse(str(run.get("stdout"))).lines[0]
        xfer = run.get("xfer_type", line.xfer_type or 0)
        result_runs.append(GdsioRun(
            transfer=transfer,
            xfer_type=xfer if isinstance(xfer, int) and not isinstance(xfer, bool) else -1,
            throughput_gibps=line.throughput_gibps, avg_latency_us=line.avg_latency_us,
            ops=line.ops, duration_s=line.total_time_s))
    if doc.get("status") == "failed":
        problems.append(str(doc.get("reason")))
    if doc.get("file_removed") is False:
        problems.append(f"the test file {doc.get('file')} could not be removed "
                        f"({doc.get('remove_error')}): remove it by hand")
    by = {r.transfer: r for r in result_runs}
    gds, cpu = by.get("gds"), by.get("cpu")
    ratio = (round(gds.throughput_gibps / cpu.throughput_gibps, 3)
             if gds and cpu and cpu.throughput_gibps > 0 else None)
    result = GdsioResult(io_type=opts.io_type, file=str(doc.get("file") or ""),
                         file_size_bytes=int(opts.size_bytes or 0),
                         io_size_bytes=opts.io_size_bytes, workers=opts.workers,
                         runs=tuple(result_runs), ratio=ratio, min_ratio=floor)
    if ratio is None:
        problems = problems or ["the CPU run reported no throughput, so there is no ratio"]
        return result, CheckResult(CHECK_ID, FAIL if floor is not None else WARN, expected,
                                   "no ratio", "; ".join(problems))
    assert gds is not None and cpu is not None
    observed = (f"ratio {ratio:g} (GDS {gds.throughput_gibps:g} GiB/s, CPU "
                f"{cpu.throughput_gibps:g} GiB/s, {opts.io_type}, {opts.workers} workers)")
    note = ""
    if io_test is not None and io_test.path_taken != PATH_DIRECT:
        note = (" gdsio prints XferType: GPUD also in compat mode, and the I/O test found no "
                f"direct path ({io_test.path_taken}): the GDS run probably went through POSIX.")
    extra = (" " + "; ".join(problems) + ".") if problems else ""
    if floor is not None and ratio < floor:
        return result, CheckResult(
            CHECK_ID, FAIL, expected, observed,
            f"GPU Direct is {ratio:g}x the CPU-only throughput, under the policy's floor "
            f"{floor:g}: check that the I/O takes the direct path (io.direct_path), the GPU and "
            f"the NVMe share a PCIe switch or root port, and nvidia-fs stats.{note}{extra}")
    status = WARN if problems else PASS
    return result, CheckResult(
        CHECK_ID, status, expected, observed,
        f"GPU Direct moved {ratio:g}x the CPU-only throughput on the same file.{note}{extra}")


def run_gdsio(runner: CommandRunner, opts: GdsioOptions, directory: str, floor: float | None,
              *, io_test: IoTestResult | None = None
              ) -> tuple[GdsioResult | None, CheckResult, str]:
    """Run the node script; (result, check, raw output). ConnectError propagates."""
    timeout = opts.timeout_s * len(("gds", "cpu")) + _SLACK_S
    res = runner.run(command(opts, directory), timeout=timeout, stdin=load_script(SCRIPT))
    raw = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr.strip() else "")
    result, check = evaluate(_last_json(res.stdout), opts, floor, io_test=io_test,
                             exit_status=res.exit_status, stderr=res.stderr)
    return result, check, raw


__all__ = ["CHECK_ID", "command", "effective", "evaluate", "run_gdsio"]
