"""The rollout state machine: waves, gates, failure budgets, reboots, resume.

Every node walks ``pending -> [provisioning -> [rebooting ->]] verifying -> compliant`` or ends
in ``failed``, ``skipped`` (drain failed, or verification off) or ``reboot_pending``; a node
whose playbook run ended without a final result (no ``playbook_on_stats``) is ``lost``: no
failure, the rollout stops after its wave and stays open, a resume redoes it; each step
is committed in the ledger together with its result (``record_verification(step=...)``), so a
``kill -9`` at any moment loses at most the steps in flight. The same command again finds the
unfinished run (``last_unfinished_run``), keeps every node that finished, and redoes the nodes
caught mid-step first.

This module holds the waves, gates and failure budgets; the per-node step machine is
:mod:`provisioner.rollout.steps`, the interfaces and result records
:mod:`provisioner.rollout.interfaces` (their names stay importable from here). The engine
only talks to interfaces (:class:`Provisioner`, :class:`Verifier`, the ledger,
:class:`Observer`), so the unit tests drive it with fakes and the fleet tests with the real
ansible-runner driver and SSH verification.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout.drain import DrainHooks
from provisioner.rollout.interfaces import (
    COMPLIANT,
    DONE_STEPS,
    FAILED,
    INTERRUPTED,
    LOST,
    MID_STEPS,
    PENDING,
    PROVISIONING,
    REBOOT_PENDING,
    REBOOTING,
    SKIPPED,
    VERIFYING,
    LedgerLike,
    Lost,
    NodeResult,
    NullObserver,
    Observer,
    Provisioner,
    RolloutOptions,
    RolloutResult,
    Stop,
    Verifier,
    WaveSummary,
)
from provisioner.rollout.planner import (
    Action,
    Plan,
    PlannedNode,
    Wave,
    plan_waves,
)
from provisioner.rollout.steps import (
    NOT_STARTED_FAILURE,
    NodeSteps,
    reboot_decision,
    reboot_required,
)

__all__ = [
    "COMPLIANT",
    "DONE_STEPS",
    "Engine",
    "FAILED",
    "INTERRUPTED",
    "LOST",
    "LedgerLike",
    "Lost",
    "MID_STEPS",
    "NodeResult",
    "NullObserver",
    "Observer",
    "PENDING",
    "PROVISIONING",
    "Provisioner",
    "REBOOTING",
    "REBOOT_PENDING",
    "RolloutOptions",
    "RolloutResult",
    "SKIPPED",
    "Stop",
    "VERIFYING",
    "Verifier",
    "WaveSummary",
    "reboot_decision",
    "reboot_required",
]


def _brief(text: str, width: int = 160) -> str:
    """A reason cut at a word for a line that names several nodes."""
    import textwrap

    return textwrap.shorten(text, width, placeholder=" ...") if text.strip() else text


class Engine(NodeSteps):
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
        new_run_id: str | None = None,
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
        self._new_run_id = new_run_id  # the id a new (not resumed) run gets
        self._total_failures = 0
        self.playbook_began = False  # a provisioning playbook of this attempt began
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
                waves.append(Wave(int(w["index"]), tuple(first + rest),
                                  whole=w.get("whole") is True))
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
        self.run_id = self.ledger.start_run("rollout", self.fleet, args,
                                            run_id=self._new_run_id)
        from provisioner.rollout.state import seed_pending

        seed_pending(self.ledger, self.run_id, plan)
        return plan, False, {}

    # ------------------------------------------------------------------ the run
    def run(self) -> RolloutResult:
        return self.run_with(None)

    def run_with(self, on_run_id: Callable[[str], None] | None) -> RolloutResult:
        """Run; ``on_run_id`` learns the run id (new or resumed) before any node changes.
        Each wave's playbook run hands its outcomes over at its closing stats; the rest of
        the last one (ansible-playbook's exit) overlaps the run's end in the ledger, and
        none is left when this returns."""
        try:
            return self._run_with(on_run_id)
        finally:
            settle = getattr(self.provisioner, "settle", None)
            if settle is not None:
                settle()

    def _run_with(self, on_run_id: Callable[[str], None] | None) -> RolloutResult:
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
            for pos, wave in enumerate(plan.waves):
                todo = [p for p in wave.nodes if not self.nodes[p.name].carried_over]
                if not todo:
                    continue
                if wave.index > 0 or resumed:
                    self._before_wave(wave, first_run_wave=not summaries)
                self._prestart_next(plan.waves[pos + 1:])
                summary = self._run_wave(wave, todo)
                summaries.append(summary)
                self.obs.wave_end(wave, summary)
                if summary.lost:
                    raise Lost(summary.stopped)
                if summary.stopped:
                    # stopped only by nodes it could not reach: exit 2 names the cause (as
                    # verify's does), 3 stays for a failure, a gate or a "no" (docs/cli.md);
                    # 64 when the playbook could not start and none began before: nothing ran
                    only_unreachable = 0 < summary.unreachable == summary.failures
                    code = (Exit.USAGE if summary.not_started and not self.playbook_began
                            else Exit.UNREACHABLE if only_unreachable else Exit.ABORTED)
                    raise Stop(summary.stopped, code)
        except Stop as stop:
            status, code, message = "aborted", stop.code, str(stop.args[0])
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
        finally:
            # a next wave's run started ahead that the rollout did not reach: it ends before
            # its first play, having touched no host
            drop = getattr(self.provisioner, "drop_prestarted", None)
            if drop is not None:
                drop()
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
        result = RolloutResult(
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
        # what this attempt ended with, beside the steps and verifications: `report RUN`
        # writes the document `rollout --json` wrote from it (one writer, issue 47)
        record = getattr(self.ledger, "record_result", None)
        if record is not None:
            from provisioner.errors import LedgerError

            try:
                record(self.run_id, result.to_dict(verifications=False))
            except LedgerError as exc:  # the steps are recorded; an interrupt's code stands
                self.obs.message(f"the ledger did not take this attempt's result ({exc}); "
                                 f"`provisioner report {self.run_id}` renders the run without "
                                 f"its exit code and message")
        return result

    def _prestart_next(self, later: Sequence[Wave]) -> None:
        """Start the next wave's playbook run now, held before its first play until that wave
        begins (:mod:`provisioner.rollout.prestart`): its seconds of start-up overlap this
        wave instead of following it. Only when the next wave's hosts are known now: every
        node of it is provisioned as planned (no reconcile check, no node redone from a
        resume, no drain hook that may skip one); otherwise that wave starts its run itself,
        as does any wave whose hosts differ from the held run's when it begins."""
        prestart = getattr(self.provisioner, "prestart", None)
        if prestart is None or self.drain.drain_cmd:
            return
        for nxt in later:
            todo = [p for p in nxt.nodes if not self.nodes[p.name].carried_over]
            if not todo:
                continue
            if all(p.action is Action.PROVISION
                   or (p.action is Action.VERIFY and self.opts.force) for p in todo):
                prestart([p.name for p in todo], wave=nxt.index)
            return

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
            if n.failure == NOT_STARTED_FAILURE:
                summary.not_started += 1
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
        from provisioner.rollout.explain import short_reason

        # each node's whole reason is on its own line under the summary table: here it is
        # cut at a word (issue 47: a 700-character gate message was printed three times)
        failing = sorted(
            f"{n.name} ({_brief(short_reason(n.failure, n.reason))})"
            for n in (self.nodes[p.name] for p in wave.nodes)
            if n.failure
        )
        if summary.not_started:
            # Ansible could not load the playbook: every wave would fail the same way
            first = next(n for n in (self.nodes[p.name] for p in wave.nodes)
                         if n.failure == NOT_STARTED_FAILURE)
            summary.passed = False
            summary.stopped = (
                f"{first.reason}; no node was touched by it ({summary.not_started} in "
                f"{wave.label}); fix the playbook or install what it names, then run the same "
                f"command again")
        elif summary.lost:
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
