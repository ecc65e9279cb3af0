"""SIGINT and SIGTERM, owned by the provisioner (not by the libraries it calls).

ansible-runner installs its own SIGINT/SIGTERM handlers on its first run and never restores them
(they only set a flag that nothing reads once the run returned), so after the first playbook a
Ctrl-C was silently swallowed. :func:`handling` installs ours for the length of a command and
puts back whatever was there before; :func:`run_playbook` passes :func:`requested` to
ansible-runner as its cancel callback, so the runner never installs its own.

The first signal records which one arrived and raises :class:`Interrupted` in the main thread,
except inside a :func:`deferred` section (a playbook run: the runner polls :func:`requested`,
the playbook's guard ends it and everything it started, the runner returns; the caller then
raises). Registered closers
(open SSH connections of ``verify``) are called at once, from the handler, so worker threads
blocked on a node return within a moment. A second signal exits at once (``os._exit``) with
128 + the signal number; the playbook's guard (provisioner.rollout.guard) sees its parent die
and kills what is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``exit_code`` is 128 + its number (130, 143)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = 0
        self.closers: dict[int, Callable[[], None]] = {}
        self.lock = threading.Lock()
        self.event = threading.Event()


_state = _State()


def requested() -> bool:
    """Has a stop been asked for (ansible-runner's cancel callback)?"""
    return _state.signum is not None


def signum() -> int | None:
    return _state.signum


def event() -> threading.Event:
    """Set when a stop is asked for: wait on it instead of sleeping."""
    return _state.event


def check() -> None:
    """Raise :class:`Interrupted` if a stop was asked for."""
    if _state.signum is not None:
        raise Interrupted(_state.signum)


def _close_all() -> None:
    with _state.lock:
        closers = list(_state.closers.values())
    for close in closers:
        with contextlib.suppress(Exception):
            close()


def _handler(signo: int, _frame: FrameType | None) -> None:
    if _state.signum is not None:
        # the second signal: stop now; the guard of a running playbook kills what is left
        with contextlib.suppress(Exception):
            os.write(2, f"\n{signal.Signals(signo).name} again: stopping now\n".encode())
        os._exit(128 + signo)
    _state.signum = signo
    _state.event.set()
    threading.Thread(target=_close_all, name="interrupt-close", daemon=True).start()
    if _state.deferred == 0:
        raise Interrupted(signo)


def trip(signo: int) -> None:
    """Record a stop as the handler would, without raising (tests, other threads)."""
    _state.signum = signo
    _state.event.set()
    _close_all()


def reset() -> None:
    """Forget a recorded stop (tests; a new command in the same process)."""
    _state.signum = None
    _state.deferred = 0
    _state.event.clear()
    with _state.lock:
        _state.closers.clear()


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Own SIGINT and SIGTERM for the block (main thread only); restore the previous ones."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reset()
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """In the block a first signal only records the stop (the code polls :func:`requested`);
    ours are (re)installed for the block, whatever a library installed meanwhile."""
    main = threading.current_thread() is threading.main_thread()
    previous: dict[signal.Signals, Any] = {}
    if main:
        previous = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, _handler)
    _state.deferred += 1
    try:
        yield
    finally:
        _state.deferred -= 1
        if main:
            for s, h in previous.items():
                signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def closing(close: Callable[[], None]) -> Iterator[None]:
    """Call ``close`` as soon as a stop is asked for while the block runs."""
    key = id(close)
    with _state.lock:
        _state.closers[key] = close
    try:
        if _state.signum is not None:
            close()
        yield
    finally:
        with _state.lock:
            _state.closers.pop(key, None)


def sleep(seconds: float) -> None:
    """A sleep that a stop ends at once (raises :class:`Interrupted`)."""
    _state.event.wait(max(0.0, seconds))
    check()


__all__ = ["Interrupted", "check", "closing", "deferred", "event", "handling", "requested",
           "reset", "signum", "sleep", "trip"]
