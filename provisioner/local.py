"""``CommandRunner`` for this machine (``provisioner verify --local``): no SSH involved.

Each command runs under ``/bin/sh -c`` in its own session (process group), so a deadline kills
the whole tree it started, not only the shell. Both pipes are drained at once by one loop that
also bounds them: stdout beyond ``MAX_STDOUT_BYTES`` (stderr beyond ``MAX_STDERR_BYTES``) stops
the command and raises :class:`~provisioner.errors.OutputTooLarge` (provisioner.sanitize).

:meth:`LocalRunner.close` is the closer ``verify`` registers with provisioner.interrupts, as
for an SSH connection: on SIGINT/SIGTERM it sends SIGTERM to the running command's process
group (the I/O test cleans up its file on it), SIGKILL one second later, and the waiting
:meth:`LocalRunner.run` returns at once with a :class:`~provisioner.errors.ConnectError`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import threading
import time

from provisioner.errors import CommandTimeout, ConnectError
from provisioner.sanitize import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, BoundedOutput
from provisioner.verify.model import CommandResult

KILL_GRACE_S = 1.0  # SIGTERM, then SIGKILL this much later
_POLL_S = 0.05


class LocalRunner:
    """Runs commands on the local machine; same contract as the SSH runner."""

    def __init__(self, name: str | None = None, *, shell: str = "/bin/sh",
                 max_stdout: int = MAX_STDOUT_BYTES, max_stderr: int = MAX_STDERR_BYTES) -> None:
        self.name = name or socket.gethostname()
        self.shell = shell
        self.max_stdout = max_stdout
        self.max_stderr = max_stderr
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = threading.Event()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every running command (its whole process group): SIGTERM now, SIGKILL after
        :data:`KILL_GRACE_S`; later :meth:`run` calls refuse. Safe from any thread."""
        self._closed.set()
        with self._lock:
            procs = list(self._running)
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)

    def run(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
        if self._closed.is_set():
            raise ConnectError(f"{self.name}: stopped (interrupted)")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                [self.shell, "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                start_new_session=True,
            )
        except OSError as exc:
            raise ConnectError(f"{self.name}: cannot start {self.shell}: {exc}") from exc
        with self._lock:
            self._running.add(proc)
        try:
            if self._closed.is_set():  # close() ran between the check above and the add
                _signal_group(proc, signal.SIGTERM)
            out, err = self._collect(proc, command, stdin or b"", t0 + timeout, timeout)
        except BaseException:
            _kill_group(proc)
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        return CommandResult(
            exit_status=proc.returncode,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - t0,
        )

    def _collect(self, proc: subprocess.Popen[bytes], command: str, data: bytes,
                 deadline: float, timeout: float) -> tuple[bytes, bytes]:
        """Feed stdin, drain stdout and stderr (bounded) until both close and the command
        exits; raise on the deadline, on too much output and on :meth:`close`."""
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        output = BoundedOutput(self.name, _short(command), max_stdout=self.max_stdout,
                               max_stderr=self.max_stderr)
        sel = selectors.DefaultSelector()
        try:
            os.set_blocking(proc.stdin.fileno(), False)
            if data:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
            sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
            sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
            view = memoryview(data)
            closed_at: float | None = None
            while True:
                if self._closed.is_set():
                    if closed_at is None:
                        closed_at = time.monotonic()
                    if proc.poll() is not None or time.monotonic() - closed_at > KILL_GRACE_S:
                        raise ConnectError(f"{self.name}: stopped (interrupted): "
                                           f"{_short(command)}")
                streams_open = any(k.fileobj is not proc.stdin for k in sel.get_map().values())
                if not streams_open and proc.poll() is not None:
                    return output.bytes_of("stdout"), output.bytes_of("stderr")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(
                        f"{self.name}: command ran past its {timeout:g}s deadline: "
                        f"{_short(command)}")
                if not streams_open:
                    time.sleep(min(_POLL_S, remaining))
                    continue
                for key, _ev in sel.select(min(_POLL_S, remaining)):
                    if key.fileobj is proc.stdin:
                        try:
                            n = os.write(proc.stdin.fileno(), view[:65536])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            n = len(view)
                        view = view[n:]
                        if not view:
                            sel.unregister(proc.stdin)
                            proc.stdin.close()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    output.take(key.data, chunk)
        finally:
            sel.close()


def _short(command: str) -> str:
    first = command.strip().splitlines()[0] if command.strip() else ""
    return first[:120]


def _signal_group(proc: subprocess.Popen[bytes], signo: int) -> None:
    try:
        os.killpg(proc.pid, signo)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signo)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
