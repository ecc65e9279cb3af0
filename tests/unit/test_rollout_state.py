"""Rollout additions on top of the ledger: bulk pending rows, light latest state, group commit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.errors import LedgerError
from provisioner.rollout.state import Result, ResultWriter, latest_states, record_results
from provisioner.store import Ledger


def _rep(name: str, ok: bool = True) -> dict[str, Any]:
    return {"name": name, "reachable": True, "compliant": ok, "route": "nvfs",
            "checks": [{"id": "gds.io_direct", "status": "pass" if ok else "fail",
                        "expected": "direct", "observed": {"path": "direct"}, "message": "m"}],
            "io_test": {"path_taken": "direct"}, "facts": {}, "raw": {"nvfs_stats": "x"}}


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger.open(tmp_path / "l.sqlite")
    yield led
    led.close()


def test_bulk_rows_match_record_verification(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "f", {})
    ledger.record_verification(run, _rep("a"), step="compliant", wave=1, detail={"x": 1})
    record_results(ledger, run, [Result(_rep("b"), "compliant", 1, {"x": 1})])
    a, b = ledger.latest_for("a"), ledger.latest_for("b")
    assert a is not None and b is not None
    for key in ("reachable", "compliant", "route", "path_taken", "checks"):
        assert a[key] == b[key], key
    assert {**a["report"], "name": "b"} == b["report"]
    assert ledger.raw_for(a["id"]) == ledger.raw_for(b["id"]) == {"nvfs_stats": "x"}
    steps = ledger.node_steps(run)
    assert steps["a"] == {**steps["b"], "updated_at": steps["a"]["updated_at"]}
    assert [e["step"] for e in ledger.step_events(run, "b")] == ["compliant"]


def test_bulk_keeps_the_wave_when_none_is_given(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "f", {})
    ledger.set_step(run, "a", "verifying", wave=3)
    record_results(ledger, run, [Result(_rep("a"), "compliant", None, {})])
    assert ledger.node_steps(run)["a"]["wave"] == 3


def test_a_bad_step_writes_nothing(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "f", {})
    with pytest.raises(LedgerError):
        record_results(ledger, run, [Result(_rep("a"), "compliant", 0, {}),
                                     Result(_rep("b"), "bogus", 0, {})])
    assert ledger.latest() == [] and ledger.node_steps(run) == {}


def test_latest_states(ledger: Ledger) -> None:
    run = ledger.start_run("verify", "f", {})
    ledger.record_verification(run, _rep("a", True))
    ledger.record_verification(run, _rep("a", False))
    ledger.record_verification(run, _rep("b", True))
    st = latest_states(ledger)
    assert {n: s["compliant"] for n, s in st.items()} == {"a": False, "b": True}


def test_writer_flushes_on_size_timer_and_flush(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "f", {})
    w = ResultWriter(ledger, run, max_batch=3, max_delay_s=0.2)
    w.add(_rep("a"), "compliant", 0, {})
    w.add(_rep("b"), "compliant", 0, {})
    assert ledger.node_steps(run) == {}  # queued
    w.add(_rep("c"), "compliant", 0, {})
    assert set(ledger.node_steps(run)) == {"a", "b", "c"}  # batch full
    w.add(_rep("d"), "compliant", 0, {})
    deadline = time.monotonic() + 5
    while "d" not in ledger.node_steps(run):  # the timer writes it
        assert time.monotonic() < deadline
        time.sleep(0.02)
    w.add(_rep("e"), "failed", 0, {})
    w.flush()
    assert ledger.node_steps(run)["e"]["step"] == "failed"
