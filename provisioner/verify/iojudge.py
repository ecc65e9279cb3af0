"""The kvikio I/O test's judgement: which path the data took, and with what evidence, read
from the document the node-side script printed (pure; every field is hostile: numbers must be
finite, byte counts whole, text bounded). :mod:`provisioner.verify.iotest` runs the test.

Path decision (docs/checks.md, ``io.direct_path``):

* ``skipped``: the test did not run (disabled, no directory, no GPU, no cupy/kvikio: then the
  reason says that the verification runtime is missing and which role installs it).
* ``direct``: the attempt with ``KVIKIO_COMPAT_MODE=OFF`` and ``CUFILE_ALLOW_COMPAT_MODE=false``
  wrote, read back and verified the data, and nothing contradicts it. It is *proven* only by
  evidence of the test's own I/O (``evidence.proof``):

  - ``nvfs_counters``: with rw_stats on, the nvidia-fs ``writeMiB``/``readMiB`` deltas each cover
    the test's own bytes (whole MiB, rounded down as the driver does). A delta of ``n`` alone, or
    one smaller than the test, proves nothing (another GDS job may have moved it);
  - ``cufile_log``: the test-scoped cuFile log (``CUFILE_ENV_PATH_JSON``) shows per-I/O direct
    markers and no compat line (the proof on p2pdma, corroboration on nvfs);
  - ``cufile_stats``: on WekaFS and IBM Storage Scale, whose I/O nvidia-fs never counts, cuFile's
    own per-process statistics cover the test's reads with no POSIX request (and its writes when
    the filesystem's write key is true): :mod:`provisioner.verify.iostats`.

  Setting compat mode off (the former ``compat_off`` proof) is recorded as
  ``evidence.fallback_disabled`` but proves nothing by itself. An I/O size under
  :data:`MIN_PROVABLE_IO_BYTES` or under kvikio's ``KVIKIO_GDS_THRESHOLD`` proves nothing either:
  kvikio sends such calls through POSIX whatever the compat mode.
* ``compat``: the direct attempt was refused and the POSIX attempt (``KVIKIO_COMPAT_MODE=ON``)
  worked; or the direct attempt "worked" while the nvidia-fs counters did not cover its bytes, or
  cuFile's own log says it used compat mode (cuFile fell back on its own).
* ``failed``: no attempt moved the data correctly (or the data read back differed).
"""

from __future__ import annotations

import math
from typing import Any

from provisioner.verify import iostats
from provisioner.verify.model import (
    MIN_PROVABLE_IO_BYTES,
    PATH_COMPAT,
    PATH_DIRECT,
    PATH_FAILED,
    PATH_SKIPPED,
    IoTestResult,
)
from provisioner.verify.parsers import cufile_log, nvfs_stats

MIB = 1 << 20
# What kvikio uses when the document does not say: 1 MiB, the largest default any release had
# (rapidsai/kvikio cpp/src/defaults.cpp: 1 MiB from 23.06, 16 KiB since 25.04, PR #596).
_KVIKIO_THRESHOLD_FALLBACK = 1 << 20


def _number(value: Any) -> float | None:
    """A node's number: a finite int or float (not a bool, a string or NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int past any float (10**400)
        return None
    return f if math.isfinite(f) else None


def _whole(value: Any) -> int:
    """A node's byte count: a non-negative int (0 for anything else)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _gbps(nbytes: int, seconds: Any) -> float | None:
    s = _number(seconds)
    if not s or s <= 0:
        return None
    gbps = nbytes / s / 1e9
    return round(gbps, 3) if math.isfinite(gbps) else None  # 1e-320 s: inf


def _stats_delta(before: Any, after: Any) -> dict[str, float] | None:
    if not before or not after or not isinstance(before, str) or not isinstance(after, str):
        return None
    return nvfs_stats.delta(nvfs_stats.parse(before), nvfs_stats.parse(after))


def _summary(att: dict[str, Any]) -> dict[str, Any]:
    keep = ("mode", "ok", "stage", "error", "verified", "write_s", "read_s", "bytes",
            "is_gds_available", "compat_mode_preferred", "compat_mode", "handle_compat_preferred",
            "handle_direct_io_supported", "cufile_nvfs_version", "cufile_allow_compat_mode",
            "libcufile_version", "kvikio_version", "cupy_version", "gpu_name", "gpu_count",
            "env", "missing", "gds_threshold", "libcufile_preload", "libcufile_mapped")
    return {k: att.get(k) for k in keep if k in att}


