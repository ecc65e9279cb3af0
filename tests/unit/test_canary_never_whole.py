"""A canary is never the whole fleet of more than one node unless asked in words (issue 47
item 3): ``--waves 1`` on 8 nodes was "1 wave of 8", every node marked canary, and so was
``--waves 10%``. Now the nodes after the last entry form a last wave of their own, a first
entry that takes every node is refused (exit 64), and ``--waves all`` asks for every node at
once, without a canary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout.planner import describe_waves, parse_wave_spec, plan_waves, wave_sizes

EIGHT = [f"gpu-{i:02d}" for i in range(1, 9)]


@pytest.mark.parametrize("spec", ["1", "10%", "1,100%", "12%"])
def test_the_canary_of_eight_is_one_node(spec: str) -> None:
    plan = plan_waves(EIGHT, spec)
    assert [len(w) for w in plan.waves] == [1, 7]
    assert [w.label for w in plan.waves] == ["canary", "wave 1"]
    assert sum(w.canary for w in plan.waves) == 1


@pytest.mark.parametrize("spec", ["100%", "8", "50,1", "99%,1", "9"])
def test_a_canary_of_every_node_is_refused(spec: str) -> None:
    with pytest.raises(UsageError) as exc:
        plan_waves(EIGHT, spec)
    text = str(exc.value)
    assert "a canary is never the whole fleet" in text
    assert "--waves all" in text and "--waves 1," in text  # both ways out, named


def test_one_node_may_be_its_own_canary() -> None:
    assert wave_sizes("100%", 1) == [1]
    assert wave_sizes("1,5,25%,100%", 1) == [1]


def test_all_asks_for_every_node_without_a_canary() -> None:
    plan = plan_waves(EIGHT, "all")
    assert [len(w) for w in plan.waves] == [8]
    wave = plan.waves[0]
    assert not wave.canary and wave.whole and wave.label == "all (no canary)"
    assert plan.to_dict()["waves"][0]["whole"] is True
    assert describe_waves("all", 8) == (
        "all on 8 nodes -> 1 wave of 8 (asked for: every node at once, no canary)")


@pytest.mark.parametrize("spec", ["all,1", "1,all", "al"])
def test_all_stands_alone(spec: str) -> None:
    with pytest.raises(UsageError, match="--waves"):
        parse_wave_spec(spec)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 120), st.booleans()), min_size=1, max_size=6),
       st.integers(2, 400))
def test_no_spec_makes_the_whole_fleet_the_canary(entries: list[tuple[int, bool]],
                                                  total: int) -> None:
    spec = ",".join(f"{min(v, 100)}%" if pct else str(v) for v, pct in entries)
    try:
        sizes = wave_sizes(spec, total)
    except UsageError:
        return
    assert sum(sizes) == total and all(n > 0 for n in sizes)
    assert sizes[0] < total  # the canary leaves some node for after it
    # every entry that found nodes is a wave of its own; what is left is one more
    parsed = parse_wave_spec(spec)
    assert len(sizes) <= len(parsed) + 1


def _inventory(tmp_path: Path, n: int) -> Path:
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"gpu-{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in range(1, n + 1)))
    return inv


def test_plan_of_waves_1_on_eight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path, 8)
    assert main(["plan", "-i", str(inv), "--ledger", str(tmp_path / "l.sqlite"),
                 "--waves", "1", "--json", "-", "--allow-local-connection"]) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert [(w["label"], len(w["nodes"])) for w in doc["waves"]] == [("canary", 1),
                                                                      ("wave 1", 7)]


@pytest.mark.parametrize("command", ["plan", "rollout"])
def test_plan_and_rollout_refuse_a_whole_fleet_canary(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path, 8)
    ledger = tmp_path / "l.sqlite"
    argv = [command, "-i", str(inv), "--ledger", str(ledger), "--waves", "100%"]
    if command == "rollout":
        pb = tmp_path / "site.yml"
        pb.write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
        argv += ["--playbook", str(pb), "--no-verify", "--plain"]
    argv += ["--allow-local-connection"]  # the hosts are this machine (issue 45)
    assert main(argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert "a canary is never the whole fleet" in err, err
    if command == "rollout":  # refused before the run began: no run in the ledger
        from provisioner.store import open_read_only

        if ledger.exists():
            with open_read_only(str(ledger)) as led:
                assert led.runs(limit=5) == []


def test_a_wave_of_all_is_held_to_its_budget_not_a_canarys(tmp_path: Path) -> None:
    from provisioner.rollout.planner import Budget
    from provisioner.store import Ledger
    from tests.unit.test_rollout_engine import FakeFleet, engine

    fleet = FakeFleet(broken={"n2"})
    with Ledger.open(tmp_path / "l.sqlite") as led:
        res = engine(led, fleet, waves="all", max_failures=Budget(1, False)).run()
        assert fleet.provision_calls == [[f"n{i}" for i in range(1, 9)]]  # one wave of 8
        assert res.exit_code == Exit.NOT_COMPLIANT and res.status == "not_compliant"
        assert res.waves[0].label == "all (no canary)" and res.waves[0].passed
        recorded = led.get_run(res.run_id)["args"]["plan"]["waves"]
        assert recorded[0]["whole"] is True and recorded[0]["label"] == "all (no canary)"
