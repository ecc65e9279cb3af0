"""The per-node step machine of a rollout wave: reconcile (verify-only), drain, provision,
verify, reboot when the node asks for one and ``--allow-reboot`` allows it, verify again, resume
hook; every step committed in the ledger with its result (see :mod:`provisioner.rollout.engine`
for the waves, gates and failure budgets around it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from provisioner.rollout.drain import DrainHooks
from provisioner.rollout.interfaces import (
    COMPLIANT,
    FAILED,
    LOST,
    PROVISIONING,
    REBOOT_PENDING,
    REBOOTING,
    SKIPPED,
    VERIFYING,
    LedgerLike,
    NodeResult,
    Observer,
    Provisioner,
    RolloutOptions,
    Verifier,
)
from provisioner.rollout.planner import (
    Action,
    PlannedNode,
    Wave,
)
from provisioner.rollout.runner import HostOutcome, HostStatus

# the failure kind of a node whose playbook Ansible could not start (HostStatus.NOT_STARTED)
NOT_STARTED_FAILURE = "not_started"

if TYPE_CHECKING:  # imported where used: it brings in sqlalchemy
    from provisioner.rollout.state import ResultWriter


def _clean_step(detail: Mapping[str, Any] | None, message: str) -> tuple[dict[str, Any], str]:
    """A step's detail and message as the ledger and the terminal get them: playbook failure
    text (a task's msg, stderr) redacted (provisioner.redact) and its control characters shown
    escaped (provisioner.sanitize), so a node's answer neither leaks a secret nor drives the
    operator's terminal."""
    from provisioner.redact import redact_mapping, redact_text
    from provisioner.sanitize import printable, printable_document

    clean = printable_document(redact_mapping(dict(detail or {})), multiline=True)
    return dict(clean), printable(redact_text(message), multiline=True)



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



class NodeSteps:
    """The engine's per-node steps; :class:`~provisioner.rollout.engine.Engine` sets every
    attribute below in its ``__init__``."""

    ledger: LedgerLike
    provisioner: Provisioner
    verifier: Verifier | None
    opts: RolloutOptions
    obs: Observer
    drain: DrainHooks
    addresses: dict[str, str]
    nodes: dict[str, NodeResult]
    run_id: str
    _lock: threading.Lock
    _writer: ResultWriter
    _changed_since_gate: bool
    _caught: dict[str, str]
    # some provisioning playbook of this attempt began (a host had an outcome other than
    # "not started"): a playbook that then cannot start is exit 3, not 64 (something ran)
    playbook_began: bool = False

    # ------------------------------------------------------------------ helpers
    def _step(self, name: str, step: str, wave: int, detail: Mapping[str, Any] | None = None,
              message: str = "", failure: str | None = None) -> None:
        self._steps([(name, detail)], step, wave, message, failure)

    def _steps(self, items: Sequence[tuple[str, Mapping[str, Any] | None]], step: str,
               wave: int, message: str = "", failure: str | None = None) -> None:
        """Nodes (``(name, detail)``) to ``step``, in one ledger transaction: the hosts of a
        batch move together."""
        msg = _clean_step(None, message)[1]
        # the line the terminal shows is the ledger's too (report RUN reads it back, issue 47)
        said = {"message": msg} if msg else {}
        rows = [(name, step, wave, {**_clean_step(detail, "")[0], **said, "failure": failure})
                for name, detail in items]
        with self._lock:
            self._writer.flush()  # results queued for these nodes land before their next step
            if hasattr(self.ledger, "set_steps"):
                self.ledger.set_steps(self.run_id, rows)
            else:  # test doubles: one write per node
                for name, _s, _w, detail in rows:
                    self.ledger.set_step(self.run_id, name, step, wave=wave, detail=detail)
            for name, *_ in rows:
                node = self.nodes[name]
                node.step = step
                node.failure = failure
                if msg:
                    node.reason = msg
        for name, *_ in rows:
            self.obs.node(name, step, msg)

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
                self._steps([(n, {"action": "verify-only"}) for n in check_first], VERIFYING, w)

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
                self._steps([(n, {"reason": "compliant in the ledger; verification off"})
                             for n in check_first], SKIPPED, w,
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
        self._steps([(n, {"action": "provision"}) for n in ready], PROVISIONING, w)
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
                self.playbook_began = True
                provisioned.append(name)
                continue
            if out.status is HostStatus.LOST:
                self._step(name, LOST, w, {"during": PROVISIONING, "reason": "lost",
                                           "outcome": out.to_dict()},
                           f"lost: {out.message or 'no final result'}; redone on resume")
                continue
            if out.status is HostStatus.NOT_STARTED:
                # Ansible could not load the playbook: nothing ran on any node (the engine
                # stops the rollout after this wave, exit 64 when no playbook began at all)
                self._step(name, FAILED, w, {"reason": out.status.value,
                                             "outcome": out.to_dict()},
                           out.message or "the playbook did not start", NOT_STARTED_FAILURE)
                continue
            self.playbook_began = True
            where = f"task {out.failed_task!r}: " if out.failed_task else ""
            self._step(name, FAILED, w, {"reason": out.status.value, "outcome": out.to_dict()},
                       f"{out.status.value}: {where}{out.message or ''}".strip(),
                       "unreachable" if out.status is HostStatus.UNREACHABLE else "failed")
        if not provisioned:
            return
        if not self.opts.verify:
            self._steps([(n, {"reason": "provisioned; verification off",
                              "outcome": self.nodes[n].outcome}) for n in provisioned],
                        SKIPPED, w, "provisioned; verification off (--no-verify)")
            for name in provisioned:
                self._resume_hook(name)
            return
        self._verify_after_change(provisioned, w, rebooted=False)

    def _verify_after_change(self, hosts: Sequence[str], w: int, *, rebooted: bool) -> None:
        self._steps([(n, {"after": "reboot" if rebooted else "provision"}) for n in hosts],
                    VERIFYING, w)
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
