"""The kvikio I/O test, controller side: build the remote command, read its JSON, decide which
path the data took and with what evidence (pure, apart from :func:`run_io_test`).

Path decision (docs/checks.md, ``io.direct_path``):

* ``skipped``: the test did not run (disabled, no directory, no GPU, no cupy/kvikio: then the
  reason says that the verification runtime is missing and which role installs it).
* ``direct``: the attempt with ``KVIKIO_COMPAT_MODE=OFF`` and ``CUFILE_ALLOW_COMPAT_MODE=false``
  wrote, read back and verified the data, and nothing contradicts it: on the nvfs route with
  rw_stats on, the nvidia-fs ``Writes n=``/``Reads n=`` counters must have moved. Evidence
  (``proof``) is ``counters`` when they moved, else ``compat_off``.
* ``compat``: the direct attempt was refused and the POSIX attempt (``KVIKIO_COMPAT_MODE=ON``)
  worked; or the direct attempt "worked" while the nvidia-fs counters stood still (cuFile fell
  back on its own).
* ``failed``: no attempt moved the data correctly (or the data read back differed).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, replace
from typing import Any

from provisioner.remote import load_script
from provisioner.verify.model import (
    PATH_COMPAT,
    PATH_DIRECT,
    PATH_FAILED,
    PATH_SKIPPED,
    CommandRunner,
    IoTestOptions,
    IoTestResult,
)
from provisioner.verify.parsers import nvfs_stats

SCRIPT = "iotest.py"
# The verification runtime (kvikio + cupy): installed by this role, recorded in this fact file
# (read by the gather script); without it the test runs with the node's plain python3.
RUNTIME_ROLE = "gdsfleet.gds.verify_runtime"
RUNTIME_FACT_FILE = "/etc/ansible/facts.d/gdsfleet_verify_runtime.fact"
FALLBACK_PYTHON = "python3"
# Seconds on top of the attempts' own limit for interpreter start, stats and clean-up.
_SLACK_S = 60.0


@dataclass(frozen=True)
class Interpreter:
    """Which interpreter runs the I/O test, and why."""

    python: str
    source: str  # "fact_file" (the role's runtime) or "fallback" (plain python3)
    note: str

    def to_dict(self) -> dict[str, str]:
        return {"python": self.python, "source": self.source, "note": self.note}


def choose_interpreter(runtime: dict[str, Any] | None) -> Interpreter:
    """The fact file's interpreter when the file names one; else the node's ``python3`` (pure).
    ``runtime`` is ``facts["verify_runtime"]`` (provisioner.verify.facts)."""
    rt = runtime or {}
    python = rt.get("python")
    if rt.get("present") and isinstance(python, str) and python:
        return Interpreter(python, "fact_file", f"from {RUNTIME_FACT_FILE}")
    if rt.get("present"):
        return Interpreter(FALLBACK_PYTHON, "fallback",
                           f"{RUNTIME_FACT_FILE} is unusable ({rt.get('error')}); "
                           f"falling back to {FALLBACK_PYTHON}")
    if rt.get("error"):
        return Interpreter(FALLBACK_PYTHON, "fallback",
                           f"{RUNTIME_FACT_FILE}: {rt.get('error')}; "
                           f"falling back to {FALLBACK_PYTHON}")
    return Interpreter(FALLBACK_PYTHON, "fallback",
                       f"no {RUNTIME_FACT_FILE}; falling back to {FALLBACK_PYTHON}")


def runtime_missing_reason(interp: Interpreter, detail: str) -> str:
    """The I/O test's reason when kvikio/cupy are not usable (pure)."""
    where = (f"the interpreter {interp.python} named in {RUNTIME_FACT_FILE}"
             if interp.source == "fact_file"
             else f"{interp.python} ({interp.note})")
    return (f"verification runtime missing: {detail} [{where}]. The role {RUNTIME_ROLE} "
            f"(the last role of playbooks/site.yml) installs kvikio and cupy into a virtual "
            f"environment (/opt/gdsfleet/venv) and records it in {RUNTIME_FACT_FILE}: run "
            f"site.yml, or that role, on this node")


def command(options: IoTestOptions, path: str, python: str = FALLBACK_PYTHON) -> str:
    args = {
        "path": path,
        "size_bytes": options.aligned_size(),
        "keep_file": options.keep_file,
        "timeout_s": options.timeout_s,
        "enable_rw_stats": options.enable_rw_stats,
        "try_compat": options.try_compat,
    }
    return shlex.quote(python) + " - " + shlex.quote(json.dumps(args, sort_keys=True))


