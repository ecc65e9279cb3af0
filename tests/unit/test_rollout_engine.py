"""Rollout engine against fakes (playbook + verification) and a real SQLite ledger.

Waves, canary, failure budgets, health gate, reconcile, reboot decisions, drain, approval,
and resume ordering after a crash (mid-step nodes first, finished nodes never redone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from provisioner.exitcodes import Exit
from provisioner.rollout.drain import DrainHooks
from provisioner.rollout.engine import (
    Engine,
    RolloutOptions,
    reboot_decision,
    reboot_required,
)
from provisioner.rollout.planner import Budget, plan_waves
from provisioner.rollout.runner import HostOutcome, HostStatus
from provisioner.rollout.state import seed_pending
from provisioner.store import Ledger

NODES = [f"n{i}" for i in range(1, 9)]


class Crash(BaseException):
    """Stands in for kill -9: nothing after it runs, no finally of the engine's own."""


@dataclass
class FakeFleet:
    """Fake nodes: provisioning makes a node compliant unless it is broken."""

    broken: set[str] = field(default_factory=set)  # the playbook fails
    unreachable: set[str] = field(default_factory=set)
    noncompliant: set[str] = field(default_factory=set)  # playbook ok, verification fails
    needs_reboot: set[str] = field(default_factory=set)
    compliant: set[str] = field(default_factory=set)
    decays: set[str] = field(default_factory=set)  # fail the next health gate
    provision_calls: list[list[str]] = field(default_factory=list)
    reboot_calls: list[list[str]] = field(default_factory=list)
    verify_calls: list[tuple[list[str], bool]] = field(default_factory=list)
    crash_in_verify_after: int | None = None
    lost_in: set[str] = field(default_factory=set)  # a playbook run with one of them is cut
    reboot_lost: bool = False  # the reboot playbook's run is cut
    _verified: int = 0

    # Provisioner
    def provision(self, hosts: Sequence[str], *, wave: int,
                  on_host_event: Callable[[str, str, str], None]) -> Mapping[str, HostOutcome]:
        self.provision_calls.append(list(hosts))
        out = {}
        if self.lost_in & set(hosts):  # the stream ended before its stats: every host lost
            for h in hosts:
                on_host_event(h, "runner_on_ok", "Install nvidia-gds")
            return {h: HostOutcome(h, HostStatus.LOST, ok=3, changed=1,
                                   message="no final result") for h in hosts}
        for h in hosts:
            if h in self.unreachable:
                out[h] = HostOutcome(h, HostStatus.UNREACHABLE, failed_task="Gather",
                                     message="ssh: connect refused")
            elif h in self.broken:
                out[h] = HostOutcome(h, HostStatus.FAILED, failed_task="Install nvidia-gds",
                                     message="nvidia-fs-dkms: DKMS build failed")
            else:
                on_host_event(h, "runner_on_ok", "Install nvidia-gds")
                out[h] = HostOutcome(h, HostStatus.CHANGED, ok=5, changed=2)
                if h not in self.noncompliant:
                    self.compliant.add(h)
        return out

    def reboot(self, hosts: Sequence[str], *, wave: int) -> Mapping[str, HostOutcome]:
        self.reboot_calls.append(list(hosts))
        if self.reboot_lost:
            return {h: HostOutcome(h, HostStatus.LOST, message="no final result") for h in hosts}
        self.needs_reboot -= set(hosts)
        return {h: HostOutcome(h, HostStatus.CHANGED) for h in hosts}

    # Verifier
    def verify(self, hosts: Sequence[str], *, cheap: bool,
               on_report: Callable[[dict[str, Any]], None]) -> dict[str, dict[str, Any]]:
        self.verify_calls.append((list(hosts), cheap))
        out = {}
        for h in hosts:
            if self.crash_in_verify_after is not None and \
                    self._verified >= self.crash_in_verify_after:
                raise Crash()
            self._verified += 1
            ok = h in self.compliant and not (cheap and h in self.decays)
            rep = {
                "name": h, "reachable": h not in self.unreachable, "compliant": ok,
                "route": "nvfs", "checks": [{"id": "gds.io_direct",
                                            "status": "pass" if ok else "fail",
                                            "expected": "direct", "observed": "x",
                                            "message": ""}],
                "io_test": {"path_taken": "direct" if ok else "failed"},
                "facts": {"reboot_required": h in self.needs_reboot},
                "error": None,
            }
            out[h] = rep
            on_report(rep)
        return out


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger.open(tmp_path / "ledger.sqlite")
    yield led
    led.close()


