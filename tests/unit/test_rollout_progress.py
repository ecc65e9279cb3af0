"""Progress output (plain lines, rich live view) and the JSON/JUnit reports of a rollout."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console

from provisioner.exitcodes import Exit
from provisioner.rollout.engine import NodeResult, RolloutResult, WaveSummary
from provisioner.rollout.planner import plan_waves
from provisioner.rollout.progress import (
    LiveObserver,
    PlainObserver,
    make_observer,
    report_dict,
    summary_table,
)


def _result() -> RolloutResult:
    plan = plan_waves(["a", "b", "c"], "1,100%")
    nodes = {
        "a": NodeResult("a", 0, "provision", "compliant", "verified", provisioned=True),
        "b": NodeResult("b", 1, "provision", "failed", "failed: task 'Install': boom",
                        failure="failed", outcome={"status": "failed", "failed_task": "Install"}),
        "c": NodeResult("c", 1, "provision", "reboot_pending", "reboot pending"),
    }
    waves = [WaveSummary(0, "canary", 1, compliant=1),
             WaveSummary(1, "wave 1", 2, failed=1, reboot_pending=1, allowed_failures=1)]
    return RolloutResult("run-1", "not_compliant", Exit.NOT_COMPLIANT, plan, nodes, waves,
                         "not every node is compliant")


def test_plain_observer_lines() -> None:
    out = io.StringIO()
    obs = PlainObserver(out)
    plan = plan_waves(["a", "b"], "1,100%")
    obs.plan(plan, run_id="r1", resumed=True, done={"a": "compliant"})
    obs.wave_start(plan.waves[1], ["b"])
    obs.node("b", "provisioning")
    obs.node("b", "provisioning", "Install")  # repeated step: not printed again
    obs.node("b", "compliant", "verified")
    obs.gate("health", True, "1/1 compliant")
    text = out.getvalue().splitlines()
    assert text == [
        "rollout r1: resuming: 1,100% on 2 nodes -> 2 waves of 1, 1 (100% of 2 = 2: only 1 "
        "left); 1 already finished",
        "== wave 1: 1 node(s): b",
        "[1/2] b: provisioning",
        "[2/2] b: compliant (verified)",
        "gate health: pass: 1/1 compliant",
    ]


def test_live_observer_renders_bars_and_states() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    obs = LiveObserver(console)
    plan = plan_waves(["a", "b"], "1,100%")
    obs.plan(plan, run_id="r1", resumed=False, done={})
    obs.wave_start(plan.waves[0], ["a"])
    obs.node("a", "provisioning", "Install nvidia-gds")
    obs.node("a", "compliant", "verified")
    obs.close()
    text = buf.getvalue()
    assert "rollout r1" in text and "canary" in text and "compliant" in text
    assert obs.progress.tasks[0].completed == 1


def test_observer_choice() -> None:
    from provisioner.rollout.engine import NullObserver

    assert isinstance(make_observer(quiet=True), NullObserver)
    assert isinstance(make_observer(plain=True), PlainObserver)


def test_summary_and_reports(tmp_path: Path) -> None:
    res = _result()
    buf = io.StringIO()
    summary_table(res, buf)
    assert "reboot_pending" in buf.getvalue() and "exit 1" in buf.getvalue()
    from provisioner.reports import write_reports

    write_reports(report_dict(res, location="x"), json_path=str(tmp_path / "r.json"),
                  junit=str(tmp_path / "r.xml"))
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["kind"] == "rollout" and doc["exit_code"] == 1 and doc["ledger"] == "x"
    assert doc["counts"] == {"compliant": 1, "failed": 1, "reboot_pending": 1}
    root = ET.parse(tmp_path / "r.xml").getroot()  # noqa: S314 - our own file
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["canary", "wave 1"]
    assert suites[1].get("failures") == "1" and suites[1].get("skipped") == "1"
    failure = suites[1].find("testcase[@name='b']/failure")
    assert failure is not None and "Install" in (failure.get("message") or "")


def test_plain_wave_end_says_how_many_were_lost() -> None:
    buf = io.StringIO()
    obs = PlainObserver(buf)
    wave = plan_waves(["a", "b"], "1,100%").waves[0]
    obs.wave_end(wave, WaveSummary(0, wave.label, 1, lost=1, passed=False))
    obs.wave_end(wave, WaveSummary(0, wave.label, 1))
    first, second = buf.getvalue().splitlines()
    assert "1 lost (no failure)" in first and first.endswith("STOPPED")
    assert "lost" not in second
