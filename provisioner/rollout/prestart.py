"""A wave's playbook run started ahead, held before its first play until its wave begins.

Every wave is one ``ansible-playbook`` run, and each run first spends seconds that touch no
host: Python and ansible-core start, the inventory is read, the playbook and its roles load
(about 1.5 s on a 2-core machine, more with a large inventory). A ``serial`` play pays that
once; the rollout paid it again at every wave, on the critical path, between one wave's end
and the next wave's first task. So while wave N runs (and is verified, and its gates pass),
wave N+1's run is started with :class:`Hold`: ansible-playbook loads, then the callback plugin
``hold/gdsfleet_hold.py`` waits in ``v2_playbook_on_start`` on a FIFO. When wave N+1 begins
with the same hosts, the rollout writes ``g`` and the playbook goes on from there; when the
rollout stops first (a failed gate, a budget, a ``no``, Ctrl-C, an error) or the wave turns
out to need other hosts (reconcile found one compliant, a drain failed), it writes ``a`` and
the held run exits before its first play, having contacted no host. If the rollout dies, the
FIFO's last writer is gone: the held run reads its end and exits (and its guard, which dies
with the rollout, kills it anyway).

What a held run does once released is the run the wave would have started itself: the same
command, environment and extra vars, under the same guard, with the same events, timeout
(counted from the release) and outcomes. Only the moment it read the inventory and the
playbook is earlier: an inventory edited while the previous wave runs applies from the wave
after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provisioner.rollout.runner import PlaybookResult

HOLD_PLUGIN_DIR = Path(__file__).resolve().with_name("hold")
FIFO_ENV = "GDSFLEET_HOLD_FIFO"  # the callback plugin's (hold/gdsfleet_hold.py) variable


class Hold:
    """The FIFO one held run waits on. This process keeps a descriptor open on it from the
    start (so the run can open it at once, and reads the FIFO's end if this process dies)
    until :meth:`close`."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="gdsfleet-hold-")  # 0700
        self.path = os.path.join(self._dir, "go")
        os.mkfifo(self.path, 0o600)
        # read-write: opening never blocks, and the pipe's buffer lives while this is open;
        # not inherited by the processes this one starts (Python's descriptors are not)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.released_at: float | None = None
        self.dropped = False
        self._lock = threading.Lock()

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables that load the hold plugin into the run (``environ``: the run's
        environment so far, whose callback plugin folders are kept first)."""
        from provisioner.rollout.stream import callback_dirs

        return {FIFO_ENV: self.path,
                "ANSIBLE_CALLBACK_PLUGINS": callback_dirs(environ, HOLD_PLUGIN_DIR)}

    def _send(self, byte: bytes) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.write(self._fd, byte)

    def go(self) -> None:
        """Let the run go on (once)."""
        if self.released_at is None and not self.dropped:
            self.released_at = time.monotonic()
            self._send(b"g")

    def drop(self) -> None:
        """End the run before its first play (if it has not been let go)."""
        if self.released_at is None and not self.dropped:
            self.dropped = True
            self._send(b"a")

    def clock(self) -> float:
        """When the run's own time began: its release; now while it is held."""
        return self.released_at if self.released_at is not None else time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
        shutil.rmtree(self._dir, ignore_errors=True)


class Held:
    """One playbook run in a thread of its own (``start(hold, on_final)`` runs it, e.g.
    :func:`provisioner.rollout.runner.run_playbook` with ``hold=`` and ``on_final=``), for
    ``hosts``: started ahead and held before its first play (``hold=True``), or started at
    once (``hold=False``: the wave's own run, see ``LocalExecutor.run``).

    :meth:`release` gives the run's result as soon as its closing stats are in (every host's
    outcome is final there), not when ansible-playbook has exited: the next wave goes on while
    this run's process exits and its guard sweeps (a few tenths of a second that a ``serial``
    play never pays between its batches). That rest of the run, its tail, goes on in this
    object's thread; :meth:`wait` waits for it (the rollout waits for every tail before it
    ends, ``AnsibleProvisioner.settle``)."""

    def __init__(self, hosts: Sequence[str],
                 start: Callable[[Hold | None, Callable[[PlaybookResult], None]],
                                 PlaybookResult], *,
                 name: str = "held-playbook", hold: bool = True) -> None:
        self.hosts = tuple(hosts)
        self.hold: Hold | None = Hold() if hold else None
        self._result: PlaybookResult | None = None
        self._final: PlaybookResult | None = None  # the result at the closing stats
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._ready = threading.Event()  # the final result is in, or the run ended
        self._thread = threading.Thread(target=self._main, args=(start,), name=name,
                                        daemon=True)
        self._thread.start()

    def _main(self, start: Callable[[Hold | None, Callable[[PlaybookResult], None]],
                                    PlaybookResult]) -> None:
        try:
            self._result = start(self.hold, self._stats_in)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that releases it
            self._error = exc
        finally:
            self._done.set()
            self._ready.set()

    def _stats_in(self, result: PlaybookResult) -> None:
        self._final = result
        self._ready.set()

    def matches(self, hosts: Sequence[str]) -> bool:
        """Is this the run for ``hosts`` (the same names, in any order)?"""
        return sorted(self.hosts) == sorted(hosts)

    def release(self) -> PlaybookResult:
        """Let the run go on and wait for its outcomes, as a run started now would be waited
        for: SIGINT/SIGTERM cancel it (the run's guard ends it) and raise
        :class:`provisioner.interrupts.Interrupted` once it is gone. Returns at the run's
        closing stats when they come (its tail goes on: :meth:`wait`), else at its end."""
        from provisioner import interrupts

        if self.hold is not None:
            self.hold.go()
        try:
            with interrupts.deferred():
                # the stats, or the run's end (an interrupt: once its guard has ended it)
                while not self._ready.wait(0.5):
                    pass
        finally:
            if self.hold is not None:
                self.hold.close()
        if self._final is not None and not self._done.is_set():
            return self._final
        interrupts.check()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def wait(self, timeout: float | None = None) -> PlaybookResult | None:
        """Wait (at most ``timeout`` s) for the whole run, its tail included; its result, or
        None when it did not end in time or ended in an error (the error is not raised here:
        the outcomes were handed over at the stats, and an interrupt is the caller's to
        check)."""
        self._done.wait(timeout)
        return self._result if self._done.is_set() else None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def drop(self, timeout: float = 60.0) -> None:
        """End the run before it touches a host and wait (at most ``timeout`` s) for it."""
        if self.hold is not None:
            self.hold.drop()
        self._done.wait(timeout)
        if self.hold is not None:
            self.hold.close()
