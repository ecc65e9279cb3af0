# TEST STAND-IN (gdsfleet test harness): NOT kvikio. kvikio.CuFile over the simulated node.
# KVIKIO_COMPAT_MODE=OFF: direct I/O when the node has a usable route (nvfs: nvidia_fs loaded
# and the patched nvme symbol in kallsyms; p2pdma: p2pdma_pgmap_ops and both use_pci_p2pdma keys
# in cufile.json; the file on xfs or ext4 with data=ordered); with no route, cuFile's own compat
# mode when cufile.json allows it, else a RuntimeError. AUTO: direct when usable, else POSIX
# silently. ON: POSIX. Direct I/O is counted in the simulated nvidia-fs stats. Like the real
# kvikio, a pread/pwrite smaller than KVIKIO_GDS_THRESHOLD goes through POSIX whatever the compat
# mode, is not counted in nvidia-fs stats and never reaches cuFile (so cuFile's log, written
# when cufile.json sets logging.dir, shows no per-I/O line for it).
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, "/usr/local/lib/gdsfleet-sim")
import gdsfleet_sim as _sim  # noqa: E402

from . import defaults  # noqa: E402

_ALIGN = 4096


class CUfileException(RuntimeError):  # noqa: N818 (kvikio's name)
    pass


class IOFuture:
    def __init__(self, nbytes: int) -> None:
        self._n = nbytes

    def get(self) -> int:
        return self._n

    def done(self) -> bool:
        return True


def _buffer(buf: object) -> tuple[memoryview, int | None]:
    """(writable view of the bytes, device index or None for host memory)."""
    data = getattr(buf, "_buf", None)
    if isinstance(data, bytearray):
        return memoryview(data), int(buf.device.id)  # type: ignore[attr-defined]
    return memoryview(buf).cast("B"), None  # type: ignore[arg-type]


_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "r+": os.O_RDWR,
          "w+": os.O_RDWR | os.O_CREAT | os.O_TRUNC, "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND}


class CuFile:
    def __init__(self, file: str | os.PathLike[str], flags: str = "r", mode: int = 0o644) -> None:
        self._path = os.fspath(file)
        if flags not in _FLAGS:
            raise ValueError(f"Unknown file open flag: {flags}")
        self._fd = os.open(self._path, _FLAGS[flags], mode)
        self._closed = False
        self._route: str | None = None
        self._cufile = False  # a cuFile handle is registered (I/O goes through cuFile)
        compat = defaults.compat_mode()
        if compat == defaults.CompatMode.ON:
            return
        _sim.cufile_log_driver_open()
        route, why = _sim.direct_route(self._path)
        if route is not None or compat == defaults.CompatMode.OFF:
            _sim.cufile_log_handle(route, why)
        if route is not None:
            self._route = route
            self._cufile = True
            return
        if compat == defaults.CompatMode.OFF and not _sim.cufile_settings()["allow_compat_mode"]:
            os.close(self._fd)
            self._closed = True
            code = ("CU_FILE_DRIVER_NOT_INITIALIZED" if "not loaded" in why or "driver" in why
                    else "CU_FILE_IO_NOT_SUPPORTED")
            raise CUfileException(
                f"cuFile error at: /kvikio/cpp/src/file_handle.cpp:117: cuFileHandleRegister "
                f"failed for {self._path}: {code} ({why}; allow_compat_mode is false)")
        # otherwise: POSIX (AUTO silently; OFF through cuFile's own compat mode)
        self._cufile = compat == defaults.CompatMode.OFF

    # -- context manager and housekeeping
    def __enter__(self) -> CuFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            os.close(self._fd)
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int:
        return self._fd

    def open_flags(self) -> int:
        return os.O_RDWR

    def nbytes(self) -> int:
        return os.fstat(self._fd).st_size

    def is_direct_io_supported(self) -> bool:
        return self._route is not None

    # -- I/O
    def _direct(self, view: memoryview, device: int | None, size: int, offset: int) -> bool:
        return (self._route is not None and device is not None
                and size >= defaults.gds_threshold()
                and size % _ALIGN == 0 and offset % _ALIGN == 0)

    def _log_io(self, kind: str, size: int, offset: int, device: int | None,
                direct: bool) -> None:
        """cuFile's per-I/O log lines: kvikio calls cuFile once per task, only for device
        buffers at or above the GDS threshold."""
        if not self._cufile or device is None or size < defaults.gds_threshold():
            return
        task = max(1, defaults.task_size())
        done = 0
        while done < size:
            n = min(task, size - done)
            _sim.cufile_log_io(kind, self._route if direct else None, self._fd, n, offset + done)
            done += n

    def _account(self, kind: str, direct: bool, size: int, device: int | None,
                 seconds: float) -> None:
        if direct and self._route == "nvfs":
            chunk = int(_sim.cufile_settings()["max_direct_io_size_kb"]) * 1024  # type: ignore[arg-type]
            _sim.record_direct_io(kind, size, chunk, device or 0, seconds)
        _cufile_stats(kind, direct, size, device)

    def pwrite(self, buf: object, size: int | None = None, file_offset: int = 0,
               task_size: int | None = None) -> IOFuture:
        if self._closed:
            raise ValueError("I/O operation on closed file")
        view, device = _buffer(buf)
        size = len(view) if size is None else int(size)
        direct = self._direct(view, device, size, file_offset)
        t0 = time.monotonic()
        done = 0
        while done < size:
            n = os.pwrite(self._fd, view[done:size], file_offset + done)
            if n <= 0:
                raise OSError("short write")
            done += n
        self._account("write", direct, size, device, time.monotonic() - t0)
        self._log_io("write", size, file_offset, device, direct)
        return IOFuture(done)

    def pread(self, buf: object, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> IOFuture:
        if self._closed:
            raise ValueError("I/O operation on closed file")
        view, device = _buffer(buf)
        size = len(view) if size is None else int(size)
        direct = self._direct(view, device, size, file_offset)
        t0 = time.monotonic()
        done = 0
        while done < size:
            n = os.preadv(self._fd, [view[done:size]], file_offset + done)
            if n <= 0:
                break
            done += n
        self._account("read", direct, done, device, time.monotonic() - t0)
        self._log_io("read", done, file_offset, device, direct)
        return IOFuture(done)

    def write(self, buf: object, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> int:
        return self.pwrite(buf, size, file_offset, task_size).get()

    def read(self, buf: object, size: int | None = None, file_offset: int = 0,
             task_size: int | None = None) -> int:
        return self.pread(buf, size, file_offset, task_size).get()

    raw_write = write
    raw_read = read


def _cufile_stats(kind: str, direct: bool, size: int, device: int | None) -> None:
    """profile.cufile_stats >= 1: per-process counters for the stand-in gds_stats."""
    try:
        level = int(_sim.cufile_settings()["cufile_stats"])  # type: ignore[arg-type]
    except (TypeError, ValueError):
        level = 0
    if level < 1:
        return
    d = _sim.RUN + "/cufile-stats"
    os.makedirs(d, exist_ok=True)
    path = f"{d}/{os.getpid()}.json"
    try:
        with open(path) as fh:
            st = json.load(fh)
    except (OSError, ValueError):
        st = {"pid": os.getpid(), "level": level, "read": {}, "write": {}}
    gpu = str(device or 0)
    e = st[kind].setdefault(gpu, {"n": 0, "posix": 0, "bytes": 0})
    e["n"] += 1
    e["bytes"] += size
    if not direct:
        e["posix"] += 1
    with open(path, "w") as fh:
        json.dump(st, fh)
