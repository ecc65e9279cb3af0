"""gdsfleet kvikio I/O test: runs ON a node, prints ONE JSON document on stdout.

Sent over SSH on stdin to ``python3 - '<options json>'``, bundled with the shared modules it
declares (provisioner/remote/bundle.py). Stdlib only, Python 3.8+; uses the
node's kvikio and cupy (only the API subset named in docs/checks.md, looked up defensively).

What it does:
1. checks the target directory; turns nvidia-fs ``rw_stats_enabled`` on when asked and the
   node allows it (restored afterwards), and snapshots /proc/driver/nvidia-fs/stats;
2. attempt "OFF": in a forked child with ``KVIKIO_COMPAT_MODE=OFF`` and
   ``CUFILE_ALLOW_COMPAT_MODE=false`` (no silent fallback), ``KVIKIO_GDS_THRESHOLD`` set (calls
   under it go through POSIX whatever the compat mode) and ``CUFILE_ENV_PATH_JSON`` pointing at a
   test-scoped copy of the node's effective cufile.json (logging to a temporary directory at
   TRACE, cufile_stats 3, allow_compat_mode false), writes ``size`` bytes of random data from GPU
   memory with kvikio, reads them back into GPU memory, compares on the GPU, times both; cuFile's
   log of that attempt comes back in ``cufile_log``, and, read while the attempt still holds
   them open, cuFile's per-process statistics (``gds_stats -p PID -l 3``) and the modules
   nvidia-fs registered with (/proc/driver/nvidia-fs/modules) in the attempt's ``cufile_stats``
   and ``nvfs_modules``;
3. snapshots the stats again; when the direct attempt failed and ``try_compat`` is set, attempt
   "ON" (POSIX through kvikio) tells whether I/O works at all;
4. always restores rw_stats_enabled and removes the test file (unless ``keep_file``).

Which libcufile: libkvikio (26.10) loads libcufile through cuda-pathfinder, which takes a
library already in the process first, then the virtual environment's NVIDIA wheels
(``nvidia-cufile``), then the system (NVIDIA/cuda-python cuda_pathfinder README; fixture
tests/fixtures/iotest/libcufile/README.md). DeepSpeed and gdsio use the host's libcufile, so each
attempt loads the host's ``libcufile.so.0`` (ldconfig's cache, then the CUDA toolkit folders;
never a site-packages copy) before importing kvikio, and reports the libcufile files mapped
into the process after the I/O (``/proc/self/maps``). ``libcufile`` in the report names the
host's library and the wheel's, each with its version.

Each attempt runs in its own forked child (kvikio reads KVIKIO_COMPAT_MODE at import; a CUDA
crash cannot take the report down). The parent never imports cupy or kvikio.
The orchestrator, not this script, decides which path the data took (it parses the stats).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from typing import Any

# gdsfleet:bundle-begin
from provisioner.remote.bundle import shared as _shared  # controller side; bundle() inlines

# gdsfleet:bundle-end
# cufile.json's comment stripping: plugins/module_utils/cufile_json.py (one copy, shared with
# provisioner verify and the collection's filters).
_cufile_json = _shared("cufile_json.py")
# Free space and sizes in words: provisioner/remote/_nodefs.py (shared with gdsio.py).
_nodefs = _shared("_nodefs.py")
free_bytes = _nodefs.free_bytes
human_bytes = _nodefs.human_bytes
# Read while the attempt holds cuFile and nvidia-fs open: the registered modules (_iostats.py)
# and cuFile's per-process stats, as attest reads a job's (module_utils/attest_counters.py).
_iostats = _shared("_iostats.py")
_counters = _shared("attest_counters.py")

SCHEMA = 1
STATS = "/proc/driver/nvidia-fs/stats"
RW_STATS = "/sys/module/nvidia_fs/parameters/rw_stats_enabled"
MARK = "@@gdsfleet-attempt@@"
CUFILE_JSON = "/etc/cufile.json"
# What the test-scoped cufile.json changes in the node's own (everything else is kept).
CUFILE_OVERRIDES = {
    "logging.level": "TRACE",
    "profile.cufile_stats": 3,
    "properties.allow_compat_mode": False,
}
# A TRACE log of a 1 GiB test is large; keep its head and tail (the mode lines come first, the
# per-I/O markers throughout).
LOG_HEAD_LINES = 3000
LOG_TAIL_LINES = 1000


# Which libcufile (the host's, the wheel's, what is mapped): provisioner/remote/_libcufile.py.
_libcufile = _shared("_libcufile.py")
host_libcufile = _libcufile.host_libcufile
wheel_libcufile = _libcufile.wheel_libcufile
mapped_libcufile = _libcufile.mapped_libcufile
preload_libcufile = _libcufile.preload_libcufile

def read_text(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def write_text(path: str, value: str) -> str | None:
    """Write ``value``; return an error message or None."""
    try:
        with open(path, "w") as fh:
            fh.write(value)
        return None
    except OSError as exc:
        return str(exc)


def _safe(fn, default=None):  # type: ignore[no-untyped-def]
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - evidence gathering must not stop the test
        return default if default is not None else f"error: {exc}"
    return value


def _plain(value):  # type: ignore[no-untyped-def]
    """JSON-safe rendering of values coming from kvikio/cupy (enums by name, bytes, tuples)."""
    if value is None or isinstance(value, bool):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str) and type(value).__module__ != "builtins":
        return name  # e.g. kvikio.CompatMode.OFF (an IntEnum) -> "OFF"
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def submodule(pkg: Any, name: str) -> Any:
    """``pkg.name``: real kvikio (26.10) binds neither ``defaults`` nor ``cufile_driver`` on
    ``import kvikio``, so import them explicitly; fall back to the attribute."""
    try:
        return importlib.import_module(pkg.__name__ + "." + name)
    except Exception:  # noqa: BLE001 - a kvikio without that module
        return getattr(pkg, name, None)


def compat_preferred(kvikio: Any) -> object:
    """kvikio's view of compat mode, whichever API this kvikio has."""
    defaults = submodule(kvikio, "defaults")
    fn = getattr(defaults, "is_compat_mode_preferred", None)
    if callable(fn):
        return _plain(_safe(fn))
    fn = getattr(defaults, "compat_mode", None)
    if callable(fn):
        return {"compat_mode": _plain(_safe(fn))}
    return None


