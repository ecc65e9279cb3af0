"""Report paths (``--json``, ``--junit``) are checked before any work starts.

A run that verified or provisioned every node and then cannot write its report has wasted the
operator's time (and used to end in a traceback): before the first node is touched, an existing
target must be a writable regular file, and otherwise the nearest existing directory on its
path must take a new file (the writers create the missing directories below it). A symlink is
judged by what it points to (the writers follow it, never replace it); a character device, a
FIFO or a file descriptor's name (``/dev/stdout``, ``/dev/stderr``) is accepted where a file
is (the writers write it directly: provisioner.fsutil).
"""

from __future__ import annotations

import os
import tempfile

from provisioner.errors import UsageError


def check_output_path(option: str, value: str | None, *, stdout_ok: bool = True) -> None:
    """Refuse (exit 64) a report path that cannot be written; ``-`` is stdout."""
    if not value:
        return
    if value == "-":
        if stdout_ok:
            return
        raise UsageError(f"{option} -: this report cannot go to stdout; give a file")
    from provisioner.fsutil import SpecialFileError, resolve_output

    try:
        path, is_fd = resolve_output(value)
    except SpecialFileError as exc:
        raise UsageError(f"{option} {value}: {exc.strerror}") from None
    except OSError as exc:
        raise UsageError(f"{option} {value}: {exc.strerror}; choose another path") from None
    if is_fd or path.is_char_device() or path.is_fifo():
        return  # written directly by the writers; nothing to probe
    if path.is_dir():
        raise UsageError(f"{option} {value}: is a directory; give a file name")
    if path.exists():
        if not path.is_file():
            raise UsageError(f"{option} {value}: is not a regular file")
        try:
            with open(path, "ab"):
                pass
        except OSError as exc:
            raise UsageError(f"{option} {value}: cannot be written ({exc.strerror})") from exc
        return
    # The report writers create missing directories: find the nearest one that exists.
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(
            f"{option} {value}: {str(parent)!r} is not a directory; choose another path"
        )
    # Probe with a temporary file: os.access() says yes to root even on a read-only mount.
    try:
        fd, probe = tempfile.mkstemp(prefix=".gdsfleet-probe-", dir=parent)
    except OSError as exc:
        raise UsageError(
            f"{option} {value}: the directory {str(parent)!r} does not take new files "
            f"({exc.strerror}); choose another path"
        ) from exc
    os.close(fd)
    os.unlink(probe)


__all__ = ["check_output_path"]