def engine(ledger: Ledger, fleet: FakeFleet, targets: Sequence[str] = NODES,
           **opts: Any) -> Engine:
    kw: dict[str, Any] = {"waves": "1,3,100%"}
    drain = opts.pop("drain", None)
    confirm = opts.pop("confirm", None)
    kw.update(opts)
    return Engine(ledger=ledger, fleet="fleet-x", targets=targets, provisioner=fleet,
                  verifier=fleet, options=RolloutOptions(**kw), drain=drain, confirm=confirm,
                  sleep=lambda s: None)


def steps(ledger: Ledger, run_id: str) -> dict[str, str]:
    return {n: s["step"] for n, s in ledger.node_steps(run_id).items()}


def test_clean_rollout_in_waves(ledger: Ledger) -> None:
    f = FakeFleet()
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.OK and res.status == "succeeded"
    assert [len(c) for c in f.provision_calls] == [1, 3, 4]
    assert steps(ledger, res.run_id) == dict.fromkeys(NODES, "compliant")
    assert ledger.get_run(res.run_id)["status"] == "succeeded"
    # health gate before waves 1 and 2: cheap re-verification of the rolled nodes
    assert ([h for h, cheap in f.verify_calls if cheap]) == [["n1"], ["n1", "n2", "n3", "n4"]]
    # every node's latest verification says compliant
    assert {r["node"] for r in ledger.latest() if r["compliant"]} == set(NODES)


def test_canary_failure_stops_everything(ledger: Ledger) -> None:
    f = FakeFleet(broken={"n1"})
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.ABORTED and "canary" in res.message
    assert f.provision_calls == [["n1"]]
    st = steps(ledger, res.run_id)
    assert st["n1"] == "failed"
    assert all(st[n] == "pending" for n in NODES[1:])
    detail = ledger.node_steps(res.run_id)["n1"]["detail"]
    assert detail["outcome"]["failed_task"] == "Install nvidia-gds"
    assert ledger.get_run(res.run_id)["status"] == "aborted"


def test_canary_verification_failure_stops(ledger: Ledger) -> None:
    f = FakeFleet(noncompliant={"n1"})
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.ABORTED
    assert f.provision_calls == [["n1"]]


def test_wave_over_budget_stops_the_rest(ledger: Ledger) -> None:
    f = FakeFleet(broken={"n2", "n3"})
    res = engine(ledger, f, max_failures=Budget(1, False)).run()
    assert res.exit_code is Exit.ABORTED and "over its failure budget" in res.message
    assert "n2" in res.message and "n3" in res.message
    assert len(f.provision_calls) == 2
    st = steps(ledger, res.run_id)
    assert [st[n] for n in ("n5", "n6", "n7", "n8")] == ["pending"] * 4
    assert res.waves[1].failed == 2 and res.waves[1].allowed_failures == 1


def test_within_budget_continues_and_exit_says_not_compliant(ledger: Ledger) -> None:
    f = FakeFleet(broken={"n3"})
    res = engine(ledger, f, max_failures=Budget(34, True)).run()  # 34% of 3 -> 1
    assert len(f.provision_calls) == 3
    assert res.exit_code is Exit.NOT_COMPLIANT and res.status == "not_compliant"
    assert steps(ledger, res.run_id)["n8"] == "compliant"


def test_total_budget(ledger: Ledger) -> None:
    f = FakeFleet(broken={"n2", "n5"})
    res = engine(ledger, f, waves="1,2,2,100%", max_failures=Budget(1, False),
                 max_total_failures=Budget(1, False)).run()
    assert res.exit_code is Exit.ABORTED and "--max-total-failures" in res.message
    assert len(f.provision_calls) == 3


def test_unreachable_node_exit_code(ledger: Ledger) -> None:
    f = FakeFleet(unreachable={"n4"})
    res = engine(ledger, f, max_failures=Budget(1, False)).run()
    assert res.exit_code is Exit.UNREACHABLE
    assert res.nodes["n4"].failure == "unreachable"
    assert res.waves[1].unreachable == 1


