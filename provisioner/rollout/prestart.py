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

The first wave's run has no wave before it to overlap, but the rollout's own start (Python,
its imports, the inventory read, the ledger, the plan: about a second at 500 hosts) came
before it. So once the fleet lock is held, that run starts at once with :class:`Gate`, before
the rollout knows which hosts it is for: ansible-playbook loads and reads the inventory, then
waits in a script that is its last inventory source, and the hosts come in its ``--limit
@FILE`` when the first wave that provisions begins (the rollout drops it when the run is
resumed instead, or another run comes first).

What a held run does once released is the run the wave would have started itself: the same
command, environment and extra vars, under the same guard, with the same events, timeout
(counted from the release) and outcomes. Only the moment it read the inventory and the
playbook is earlier: an inventory edited while the previous wave runs applies from the wave
after. A run started at a gate has two more things a wave's own run has not: the gate script
among ansible's inventory sources (``ansible_inventory_sources``; it adds no host or group)
and its hosts in a limit file instead of on its command line.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar


class _RunResult(Protocol):
    """What a held run's result must say here: whether its playbook never began
    (:class:`provisioner.rollout.runner.PlaybookResult` is the one the rollout uses; a
    protocol, so that the runner and this module, which it imports, do not import each other)."""

    @property
    def error(self) -> str | None: ...


PlaybookResult = TypeVar("PlaybookResult", bound=_RunResult)

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
            self._send(self._GO)

    # the words on the FIFO: the hold plugin reads one byte, a Gate's script a line
    _GO, _DROP = b"g", b"a"

    def drop(self) -> None:
        """End the run before its first play (if it has not been let go)."""
        if self.released_at is None and not self.dropped:
            self.dropped = True
            self._send(self._DROP)

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


_GATE_SCRIPT = """#!/bin/sh
# gdsfleet: the gate of a playbook run started before the rollout knew its hosts
# (provisioner/rollout/prestart.py, class Gate). ansible-playbook runs this as the last of its
# inventory sources; it adds no host. It waits for the rollout's word: g, go on (the rollout
# has written the --limit file); anything else, or the end of the FIFO, drop: exit 75, and
# ansible-playbook then stops at its missing --limit file, before any play.
: > {arrived}
IFS= read -r word < {fifo} || word=
if [ "$word" = g ]; then
  printf '{{"_meta": {{"hostvars": {{}}}}}}\\n'
  exit 0
fi
echo "gdsfleet: this run started ahead was dropped before its first play; no host touched" >&2
exit 75
"""


