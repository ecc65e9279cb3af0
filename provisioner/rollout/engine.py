"""The rollout state machine: waves, gates, failure budgets, reboots, resume.

Every node walks ``pending -> [provisioning -> [rebooting ->]] verifying -> compliant`` or ends
in ``failed``, ``skipped`` (drain failed, or verification off) or ``reboot_pending``; a node
whose playbook run ended without a final result (no ``playbook_on_stats``) is ``lost``: no
failure, the rollout stops after its wave and stays open, a resume redoes it; each step
is committed in the ledger together with its result (``record_verification(step=...)``), so a
``kill -9`` at any moment loses at most the steps in flight. The same command again finds the
unfinished run (``last_unfinished_run``), keeps every node that finished, and redoes the nodes
caught mid-step first.

The engine only talks to interfaces (:class:`Provisioner`, :class:`Verifier`, the ledger,
:class:`Observer`), so the unit tests drive it with fakes and the fleet tests with the real
ansible-runner driver and SSH verification.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout.drain import DrainHooks
from provisioner.rollout.planner import (
    DEFAULT_WAVES,
    Action,
    Budget,
    Plan,
    PlannedNode,
    Wave,
    plan_waves,
)
from provisioner.rollout.runner import HostOutcome, HostStatus

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
    def start_run(self, kind: str, fleet: str, args: Mapping[str, Any] | None = None) -> str: ...
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



def _clean_step(detail: Mapping[str, Any] | None, message: str) -> tuple[dict[str, Any], str]:
    """A step's detail and message as the ledger and the terminal get them: playbook failure
    text (a task's msg, stderr) redacted (provisioner.redact) and its control characters shown
    escaped (provisioner.sanitize), so a node's answer neither leaks a secret nor drives the
    operator's terminal."""
    from provisioner.redact import redact_mapping, redact_text
    from provisioner.sanitize import printable, printable_document

    clean = printable_document(redact_mapping(dict(detail or {})), multiline=True)
    return dict(clean), printable(redact_text(message), multiline=True)


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
    failure: str | None = None  # failed | unreachable | drain: counts against the budgets
    outcome: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
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

    def to_dict(self) -> dict[str, Any]:
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
            "nodes": [n.to_dict() for n in self.nodes.values()],
        }


class Stop(Exception):
    """Internal: a gate or budget stopped the rollout."""


class Lost(Exception):
    """Internal: nodes of a wave were lost; the rollout stops, the run stays open."""


def reboot_required(report: Mapping[str, Any]) -> bool:
    """Does a verification report say the node waits for a reboot?

    verify's facts carry it (``facts.reboot.required``, from /var/lib/gdsfleet/reboot-required),
    or its ``reboot.pending`` check; the raw file content is the last fallback.
    """
    facts = report.get("facts") or {}
    if isinstance(facts, Mapping):
        for key in ("reboot", "reboot_required"):
            if key in facts:
                val = facts[key]
                if isinstance(val, Mapping):
                    return bool(val.get("required", False))
                return bool(val)
    for check in report.get("checks") or []:
        if isinstance(check, Mapping) and check.get("id") == "reboot.pending":
            return check.get("status") in ("fail", "warn")
    raw = report.get("raw") or {}
    item = raw.get("reboot_required") if isinstance(raw, Mapping) else None
    if isinstance(item, Mapping):
        return item.get("rc") == 0 and bool(str(item.get("out", "")).strip())
    return False


def reboot_decision(
    *, required: bool, allow_reboot: bool, already_rebooted: bool
) -> str:
    """``none`` | ``reboot`` | ``pending`` | ``failed`` for a node after provisioning.

    A node needing a reboot is rebooted only with --allow-reboot, and only once per attempt:
    a reboot that did not clear the flag is a failure, never a loop.
    """
    if not required:
        return "none"
    if already_rebooted:
        return "failed"
    return "reboot" if allow_reboot else "pending"


