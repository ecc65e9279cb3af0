"""Optional per-node drain hooks (e.g. Slurm) around provisioning.

``--drain-cmd`` runs before a node is provisioned, ``--drain-wait-cmd`` is then polled until
it exits 0 (or the timeout passes), and ``--resume-cmd`` runs after the node verified
compliant. Templates substitute only ``{node}`` and ``{address}``, each shell-quoted; any other
brace is refused when the options are parsed. A node whose drain fails is skipped, never
provisioned.
"""

from __future__ import annotations

import shlex
import string
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from provisioner.errors import UsageError

FIELDS = frozenset({"node", "address"})


def check_template(template: str, option: str) -> str:
    """Refuse a template with fields other than {node}/{address}, or bad braces."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UsageError(f"{option} {template!r}: {exc}; use {{node}} or {{address}}") from exc
    for _lit, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in FIELDS or spec or conv:
            raise UsageError(
                f"{option} {template!r}: unknown field {{{name}}}; only {{node}} and "
                f"{{address}} are substituted (write literal braces as {{{{ and }}}})"
            )
    return template


def render(template: str, node: str, address: str | None = None) -> str:
    """Substitute ``{node}``/``{address}``, shell-quoted."""
    return template.format(node=shlex.quote(node), address=shlex.quote(address or node))


@dataclass(frozen=True)
class HookResult:
    ok: bool
    command: str
    exit_status: int | None
    output: str
    duration_s: float

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "command": self.command,
            "exit_status": self.exit_status,
            "output": self.output[-2000:],
            "duration_s": round(self.duration_s, 3),
        }


def _run(command: str, timeout: float) -> HookResult:
    started = time.monotonic()
    try:
        p = subprocess.run(  # noqa: S602 - operator-written template, values shell-quoted
            command,
            shell=True,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        text = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
        return HookResult(False, command, None, f"{text}\ntimed out after {timeout:.0f}s",
                          time.monotonic() - started)
    output = (p.stdout + p.stderr).strip()
    return HookResult(p.returncode == 0, command, p.returncode, output,
                      time.monotonic() - started)


@dataclass(frozen=True)
class DrainHooks:
    drain_cmd: str | None = None
    resume_cmd: str | None = None
    wait_cmd: str | None = None
    wait_timeout_s: float = 600.0
    poll_interval_s: float = 5.0
    command_timeout_s: float = 120.0

    @classmethod
    def from_options(
        cls,
        drain_cmd: str | None,
        resume_cmd: str | None,
        wait_cmd: str | None,
        wait_timeout_s: float = 600.0,
        poll_interval_s: float = 5.0,
    ) -> DrainHooks:
        if wait_cmd and not drain_cmd:
            raise UsageError("--drain-wait-cmd needs --drain-cmd")
        if wait_timeout_s <= 0 or poll_interval_s <= 0:
            raise UsageError("--drain-timeout and --drain-poll must be above 0")
        return cls(
            drain_cmd=check_template(drain_cmd, "--drain-cmd") if drain_cmd else None,
            resume_cmd=check_template(resume_cmd, "--resume-cmd") if resume_cmd else None,
            wait_cmd=check_template(wait_cmd, "--drain-wait-cmd") if wait_cmd else None,
            wait_timeout_s=wait_timeout_s,
            poll_interval_s=poll_interval_s,
        )

    @property
    def enabled(self) -> bool:
        return bool(self.drain_cmd or self.resume_cmd)

    def drain(
        self,
        node: str,
        address: str | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> HookResult:
        """Drain ``node`` and wait until drained; ``ok`` False means: skip the node."""
        if not self.drain_cmd:
            return HookResult(True, "", 0, "", 0.0)
        res = _run(render(self.drain_cmd, node, address), self.command_timeout_s)
        if not res.ok or not self.wait_cmd:
            return res
        command = render(self.wait_cmd, node, address)
        deadline = clock() + self.wait_timeout_s
        started = clock()
        while True:
            left = deadline - clock()
            wait = _run(command, max(1.0, min(self.command_timeout_s, left)))
            if wait.ok:
                return HookResult(True, command, 0, wait.output, clock() - started)
            if clock() + self.poll_interval_s > deadline:
                return HookResult(
                    False, command, wait.exit_status,
                    f"not drained after {self.wait_timeout_s:.0f}s: {wait.output}",
                    clock() - started,
                )
            sleep(self.poll_interval_s)

    def resume(self, node: str, address: str | None = None) -> HookResult:
        if not self.resume_cmd:
            return HookResult(True, "", 0, "", 0.0)
        return _run(render(self.resume_cmd, node, address), self.command_timeout_s)