def run_io_test(runner: CommandRunner, options: IoTestOptions, path: str, *,
                route: str | None = None,
                runtime: dict[str, Any] | None = None) -> tuple[IoTestResult, str]:
    """Run the remote script with the verification runtime's interpreter (``runtime``: the
    gather's ``verify_runtime`` facts; see :func:`choose_interpreter`); return the evaluated
    result and the raw output. Node-side failures become a ``failed``/``skipped`` result;
    ConnectError (transport) propagates."""
    started = time.monotonic()
    attempts = 2 if options.try_compat else 1
    timeout = options.timeout_s * attempts + _SLACK_S
    interp = choose_interpreter(runtime)
    # ConnectError (transport) propagates to verify_node's caller.
    res = runner.run(command(options, path, interp.python), timeout=timeout,
                     stdin=load_script(SCRIPT))
    raw = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr.strip() else "")
    doc = _last_json(res.stdout)
    if doc is None and res.exit_status in (126, 127) and interp.source == "fact_file":
        reason = runtime_missing_reason(
            interp, f"{interp.python} cannot run on the node (exit {res.exit_status}: "
            f"{res.stderr.strip()[-200:]})")
        return (
            IoTestResult(path_taken=PATH_SKIPPED, reason=reason, path=path,
                         evidence={"interpreter": interp.to_dict()},
                         duration_s=time.monotonic() - started),
            raw,
        )
    if doc is None:
        reason = (
            "python3 is not installed on the node"
            if res.exit_status == 127
            else f"the I/O test script produced no report (exit {res.exit_status}): "
            f"{(res.stderr or res.stdout).strip()[-400:]}"
        )
        return (
            IoTestResult(path_taken=PATH_FAILED, reason=reason, path=path,
                         duration_s=time.monotonic() - started),
            raw,
        )
    result = with_interpreter(evaluate(doc, route=route), interp)
    return result, raw


def with_interpreter(result: IoTestResult, interp: Interpreter) -> IoTestResult:
    """Record the interpreter in the evidence; a test skipped because cupy or kvikio did not
    import says that the verification runtime is missing and which role installs it (pure)."""
    evidence = dict(result.evidence)
    evidence["interpreter"] = interp.to_dict()
    reason = result.reason
    missing = next((a for a in result.attempts
                    if a.get("missing") in ("kvikio", "cupy")), None)
    if result.path_taken == PATH_SKIPPED and missing is not None:
        reason = runtime_missing_reason(
            interp, str(missing.get("error") or f"{missing.get('missing')} does not import"))
    return replace(result, evidence=evidence, reason=reason)


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _gbps(nbytes: int, seconds: Any) -> float | None:
    if not seconds or seconds <= 0:
        return None
    return round(nbytes / float(seconds) / 1e9, 3)


def _stats_delta(before: str | None, after: str | None) -> dict[str, float] | None:
    if not before or not after:
        return None
    return nvfs_stats.delta(nvfs_stats.parse(before), nvfs_stats.parse(after))


def _summary(att: dict[str, Any]) -> dict[str, Any]:
    keep = ("mode", "ok", "stage", "error", "verified", "write_s", "read_s", "bytes",
            "is_gds_available", "compat_mode_preferred", "compat_mode", "handle_compat_preferred",
            "handle_direct_io_supported", "cufile_nvfs_version", "cufile_allow_compat_mode",
            "libcufile_version", "kvikio_version", "cupy_version", "gpu_name", "gpu_count",
            "env", "missing")
    return {k: att.get(k) for k in keep if k in att}