class Engine:
    def __init__(
        self,
        *,
        ledger: LedgerLike,
        fleet: str,
        targets: Sequence[str],
        provisioner: Provisioner,
        verifier: Verifier | None,
        options: RolloutOptions,
        observer: Observer | None = None,
        drain: DrainHooks | None = None,
        addresses: Mapping[str, str] | None = None,
        confirm: Callable[[Wave], bool] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not targets:
            raise UsageError("no nodes to roll out to")
        if options.verify and verifier is None:
            raise UsageError("verification is on but no verifier was given")
        self.ledger = ledger
        self.fleet = fleet
        self.targets = list(dict.fromkeys(targets))
        self.provisioner = provisioner
        self.verifier = verifier
        self.opts = options
        self.obs: Observer = observer or NullObserver()
        self.drain = drain or DrainHooks()
        self.addresses = dict(addresses or {})
        self.confirm = confirm
        self.sleep = sleep
        self._lock = threading.Lock()
        self.nodes: dict[str, NodeResult] = {}
        self.run_id = ""
        self._total_failures = 0
        self._changed_since_gate = True
        self._caught: dict[str, str] = {}  # resume: node -> the step it was caught in
        from provisioner.rollout.state import ResultWriter

        self._writer = ResultWriter(ledger, "")

    # ------------------------------------------------------------------ planning / resume
    def _latest(self) -> dict[str, dict[str, Any]]:
        from provisioner.rollout.state import latest_states

        wanted = set(self.targets)
        return {n: r for n, r in latest_states(self.ledger).items() if n in wanted}

    def prepare(self) -> tuple[Plan, bool, dict[str, dict[str, Any]]]:
        """Find an unfinished run to resume, or plan and start a new one."""
        run_id = (
            self.ledger.last_unfinished_run("rollout", self.fleet) if self.opts.resume else None
        )
        if run_id:
            run = self.ledger.get_run(run_id) or {}
            recorded = (run.get("args") or {}).get("plan") or {}
            waves_rec = recorded.get("waves") or []
            names = [n["name"] for w in waves_rec for n in w.get("nodes", [])]
            if sorted(names) != sorted(self.targets):
                raise UsageError(
                    f"an unfinished rollout ({run_id}) of this fleet covers other nodes "
                    f"({len(names)} planned, {len(self.targets)} selected now); run the same "
                    f"command (same -i/--limit) to resume it, or pass --restart to abandon it"
                )
            steps = self.ledger.node_steps(run_id)
            mid = {n for n, s in steps.items() if s.get("step") in MID_STEPS}
            waves: list[Wave] = []
            for w in waves_rec:
                planned = [
                    PlannedNode(n["name"], Action(n["action"]), n.get("reason", ""))
                    for n in w.get("nodes", [])
                ]
                first = [
                    PlannedNode(p.name, Action.RESUME,
                                f"caught mid-step ({steps[p.name]['step']}); redone first")
                    for p in planned
                    if p.name in mid
                ]
                rest = [p for p in planned if p.name not in mid]
                waves.append(Wave(int(w["index"]), tuple(first + rest)))
            plan = Plan(spec=str(recorded.get("spec", self.opts.waves)), waves=tuple(waves))
            self._caught = {
                n: str((steps[n].get("detail") or {}).get("during") or steps[n]["step"])
                if steps[n].get("step") in (INTERRUPTED, LOST) else str(steps[n]["step"])
                for n in mid
            }
            self.run_id = run_id
            return plan, True, steps
        plan = plan_waves(
            self.targets, self.opts.waves, latest=self._latest(), force=self.opts.force
        )
        args = dict(self.opts.args)
        args["plan"] = plan.to_dict()
        self.run_id = self.ledger.start_run("rollout", self.fleet, args)
        from provisioner.rollout.state import seed_pending

        seed_pending(self.ledger, self.run_id, plan)
        return plan, False, {}

    # ------------------------------------------------------------------ helpers
    def _step(self, name: str, step: str, wave: int, detail: Mapping[str, Any] | None = None,
              message: str = "", failure: str | None = None) -> None:
        detail, message = _clean_step(detail, message)
        with self._lock:
            self._writer.flush()  # results queued for this node land before its next step
            self.ledger.set_step(self.run_id, name, step, wave=wave,
                                 detail={**dict(detail or {}), "failure": failure})
            node = self.nodes[name]
            node.step = step
            node.failure = failure
            if message:
                node.reason = message
        self.obs.node(name, step, message)

    def _record(self, report: Mapping[str, Any], step: str | None, wave: int,
                detail: Mapping[str, Any] | None = None, message: str = "",
                failure: str | None = None) -> None:
        name = str(report.get("name"))
        detail, message = _clean_step(detail, message)
        with self._lock:
            # group commit: the verification and the step it decides go in one transaction
            self._writer.add(report, step, wave, {**dict(detail or {}), "failure": failure})
            node = self.nodes.get(name)
            if node is not None and step is not None:
                node.step = step
                node.failure = failure
                node.verification = _verification_summary(report)
                if message:
                    node.reason = message
        if step is not None:
            self.obs.node(name, step, message)

    def _verify(self, hosts: Sequence[str], *, cheap: bool,
                on_report: Callable[[dict[str, Any]], None]) -> dict[str, dict[str, Any]]:
        assert self.verifier is not None
        if not hosts:
            return {}
        try:
            reports = self.verifier.verify(hosts, cheap=cheap, on_report=on_report)
            for h in hosts:  # a verifier that lost a node: unreachable, never silently compliant
                if h not in reports:
                    rep = _unreachable_report(h, "no verification result")
                    on_report(rep)
                    reports[h] = rep
        finally:
            self._writer.flush()
        return reports

    # ------------------------------------------------------------------ the run
    def run(self) -> RolloutResult:
        return self.run_with(None)

    def run_with(self, on_run_id: Callable[[str], None] | None) -> RolloutResult:
        """Run; ``on_run_id`` learns the run id (new or resumed) before any node changes."""
        started = time.monotonic()
        plan, resumed, steps = self.prepare()
        from provisioner.rollout.state import ResultWriter

        self._writer = ResultWriter(self.ledger, self.run_id)
        # a resumed run cannot know what the killed attempt changed: gate it
        self._changed_since_gate = resumed
        if on_run_id is not None:
            on_run_id(self.run_id)
        for w in plan.waves:
            for p in w.nodes:
                rec = steps.get(p.name, {})
                step = rec.get("step", PENDING)
                nr = NodeResult(p.name, w.index, p.action.value)
                if step in DONE_STEPS:
                    nr.step = step
                    nr.carried_over = True
                    nr.reason = str((rec.get("detail") or {}).get("reason", ""))
                    nr.failure = (rec.get("detail") or {}).get("failure")
                self.nodes[p.name] = nr
        done = {n: r.step for n, r in self.nodes.items() if r.carried_over}
        self.obs.plan(plan, run_id=self.run_id, resumed=resumed, done=done)
        self._total_failures = sum(1 for r in self.nodes.values() if r.failure)
        summaries: list[WaveSummary] = []
        status, code, message = "succeeded", Exit.OK, ""
        try:
            for wave in plan.waves:
                todo = [p for p in wave.nodes if not self.nodes[p.name].carried_over]
                if not todo:
                    continue
                if wave.index > 0 or resumed:
                    self._before_wave(wave, first_run_wave=not summaries)
                summary = self._run_wave(wave, todo)
                summaries.append(summary)
                self.obs.wave_end(wave, summary)
                if summary.lost:
                    raise Lost(summary.stopped)
                if summary.stopped:
                    raise Stop(summary.stopped)
        except Stop as stop:
            status, code, message = "aborted", Exit.ABORTED, str(stop)
        except Lost as lost:
            # like an interrupt: the run stays open (no finish_run), the same command resumes
            # and redoes the lost nodes first; no failure was counted for them
            self._writer.flush()
            message = f"{lost}; no failure counted; run the same command again to redo them"
            self.obs.message(message)
            return self._result("lost", Exit.ABORTED, message, plan, summaries, resumed,
                                started)
        except KeyboardInterrupt as exc:
            # the ledger holds every finished step; the nodes in flight become 'interrupted'
            # (no failure, no budget spent); the run stays unfinished -> resumable
            return self._interrupted(exc, plan, summaries, resumed, started)
        self._writer.flush()
        if status == "succeeded":
            good = (COMPLIANT,) if self.opts.verify else (COMPLIANT, SKIPPED)
            bad = [n.step for n in self.nodes.values() if n.step not in good or n.failure]
            if bad:
                status = "not_compliant"
                unreachable = any(n.failure == "unreachable" for n in self.nodes.values())
                code = Exit.UNREACHABLE if unreachable else Exit.NOT_COMPLIANT
                counts: dict[str, int] = {}
                for s in bad:
                    counts[s] = counts.get(s, 0) + 1
                message = "not every node is compliant: " + ", ".join(
                    f"{v} {k}" for k, v in sorted(counts.items())
                )
            else:
                message = (
                    f"all {len(self.nodes)} node(s) compliant"
                    if self.opts.verify
                    else f"all {len(self.nodes)} node(s) provisioned (verification off)"
                )
        self.ledger.finish_run(self.run_id, status)
        return self._result(status, code, message, plan, summaries, resumed, started)

    def _interrupted(self, exc: KeyboardInterrupt, plan: Plan, summaries: list[WaveSummary],
                     resumed: bool, started: float) -> RolloutResult:
        signum = int(getattr(exc, "signum", 2))
        code = Exit.TERMINATED if signum == 15 else Exit.INTERRUPTED
        name = "SIGTERM" if signum == 15 else "SIGINT"
        self._writer.flush()
        caught = sorted(n.name for n in self.nodes.values() if n.step in MID_STEPS)
        for node in caught:
            during = self.nodes[node].step
            self._step(node, INTERRUPTED, self.nodes[node].wave,
                       {"during": during, "signal": name},
                       f"interrupted by {name} while {during}; redone first on resume")
        self._writer.flush()
        message = (
            f"interrupted by {name}"
            + (f"; {len(caught)} node(s) in flight marked interrupted: {', '.join(caught)}"
               if caught else "")
            + "; no failure counted; run the same command again to resume"
        )
        self.obs.message(message)
        return self._result("interrupted", code, message, plan, summaries, resumed, started)

    def _result(self, status: str, code: Exit, message: str, plan: Plan,
                summaries: list[WaveSummary], resumed: bool, started: float) -> RolloutResult:
        return RolloutResult(
            run_id=self.run_id,
            status=status,
            exit_code=code,
            plan=plan,
            nodes=self.nodes,
            waves=summaries,
            message=message,
            resumed=resumed,
            duration_s=time.monotonic() - started,
        )

    # ------------------------------------------------------------------ gates
    def _before_wave(self, wave: Wave, *, first_run_wave: bool) -> None:
        if not first_run_wave:
            if self.opts.pause_between_waves > 0:
                self.obs.message(
                    f"pausing {self.opts.pause_between_waves:.0f}s before {wave.label} "
                    f"(Ctrl-C stops; the same command resumes)"
                )
                self.sleep(self.opts.pause_between_waves)
            if self.confirm is not None and not self.confirm(wave):
                self.obs.gate("approval", False, f"{wave.label} not approved")
                raise Stop(f"{wave.label} was not approved; nothing more changed")
        self._health_gate(wave)

    def _health_gate(self, wave: Wave) -> None:
        if not (self.opts.verify and self.opts.health_gate):
            return
        rolled = [n.name for n in self.nodes.values() if n.step == COMPLIANT]
        if not rolled:
            return
        if not self._changed_since_gate:
            self.obs.gate("health", True, f"before {wave.label}: skipped, nothing changed since "
                          f"the {len(rolled)} rolled node(s) were verified")
            return
        healthy: list[str] = []
        unhealthy: list[str] = []

        def on_report(rep: dict[str, Any]) -> None:
            ok = bool(rep.get("compliant")) and not reboot_required(rep)
            (healthy if ok else unhealthy).append(str(rep.get("name")))
            self._record(rep, None, self.nodes[str(rep.get("name"))].wave,
                         detail={"gate": "health", "before_wave": wave.index})

        self._verify(rolled, cheap=True, on_report=on_report)
        frac = len(healthy) / len(rolled)
        msg = (
            f"before {wave.label}: {len(healthy)}/{len(rolled)} already-rolled node(s) still "
            f"compliant ({frac:.0%}, threshold {self.opts.health_threshold:.0%})"
        )
        if unhealthy:
            msg += "; not compliant now: " + ", ".join(sorted(unhealthy))
        ok = frac >= self.opts.health_threshold
        self._changed_since_gate = False
        self.obs.gate("health", ok, msg)
        if not ok:
            raise Stop(f"health gate failed {msg}")

    # ------------------------------------------------------------------ one wave
    def _run_wave(self, wave: Wave, todo: Sequence[PlannedNode]) -> WaveSummary:
        t0 = time.monotonic()
        allowed = 0 if wave.canary else self.opts.max_failures.allowed(len(wave))
        summary = WaveSummary(wave.index, wave.label, len(wave), allowed_failures=allowed)
        self.obs.wave_start(wave, [p.name for p in todo])
        resumed = [p for p in todo if p.action is Action.RESUME]
        rest = [p for p in todo if p.action is not Action.RESUME]
        for batch in (resumed, rest):  # nodes caught mid-step are redone first
            if batch:
                self._run_batch(wave, batch)
            if any(self.nodes[p.name].step == LOST for p in batch):
                break  # a playbook run was cut: nothing more changes in this attempt
        for p in wave.nodes:
            n = self.nodes[p.name]
            if n.step == LOST:
                summary.lost += 1
            elif n.failure == "unreachable":
                summary.unreachable += 1
            elif n.failure == "drain":
                summary.skipped += 1
            elif n.failure:
                summary.failed += 1
            elif n.step == COMPLIANT:
                summary.compliant += 1
            elif n.step == REBOOT_PENDING:
                summary.reboot_pending += 1
        self._total_failures += sum(1 for p in todo if self.nodes[p.name].failure)
        summary.duration_s = time.monotonic() - t0
        failing = sorted(
            f"{n.name} ({n.failure}: {n.reason})"
            for n in (self.nodes[p.name] for p in wave.nodes)
            if n.failure
        )
        if summary.lost:
            lost = sorted(p.name for p in wave.nodes if self.nodes[p.name].step == LOST)
            summary.passed = False
            summary.stopped = (
                f"{wave.label}: {len(lost)} node(s) lost (the playbook run ended without a final "
                f"result: killed, crashed, timed out or its stream cut): {', '.join(lost)}"
            )
        elif wave.canary and summary.failures:
            summary.passed = False
            summary.stopped = (
                f"the canary failed; nothing else was touched: {'; '.join(failing)}"
            )
        elif wave.canary and summary.reboot_pending:
            # the canary must prove compliance before anything else changes
            summary.passed = False
            summary.stopped = (
                "the canary waits for a reboot, so it cannot prove compliance; nothing else was "
                "touched: pass --allow-reboot to let the rollout reboot it (or reboot it "
                "yourself and run the same command again)"
            )
        elif summary.failures > allowed:
            summary.passed = False
            summary.stopped = (
                f"{wave.label} is over its failure budget ({summary.failures} failed, "
                f"{allowed} allowed by --max-failures {self.opts.max_failures}); the remaining "
                f"waves were not touched: {'; '.join(failing)}"
            )
        elif self.opts.max_total_failures is not None and self.opts.max_total_failures.exceeded(
            self._total_failures, len(self.targets)
        ):
            summary.passed = False
            summary.stopped = (
                f"{self._total_failures} failure(s) in total exceed --max-total-failures "
                f"{self.opts.max_total_failures} "
                f"({self.opts.max_total_failures.allowed(len(self.targets))} allowed of "
                f"{len(self.targets)}): {'; '.join(failing)}"
            )
        return summary

    def _run_batch(self, wave: Wave, batch: Sequence[PlannedNode]) -> None:
        w = wave.index
        to_provision: list[str] = []
        check_first: list[str] = []
        for p in batch:
            recorded = p.action
            if recorded is Action.RESUME:
                # caught while verifying: its change is done, verify it again (provisioned
                # only if that fails); caught provisioning or rebooting: redo the change
                recorded = (
                    Action.VERIFY if self._caught.get(p.name) == VERIFYING and self.opts.verify
                    else Action.PROVISION
                )
            if recorded is Action.VERIFY and (not self.opts.force or p.action is Action.RESUME):
                check_first.append(p.name)
            else:
                to_provision.append(p.name)

        # reconcile: nodes the ledger says are compliant are verified, not re-provisioned
        if check_first:
            if self.opts.verify:
                for name in check_first:
                    self._step(name, VERIFYING, w, {"action": "verify-only"})

                def on_check(rep: dict[str, Any]) -> None:
                    name = str(rep.get("name"))
                    if rep.get("compliant") and not reboot_required(rep):
                        self._record(rep, COMPLIANT, w,
                                     {"action": "verify-only", "reason": "already compliant"},
                                     "already compliant; not re-provisioned")
                    else:
                        self._record(rep, PROVISIONING, w,
                                     {"action": "provision",
                                      "reason": "verification found it not compliant"},
                                     "not compliant any more; provisioning")
                        with self._lock:
                            to_provision.append(name)

                self._verify(check_first, cheap=False, on_report=on_check)
            else:
                for name in check_first:
                    self._step(name, SKIPPED, w,
                               {"reason": "compliant in the ledger; verification off"},
                               "compliant in the ledger; verification off")

        if not to_provision:
            return
        # drain hooks: a node that does not drain is skipped, never provisioned
        ready: list[str] = []
        for name in to_provision:
            if self.drain.drain_cmd:
                res = self.drain.drain(name, self.addresses.get(name))
                if not res.ok:
                    self._step(name, SKIPPED, w,
                               {"reason": "drain failed", "drain": res.to_dict()},
                               f"drain failed: {res.output or res.exit_status}", "drain")
                    continue
            ready.append(name)
        if not ready:
            return
        self._changed_since_gate = True
        for name in ready:
            self._step(name, PROVISIONING, w, {"action": "provision"})
        t0 = time.monotonic()

        def on_event(host: str, kind: str, task: str) -> None:
            if kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
                self.obs.node(host, PROVISIONING, task)

        outcomes = self.provisioner.provision(ready, wave=w, on_host_event=on_event)
        provisioned: list[str] = []
        for name in ready:
            out = outcomes.get(name) or HostOutcome(name, HostStatus.NOT_RUN,
                                                   message="no result from the playbook run")
            node = self.nodes[name]
            node.outcome = out.to_dict()
            node.provisioned = out.succeeded
            node.duration_s = time.monotonic() - t0
            if out.succeeded:
                provisioned.append(name)
                continue
            if out.status is HostStatus.LOST:
                self._step(name, LOST, w, {"during": PROVISIONING, "reason": "lost",
                                           "outcome": out.to_dict()},
                           f"lost: {out.message or 'no final result'}; redone on resume")
                continue
            where = f"task {out.failed_task!r}: " if out.failed_task else ""
            self._step(name, FAILED, w, {"reason": out.status.value, "outcome": out.to_dict()},
                       f"{out.status.value}: {where}{out.message or ''}".strip(),
                       "unreachable" if out.status is HostStatus.UNREACHABLE else "failed")
        if not provisioned:
            return
        if not self.opts.verify:
            for name in provisioned:
                self._step(name, SKIPPED, w,
                           {"reason": "provisioned; verification off",
                            "outcome": self.nodes[name].outcome},
                           "provisioned; verification off (--no-verify)")
                self._resume_hook(name)
            return
        self._verify_after_change(provisioned, w, rebooted=False)

    def _verify_after_change(self, hosts: Sequence[str], w: int, *, rebooted: bool) -> None:
        for name in hosts:
            self._step(name, VERIFYING, w, {"after": "reboot" if rebooted else "provision"})
        to_reboot: list[str] = []

        def on_report(rep: dict[str, Any]) -> None:
            name = str(rep.get("name"))
            node = self.nodes[name]
            decision = reboot_decision(
                required=reboot_required(rep),
                allow_reboot=self.opts.allow_reboot,
                already_rebooted=rebooted,
            )
            detail: dict[str, Any] = {"outcome": node.outcome, "rebooted": rebooted}
            if decision == "reboot":
                self._record(rep, REBOOTING, w, {**detail, "reason": "reboot required"},
                             "reboot required; rebooting")
                with self._lock:
                    to_reboot.append(name)
            elif decision == "pending":
                self._record(rep, REBOOT_PENDING, w,
                             {**detail, "reason": "reboot pending (--allow-reboot not given)"},
                             "reboot pending: pass --allow-reboot or reboot it yourself")
            elif decision == "failed":
                self._record(rep, FAILED, w,
                             {**detail, "reason": "still requires a reboot after rebooting"},
                             "still requires a reboot after rebooting", "failed")
            elif rep.get("compliant"):
                self._record(rep, COMPLIANT, w, {**detail, "reason": "verified"}, "verified")
                self._resume_hook(name)
            else:
                why = rep.get("error") or ", ".join(
                    str(c.get("id")) for c in rep.get("checks") or []
                    if c.get("status") == "fail"
                ) or "not compliant"
                reason = "unreachable" if not rep.get("reachable", True) else "not compliant"
                self._record(rep, FAILED, w, {**detail, "reason": reason},
                             f"verification: {reason}: {why}",
                             "unreachable" if reason == "unreachable" else "failed")

        self._verify(hosts, cheap=False, on_report=on_report)
        if to_reboot:
            outcomes = self.provisioner.reboot(to_reboot, wave=w)
            back: list[str] = []
            for name in to_reboot:
                out = outcomes.get(name) or HostOutcome(name, HostStatus.NOT_RUN,
                                                       message="no result from the reboot")
                self.nodes[name].rebooted = out.succeeded
                if out.succeeded:
                    back.append(name)
                elif out.status is HostStatus.LOST:
                    self._step(name, LOST, w, {"during": REBOOTING, "reason": "lost",
                                               "outcome": out.to_dict()},
                               f"lost while rebooting: {out.message or 'no final result'}; "
                               "redone on resume")
                else:
                    self._step(name, FAILED, w, {"reason": "reboot failed",
                                                 "outcome": out.to_dict()},
                               f"reboot failed: {out.message or out.status.value}",
                               "unreachable" if out.status is HostStatus.UNREACHABLE
                               else "failed")
            if back:
                self._verify_after_change(back, w, rebooted=True)

    def _resume_hook(self, name: str) -> None:
        if not self.drain.resume_cmd:
            return
        res = self.drain.resume(name, self.addresses.get(name))
        if not res.ok:
            self.obs.message(f"{name}: --resume-cmd failed ({res.exit_status}): {res.output}")


def _verification_summary(rep: Mapping[str, Any]) -> dict[str, Any]:
    io = rep.get("io_test") or {}
    return {
        "reachable": bool(rep.get("reachable", True)),
        "compliant": bool(rep.get("compliant")),
        "route": rep.get("route"),
        "path_taken": io.get("path_taken") if isinstance(io, Mapping) else None,
        "failing": sorted(
            str(c.get("id")) for c in rep.get("checks") or [] if c.get("status") == "fail"
        ),
        "error": rep.get("error"),
    }


def _unreachable_report(name: str, error: str) -> dict[str, Any]:
    return {
        "name": name,
        "reachable": False,
        "compliant": False,
        "route": "unknown",
        "checks": [],
        "io_test": {"path_taken": "skipped"},
        "facts": {},
        "error": error,
    }
