"""Where tracebacks go: a private debug log, never the terminal.

An unexpected error (a bug) is reported on stderr in one line that names this file; the full
traceback is appended to ``$XDG_STATE_HOME/gdsfleet/debug.log`` (default
``~/.local/state/gdsfleet/debug.log``; ``$GDSFLEET_DEBUG_LOG`` overrides the path). The file is
created 0600 in a 0700 directory, because a traceback can carry arguments and paths. The
default folder must be the caller's alone and the file is never reached through a link (issue
45: under ``sudo`` with another user's ``$HOME``, a planted ``debug.log`` link would have had
root append to any file); otherwise nothing is written and the one line says so.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

ENV_DEBUG_LOG = "GDSFLEET_DEBUG_LOG"


def debug_log_path() -> Path:
    explicit = os.environ.get(ENV_DEBUG_LOG)
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "gdsfleet" / "debug.log"


def write_traceback(context: str, exc: BaseException | None = None) -> str | None:
    """Append ``context`` and the traceback of ``exc`` (default: the one being handled).

    Returns the log's path, or None when it cannot be written (then nothing is printed
    either: the caller's one-line message says so).
    """
    path = debug_log_path()
    if exc is None:
        text = traceback.format_exc()
    else:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    from provisioner.fsutil import open_private, owned_dir, private_dir
    from provisioner.redact import redact_text

    entry = redact_text(f"--- {stamp} pid {os.getpid()}: {context}\n{text}\n")
    named = bool(os.environ.get(ENV_DEBUG_LOG))
    try:
        if not named:  # the project's state folder: the caller's alone, no link followed
            owned_dir(path.parent)
        private_dir(path.parent)
        fd = open_private(path, follow=named)
        try:
            mode = os.fstat(fd).st_mode & 0o777
            if mode & 0o077:  # an older log made wider: narrow it, never widen
                os.fchmod(fd, mode & 0o600)
            os.write(fd, entry.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        return None
    return str(path)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for stderr."""
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0]}" if msg else type(exc).__name__


def report_internal(prog: str, exc: BaseException) -> None:
    """The one line an operator sees for a bug."""
    where = write_traceback(prog, exc)
    tail = (f"the traceback is in {where}" if where
            else f"the traceback could not be written to {debug_log_path()}")
    from provisioner.redact import redact_text
    from provisioner.sanitize import printable

    # the exception's text may quote a node's bytes: escaped like every other error line
    sys.stderr.write(printable(redact_text(f"{prog}: internal error (a bug, please report "
                                           f"it): {one_line(exc)}; {tail}")) + "\n")


__all__ = ["ENV_DEBUG_LOG", "debug_log_path", "one_line", "report_internal", "write_traceback"]
