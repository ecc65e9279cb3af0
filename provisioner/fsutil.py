"""Files and folders the provisioner creates hold run details (and, briefly, secrets): the
ledger, the rollout lock, reports, the runner's private data folder, the debug log.

They are created owner-only: files 0600, folders 0700, by ``os.open``/``mkdir`` with that mode,
so the operator's umask can only narrow them further; nothing here ever widens a mode.
Shared helpers so every writer (reports, ledger, lock, runner) does the same.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: str | os.PathLike[str], *, narrow: bool = False) -> Path:
    """Create ``path`` (and missing parents) 0700; ``narrow``: also take group/other bits off
    an existing folder that the provisioner owns (e.g. ``runner/``), never adding any."""
    p = Path(path)
    missing = []
    cur = p
    while not cur.exists() and cur != cur.parent:
        missing.append(cur)
        cur = cur.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=DIR_MODE)
    if narrow and not missing:
        st = p.stat()
        if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.getuid():
            os.chmod(p, stat.S_IMODE(st.st_mode) & DIR_MODE)
    return p


def create_private(path: str | os.PathLike[str]) -> bool:
    """Create an empty 0600 file unless it exists; True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def open_private(path: str | os.PathLike[str], flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """``os.open`` that creates a missing file 0600 (umask-narrowed); returns the fd."""
    return os.open(path, flags | os.O_CREAT, FILE_MODE)


def append_private(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to a file created 0600 when missing."""
    fd = open_private(path)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_private(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``path`` atomically (temp file in the same folder, fsync, rename), mode 0600
    narrowed by the umask; a missing folder is created 0700."""
    write_atomic(path, data, mode=FILE_MODE)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *,
                 mode: int = FILE_MODE) -> None:
    """Write ``path`` atomically: a temp file in the target's own folder (the rename never
    crosses a filesystem), ``mode`` narrowed by the umask, fsync, rename. A reader sees the old
    file or the new one, never half of one. A missing folder is created 0700 for a private
    ``mode``, or as a plain ``mkdir`` would for a file others read."""
    target = Path(path).expanduser()
    if mode & 0o077:  # a file others read (the Prometheus textfile): its folder must be too
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        private_dir(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        os.fchmod(fd, mode & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process umask, read without changing it where /proc says it."""
    with contextlib.suppress(OSError, ValueError), \
            open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o077)
    os.umask(old)
    return old


__all__ = ["DIR_MODE", "FILE_MODE", "append_private", "create_private", "current_umask",
           "open_private", "private_dir", "write_atomic", "write_private"]