class Gate(Hold):
    """A run started before its hosts are known (the first wave's, while the rollout itself
    starts: reads its inventory, opens the ledger, plans). ansible-playbook gets two
    inventory sources, the rollout's and :attr:`script`, and ``--limit @``:attr:`limit_file`.
    It imports itself and reads the inventory, then runs the script (ansible-core's ``script``
    inventory plugin, enabled by default), which waits on the FIFO. :meth:`go` writes the
    hosts into the limit file, then lets the script return; :meth:`drop` ends it.

    The limit file is what keeps every host safe, not the wait: ansible-playbook refuses to
    run when a ``--limit @FILE`` does not exist (``InventoryManager.subset``, ansible-core),
    and it exists only once :meth:`go` has written it whole (a rename). Should the script not
    run (the ``script`` plugin disabled, or a cached inventory), the run either finds the
    file (it started after :meth:`go`: the released run, as it should be) or stops before any
    play, without having :attr:`arrived` at the gate; the rollout then starts the wave's run
    itself (:meth:`Held.stood_in`).

    Upstream facts this rests on, stated in tests/fixtures/ansible-core/upstream.yml and
    checked by tests/unit/test_rollout_start_ahead.py against the installed versions:
    ansible/ansible ``lib/ansible/inventory/manager.py``
    (``InventoryManager.subset``: a ``@FILE`` limit that does not exist is an error) and
    ``lib/ansible/plugins/inventory/script.py`` (an executable source runs with ``--list``)
    at v2.19.14; ansible/ansible-runner ``src/ansible_runner/config/runner.py`` at 2.4.3 (a
    list of inventories becomes one ``-i`` each, in order)."""

    def __init__(self, script_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.limit_file = os.path.join(self._dir, "limit")
        self._arrived = os.path.join(self._dir, "arrived")
        # the script goes where the run's guard wrapper goes (the runner's folder): a /tmp
        # mounted noexec, as hardened hosts have it, would keep it from running
        where = str(script_dir) if script_dir is not None else self._dir
        self.script = os.path.join(where, f".gdsfleet-gate-{os.path.basename(self._dir)}.sh")
        self.on_go: Callable[[Sequence[str]], None] | None = None  # told the hosts first
        self._was_there = False
        fd = os.open(self.script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_GATE_SCRIPT.format(arrived=shlex.quote(self._arrived),
                                         fifo=shlex.quote(self.path)))

    _GO, _DROP = b"g\n", b"a\n"

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {}  # the wait is the script's: no callback plugin

    @property
    def arrived(self) -> bool:
        """Has the run reached the gate (its script ran)? Kept past :meth:`close`."""
        if not self._was_there:
            self._was_there = os.path.exists(self._arrived)
        return self._was_there

    def close(self) -> None:
        _ = self.arrived  # read before the folder goes
        with contextlib.suppress(OSError):
            os.unlink(self.script)
        super().close()

    def go(self, hosts: Sequence[str] = ()) -> None:  # type: ignore[override]
        """Write ``hosts`` (names the inventory accepted: no pattern, one per line) into the
        limit file, then let the run go on (once)."""
        if self.released_at is not None or self.dropped:
            return
        from provisioner.inventory import HOSTNAME_RE  # no pattern, space or newline

        bad = [h for h in hosts if not HOSTNAME_RE.match(h)]
        if bad or not hosts:
            raise ValueError(f"a held run's --limit takes plain host names, not {bad[:1]}")
        if self.on_go is not None:
            self.on_go(hosts)
        tmp = self.limit_file + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(hosts) + "\n")
        os.replace(tmp, self.limit_file)
        self.released_at = time.monotonic()
        self._send(self._GO)


class Held(Generic[PlaybookResult]):
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

    def __init__(self, hosts: Sequence[str] | None,
                 start: Callable[[Hold | None, Callable[[PlaybookResult], None]],
                                 PlaybookResult], *,
                 name: str = "held-playbook", hold: bool = True,
                 gate_dir: str | os.PathLike[str] | None = None) -> None:
        # None: started before its hosts were known (a Gate, its script in gate_dir), they
        # come with release()
        self.hosts = tuple(hosts) if hosts is not None else None
        self.hold: Hold | None = None
        if hold:
            self.hold = Hold() if hosts is not None else Gate(gate_dir)
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
        """Is this the run for ``hosts`` (the same names, in any order; any names for a run
        started before its hosts were known, while it has not ended)?"""
        if self.hosts is None:
            from provisioner.inventory import HOSTNAME_RE  # no pattern, space or newline

            return not self.done and bool(hosts) and all(HOSTNAME_RE.match(h) for h in hosts)
        return sorted(self.hosts) == sorted(hosts)

    def release(self, hosts: Sequence[str] = ()) -> PlaybookResult:
        """Let the run go on and wait for its outcomes, as a run started now would be waited
        for: SIGINT/SIGTERM cancel it (the run's guard ends it) and raise
        :class:`provisioner.interrupts.Interrupted` once it is gone. Returns at the run's
        closing stats when they come (its tail goes on: :meth:`wait`), else at its end.
        ``hosts``: a run started before its hosts were known runs for these."""
        from provisioner import interrupts

        if isinstance(self.hold, Gate):
            self.hold.go(hosts)
        elif self.hold is not None:
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

    def stood_in(self, result: PlaybookResult) -> bool:
        """Did this run stand in for the wave's own? Not when it was started before its hosts
        were known, never reached its gate and never began its playbook (it stopped at its
        missing limit file, see :class:`Gate`): the wave then starts its run itself."""
        gate = self.hold
        return not (isinstance(gate, Gate) and not gate.arrived and result.error is not None)

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
