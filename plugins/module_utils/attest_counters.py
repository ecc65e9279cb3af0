# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""attest, part three: which path a job's bytes took (the answer to NVIDIA/gds-nvidia-fs#78 for
the user's own workload), from three sources, each bounded:

- nvidia-fs's own counters (``/proc/driver/nvidia-fs/stats``: ``readMiB=``/``writeMiB=`` move
  only with the module parameter ``rw_stats_enabled=1``; docs gds-reference §4): the delta
  between the baseline the prolog stored (``/run/gdsfleet/jobs/<ID>.json``) and now. They are
  the whole node's: exact for a job that had the node to itself (exclusive), an upper bound
  otherwise; a counter that went down (module reloaded, stats reset) gives no delta.
- cuFile's per-process stats (``gds_stats -p PID -l 3``, only while the process runs and
  ``profile.cufile_stats`` >= 1; NVIDIA GDS benchmarking guide §4.3.2, troubleshooting guide
  §18): the MiB read and written, and per GPU ``n=`` and ``posix=`` (I/O cuFile served through
  POSIX, i.e. compat mode; tests/fixtures/attest/README.md).
- cuFile's log in ``logging.dir`` (libcufile 1.15 names it ``cufile_<pid>_<date>.log``): the
  lines since the job started that say compat mode, the nvidia-fs path or P2PDMA (the same
  patterns ``verify`` reads, provisioner/verify/parsers/cufile_log.py; a test keeps them equal).

Pure standard library, Python 3.8+; file reads go through the caller's ``Node``
(attest_state.py) so tests run them on a simulated node tree.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import time

# typing is imported for the type checker only: a node pays for no import it does not need
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATS_PATH = "/proc/driver/nvidia-fs/stats"
STATS_MAX = 256 * 1024
MIB = 1 << 20
JOBS_DIR = "/run/gdsfleet/jobs"
BASELINE_MAX = 4096
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
GDS_STATS_OUT_MAX = 1024 * 1024
LOG_FILES_MAX = 16
LOG_BYTES_MAX = 4 * 1024 * 1024  # the newest part of each log file
GDS_STATS_DIRS = ("/usr/local/cuda/gds/tools",)
GDS_STATS_GLOB = "/usr/local/cuda-*/gds/tools/gds_stats"

# cuFile's log lines (provisioner/verify/parsers/cufile_log.py holds the sources of each; a unit
# test keeps these patterns equal to those)
COMPAT_PATTERNS = (
    re.compile(r"running in compatible mode", re.I),
    re.compile(r"using cuFile posix read/write with compat mode", re.I),
    re.compile(r"\bCompatibility Mode:\s*1\b", re.I),
)
NVFS_IO_PATTERNS = (re.compile(r"gds path taken with O_?DIRECT", re.I),)
P2P_RE = re.compile(r"\bp2p mode:\s*(?P<p2p>\d)\s+compat:\s*(?P<compat>\d)", re.I)
BLOCKER_PATTERNS = (
    re.compile(r"nvidia-fs\.ko driver not loaded", re.I),
    re.compile(r"NVMe Driver not registered with nvidia-fs", re.I),
    re.compile(r"cuFileHandleRegister error", re.I),
    re.compile(r"GPUDirect Storage not supported on current file", re.I),
    re.compile(r"cuFileDriverOpen failed", re.I),
)
_LOG_TIME = re.compile(r"^\s*(\d{1,2})-(\d{1,2})-(\d{4})\s+(\d{1,2}):(\d{1,2}):(\d{1,2})")
_PAIR = re.compile(r"([A-Za-z][\w()%/-]*)=(-?\d+(?:\.\d+)?)")


# --- nvidia-fs's counters ----------------------------------------------------------------------

def parse_nvfs_stats(text: str) -> dict[str, Any]:
    """``/proc/driver/nvidia-fs/stats`` -> ``rw_stats`` (the ``IO stats:`` line), ``read_mib`` /
    ``write_mib`` (the Reads/Writes lines' ``readMiB=``/``writeMiB=``, absent unless
    rw_stats_enabled=1), ``active_process`` (a gauge) (pure)."""
    out: dict[str, Any] = {"rw_stats": None, "read_mib": None, "write_mib": None,
                           "active_process": None}
    for raw in text.splitlines()[:4096]:
        line = raw.strip()
        m = re.match(r"IO stats:\s*(\w+)", line)
        if m:
            out["rw_stats"] = m.group(1).lower() == "enabled"
            continue
        m = re.match(r"Active Process:\s*(\d+)", line)
        if m:
            out["active_process"] = int(m.group(1))
            continue
        name, rest = line.partition(":")[::2]
        key = {"reads": ("readMiB", "read_mib"), "writes": ("writeMiB", "write_mib")}.get(
            name.strip().lower())
        if key:
            for k, v in _PAIR.findall(rest):
                if k == key[0]:
                    out[key[1]] = int(float(v))
    return out