def compat_setting(kvikio: Any) -> object:
    """The compat_mode setting (ON/OFF/AUTO) as kvikio resolved it."""
    defaults = submodule(kvikio, "defaults")
    get = getattr(defaults, "get", None)
    if callable(get):
        return _plain(_safe(lambda: get("compat_mode")))
    fn = getattr(defaults, "compat_mode", None)
    return _plain(_safe(fn)) if callable(fn) else None


def gds_threshold(kvikio: Any) -> object:
    """kvikio's resolved GDS threshold in bytes (calls under it skip cuFile), or None."""
    defaults = submodule(kvikio, "defaults")
    get = getattr(defaults, "get", None)
    if callable(get):
        value = _safe(lambda: get("gds_threshold"))
        if isinstance(value, int):
            return value
    fn = getattr(defaults, "gds_threshold", None)
    if callable(fn):
        value = _safe(fn)
        if isinstance(value, int):
            return value
    return None


def scoped_cufile_json(tmpdir: str) -> dict:
    """Write a test-scoped copy of the node's effective cufile.json into ``tmpdir`` (its log in
    ``tmpdir/log``); return what was done (``json`` is the path, or ``error`` says why not)."""
    source = os.environ.get("CUFILE_ENV_PATH_JSON") or CUFILE_JSON
    info: dict = {"source": source, "json": None, "log_dir": None, "overrides": {}}
    text = read_text(source)
    config: dict = {}
    if text is None:
        info["source_missing"] = True  # cuFile's built-in defaults apply
    else:
        try:
            loaded = json.loads(_cufile_json.strip_comments(text))
        except ValueError as exc:
            info["error"] = f"{source} is not valid JSON: {exc}"
            return info
        if not isinstance(loaded, dict):
            info["error"] = f"{source} is not a JSON object"
            return info
        config = loaded
    log_dir = os.path.join(tmpdir, "log")
    os.makedirs(log_dir, exist_ok=True)
    overrides = dict(CUFILE_OVERRIDES)
    overrides["logging.dir"] = log_dir
    for dotted, value in overrides.items():
        section, key = dotted.split(".", 1)
        sub = config.get(section)
        if not isinstance(sub, dict):
            sub = config[section] = {}
        sub[key] = value
    path = os.path.join(tmpdir, "cufile.json")
    with open(path, "w") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)
    info.update(json=path, log_dir=log_dir, overrides=overrides)
    return info


