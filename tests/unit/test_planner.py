"""Wave planner: sizes, rounding, caps, limits, empty sets, malformed specs, actions."""

from __future__ import annotations

import pytest

from provisioner.errors import UsageError
from provisioner.rollout.planner import (
    Action,
    Budget,
    parse_budget,
    parse_threshold,
    parse_wave_spec,
    plan_waves,
    wave_sizes,
)

NODES = [f"n{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize(
    ("spec", "total", "expected"),
    [
        ("1,5,20%,100%", 10, [1, 5, 2, 2]),  # 20% of 10 = 2; 100% capped to the 2 left
        ("1,5,20%,100%", 8, [1, 5, 2]),  # 20% of 8 = 1.6 -> 2 (rounds up), set exhausted
        ("1,5,20%,100%", 100, [1, 5, 20, 74]),
        ("1", 10, [1, 9]),  # one entry: the canary, then the rest as a last wave (issue 47)
        ("1,2", 10, [1, 2, 7]),  # spec runs out: the rest is a last wave of its own
        ("10%", 3, [1, 2]),  # 10% of 3 -> 1, the rest a last wave
        ("10%,10%", 3, [1, 1, 1]),
        ("1%,100%", 50, [1, 49]),  # percent rounds up to at least one node
        ("1,50,50", 8, [1, 7]),  # sizes beyond the set are capped
        ("1,5,20%,100%", 1, [1]),
        ("1,5", 0, []),  # empty target set -> no waves
        (" 1 , 2% ,3", 200, [1, 4, 3, 192]),  # whitespace tolerated
    ],
)
def test_wave_sizes(spec: str, total: int, expected: list[int]) -> None:
    assert wave_sizes(spec, total) == expected
    assert sum(wave_sizes(spec, total)) == total


@pytest.mark.parametrize(
    "spec",
    ["", " ", "1,,2", "a", "1,x%", "0", "1,0%", "-1", "150%", "1.5", "5%%", "1;2", "%"],
)
def test_malformed_specs_are_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="--waves"):
        parse_wave_spec(spec)


def test_malformed_spec_message_names_the_entry() -> None:
    with pytest.raises(UsageError, match=r"entry 2 \('x'\)"):
        parse_wave_spec("1,x,3")


def test_plan_keeps_inventory_order_and_puts_changes_first() -> None:
    latest = {
        "n01": {"compliant": True, "reachable": True, "at": "t1"},
        "n02": {"compliant": False, "reachable": True},
        "n03": {"compliant": True, "reachable": False},
    }
    plan = plan_waves(NODES, "1,2,100%", latest=latest)
    order = [p.name for p in plan.nodes]
    # n01 is compliant: verify only, so it goes last; a node that will change is the canary
    assert order[0] == "n02"
    assert order[-1] == "n01"
    assert order[1:-1] == ["n03", "n04", "n05", "n06", "n07", "n08", "n09", "n10"]
    actions = {p.name: p.action for p in plan.nodes}
    assert actions["n01"] is Action.VERIFY
    assert actions["n02"] is Action.PROVISION
    assert actions["n03"] is Action.PROVISION  # unreachable last time
    assert actions["n04"] is Action.PROVISION  # unknown: no record
    assert [len(w) for w in plan.waves] == [1, 2, 7]
    assert plan.waves[0].canary and plan.waves[0].label == "canary"
    assert plan.counts() == {"verify": 1, "provision": 9, "resume": 0}


def test_force_reprovisions_compliant_nodes() -> None:
    latest = {n: {"compliant": True, "reachable": True} for n in NODES}
    plan = plan_waves(NODES, "1,100%", latest=latest, force=True)
    assert {p.action for p in plan.nodes} == {Action.PROVISION}
    assert plan.nodes[0].reason == "--force"


def test_resume_first_nodes_lead() -> None:
    plan = plan_waves(NODES, "2,100%", resume_first=["n07", "n03"])
    assert [p.name for p in plan.waves[0].nodes] == ["n03", "n07"]
    assert all(p.action is Action.RESUME for p in plan.waves[0].nodes)


def test_duplicates_and_empty() -> None:
    plan = plan_waves(["a", "b", "a"], "1,100%")
    assert [p.name for p in plan.nodes] == ["a", "b"]
    assert plan_waves([], "1,100%").waves == ()


def test_limit_selection_is_planned_alone() -> None:
    # --limit is applied by the inventory loader; the planner plans exactly what it is given
    plan = plan_waves(NODES[:3], "1,5,20%,100%")
    assert [len(w) for w in plan.waves] == [1, 2]


def test_plan_to_dict_round_trip_shape() -> None:
    d = plan_waves(NODES[:2], "1,100%").to_dict()
    assert d["spec"] == "1,100%"
    assert [w["label"] for w in d["waves"]] == ["canary", "wave 1"]
    assert d["waves"][0]["nodes"][0] == {
        "name": "n01", "action": "provision", "reason": "no record in the ledger"}


@pytest.mark.parametrize(
    ("value", "size", "allowed", "exceeded_at"),
    [
        ("0", 10, 0, 1),
        ("2", 10, 2, 3),
        ("10%", 10, 1, 2),
        ("10%", 5, 0, 1),  # percent rounds down: 0.5 -> 0 tolerated
        ("25%", 8, 2, 3),
        ("100%", 4, 4, 5),
    ],
)
def test_failure_budgets(value: str, size: int, allowed: int, exceeded_at: int) -> None:
    b = parse_budget(value, option="--max-failures")
    assert b.allowed(size) == allowed
    assert not b.exceeded(allowed, size)
    assert b.exceeded(exceeded_at, size)


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "101%", "%"])
def test_bad_budgets(value: str) -> None:
    with pytest.raises(UsageError, match="--max-failures"):
        parse_budget(value, option="--max-failures")


def test_budget_default_is_zero() -> None:
    assert parse_budget(None, option="--max-failures") == Budget(0, False)


@pytest.mark.parametrize(("value", "frac"), [("1", 1.0), ("0.9", 0.9), ("90%", 0.9), (None, 1.0)])
def test_thresholds(value: str | None, frac: float) -> None:
    assert parse_threshold(value) == pytest.approx(frac)


@pytest.mark.parametrize("value", ["1.5", "x", "-0.1", "120%"])
def test_bad_thresholds(value: str) -> None:
    with pytest.raises(UsageError, match="--health-threshold"):
        parse_threshold(value)