def nvfs_counters(node: Any) -> dict[str, Any] | None:
    """The node's nvidia-fs counters now (None without nvidia-fs)."""
    text = node.text(STATS_PATH, STATS_MAX)
    return parse_nvfs_stats(text) if text is not None else None


# --- cuFile's per-process stats ----------------------------------------------------------------

def parse_gds_stats(text: str) -> dict[str, Any]:
    """``gds_stats -p PID -l N`` -> ``version``, ``read_mib``/``write_mib`` (GLOBAL STATS' Total
    Read/Write Size), errors, and per GPU the Read/Write ``n=``, ``posix=``, ``MiB=``; ``ops`` and
    ``posix_ops`` sum them (pure; unknown lines are ignored)."""
    out: dict[str, Any] = {"version": None, "read_mib": None, "write_mib": None,
                           "read_errors": None, "write_errors": None, "gpus": [],
                           "ops": None, "posix_ops": None}
    for raw in text.splitlines()[:4096]:
        line = raw.strip()
        m = re.match(r"cuFile STATS VERSION\s*:\s*(\d+)", line)
        if m:
            out["version"] = int(m.group(1))
            continue
        for label, key in (("Total Read Size (MiB)", "read_mib"),
                           ("Total Write Size (MiB)", "write_mib"),
                           ("Total Read Errors", "read_errors"),
                           ("Total Write Errors", "write_errors")):
            if line.startswith(label):
                m = re.match(re.escape(label) + r"\s*:\s*(\d+)", line)
                if m:
                    out[key] = int(m.group(1))
        m = re.match(r"GPU\s+(\d+)\s+Read:(?P<read>.*?)Write:(?P<write>.*?)(BufRegister:|$)",
                     line)
        if m:
            gpu: dict[str, Any] = {"gpu": m.group(1)}
            for part in ("read", "write"):
                pairs = dict(_PAIR.findall(m.group(part)))
                gpu[part] = {k: int(float(pairs[k])) for k in ("n", "posix", "MiB", "err")
                             if k in pairs}
            out["gpus"].append(gpu)
    if out["gpus"]:
        out["ops"] = sum(g[p].get("n", 0) for g in out["gpus"] for p in ("read", "write"))
        out["posix_ops"] = sum(g[p].get("posix", 0) for g in out["gpus"]
                               for p in ("read", "write"))
    return out


def find_gds_stats(node: Any = None) -> str | None:
    """gds-tools' gds_stats: on PATH, else the CUDA toolkit's (the newest cuda-X.Y first); under
    ``node``'s root when given (a simulated tree), else on this host."""
    import shutil  # only with --pid, or in the I/O test

    at = node.path if node is not None else (lambda p: p)
    found = shutil.which("gds_stats")
    if found:
        return found
    for d in GDS_STATS_DIRS:
        if os.access(at(d + "/gds_stats"), os.X_OK):
            return at(d + "/gds_stats")
    versioned = sorted(glob.glob(at(GDS_STATS_GLOB)), reverse=True)
    return versioned[0] if versioned else None