def _env(att: dict[str, Any] | None) -> dict[str, Any]:
    env = (att or {}).get("env")
    return env if isinstance(env, dict) else {}


def _fallback_disabled(att: dict[str, Any] | None) -> bool:
    env = _env(att)
    return (env.get("KVIKIO_COMPAT_MODE") == "OFF"
            and str(env.get("CUFILE_ALLOW_COMPAT_MODE", "")).lower() == "false")


def _threshold(att: dict[str, Any] | None) -> int | None:
    """kvikio's GDS threshold for the attempt: what kvikio resolved, else what the test set."""
    for value in ((att or {}).get("gds_threshold"), _env(att).get("KVIKIO_GDS_THRESHOLD")):
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
    return None


def _cufile_log(doc: dict[str, Any]) -> cufile_log.CufileLog | None:
    """The test-scoped cuFile log the node sent back, parsed; None when there is none."""
    entry = doc.get("cufile_log")
    if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
        return None
    return cufile_log.parse(entry["text"])


def _counter_proof(delta: dict[str, float] | None, size: int) -> tuple[bool | None, str]:
    """Do the nvidia-fs deltas cover the test's own bytes? (True, why) | (False, why) |
    (None, why) when the counters cannot tell (no MiB counters)."""
    if not delta or "write_mib" not in delta or "read_mib" not in delta:
        return None, "nvidia-fs writeMiB/readMiB counters were not available"
    need = size // MIB
    w, r = delta["write_mib"], delta["read_mib"]
    wn, rn = delta.get("writes_n", 0), delta.get("reads_n", 0)
    seen = f"writeMiB +{w:g}, readMiB +{r:g} (Writes n +{wn:g}, Reads n +{rn:g})"
    if need >= 1 and w >= need and r >= need:
        return True, f"nvidia-fs counted {seen}, covering the test's own {need} MiB each way"
    if w <= 0 and r <= 0 and wn <= 0 and rn <= 0:
        return False, f"nvidia-fs counters did not move ({seen})"
    return False, (f"nvidia-fs counters moved ({seen}) but do not cover the test's own "
                   f"{need} MiB each way: that movement is another GDS job's or partial, so this "
                   "I/O went (at least partly) through POSIX")


# -- which libcufile the test used (docs/checks.md, io.libcufile) -----------------------------
# libkvikio loads libcufile through cuda-pathfinder, which prefers a library already in the
# process, then the environment's nvidia-cufile wheel, then the system (NVIDIA/cuda-python,
# cuda_pathfinder/cuda/pathfinder/README.md; tests/fixtures/iotest/libcufile/README.md). The node
# script loads the host's libcufile first; these say whether that held and whether the wheel
# beside it is the same release.
LIB_HOST = "host"
LIB_WHEEL = "wheel"
LIB_OTHER = "other"
LIB_UNKNOWN = "unknown"


def _release(version: Any) -> tuple[int, ...] | None:
    """(1, 15, 1) from "1.15.1" or the wheel's "1.15.1.6" (its 4th part is the build)."""
    parts = str(version or "").split(".")
    nums: list[int] = []
    for part in parts[:3]:
        if not part.isdigit():
            return None
        nums.append(int(part))
    return tuple(nums) if len(nums) == 3 else None


