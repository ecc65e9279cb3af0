"""What the rollout engine talks to and what it gives back: the step names a node walks
through, the interfaces it drives (:class:`Provisioner`, :class:`Verifier`, the ledger,
:class:`Observer`), its options and its per-node, per-wave and per-run results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from provisioner.exitcodes import Exit
from provisioner.rollout.planner import (
    DEFAULT_WAVES,
    Budget,
    Plan,
    Wave,
)
from provisioner.rollout.runner import HostOutcome

PENDING = "pending"
PROVISIONING = "provisioning"
REBOOTING = "rebooting"
REBOOT_PENDING = "reboot_pending"
VERIFYING = "verifying"
COMPLIANT = "compliant"
FAILED = "failed"
SKIPPED = "skipped"
# stopped by SIGINT/SIGTERM while in flight: no failure (no budget spent), redone on resume
INTERRUPTED = "interrupted"
# its playbook run (provisioning or reboot) ended without a final result: the stream stopped
# before playbook_on_stats (killed, OOM, crash, timeout). No failure (no budget spent); the
# rollout stops after the wave, the run stays open and a resume redoes the node first
LOST = "lost"

DONE_STEPS = frozenset({COMPLIANT, FAILED, SKIPPED, REBOOT_PENDING})
MID_STEPS = frozenset({PROVISIONING, REBOOTING, VERIFYING, INTERRUPTED, LOST})


class Provisioner(Protocol):
    """Changes nodes: one playbook run per call (a wave, or the resumed part of one)."""

    def provision(
        self, hosts: Sequence[str], *, wave: int, on_host_event: Callable[[str, str, str], None]
    ) -> Mapping[str, HostOutcome]: ...

    def reboot(self, hosts: Sequence[str], *, wave: int) -> Mapping[str, HostOutcome]: ...


class Verifier(Protocol):
    """Verifies nodes; ``on_report`` gets each NodeReport dict as it finishes."""

    def verify(
        self,
        hosts: Sequence[str],
        *,
        cheap: bool,
        on_report: Callable[[dict[str, Any]], None],
    ) -> dict[str, dict[str, Any]]: ...


class LedgerLike(Protocol):
    def start_run(self, kind: str, fleet: str, args: Mapping[str, Any] | None = None, *,
                  run_id: str | None = None) -> str: ...
    def finish_run(self, run_id: str, status: str) -> None: ...
    def get_run(self, run_id: str) -> dict[str, Any] | None: ...
    def last_unfinished_run(self, kind: str, fleet: str) -> str | None: ...
    def record_verification(
        self,
        run_id: str,
        report: Mapping[str, Any],
        *,
        step: str | None = None,
        wave: int | None = None,
        raw: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int: ...
    def set_step(
        self,
        run_id: str,
        node: str,
        step: str,
        *,
        wave: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None: ...
    def node_steps(self, run_id: str) -> dict[str, dict[str, Any]]: ...
    def latest(self) -> list[dict[str, Any]]: ...



class Observer(Protocol):
    """Progress display hooks (see provisioner.rollout.progress)."""

    def plan(self, plan: Plan, *, run_id: str, resumed: bool, done: Mapping[str, str]) -> None: ...
    def wave_start(self, wave: Wave, todo: Sequence[str]) -> None: ...
    def node(self, name: str, step: str, message: str = "") -> None: ...
    def gate(self, name: str, ok: bool, message: str) -> None: ...
    def wave_end(self, wave: Wave, summary: WaveSummary) -> None: ...
    def message(self, text: str) -> None: ...


class NullObserver:
    def plan(self, plan: Plan, *, run_id: str, resumed: bool, done: Mapping[str, str]) -> None:
        pass

    def wave_start(self, wave: Wave, todo: Sequence[str]) -> None:
        pass

    def node(self, name: str, step: str, message: str = "") -> None:
        pass

    def gate(self, name: str, ok: bool, message: str) -> None:
        pass

    def wave_end(self, wave: Wave, summary: WaveSummary) -> None:
        pass

    def message(self, text: str) -> None:
        pass


@dataclass(frozen=True)
class RolloutOptions:
    waves: str = DEFAULT_WAVES
    max_parallel: int = 10
    max_failures: Budget = field(default_factory=lambda: Budget(0, False))
    max_total_failures: Budget | None = None
    health_threshold: float = 1.0
    health_gate: bool = True
    verify: bool = True
    force: bool = False
    allow_reboot: bool = False
    pause_between_waves: float = 0.0
    resume: bool = True
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class NodeResult:
    name: str
    wave: int
    action: str
    step: str = PENDING
    reason: str = ""
    provisioned: bool = False
    rebooted: bool = False
    carried_over: bool = False  # finished in an earlier attempt of this run (resume)
    # failed | unreachable | drain | not_started (the playbook did not start): counts
    # against the budgets
    failure: str | None = None
    outcome: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    duration_s: float = 0.0

    def to_dict(self, *, verification: bool = True) -> dict[str, Any]:
        out = {
            "name": self.name,
            "wave": self.wave,
            "action": self.action,
            "step": self.step,
            "reason": self.reason,
            "provisioned": self.provisioned,
            "rebooted": self.rebooted,
            "carried_over": self.carried_over,
            "failure": self.failure,
            "outcome": self.outcome,
            "verification": self.verification,
            "duration_s": round(self.duration_s, 3),
        }
        if not verification:  # the ledger holds the verifications as rows of their own
            del out["verification"]
        return out


@dataclass
class WaveSummary:
    index: int
    label: str
    size: int
    compliant: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    reboot_pending: int = 0
    lost: int = 0  # no final result from the playbook: not a failure, redone on resume
    # the playbook did not start (Ansible's error): counted in failed too; the rollout stops
    not_started: int = 0
    allowed_failures: int = 0
    passed: bool = True
    duration_s: float = 0.0
    stopped: str | None = None

    @property
    def failures(self) -> int:
        return self.failed + self.unreachable + self.skipped

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "label": self.label,
            "size": self.size,
            "compliant": self.compliant,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "skipped": self.skipped,
            "reboot_pending": self.reboot_pending,
            "lost": self.lost,
            "not_started": self.not_started,
            "failures": self.failures,
            "allowed_failures": self.allowed_failures,
            "passed": self.passed,
            "duration_s": round(self.duration_s, 3),
            "stopped": self.stopped,
        }


@dataclass
class RolloutResult:
    run_id: str
    status: str  # succeeded | not_compliant | aborted | interrupted | lost
    exit_code: Exit
    plan: Plan
    nodes: dict[str, NodeResult]
    waves: list[WaveSummary]
    message: str = ""
    resumed: bool = False
    duration_s: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes.values():
            out[n.step] = out.get(n.step, 0) + 1
        return out

    def to_dict(self, *, verifications: bool = True) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "exit_code": int(self.exit_code),
            "message": self.message,
            "resumed": self.resumed,
            "duration_s": round(self.duration_s, 3),
            "counts": self.counts(),
            "plan": self.plan.to_dict(),
            "waves": [w.to_dict() for w in self.waves],
            "nodes": [n.to_dict(verification=verifications) for n in self.nodes.values()],
        }


class Stop(Exception):
    """Internal: a gate or budget stopped the rollout; ``code`` is its exit status (3, or 2
    when only unreachable nodes stopped it)."""

    def __init__(self, message: str, code: Exit = Exit.ABORTED) -> None:
        super().__init__(message)
        self.code = code


class Lost(Exception):
    """Internal: nodes of a wave were lost; the rollout stops, the run stays open."""