def evaluate(doc: dict[str, Any], *, route: str | None = None) -> IoTestResult:
    """Decide the path taken from the remote script's document (pure)."""
    attempts = [a for a in doc.get("attempts") or [] if isinstance(a, dict)]
    direct = next((a for a in attempts if a.get("mode") == "OFF"), None)
    compat = next((a for a in attempts if a.get("mode") == "ON"), None)
    size = int(doc.get("size_bytes") or 0)
    rw = doc.get("rw_stats") or {}
    rw_on = str(rw.get("during") or "") == "1"
    delta_direct = _stats_delta(doc.get("stats_before"), doc.get("stats_after_direct"))
    delta_compat = _stats_delta(doc.get("stats_after_direct"), doc.get("stats_after_compat"))
    first = direct or compat or {}
    evidence: dict[str, Any] = {
        "proof": None,
        "rw_stats_enabled_during_test": rw_on,
        "rw_stats": rw,
        "counter_delta_direct": delta_direct,
        "counter_delta_compat": delta_compat,
        "is_gds_available": first.get("is_gds_available"),
        "compat_mode_preferred": first.get("compat_mode_preferred"),
        "compat_mode": first.get("compat_mode"),
        "cufile_nvfs_version": first.get("cufile_nvfs_version"),
        "libcufile_version": first.get("libcufile_version"),
        "kvikio_version": first.get("kvikio_version"),
        "gpu_name": first.get("gpu_name"),
        "direct_error": direct.get("error") if direct else None,
        "compat_error": compat.get("error") if compat else None,
        "test_file": doc.get("file"),
        "file_removed": doc.get("file_removed"),
    }
    common: dict[str, Any] = {
        "evidence": evidence,
        "attempts": tuple(_summary(a) for a in attempts),
        "path": doc.get("path"),
        "duration_s": float(doc.get("duration_s") or 0.0),
        "bytes": size,
    }
    if doc.get("status") == "skipped":
        return IoTestResult(path_taken=PATH_SKIPPED, reason=str(doc.get("reason") or ""),
                            **common)

    counters_moved = bool(
        delta_direct and (delta_direct.get("writes_n", 0) > 0 or delta_direct.get("reads_n", 0) > 0)
    )
    counters_observable = rw_on and delta_direct is not None and "writes_n" in delta_direct

    if direct and direct.get("ok") and direct.get("verified"):
        wg = _gbps(size, direct.get("write_s"))
        rg = _gbps(size, direct.get("read_s"))
        if counters_moved:
            evidence["proof"] = "counters"
            return IoTestResult(path_taken=PATH_DIRECT, write_gbps=wg, read_gbps=rg,
                                verified=True,
                                reason="direct path proven: nvidia-fs read/write counters moved "
                                "with KVIKIO_COMPAT_MODE=OFF", **common)
        if counters_observable and route in (None, "nvfs") and rw.get("present"):
            # nvidia-fs counts every direct I/O on the nvfs route; standing counters mean
            # cuFile served the I/O through POSIX despite the settings.
            evidence["proof"] = None
            return IoTestResult(path_taken=PATH_COMPAT, write_gbps=wg, read_gbps=rg,
                                verified=True,
                                reason="I/O succeeded but nvidia-fs counters did not move: cuFile "
                                "fell back to POSIX", **common)
        env = direct.get("env") or {}
        if env.get("KVIKIO_COMPAT_MODE") == "OFF" and env.get(
            "CUFILE_ALLOW_COMPAT_MODE", ""
        ).lower() == "false":
            evidence["proof"] = "compat_off"
            return IoTestResult(path_taken=PATH_DIRECT, write_gbps=wg, read_gbps=rg,
                                verified=True,
                                reason="direct path: I/O succeeded with KVIKIO_COMPAT_MODE=OFF and "
                                "CUFILE_ALLOW_COMPAT_MODE=false (fallback impossible)", **common)
        return IoTestResult(path_taken=PATH_DIRECT, write_gbps=wg, read_gbps=rg, verified=True,
                            reason="I/O succeeded with compat mode off, without proof", **common)

    if direct and direct.get("ok") is False and direct.get("stage") == "compare":
        return IoTestResult(path_taken=PATH_FAILED, verified=False,
                            reason="data read back through the direct path differs from the data "
                            "written", **common)

    direct_error = (direct or {}).get("error") or "direct attempt did not run"
    if compat and compat.get("ok") and compat.get("verified"):
        return IoTestResult(
            path_taken=PATH_COMPAT,
            write_gbps=_gbps(size, compat.get("write_s")),
            read_gbps=_gbps(size, compat.get("read_s")),
            verified=True,
            reason=f"direct path refused ({direct_error}); the same I/O works through POSIX "
            "(compat mode)",
            **common,
        )
    if compat:
        reason = (f"direct path refused ({direct_error}); POSIX attempt failed too "
                  f"({compat.get('error')})")
    else:
        reason = f"direct path refused ({direct_error}); no compat attempt was made"
    return IoTestResult(path_taken=PATH_FAILED, verified=False, reason=reason, **common)