def libcufile_evidence(doc: dict[str, Any],
                       attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The host's and the wheel's libcufile, and which one the I/O attempts had mapped (pure).
    None when the node script did not report it (an older script)."""
    info = doc.get("libcufile")
    if not isinstance(info, dict):
        return None
    host: dict[str, Any] = info["host"] if isinstance(info.get("host"), dict) else {}
    wheel: dict[str, Any] = info["wheel"] if isinstance(info.get("wheel"), dict) else {}
    mapped: list[str] = []
    for att in attempts:
        for path in (att.get("libcufile_mapped") or [])[:8]:
            if isinstance(path, str) and path[:300] not in mapped:
                mapped.append(path[:300])
    host_real = host.get("real") or host.get("path")
    used = LIB_UNKNOWN
    if mapped:
        if host_real and all(p in (host_real, host.get("path")) for p in mapped):
            used = LIB_HOST
        elif any("/site-packages/" in p or "/dist-packages/" in p for p in mapped):
            used = LIB_WHEEL
        else:
            used = LIB_OTHER
    preload = next((a.get("libcufile_preload") for a in attempts
                    if isinstance(a.get("libcufile_preload"), dict)), None)
    return {
        "host_path": _bounded(host.get("path")),
        "host_real": _bounded(host_real),
        "host_version": _bounded(host.get("version"), 40),
        "wheel_distribution": _bounded(wheel.get("distribution"), 60),
        "wheel_version": _bounded(wheel.get("version"), 40),
        "wheel_path": _bounded(wheel.get("path")),
        "mapped": mapped[:8],
        "used": used,
        "preload_error": _bounded((preload or {}).get("error")),
    }


def _bounded(value: Any, limit: int = 300) -> str | None:
    """A string from the node, cut to ``limit`` characters (None stays None)."""
    return None if value is None else str(value)[:limit]


def libcufile_verdict(lib: dict[str, Any] | None, ran: bool,
                      operator: bool = False) -> tuple[str, str, str]:
    """(status, actual, detail) of io.libcufile: the I/O test ran with the host's libcufile and
    any nvidia-cufile wheel beside it is the host's release (pure). ``ran``: an attempt moved
    data (else the check skips). ``operator``: a GPU Operator-managed node, where the
    workloads' cuFile is judged instead (:func:`_workload_verdict`)."""
    if lib is None:
        return "skip", "not reported", ("Skipped: the node's I/O test did not report which "
                                        "libcufile it loaded.")
    host_v, wheel_v = lib.get("host_version"), lib.get("wheel_version")
    host = f"host libcufile {host_v or '?'} ({lib.get('host_path')})"
    wheel = (f"wheel {lib.get('wheel_distribution')} {wheel_v}"
             if lib.get("wheel_distribution") else "no nvidia-cufile wheel")
    actual = (f"{host if lib.get('host_path') else 'no host libcufile'}; {wheel}; "
              f"used {lib.get('used')}")
    if operator:
        return _workload_verdict(lib, ran, actual, wheel)
    if not lib.get("host_path"):
        if lib.get("wheel_distribution") or lib.get("used") in (LIB_WHEEL, LIB_OTHER):
            return "fail", actual, (
                "The host has no libcufile of its own, so the I/O test could only use "
                f"{'the ' + wheel if lib.get('wheel_distribution') else 'another copy'}: "
                "DeepSpeed and gdsio load the host's libcufile, so nothing here proves them. "
                "Install the host's cuFile (the CUDA repository's libcufile-<X>-<Y> package, or "
                "the GDS packages of the rollout) and verify again.")
        return "skip", actual, "Skipped: no libcufile on the host or in the test's environment."
    if lib.get("used") in (LIB_WHEEL, LIB_OTHER):
        return "fail", actual, (
            f"The I/O test ran with {', '.join(lib.get('mapped') or [])}, not the {host}"
            + (f" (loading it first failed: {lib.get('preload_error')})"
               if lib.get("preload_error") else "")
            + ": a result for that library says nothing about the host's (DeepSpeed, gdsio). "
            "Remove the nvidia-cufile wheel from the verification runtime, or install the one "
            "of the host's release, and verify again.")
    if lib.get("wheel_distribution"):
        hr, wr = _release(host_v), _release(wheel_v)
        pin = ".".join(map(str, hr)) + ".*" if hr else "<host release>"
        if hr is None or wr is None or hr != wr:
            return "fail", actual, (
                f"The {host} and the verification runtime's {wheel} differ"
                + (" (a version could not be read)" if hr is None or wr is None else "")
                + ": libkvikio loads the wheel's through cuda-pathfinder wherever the host's is "
                "not loaded first, so jobs using kvikio and those using the host's library "
                "(DeepSpeed, gdsio) can take different paths. Pin the wheel to the host's "
                f"release ({lib.get('wheel_distribution')}=={pin} in the verification "
                "runtime's virtual environment) or upgrade the host's "
                "cuFile to the wheel's, then verify again.")
    if not ran:
        return "skip", actual, "Skipped: no I/O attempt ran with cuFile."
    if lib.get("used") == LIB_UNKNOWN:
        return "skip", actual, ("Skipped: no libcufile was mapped into the I/O test's process "
                                "(kvikio did not load cuFile), so which one it would use is "
                                "not shown.")
    return "pass", actual, (f"The I/O test ran with the {host}"
                            + (f"; the {wheel} is the same release." if lib.get(
                                "wheel_distribution") else "."))


def _workload_verdict(lib: dict[str, Any], ran: bool, actual: str,
                     wheel: str) -> tuple[str, str, str]:
    """io.libcufile on a GPU Operator-managed node. The operator runs nvidia-fs in its driver
    container and installs no cuFile on the host; workloads bring cuFile in their images
    (NVIDIA/gpu-operator, tests/fixtures/gpu-operator/README.md), as the verification runtime's
    kvikio brings its nvidia-cufile wheel. So the cuFile judged is the one the test mapped: it
    passes when an attempt moved data with it, and says which one it was."""
    if not ran:
        return "skip", actual, "Skipped: no I/O attempt ran with cuFile."
    if lib.get("used") == LIB_UNKNOWN:
        return "skip", actual, ("Skipped: no libcufile was mapped into the I/O test's process "
                                "(kvikio did not load cuFile), so which one it used is not "
                                "shown.")
    which = (wheel if lib.get("used") == LIB_WHEEL else
             f"host libcufile {lib.get('host_version') or '?'} ({lib.get('host_path')})"
             if lib.get("used") == LIB_HOST else ", ".join(lib.get("mapped") or []) or "?")
    return "pass", actual, (
        "GPU Operator-managed node: the operator installs no cuFile on the host and workloads "
        f"bring their own (in their images), so the cuFile judged is the one the I/O test ran "
        f"with: {which}. A workload image with another cuFile release is not covered by this "
        "result.")


def _judge_direct(doc: dict[str, Any], direct: dict[str, Any], size: int, route: str | None,
                  delta: dict[str, float] | None, rw_on: bool, evidence: dict[str, Any],
                  common: dict[str, Any], fs: dict[str, Any] | None = None) -> IoTestResult:
    """The direct attempt moved and verified the data: which evidence proves it went direct?"""
    wg = _gbps(size, direct.get("write_s"))
    rg = _gbps(size, direct.get("read_s"))
    rw = doc.get("rw_stats") or {}

    def result(path: str, reason: str, proof: str | None = None) -> IoTestResult:
        evidence["proof"] = proof
        return IoTestResult(path_taken=path, write_gbps=wg, read_gbps=rg, verified=True,
                            reason=reason, **common)

    threshold = _threshold(direct)
    effective = threshold if threshold is not None else _KVIKIO_THRESHOLD_FALLBACK
    if size < MIN_PROVABLE_IO_BYTES or size < effective:
        floor = max(MIN_PROVABLE_IO_BYTES, effective)
        return result(PATH_DIRECT, (
            f"I/O of {size} bytes succeeded with compat mode off, but a test this small proves "
            f"nothing: kvikio sends calls under KVIKIO_GDS_THRESHOLD "
            f"({'unknown, assumed ' if threshold is None else ''}{effective} bytes) through "
            "POSIX and nvidia-fs counts whole MiB; run the test with --io-size of at least "
            f"{floor} bytes"))

    lib = evidence.get("libcufile")
    # on an operator-managed node the workloads' cuFile is judged (io.libcufile), not the host's
    if lib is not None and lib.get("judged") != "workload" and (
            lib.get("used") in (LIB_WHEEL, LIB_OTHER)
            or (not lib.get("host_path") and lib.get("used") != LIB_UNKNOWN)):
        return result(PATH_DIRECT, (
            "I/O succeeded with compat mode off, but with libcufile "
            f"{', '.join(lib.get('mapped') or []) or '?'}, not the host's "
            f"({lib.get('host_path') or 'the host has none'}): that proves nothing for the "
            "host's libcufile, which DeepSpeed and gdsio use (see io.libcufile)"))

    log = _cufile_log(doc)
    log_mode = log.mode if log is not None else None
    if log is not None and log_mode == cufile_log.MODE_COMPAT:
        line = log.compat_lines[0].render()
        return result(PATH_COMPAT, "I/O succeeded, but cuFile's own log says it served it "
                      f"through POSIX (compat mode): {line}")
    if fs is not None and fs.get("rdma") == "userspace":
        # WekaFS, Storage Scale: nvidia-fs's counters never move; cuFile's own statistics prove
        # the reads, the filesystem's write key decides the writes (provisioner/verify/iostats.py)
        return result(*iostats.judge_without_counters(evidence.get("cufile_stats"), size, fs))

    ok, why = _counter_proof(delta, size)
    counters_observable = rw_on and ok is not None
    if counters_observable and ok:
        if log_mode in (cufile_log.MODE_NVFS, cufile_log.MODE_P2PDMA):
            evidence["corroborated_by"] = "cufile_log"
            why += f"; cuFile's log agrees ({log_mode} per-I/O markers)"
        return result(PATH_DIRECT, "direct path proven: " + why, "nvfs_counters")
    if log is not None and log_mode == cufile_log.MODE_P2PDMA:
        # Read before the counters' verdict: I/O over PCI P2PDMA bypasses nvidia-fs, so its
        # counters stay still even where nvidia-fs is loaded, and the route is taken as nvfs
        # wherever gdscheck is absent (no gds-tools, GPU Operator nodes).
        return result(PATH_DIRECT, (
            f"direct path proven by cuFile's own log: {len(log.p2pdma_io_lines)} per-I/O "
            f"p2pdma line(s) and no compat line, e.g. {log.p2pdma_io_lines[0].render()}"
            + ("; the nvidia-fs counters did not cover the test's bytes, as expected of "
               "P2PDMA I/O, which bypasses nvidia-fs" if counters_observable else "")),
            "cufile_log")
    if counters_observable and route in (None, "nvfs") and rw.get("present"):
        # nvidia-fs counts every direct I/O on the nvfs route: counters that do not cover the
        # test's bytes mean cuFile served (part of) it through POSIX despite the settings.
        return result(PATH_COMPAT, "I/O succeeded but " + why)

    if log_mode in (cufile_log.MODE_NVFS, cufile_log.MODE_P2PDMA) and log is not None:
        markers = log.p2pdma_io_lines or log.nvfs_io_lines
        return result(PATH_DIRECT, (
            f"direct path proven by cuFile's own log: {len(markers)} per-I/O {log_mode} "
            f"line(s) and no compat line, e.g. {markers[0].render()}"), "cufile_log")

    missing = []
    if not counters_observable:
        missing.append(why if rw_on or not rw.get("present") else
                       "nvidia-fs rw_stats were not on during the test")
    if log is None:
        scope = doc.get("cufile_scope") or {}
        err = scope.get("error") if isinstance(scope, dict) else None
        missing.append("no cuFile log came back" + (f" ({err})" if err else ""))
    else:
        missing.append("cuFile's log shows no per-I/O direct marker")
    return result(PATH_DIRECT, "I/O succeeded with compat mode off, but nothing proves it took "
                  "the direct path: " + "; ".join(missing) + ". Compat mode off alone is no "
                  "proof")


def evaluate(doc: dict[str, Any], *, route: str | None = None, operator: bool = False,
             netfs: dict[str, Any] | None = None) -> IoTestResult:
    """Decide the path taken from the remote script's document (pure). ``operator``: a GPU
    Operator-managed node, whose workloads bring their own cuFile (no host libcufile): the
    cuFile the test ran with is the one judged (``libcufile.judged`` "workload"). ``netfs``:
    the network filesystem the test wrote on (:func:`provisioner.verify.iostats.netfs_context`;
    None for a local one)."""
    # a node's document: every field may be of any type (fuzzed in tests/faults/test_fuzz.py)
    raw_attempts = doc.get("attempts")
    attempts = [a for a in raw_attempts if isinstance(a, dict)] if isinstance(
        raw_attempts, list) else []
    direct = next((a for a in attempts if a.get("mode") == "OFF"), None)
    compat = next((a for a in attempts if a.get("mode") == "ON"), None)
    size = _whole(doc.get("size_bytes"))
    rw = doc.get("rw_stats")
    rw = rw if isinstance(rw, dict) else {}
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
        "fallback_disabled": _fallback_disabled(direct),
        "kvikio_gds_threshold": _threshold(direct),
        "kvikio_gds_threshold_set": _env(direct).get("KVIKIO_GDS_THRESHOLD"),
        "cufile_scope": doc.get("cufile_scope"),
        "cufile_log": None,
        "bytes_needed_mib": size // MIB,
        "libcufile": libcufile_evidence(doc, attempts),
        # read by the direct attempt while it held cuFile and nvidia-fs open
        "cufile_stats": iostats.attempt_stats(direct),
        "nvfs_modules": iostats.parse_modules((direct or {}).get("nvfs_modules")),
        "netfs": netfs,
    }
    if evidence["libcufile"] is not None:
        evidence["libcufile"]["judged"] = "workload" if operator else "host"
    log = _cufile_log(doc)
    if log is not None:
        evidence["cufile_log"] = log.evidence()
    common: dict[str, Any] = {
        "evidence": evidence,
        "attempts": tuple(_summary(a) for a in attempts),
        "path": doc.get("path"),
        "duration_s": _number(doc.get("duration_s")) or 0.0,
        "bytes": size,
    }
    if doc.get("status") == "skipped":
        return IoTestResult(path_taken=PATH_SKIPPED, reason=str(doc.get("reason") or ""),
                            **common)

    if direct and direct.get("ok") and direct.get("verified"):
        return _judge_direct(doc, direct, size, route, delta_direct, rw_on, evidence, common,
                             netfs)

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