def test_reconcile_verifies_and_skips_compliant_nodes(ledger: Ledger) -> None:
    f = FakeFleet()
    engine(ledger, f).run()
    f.provision_calls.clear()
    f.compliant.discard("n6")  # drifted since
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.OK
    assert f.provision_calls == [["n6"]]  # only the drifted node changes
    # the ledger still said compliant: verified first, found drifted, then provisioned
    ev = [e["step"] for e in ledger.step_events(res.run_id, "n6")]
    assert ev == ["pending", "verifying", "provisioning", "provisioning", "verifying",
                  "compliant"]
    detail = ledger.node_steps(res.run_id)["n1"]["detail"]
    assert detail["action"] == "verify-only"


def test_reconcile_of_a_compliant_fleet_only_verifies_once(ledger: Ledger) -> None:
    f = FakeFleet()
    engine(ledger, f).run()
    f.provision_calls.clear()
    f.verify_calls.clear()
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.OK and f.provision_calls == []
    # no health gate re-verification: nothing changed since the rolled nodes were verified
    assert [cheap for _h, cheap in f.verify_calls] == [False, False, False]
    assert sorted(sum((h for h, _c in f.verify_calls), [])) == NODES


def test_force_reprovisions(ledger: Ledger) -> None:
    f = FakeFleet()
    engine(ledger, f).run()
    f.provision_calls.clear()
    engine(ledger, f, force=True).run()
    assert sorted(sum(f.provision_calls, [])) == NODES


def test_health_gate_stops_when_rolled_nodes_decay(ledger: Ledger) -> None:
    f = FakeFleet(decays={"n1"})
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.ABORTED and "health gate" in res.message
    assert f.provision_calls == [["n1"]]


def test_health_threshold_tolerates(ledger: Ledger) -> None:
    f = FakeFleet(decays={"n2"})
    res = engine(ledger, f, health_threshold=0.7).run()  # 3/4 healthy before wave 2
    assert res.exit_code is Exit.OK


def test_reboot_pending_without_allow_reboot(ledger: Ledger) -> None:
    f = FakeFleet(needs_reboot={"n2", "n3"})
    res = engine(ledger, f).run()
    st = steps(ledger, res.run_id)
    assert st["n2"] == st["n3"] == "reboot_pending"  # not compliant, not a budget failure
    assert st["n8"] == "compliant"
    assert f.reboot_calls == []
    assert res.exit_code is Exit.NOT_COMPLIANT
    assert res.waves[1].reboot_pending == 2 and res.waves[1].passed


def test_a_canary_waiting_for_a_reboot_stops_the_rollout(ledger: Ledger) -> None:
    f = FakeFleet(needs_reboot={"n1"})
    res = engine(ledger, f).run()
    assert res.exit_code is Exit.ABORTED and "--allow-reboot" in res.message
    assert f.provision_calls == [["n1"]]
    assert steps(ledger, res.run_id)["n1"] == "reboot_pending"


def test_reboot_with_allow_reboot(ledger: Ledger) -> None:
    f = FakeFleet(needs_reboot={"n1", "n3"})
    res = engine(ledger, f, allow_reboot=True).run()
    assert f.reboot_calls == [["n1"], ["n3"]]
    assert res.exit_code is Exit.OK
    assert res.nodes["n1"].rebooted
    ev = [e["step"] for e in ledger.step_events(res.run_id, "n1")]
    assert ev == ["pending", "provisioning", "verifying", "rebooting", "verifying", "compliant"]


@pytest.mark.parametrize(
    ("required", "allow", "rebooted", "decision"),
    [(False, False, False, "none"), (False, True, False, "none"), (True, False, False, "pending"),
     (True, True, False, "reboot"), (True, True, True, "failed")],
)
def test_reboot_decision(required: bool, allow: bool, rebooted: bool, decision: str) -> None:
    assert reboot_decision(required=required, allow_reboot=allow,
                           already_rebooted=rebooted) == decision