def collect_cufile_log(log_dir: str | None) -> dict | None:
    """cuFile's log files in ``log_dir`` (cufile.log; libcufile 1.15: cufile_<pid>_<date>.log),
    concatenated; long logs keep their head and tail."""
    if not log_dir or not os.path.isdir(log_dir):
        return None
    names = sorted(n for n in os.listdir(log_dir) if n.startswith("cufile") and
                   n.endswith(".log"))
    lines: list = []
    size = 0
    for name in names:
        text = read_text(os.path.join(log_dir, name)) or ""
        size += len(text)
        lines.extend(text.splitlines())
    dropped = 0
    if len(lines) > LOG_HEAD_LINES + LOG_TAIL_LINES:
        dropped = len(lines) - LOG_HEAD_LINES - LOG_TAIL_LINES
        lines = lines[:LOG_HEAD_LINES] + lines[-LOG_TAIL_LINES:]
    return {"files": names, "bytes": size, "lines_dropped": dropped,
            "text": "\n".join(lines) + ("\n" if lines else "")}


def _sync(cupy) -> None:  # type: ignore[no-untyped-def]
    runtime = getattr(getattr(cupy, "cuda", None), "runtime", None)
    fn = getattr(runtime, "deviceSynchronize", None)
    if callable(fn):
        _safe(fn)


def attempt(mode: str, file_path: str, size: int, keep: bool,
            extra_env: dict | None = None, host_lib: str | None = None) -> dict:
    """One write/read/compare cycle. Runs in a forked child; returns the evidence."""
    res: dict[str, Any] = {
        "mode": mode,
        "ok": False,
        "stage": "import",
        "error": None,
        "bytes": size,
        "verified": False,
        "write_s": None,
        "read_s": None,
    }
    os.environ["KVIKIO_COMPAT_MODE"] = mode
    if mode == "OFF":
        # cuFile must not fall back to POSIX on its own either: an error, not a slow success.
        os.environ["CUFILE_ALLOW_COMPAT_MODE"] = "false"
    for k, v in (extra_env or {}).items():
        os.environ[k] = str(v)
    res["env"] = {
        k: os.environ[k]
        for k in ("KVIKIO_COMPAT_MODE", "CUFILE_ALLOW_COMPAT_MODE", "CUFILE_ENV_PATH_JSON",
                  "KVIKIO_GDS_THRESHOLD")
        if k in os.environ
    }
    if host_lib is not None:
        res["libcufile_preload"] = preload_libcufile(host_lib or None)
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001
        res["error"] = f"cupy is not importable with {sys.executable}: {exc}"
        res["missing"] = "cupy"
        return res
    res["cupy_version"] = _plain(getattr(cupy, "__version__", None))
    try:
        import kvikio  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001
        res["error"] = f"kvikio is not importable with {sys.executable}: {exc}"
        res["missing"] = "kvikio"
        return res
    res["kvikio_version"] = _plain(getattr(kvikio, "__version__", None))

    res["stage"] = "gpu"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001
        res["error"] = f"no usable CUDA GPU: {exc}"
        res["missing"] = "gpu"
        return res
    res["gpu_count"] = count
    if count < 1:
        res["error"] = "no CUDA GPU visible (getDeviceCount() == 0)"
        res["missing"] = "gpu"
        return res
    props = _safe(lambda: cupy.cuda.runtime.getDeviceProperties(0), {})
    res["gpu_name"] = _plain(props.get("name")) if isinstance(props, dict) else None

    res["stage"] = "driver"
    driver: Any = submodule(kvikio, "cufile_driver")
    properties: Any = getattr(driver, "properties", None)
    res["is_gds_available"] = _plain(_safe(lambda: properties.is_gds_available))
    res["libcufile_version"] = _plain(_safe(lambda: driver.libcufile_version()))
    res["cufile_nvfs_version"] = _plain(
        _safe(lambda: [properties.major_version, properties.minor_version])
    )
    res["cufile_allow_compat_mode"] = _plain(_safe(lambda: properties.allow_compat_mode))
    res["compat_mode_preferred"] = compat_preferred(kvikio)
    res["compat_mode"] = compat_setting(kvikio)
    res["gds_threshold"] = gds_threshold(kvikio)

    data = buf = None
    try:
        res["stage"] = "data"
        data = cupy.random.randint(0, 256, size=size, dtype=cupy.uint8)
        _sync(cupy)
        res["stage"] = "open_write"
        fh = kvikio.CuFile(file_path, "w")
        try:
            res["handle_compat_preferred"] = _plain(
                _safe(getattr(fh, "is_compat_mode_preferred", lambda: None))
            )
            res["handle_direct_io_supported"] = _plain(
                _safe(getattr(fh, "is_direct_io_supported", lambda: None))
            )
            res["stage"] = "write"
            t0 = time.perf_counter()
            written = fh.write(data)
        finally:
            fh.close()
        # Count the flush to the device in the write time; drop the page cache so a compat
        # read-back is not served from memory.
        fd = os.open(file_path, os.O_RDONLY)
        try:
            os.fsync(fd)
            res["write_s"] = time.perf_counter() - t0
            if hasattr(os, "posix_fadvise"):
                _safe(lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
        finally:
            os.close(fd)
        res["written"] = _plain(written)
        res["stage"] = "open_read"
        buf = cupy.empty(size, dtype=cupy.uint8)
        fh = kvikio.CuFile(file_path, "r")
        try:
            res["stage"] = "read"
            t0 = time.perf_counter()
            read = fh.read(buf)
            _sync(cupy)
            res["read_s"] = time.perf_counter() - t0
        finally:
            fh.close()
        res["read"] = _plain(read)
        # still inside the process that holds cuFile and nvidia-fs open
        res["cufile_stats"] = _counters.run_gds_stats(os.getpid(), 15.0, limit=1 << 16)
        res["stage"] = "compare"
        res["verified"] = bool(cupy.array_equal(data, buf))
        if not res["verified"]:
            res["error"] = "data read back differs from data written"
        else:
            res["ok"] = True
            res["stage"] = "done"
    except Exception as exc:  # noqa: BLE001 - the message is the evidence
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc(limit=4)[-2000:]
    finally:
        if not keep:
            with contextlib.suppress(OSError):
                os.unlink(file_path)
        res["libcufile_mapped"] = mapped_libcufile()
        # what nvidia-fs registered with, probed when cuFile opened it (also after a refusal)
        res["nvfs_modules"] = _iostats.nvfs_modules()
    return res


class ControllerGone(BaseException):
    """The orchestrator went away (its SSH channel closed, or a signal): stop, clean up."""


def controller_gone(fd: int = 1) -> bool:
    """Is the reader of our stdout gone? sshd closes its end of the session's pipes when the
    orchestrator closes the channel (Ctrl-C in verify), but sends the command no signal."""
    try:
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR / POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL)
                   for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _on_signal(signo, _frame):  # type: ignore[no-untyped-def]
    raise ControllerGone(signo)


