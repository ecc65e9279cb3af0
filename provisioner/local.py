"""``CommandRunner`` for this machine (``provisioner verify --local``): no SSH involved.

Each command runs under ``/bin/sh -c`` in its own session (process group), so a deadline kills
the whole tree it started, not only the shell; output is collected by ``communicate`` (both
pipes drained at once).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from provisioner.errors import CommandTimeout, ConnectError
from provisioner.verify.model import CommandResult


class LocalRunner:
    """Runs commands on the local machine; same contract as the SSH runner."""

    def __init__(self, name: str | None = None, *, shell: str = "/bin/sh") -> None:
        self.name = name or socket.gethostname()
        self.shell = shell

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (symmetry with the SSH runner)."""

    def run(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
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
        try:
            out, err = proc.communicate(input=stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            first = command.strip().splitlines()[0][:120] if command.strip() else ""
            raise CommandTimeout(
                f"{self.name}: command ran past its {timeout:g}s deadline: {first}"
            ) from None
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        return CommandResult(
            exit_status=proc.returncode,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - t0,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