def test_reboot_required_from_facts_or_raw() -> None:
    assert reboot_required({"facts": {"reboot": {"required": True, "reasons": ["nvidia-fs"]}}})
    assert not reboot_required({"facts": {"reboot": {"required": False, "reasons": []}}})
    assert reboot_required({"checks": [{"id": "reboot.pending", "status": "warn"}]})
    assert not reboot_required({"checks": [{"id": "reboot.pending", "status": "pass"}]})
    assert reboot_required({"facts": {"reboot_required": True}})
    assert not reboot_required({"facts": {"reboot_required": False}})
    assert reboot_required({"raw": {"reboot_required": {"rc": 0, "out": "nvidia-fs\n"}}})
    assert not reboot_required({"raw": {"reboot_required": {"rc": 1, "out": ""}}})
    assert not reboot_required({})


def test_failed_drain_skips_the_node(ledger: Ledger, tmp_path: Path) -> None:
    f = FakeFleet()
    hooks = DrainHooks.from_options(
        drain_cmd="test {node} != n3", resume_cmd=f"echo {{node}} >> {tmp_path}/resumed",
        wait_cmd=None,
    )
    res = engine(ledger, f, drain=hooks, max_failures=Budget(1, False)).run()
    assert "n3" not in sum(f.provision_calls, [])
    assert steps(ledger, res.run_id)["n3"] == "skipped"
    assert res.nodes["n3"].failure == "drain"
    resumed = (tmp_path / "resumed").read_text().split()
    assert sorted(resumed) == sorted(set(NODES) - {"n3"})  # resumed only after verification


def test_refused_approval_stops(ledger: Ledger) -> None:
    f = FakeFleet()
    asked: list[str] = []

    def confirm(wave: Any) -> bool:
        asked.append(wave.label)
        return wave.index < 2

    res = engine(ledger, f, confirm=confirm).run()
    assert asked == ["wave 1", "wave 2"]
    assert res.exit_code is Exit.ABORTED and "not approved" in res.message
    assert len(f.provision_calls) == 2


def test_no_verify_marks_provisioned_nodes(ledger: Ledger) -> None:
    f = FakeFleet()
    res = Engine(ledger=ledger, fleet="fleet-x", targets=NODES, provisioner=f, verifier=None,
                 options=RolloutOptions(waves="1,100%", verify=False)).run()
    assert res.exit_code is Exit.OK
    assert f.verify_calls == []
    assert set(steps(ledger, res.run_id).values()) == {"skipped"}


def test_crash_then_resume_redoes_mid_step_first_never_finished(ledger: Ledger) -> None:
    f = FakeFleet(crash_in_verify_after=3)  # canary n1 verified, health gate n1, then n2 ...
    with pytest.raises(Crash):
        engine(ledger, f).run()
    run_id = ledger.last_unfinished_run("rollout", "fleet-x")
    assert run_id
    st = steps(ledger, run_id)
    assert st["n1"] == "compliant" and st["n2"] == "compliant"
    assert st["n3"] == st["n4"] == "verifying"  # caught mid-step
    assert st["n5"] == "pending"
    f.crash_in_verify_after = None
    f.provision_calls.clear()
    f.verify_calls.clear()
    res = engine(ledger, f).run()
    assert res.resumed and res.run_id == run_id
    # n3/n4 were caught verifying: their change was done, so they are verified again first
    # (not re-provisioned), before anything else happens
    assert f.provision_calls == [["n5", "n6", "n7", "n8"]]
    assert f.verify_calls[:2] == [(["n1", "n2"], True), (["n3", "n4"], False)]  # gate first
    assert res.nodes["n1"].carried_over and res.nodes["n2"].carried_over
    assert res.exit_code is Exit.OK
    assert ledger.last_unfinished_run("rollout", "fleet-x") is None
    # n1/n2 were provisioned once, in the first attempt only
    for n in ("n1", "n2"):
        ev = [e["step"] for e in ledger.step_events(run_id, n)]
        assert ev.count("provisioning") == 1


def test_resume_orders_mid_step_before_pending_within_a_wave(ledger: Ledger) -> None:
    plan = plan_waves(NODES, "1,3,100%")
    run_id = ledger.start_run("rollout", "fleet-x", {"plan": plan.to_dict()})
    seed_pending(ledger, run_id, plan)
    ledger.set_step(run_id, "n1", "compliant", wave=0)
    ledger.set_step(run_id, "n4", "provisioning", wave=1)  # n2, n3 pending in the same wave
    f = FakeFleet(compliant={"n1"})
    res = engine(ledger, f).run()
    assert f.provision_calls == [["n4"], ["n2", "n3"], ["n5", "n6", "n7", "n8"]]
    assert res.plan.waves[1].nodes[0].name == "n4"
    assert res.exit_code is Exit.OK