def run_attempt(mode: str, file_path: str, size: int, keep: bool, timeout: float,
                extra_env: dict | None = None, host_lib: str | None = None) -> dict:
    """Fork a child for one attempt; collect its JSON through a pipe within ``timeout``; kill
    it and raise :class:`ControllerGone` when the orchestrator goes away meanwhile."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        os.dup2(2, 1)  # library chatter goes to stderr, never into our JSON
        try:
            out = attempt(mode, file_path, size, keep, extra_env, host_lib)
        except BaseException as exc:  # noqa: BLE001
            out = {"mode": mode, "ok": False, "stage": "crash", "error": repr(exc)}
        try:
            os.write(wfd, json.dumps(out, default=str).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if controller_gone():
                raise ControllerGone(0)
            ready, _, _ = select.select([rfd], [], [], min(left, 0.25))
            if ready:
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        os.close(rfd)
        raise
    os.close(rfd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {
            "mode": mode,
            "ok": False,
            "stage": "timeout",
            "error": f"attempt did not finish within {timeout}s",
        }
    try:
        return json.loads(b"".join(chunks).decode())
    except ValueError:
        return {
            "mode": mode,
            "ok": False,
            "stage": "crash",
            "error": f"attempt child died (wait status {status}) before reporting",
        }


def main() -> int:
    opts = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    directory = str(opts.get("path") or "/mnt/gds")
    size = int(opts.get("size_bytes") or (1 << 30))
    size = max(4096, (size + 4095) // 4096 * 4096)
    keep = bool(opts.get("keep_file", False))
    timeout = float(opts.get("timeout_s") or 600.0)
    out: dict[str, Any] = {
        "gdsfleet_iotest": SCHEMA,
        "status": "ran",
        "reason": None,
        "path": directory,
        "size_bytes": size,
        "python": sys.version.split()[0],
        "attempts": [],
        "rw_stats": {},
        "stats_before": None,
        "stats_after_direct": None,
        "stats_after_compat": None,
        "cufile_scope": None,
        "cufile_log": None,
        "file": None,
        "file_removed": None,
        "libcufile": None,
    }
    started = time.monotonic()
    if not os.path.isdir(directory):
        out["status"] = "skipped"
        out["reason"] = (
            f"test directory {directory} does not exist (is the GDS filesystem mounted?)"
        )
        return _emit(out)
    if not os.access(directory, os.W_OK):
        out["status"] = "skipped"
        out["reason"] = f"test directory {directory} is not writable by this user"
        return _emit(out)
    free = free_bytes(directory)
    if free is not None and free < size:
        # Checked before writing: a test file that fills the disk fails with ENOSPC half-way
        # (and can hurt what else lives on that filesystem).
        out["status"] = "skipped"
        out["reason"] = (
            f"needs {human_bytes(size)}, {human_bytes(free)} free at {directory}: free space "
            f"there, or choose a smaller size (--io-size, or gds_verify_io_size in the "
            f"inventory)"
        )
        out["free_bytes"] = free
        return _emit(out)
    file_path = os.path.join(directory, f".gdsfleet-iotest-{uuid.uuid4().hex[:12]}.bin")
    out["file"] = file_path
    rw: dict[str, Any] = out["rw_stats"]
    tmpdir = None
    direct_env: dict[str, Any] = {}
    threshold = opts.get("gds_threshold")
    if threshold is not None:
        direct_env["KVIKIO_GDS_THRESHOLD"] = int(threshold)
    host = host_libcufile()
    prefer_host = bool(opts.get("prefer_host_libcufile", True))
    out["libcufile"] = {"host": host, "wheel": wheel_libcufile(), "prefer_host": prefer_host}
    host_lib = (host["path"] or "") if prefer_host else None
    original = read_text(RW_STATS)
    rw["present"] = original is not None
    rw["before"] = original.strip() if original is not None else None
    rw["writable"] = original is not None and os.access(RW_STATS, os.W_OK)
    try:
        if opts.get("enable_rw_stats", True) and rw["writable"] and rw["before"] != "1":
            rw["set_error"] = write_text(RW_STATS, "1")
            rw["set_to"] = "1" if rw["set_error"] is None else None
        during = read_text(RW_STATS)
        rw["during"] = during.strip() if during is not None else None
        out["stats_before"] = read_text(STATS)
        if rw.get("set_to") == "1":
            # The real driver renders the n=/MiB counters as soon as rw_stats_enabled is 1; give
            # a slower renderer a moment so the baseline has them too (bounded, ~3 s).
            waited = 0.0
            while waited < 3.0 and "IO stats: Enabled" not in (out["stats_before"] or ""):
                time.sleep(0.1)
                waited += 0.1
                out["stats_before"] = read_text(STATS)
            rw["baseline_wait_s"] = round(waited, 1)
        if opts.get("cufile_log", True):
            tmpdir = tempfile.mkdtemp(prefix="gdsfleet-iotest-")
            scope = scoped_cufile_json(tmpdir)
            out["cufile_scope"] = scope
            if scope.get("json"):
                direct_env["CUFILE_ENV_PATH_JSON"] = scope["json"]
        direct = run_attempt("OFF", file_path, size, keep, timeout, direct_env, host_lib)
        out["attempts"].append(direct)
        out["stats_after_direct"] = read_text(STATS)
        if tmpdir:
            out["cufile_log"] = collect_cufile_log(out["cufile_scope"].get("log_dir"))
        missing = direct.get("missing")
        if missing:
            out["status"] = "skipped"
            out["reason"] = direct.get("error")
        elif not direct.get("ok") and opts.get("try_compat", True):
            compat = run_attempt("ON", file_path, size, keep, timeout, None, host_lib)
            out["attempts"].append(compat)
            out["stats_after_compat"] = read_text(STATS)
    finally:
        if rw.get("set_to") == "1" and rw["before"] is not None:
            rw["restore_error"] = write_text(RW_STATS, rw["before"])
            after = read_text(RW_STATS)
            rw["after"] = after.strip() if after is not None else None
        if not keep and os.path.exists(file_path):
            try:
                os.unlink(file_path)
            except OSError as exc:
                out["remove_error"] = str(exc)
        out["file_removed"] = not os.path.exists(file_path)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        out["duration_s"] = round(time.monotonic() - started, 3)
    return _emit(out)


def _emit(doc: dict) -> int:
    sys.stdout.write(json.dumps(doc, default=str, sort_keys=True))
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def guarded_main() -> int:
    """main(), stopped cleanly (attempt killed, test file removed, rw_stats restored) when the
    orchestrator goes away: SIGHUP/SIGTERM/SIGINT/SIGPIPE, or its end of stdout closed."""
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(s, _on_signal)
    try:
        return main()
    except ControllerGone:
        return 143


if __name__ == "__main__":
    sys.exit(guarded_main())