def run_gds_stats(pid: int, timeout: float, node: Any = None,
                  limit: int = GDS_STATS_OUT_MAX) -> dict[str, Any]:
    """``gds_stats -p PID -l 3`` as it ran: ``tool`` (None: not found), ``rc`` (None: it did not
    run or ran past ``timeout``), ``out`` (at most ``limit`` bytes, decoded), ``err`` (why, at
    most 300 characters). Shared with ``verify``'s I/O test (provisioner/remote/iotest.py),
    which sends ``out`` to the controller to parse."""
    import subprocess  # only with --pid, or in the I/O test

    exe = find_gds_stats(node)
    if exe is None:
        return {"tool": None, "rc": None, "out": "", "err": "gds_stats not found (gds-tools)"}
    try:
        proc = subprocess.run([exe, "-p", str(int(pid)), "-l", "3"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=max(0.1, timeout), check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        return {"tool": exe, "rc": None, "out": "", "err": f"gds_stats ran past {timeout:.1f}s"}
    except OSError as exc:
        return {"tool": exe, "rc": None, "out": "", "err": f"gds_stats: {exc.strerror}"}
    return {"tool": exe, "rc": proc.returncode,
            "out": proc.stdout[:limit].decode("utf-8", "replace"),
            "err": (proc.stderr or b"")[:300].decode("utf-8", "replace").strip()}


def cufile_stats(node: Any, pid: int, timeout: float) -> dict[str, Any]:
    """``gds_stats -p PID -l 3``, parsed; ``error`` says why there is nothing."""
    ran = run_gds_stats(pid, timeout, node)
    if ran["tool"] is None:
        return {"error": "gds_stats not found (package gds-tools-X-Y)"}
    if ran["rc"] is None:
        return {"error": ran["err"]}
    parsed = parse_gds_stats(ran["out"])
    if ran["rc"] != 0 or parsed["version"] is None:
        why = (ran["err"] or ran["out"][:300]).strip()
        return {"error": f"gds_stats exit {ran['rc']}: {why or 'no stats'} (needs "
                         "profile.cufile_stats >= 1 and the process still running)"}
    return {**parsed, "error": None}


# --- cuFile's log ------------------------------------------------------------------------------

def _line_time(line: str) -> float | None:
    m = _LOG_TIME.match(line)
    if not m:
        return None
    d, mo, y, h, mi, s = (int(g) for g in m.groups())
    try:
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def scan_log_text(text: str, since: float | None) -> dict[str, Any]:
    """Count the mode markers of cuFile log lines at or after ``since`` (pure)."""
    counts = {"compat": 0, "nvfs": 0, "p2pdma": 0}
    blockers: list[str] = []
    for line in text.splitlines():
        if since is not None:
            when = _line_time(line)
            if when is not None and when + 1 < since:
                continue
        if any(p.search(line) for p in COMPAT_PATTERNS):
            counts["compat"] += 1
        elif any(p.search(line) for p in NVFS_IO_PATTERNS):
            counts["nvfs"] += 1
        m = P2P_RE.search(line)
        if m:
            if m.group("compat") == "1":
                counts["compat"] += 1
            elif m.group("p2p") == "1":
                counts["p2pdma"] += 1
            else:
                counts["nvfs"] += 1
        for p in BLOCKER_PATTERNS:
            if p.search(line) and p.pattern not in blockers and len(blockers) < 5:
                blockers.append(p.pattern.replace("\\", ""))
    return {**counts, "blockers": blockers}


def cufile_log(node: Any, logging_dir: str | None, since: float | None) -> dict[str, Any] | None:
    """cuFile's logs in ``logging_dir`` written since ``since`` (None without a logging dir)."""
    if not logging_dir:
        return None
    paths = []
    for pattern in ("cufile*.log",):
        for path in glob.glob(os.path.join(node.path(logging_dir), pattern)):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if since is None or st.st_mtime + 1 >= since:
                paths.append((st.st_mtime, path))
    total: dict[str, Any] = {"files": 0, "compat": 0, "nvfs": 0, "p2pdma": 0, "blockers": []}
    for _mtime, path in sorted(paths, reverse=True)[:LOG_FILES_MAX]:
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > LOG_BYTES_MAX:
                    fh.seek(size - LOG_BYTES_MAX)
                data = fh.read(LOG_BYTES_MAX)
        except OSError:
            continue
        found = scan_log_text(data.decode("utf-8", "replace"), since)
        total["files"] += 1
        for k in ("compat", "nvfs", "p2pdma"):
            total[k] += found[k]
        total["blockers"] = (total["blockers"] + [b for b in found["blockers"]
                                                  if b not in total["blockers"]])[:5]
    return total


# --- the job's baseline and proof ----------------------------------------------------------------

def check_job_id(job: str) -> str:
    if not JOB_ID_RE.match(job or ""):
        raise ValueError(f"job id {job[:80]!r}: letters, digits, '_', '.', '-' only, at most 64")
    return job


def baseline_path(job: str) -> str:
    return f"{JOBS_DIR}/{check_job_id(job)}.json"


def write_baseline(node: Any, job: str, counters: dict[str, Any] | None,
                   now: float | None = None) -> str:
    """The prolog's snapshot of the node's counters for ``job`` (0600, atomic)."""
    path = baseline_path(job)
    doc = {"schema": "gdsfleet.attest-job/1", "job": job,
           "at": float(time.time() if now is None else now),
           "read_mib": (counters or {}).get("read_mib"),
           "write_mib": (counters or {}).get("write_mib"),
           "rw_stats": (counters or {}).get("rw_stats")}
    target = node.path(path)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    tmp = f"{target}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    try:
        os.write(fd, json.dumps(doc, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return path


def read_baseline(node: Any, job: str) -> dict[str, Any] | None:
    """The job's baseline, type-checked; None when there is none or it cannot be trusted."""
    try:
        data = node.read(baseline_path(job), BASELINE_MAX, follow=False)
    except (ValueError, OSError, Exception):  # noqa: BLE001 - hostile file: no baseline
        return None
    if data is None or len(data) > BASELINE_MAX:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("job") != job:
        return None
    at = doc.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        return None
    for k in ("read_mib", "write_mib"):
        v = doc.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return None
    return doc


def remove_baseline(node: Any, job: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(node.path(baseline_path(job)))


def _delta(before: int | None, after: int | None) -> int | None:
    if before is None or after is None or after < before:
        return None
    return (after - before) * MIB


def job_proof(job: str, *, since: float | None, until: float, pid: int | None,
              baseline: dict[str, Any] | None, counters: dict[str, Any] | None,
              stats: dict[str, Any] | None, log: dict[str, Any] | None,
              route: str | None) -> dict[str, Any]:
    """The job's proof (the ``job`` part of ``attest --json``; docs/operations.md) (pure)."""
    nv = counters or {}
    base = baseline or {}
    rw = bool(nv.get("rw_stats")) and bool(base.get("rw_stats", nv.get("rw_stats")))
    read_b = _delta(base.get("read_mib"), nv.get("read_mib")) if baseline and rw else None
    write_b = _delta(base.get("write_mib"), nv.get("write_mib")) if baseline and rw else None
    reset = bool(baseline and rw and (read_b is None or write_b is None))
    nvfs_bytes = None if read_b is None or write_b is None else read_b + write_b
    cs = stats if stats and not stats.get("error") else None
    cs_bytes = None
    if cs and cs.get("read_mib") is not None and cs.get("write_mib") is not None:
        cs_bytes = (cs["read_mib"] + cs["write_mib"]) * MIB
    p2p_bytes = compat_bytes = None
    if cs and cs_bytes is not None and cs.get("ops"):
        if cs.get("posix_ops") == cs.get("ops"):
            compat_bytes = cs_bytes
        elif not cs.get("posix_ops") and route == "p2pdma":
            p2p_bytes = cs_bytes
        elif not cs.get("posix_ops"):
            compat_bytes = 0
    lg = log or {}
    direct = bool(nvfs_bytes) or bool(p2p_bytes) or bool(lg.get("nvfs")) or bool(lg.get("p2pdma"))
    direct = direct or bool(cs and cs.get("ops") and cs.get("posix_ops") == 0
                            and route in ("nvfs", "p2pdma"))
    compat = bool(compat_bytes) or bool(lg.get("compat")) or bool(cs and cs.get("posix_ops"))
    measured = rw and baseline is not None or cs is not None or log is not None
    if direct and compat:
        verdict, why = "mixed", "some I/O took the direct path and some went through compat mode"
    elif compat:
        verdict, why = "compat", "cuFile served I/O through POSIX (compat mode): not GPUDirect"
    elif direct:
        verdict, why = "direct", "the I/O measured took the direct path"
    elif measured:
        verdict, why = "no-io", "no GDS I/O was measured for this job"
    else:
        verdict, why = "unknown", _unknown_why(rw, baseline, stats, log)
    return {
        "id": job, "since": since, "until": until, "pid": pid, "scope": "node",
        "baseline": base.get("at") if baseline else None,
        "nvfs": {"rw_stats": nv.get("rw_stats") if counters else None,
                 "read_bytes": read_b, "write_bytes": write_b, "reset": reset},
        "cufile_stats": None if stats is None else {
            "read_bytes": (stats.get("read_mib") or 0) * MIB if cs else None,
            "write_bytes": (stats.get("write_mib") or 0) * MIB if cs else None,
            "ops": stats.get("ops"), "posix_ops": stats.get("posix_ops"),
            "error": stats.get("error")},
        "cufile_log": log,
        "bytes": {"nvfs": nvfs_bytes, "p2pdma": p2p_bytes, "compat": compat_bytes},
        "verdict": verdict, "why": why,
    }


def _unknown_why(rw: bool, baseline: Any, stats: Any, log: Any) -> str:
    parts = []
    if not rw:
        parts.append("nvidia-fs counters need rw_stats_enabled=1")
    elif baseline is None:
        parts.append("no baseline (the prolog runs `gdsfleet-attest --job ID --job-start`)")
    if stats is None:
        parts.append("cuFile stats need --pid and profile.cufile_stats >= 1")
    elif stats.get("error"):
        parts.append(str(stats["error"])[:120])
    if log is None:
        parts.append("cuFile's log needs logging.dir in cufile.json")
    return "nothing measured: " + "; ".join(parts)


# --- what the node keeps of its jobs ----------------------------------------------------------
JOBS_LOG = "/var/lib/gdsfleet/attest-jobs.jsonl"
JOBS_LOG_MAX_LINES = 500
JOBS_LOG_MAX_BYTES = 1024 * 1024
TOTALS_PATH = "/var/lib/gdsfleet/attest-counters.json"
TOTALS_MAX = 4096


def _atomic_write(node: Any, path: str, data: bytes, mode: int = 0o644) -> None:
    target = node.path(path)
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    tmp = f"{target}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def append_job(node: Any, entry: dict[str, Any]) -> None:
    """Append one job proof to the node's job log, keeping its newest ``JOBS_LOG_MAX_LINES``
    lines within ``JOBS_LOG_MAX_BYTES`` (the whole file rewritten atomically)."""
    line = json.dumps(entry, sort_keys=True, allow_nan=False, default=str)
    if len(line) > JOBS_LOG_MAX_BYTES // 8:
        return
    try:
        old = node.read(JOBS_LOG, JOBS_LOG_MAX_BYTES, follow=False) or b""
    except Exception:  # noqa: BLE001 - a damaged or hostile log is started again
        old = b""
    lines = [ln for ln in old.decode("utf-8", "replace").splitlines() if ln.startswith("{")]
    lines.append(line)
    lines = lines[-JOBS_LOG_MAX_LINES:]
    while len(lines) > 1 and sum(len(ln) + 1 for ln in lines) > JOBS_LOG_MAX_BYTES:
        lines.pop(0)
    _atomic_write(node, JOBS_LOG, ("\n".join(lines) + "\n").encode())


def read_totals(node: Any) -> dict[str, dict[str, int]]:
    """The bytes by path summed over the job proofs of this node (``p2pdma``, ``compat``; each
    ``read``/``write``); {} when none (or the file cannot be trusted)."""
    try:
        data = node.read(TOTALS_PATH, TOTALS_MAX, follow=False)
        doc = json.loads((data or b"{}").decode("utf-8"))
    except Exception:  # noqa: BLE001 - a damaged or hostile file counts nothing
        return {}
    out: dict[str, dict[str, int]] = {}
    if not isinstance(doc, dict):
        return {}
    for path in ("p2pdma", "compat"):
        entry = doc.get(path)
        if isinstance(entry, dict) and all(
                isinstance(entry.get(op), int) and not isinstance(entry.get(op), bool)
                and entry[op] >= 0 for op in ("read", "write")):
            out[path] = {"read": entry["read"], "write": entry["write"]}
    return out


def add_totals(node: Any, proof: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Add a job proof's known P2PDMA and compat bytes to the node's totals (monotonic)."""
    totals = read_totals(node)
    changed = False
    stats = proof.get("cufile_stats") or {}
    for path in ("p2pdma", "compat"):
        n = (proof.get("bytes") or {}).get(path)
        if isinstance(n, int) and n > 0:
            entry = totals.setdefault(path, {"read": 0, "write": 0})
            entry["read"] += int(stats.get("read_bytes") or 0)
            entry["write"] += int(stats.get("write_bytes") or 0)
            changed = True
    if changed:
        _atomic_write(node, TOTALS_PATH, json.dumps(totals, sort_keys=True).encode())
    return totals