def test_resume_refuses_other_targets(ledger: Ledger) -> None:
    from provisioner.errors import UsageError

    f = FakeFleet(crash_in_verify_after=0)
    with pytest.raises(Crash):
        engine(ledger, f).run()
    with pytest.raises(UsageError, match="--restart"):
        engine(ledger, f, targets=NODES[:4]).run()
    f.crash_in_verify_after = None
    res = engine(ledger, f, targets=NODES[:4], resume=False).run()
    assert res.exit_code is Exit.OK and not res.resumed


def test_seed_pending_is_one_transaction_for_many(ledger: Ledger) -> None:
    names = [f"h{i:05d}" for i in range(2000)]
    plan = plan_waves(names, "1,10%,100%")
    run_id = ledger.start_run("rollout", "big", {})
    seed_pending(ledger, run_id, plan)
    st = ledger.node_steps(run_id)
    assert len(st) == 2000 and st["h00000"]["wave"] == 0 and st["h01999"]["wave"] == 2


def test_a_lost_canary_spends_no_budget_stops_and_resumes(ledger: Ledger) -> None:
    """The canary's playbook stream ends without stats: the node is lost (not failed, not
    provisioned), nothing else is touched, the run stays open; the same command redoes it."""
    f = FakeFleet(lost_in={"n1"})
    res = engine(ledger, f).run()
    assert res.status == "lost" and res.exit_code is Exit.ABORTED
    assert f.provision_calls == [["n1"]] and f.verify_calls == []
    from provisioner.rollout.progress import report_dict

    n1 = report_dict(res)["nodes"][0]  # what --json writes
    assert (n1["name"], n1["step"], n1["provisioned"], n1["failure"]) == ("n1", "lost", False,
                                                                          None)
    assert n1["outcome"]["status"] == "lost"
    assert res.waves[0].lost == 1 and res.waves[0].failures == 0
    assert res.to_dict()["waves"][0]["lost"] == 1
    run_id = ledger.last_unfinished_run("rollout", "fleet-x")
    assert run_id == res.run_id  # left open: resumable
    assert steps(ledger, run_id)["n1"] == "lost"
    assert ledger.node_steps(run_id)["n1"]["detail"]["during"] == "provisioning"
    f.lost_in.clear()
    f.provision_calls.clear()
    again = engine(ledger, f).run()
    assert again.resumed and again.run_id == run_id and again.exit_code is Exit.OK
    assert f.provision_calls[0] == ["n1"]  # redone first
    assert [e["step"] for e in ledger.step_events(run_id, "n1")] == [
        "pending", "provisioning", "lost", "provisioning", "verifying", "compliant"]


def test_lost_nodes_spend_no_failure_budget(ledger: Ledger) -> None:
    """A later wave lost with --max-total-failures 0: no failure counted, the waves after it
    untouched, the earlier ones kept; resume finishes without re-provisioning them."""
    f = FakeFleet(lost_in={"n3"})
    res = engine(ledger, f, max_total_failures=Budget(0, False)).run()
    assert res.status == "lost" and res.exit_code is Exit.ABORTED
    assert "n2, n3, n4" in res.message and "no failure counted" in res.message
    assert f.provision_calls == [["n1"], ["n2", "n3", "n4"]]
    assert {n: r.step for n, r in res.nodes.items() if r.wave == 1} == dict.fromkeys(
        ("n2", "n3", "n4"), "lost")
    assert not any(r.failure for r in res.nodes.values())
    f.lost_in.clear()
    f.provision_calls.clear()
    again = engine(ledger, f, max_total_failures=Budget(0, False)).run()
    assert again.exit_code is Exit.OK
    assert f.provision_calls == [["n2", "n3", "n4"], ["n5", "n6", "n7", "n8"]]


def test_a_lost_reboot_is_lost_not_failed(ledger: Ledger) -> None:
    f = FakeFleet(needs_reboot={"n1"}, reboot_lost=True)
    res = engine(ledger, f, allow_reboot=True).run()
    assert res.status == "lost"
    assert res.nodes["n1"].step == "lost" and res.nodes["n1"].failure is None
    detail = ledger.node_steps(res.run_id)["n1"]["detail"]
    assert detail["during"] == "rebooting"
