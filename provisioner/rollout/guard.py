"""The guard between the rollout and its ``ansible-playbook``: no playbook outlives its controller.

ansible-runner starts ``ansible-playbook`` under a pseudo-terminal with SIGHUP ignored, in a
session of its own; after a ``kill -9`` of the rollout, that playbook and its ssh children ran
on under PID 1 while a resumed rollout started a second playbook on the same nodes. The runner
therefore starts this script (``binary=``, through a small shell wrapper), which:

- asks the kernel for SIGTERM when its parent (the rollout) dies (``PR_SET_PDEATHSIG``), and
  treats SIGHUP (the pseudo-terminal hung up) and SIGTERM alike;
- becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``), so the ssh control masters that
  daemonize themselves stay its descendants;
- holds a shared ``flock`` on the rollout's children lock (``<lock>.children``), inherited by
  ``ansible-playbook`` and its forks: a resumed rollout waits until every holder is gone;
- runs ``ansible-playbook`` (which dies with SIGKILL if the guard dies, ``PR_SET_PDEATHSIG``);
- when the playbook ends, or on a signal, kills every process that carries this run's token
  (``GDSFLEET_PLAYBOOK_TOKEN`` in its environment), waits for them, and only then exits.

Stdlib only: it runs as a script (``python guard.py LOCK|- PLAYBOOK_BINARY ARGS...``), never
imported into a playbook. :func:`sweep`, :func:`holders` and :class:`Stop` are also used by the
rollout itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

TOKEN_ENV = "GDSFLEET_PLAYBOOK_TOKEN"  # noqa: S105 - a variable name, no secret
PARENT_ENV = "GDSFLEET_GUARD_PARENT"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def new_token(run_tag: str | None) -> str:
    """A playbook run's token, ``<run>.<pid>.<hex>``: what the guard kills by, fencing fences
    by, and what gdsfleet.gds.node_lock reads the run from (its first dot-separated field, so
    a later play of the same run may take over a lock an earlier one of the run left)."""
    import uuid

    return f"{run_tag or 'adhoc'}.{os.getpid()}.{uuid.uuid4().hex[:12]}"


def run_of(token: str) -> str:
    """The run a token belongs to; empty for a play outside any run (``adhoc``, ``manual``).
    plugins/modules/node_lock.py (which runs on the node and cannot import this) reads it the
    same way; tests/unit/test_node_lock.py holds the two to one answer."""
    first = token.split(".", 1)[0]
    return "" if first in ("manual", "adhoc") else first


def prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _pids() -> list[int]:
    try:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []


def _pid_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def tagged(token: str) -> list[int]:
    """PIDs of the processes (of this user, in this PID namespace) whose environment carries
    ``token``. A container on this machine is another machine's business: a node's play
    carries the token too (site.yml's ``environment``), and a lab node is a container here."""
    needle = f"{TOKEN_ENV}={token}\0".encode()
    me = os.getpid()
    ours = _pid_ns("self")
    out = []
    for pid in _pids():
        if pid == me:
            continue
        if ours is not None and _pid_ns(pid) != ours:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read() + b"\0"
        except OSError:
            continue
        if needle in env:
            out.append(pid)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep(token: str, *, grace: float = 2.0) -> list[int]:
    """Stop every process carrying ``token``: SIGTERM, then SIGKILL after ``grace`` seconds;
    returns the PIDs found. Reaps the ones that are our children."""
    found = tagged(token)
    if not found:
        return []
    sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
    deadline = time.monotonic() + grace
    while True:
        alive = tagged(token)
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        _reap()
        time.sleep(0.05)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        if time.monotonic() > deadline + 10:
            break
    _reap()
    return found


def parent_of(pid: int) -> int | None:
    """The parent of ``pid`` (``/proc/<pid>/stat``), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat.rsplit(b")", 1)[1].split()[1])  # after the command, which may hold ')'
    except (OSError, IndexError, ValueError):
        return None


class Stop:
    """ansible-runner's cancel callback for a guarded playbook: the guard ends the playbook.

    ansible-runner ends a canceled or timed-out run by SIGKILLing the process group of what it
    started, the guard included, so nothing swept: ansible-core's forks (each calls setsid,
    ansible/executor/process/worker.py ``_detach``) and their ssh ran on, until the rollout's
    own sweep after the run, and a second Ctrl-C (or a kill) during that sweep left them
    running under PID 1 for the length of their task. Here a stop (``asked()``, or the run
    past ``timeout`` seconds) sends SIGTERM to the guard instead; the guard SIGKILLs every
    process carrying the token, waits until none is left and exits, and the runner sees its
    end. Only a guard still there after ``patience`` seconds is left to the runner's SIGKILL.
    ``reason`` says why the run was ended: ``canceled``, ``timeout`` or None."""

    def __init__(self, token: str, asked: Callable[[], bool], *, timeout: float | None = None,
                 patience: float = 15.0, began: Callable[[], float] | None = None) -> None:
        self.token = token
        self.asked = asked
        self.timeout = timeout
        self.patience = patience
        self.reason: str | None = None
        # when the timeout's clock started (time.monotonic()): now, or what ``began`` says
        # (a held run's release: provisioner.rollout.prestart.Hold.clock)
        created = time.monotonic()
        self._began: Callable[[], float] = began if began is not None else (lambda: created)
        self._since = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if self.reason is None:
            if self.asked():
                self.reason = "canceled"
            elif self.timeout and now - self._began() > self.timeout:
                self.reason = "timeout"
            else:
                return False
            self._since = now
            me = os.getpid()
            ours = [pid for pid in tagged(self.token) if parent_of(pid) == me]
            for pid in ours:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            if not ours:  # no guard (not started yet, or gone): the runner's way
                return True
        return now - self._since > self.patience


def holders(path: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the processes that have ``path`` open."""
    want = os.path.realpath(path)
    out = []
    for pid in _pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == want:
                    break
            except OSError:
                continue
        else:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = "?"
        out.append((pid, cmd[:120]))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: guard.py LOCK|- PLAYBOOK_BINARY [ARGS...]\n")
        return 2
    lock_path, binary, args = argv[0], argv[1], argv[2:]
    token = os.environ.get(TOKEN_ENV, "")
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    parent = os.environ.get(PARENT_ENV)
    child: subprocess.Popen[bytes] | None = None
    stopping = {"sig": 0}

    def stop(signo: int, _frame: object) -> None:
        if stopping["sig"]:
            return
        stopping["sig"] = signo
        if child is not None:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
        if token:
            sweep(token, grace=0)
        _reap()
        os._exit(128 + signo)

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, stop)
    if parent and str(os.getppid()) != parent:  # the rollout died before we got here
        return 128 + signal.SIGTERM
    lock_fd = -1
    if lock_path != "-":
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
        os.set_inheritable(lock_fd, True)

    stop_signals = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)

    # A stop signal that came between the fork and the child's PDEATHSIG (or before `child`
    # is set) would let this guard exit without killing the new ansible-playbook, which then
    # ran on under init with the run's token. Held back until Popen returns (the child has
    # then run in_child and exec'd); stop() then kills it.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        child = subprocess.Popen([binary, *args], preexec_fn=in_child,  # noqa: S603
                                 pass_fds=(lock_fd,) if lock_fd >= 0 else ())
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    # the playbook ended: nothing it started (ssh control masters) outlives it
    if token:
        sweep(token)
    _reap()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
