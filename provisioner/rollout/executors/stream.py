"""The byte stream between the coordinator and an ssh executor's worker, and the dispatch
record (the ledger's ``dispatches`` row) each shard is sent under.

:class:`_BoundedReader` bounds what ansible-runner's Processor reads from an execution node
and :class:`Watchdog` how long (the coordinator's own deadline: ssh killed then);
:class:`Dispatch` and :class:`DispatchLedger` are what the executor writes to the ledger,
whose states are documented in docs/scale.md (``dispatching``, ``running``, then ``done``,
``failed``, ``lost``, ``unreachable`` or ``error``; a lost shard then ``fenced`` or
``deadline-passed``, and ``redispatched`` or ``abandoned``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MAX_LINE = 16 << 20  # longest line of a worker's stream (an event, a status)


class _BoundedReader:
    """ssh's stdout for ansible-runner's Processor: every line is judged on the JSON object it
    parses to, exactly as the Processor will parse it, never on a byte prefix.

    - A line longer than MAX_LINE, a JSON value that is not an object, or an archive header
      whose length is not a whole number ends the stream with :attr:`refused` saying why (the
      Processor then reports an error and the shard's hosts become lost).
    - The worker's artifacts archive (an object with a ``zipfile`` key, then that many bytes
      base64-encoded, with no line break) is skipped here, never unpacked, whatever the line
      looks like (a leading blank, ``\\u007aipfile``, other keys beside it): ansible-runner
      2.4.3's ``unstream_dir`` recreates the archive's symbolic links and then extracts through
      them, so an execution node could write anywhere the coordinator can; and gdsfleet needs
      only the events, which it keeps itself.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.skipped_archives = 0
        self.refused: str | None = None  # why the stream was ended here, if it was

    def _refuse(self, why: str) -> bytes:
        # not JSON: the Processor stops with "Failed to JSON parse a line" and this text
        self.refused = why
        return b"gdsfleet refused the worker stream: " + why.encode() + b"\n"

    def readline(self, size: int = -1) -> bytes:
        if self.refused is not None:
            return b""
        while True:
            line = bytes(self._raw.readline(MAX_LINE))
            if not line:
                return line
            if len(line) >= MAX_LINE and not line.endswith(b"\n"):
                return self._refuse(f"a line longer than {MAX_LINE} bytes")
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                return line  # the Processor reports it, with the line's start
            except ValueError:  # the Processor would raise it (it catches JSONDecodeError)
                return self._refuse("a line that is not UTF-8")
            except RecursionError:
                return self._refuse("a JSON value nested too deeply")
            if not isinstance(data, dict):
                # the Processor would test `in` on a list or a string ("zipfile" in "...")
                return self._refuse(f"a JSON {type(data).__name__}, not an object")
            if "zipfile" not in data:
                return line
            length = data["zipfile"]
            if isinstance(length, bool) or not isinstance(length, int) or length < 0:
                return self._refuse("an artifacts archive without a valid length")
            remaining = 4 * ((length + 2) // 3)  # base64 of length bytes, with its padding
            while remaining > 0:
                chunk = self._raw.read(min(remaining, 1 << 20))
                if not chunk:
                    return b""  # the stream ended inside the archive: cut
                remaining -= len(chunk)
            self.skipped_archives += 1

    def read(self, size: int = -1) -> bytes:
        return bytes(self._raw.read(size))

    # what ansible-runner's artifact unpacking (base64io) checks for
    def write(self, data: bytes) -> int:
        raise OSError("read-only stream")

    def flush(self) -> None:
        pass

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self._raw.close()

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)



def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def _shown(raw: bytes) -> str:
    from provisioner.redact import redact_text
    from provisioner.sanitize import printable

    text = raw.decode("utf-8", "replace").strip().splitlines()
    return printable(redact_text(" ".join(text[-3:])))[:400]


class Watchdog:
    """The coordinator's own wall-clock bound on one dispatch (issue 45): at ``at``
    (``time.time()``, the dispatch's deadline) ``kill`` runs once and :attr:`passed` is set.

    The execution node's ``timeout`` and sweep stop an honest worker by then; this bound holds
    whatever the node does: a worker that detaches and sends keepalives for ever, or an
    archive header followed by endless base64, ends the stream here when ssh is killed (the
    reader then sees its end). ``at`` None (``--playbook-timeout 0``): no bound, as asked."""

    def __init__(self, at: float | None, kill: Callable[[], None]) -> None:
        self.at = at
        self.passed = False
        self._kill = kill
        self._timer: threading.Timer | None = None
        if at is not None:
            self._timer = threading.Timer(max(0.0, at - time.time()), self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.passed = True
        self._kill()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def reason(self, node: str) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at or 0))
        return (f"execution node {node} was still streaming at the shard's deadline ({when}): "
                f"the coordinator killed its ssh and the shard is lost")


@dataclass
class Dispatch:
    """One shard sent to one execution node (the ledger's ``dispatches`` row)."""

    run_id: str
    wave: int
    shard: int
    exec_node: str
    hosts: list[str]
    token: str
    deadline: str | None
    state: str = "dispatching"
    id: int | None = None
    deadline_at: float | None = None  # the deadline as time.time()
    detail: dict[str, Any] = field(default_factory=dict)


class DispatchLedger(Protocol):
    """What the executor needs of the ledger (provisioner.store.Ledger has both)."""

    def record_dispatch(self, run_id: str, wave: int, shard: int, exec_node: str, token: str,
                        deadline: str | None, state: str, hosts: Sequence[str]) -> int: ...

    def update_dispatch(self, dispatch_id: int, state: str,
                        detail: Mapping[str, Any] | None = None) -> None: ...
