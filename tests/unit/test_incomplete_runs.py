"""An interrupted or empty run never looks clean (issue 47 item 4): ``report latest`` of a
``verify`` interrupted before its first node printed "0 node(s): 0 compliant ... (exit 0)"
and its HTML said "Every node is compliant."; verify's Ctrl-C message promised a resume that
a verification does not have (Low).

Now ``latest`` passes over interrupted, open and empty runs and names each on stderr; a run
rendered on purpose (``report RUN``) says what it is in the terminal, JSON, JUnit, HTML and
Prometheus, and exits 1."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from tests.unit.test_export import _direct


def _interrupted_verify(tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """A real ``provisioner verify`` of 8 nodes, Ctrl-C before the first node finished."""
    import provisioner.commands.verify as verify_cmd

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(verify_cmd, "run_parallel", interrupted)
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\n" + "".join(f"gpu-{i:02d} ansible_host=127.0.0.1\n"
                                              for i in range(1, 9)))
    code = main(["verify", "-i", str(inv), "--ledger", str(ledger), "-q"])
    return code, capsys.readouterr().err


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> tuple[Path, str, str]:
    """A complete run of 2 compliant nodes, then a verify interrupted before any node."""
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as led:
        good = led.start_run("verify", "fleet")
        for n in ("gpu-01", "gpu-02"):
            led.record_verification(good, _direct(n))
        led.finish_run(good, "compliant")
    code, err = _interrupted_verify(tmp_path, path, monkeypatch, capsys)
    assert code == Exit.INTERRUPTED
    with Ledger.open(path) as led:
        bad = led.runs(limit=1)[0]
    assert bad["status"] == "interrupted" and bad["args"]["selected_nodes"] == 8
    return path, good, bad["id"]


def test_verify_says_it_does_not_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _interrupted_verify(tmp_path, tmp_path / "l.sqlite", monkeypatch, capsys)
    assert code == Exit.INTERRUPTED
    assert "to resume" not in err and "a verification does not resume" in err, err


def test_latest_passes_over_the_interrupted_run_and_says_so(
        ledger: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, good, bad = ledger
    assert main(["report", "latest", "--ledger", str(path), "--json", "-"]) == Exit.OK
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["run_id"] == good and doc["incomplete"] is None
    assert doc["summary"]["compliant"] == 2
    assert (f"provisioner report: latest: skipped INCOMPLETE: verify run {bad} was interrupted "
            f"after 0 of 8 node(s)") in err
    assert f"`provisioner report {bad}` renders it" in err


def test_the_interrupted_run_itself_says_so_in_every_format(
        ledger: tuple[Path, str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, _, bad = ledger
    why = f"INCOMPLETE: verify run {bad} was interrupted after 0 of 8 node(s)"
    # terminal
    assert main(["report", bad, "--ledger", str(path)]) == Exit.NOT_COMPLIANT
    out, err = capsys.readouterr()
    assert why in out and why in err
    assert "(exit 0)" not in out
    # JSON, JUnit, HTML, Prometheus
    files = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "html")}
    prom = tmp_path / "prom"
    assert main(["report", bad, "--ledger", str(path), "--json", str(files["json"]),
                 "--junit", str(files["xml"]), "--html", str(files["html"]),
                 "--prom-textfile", str(prom)]) == Exit.NOT_COMPLIANT
    doc = json.loads(files["json"].read_text())
    assert doc["incomplete"].startswith(why) and doc["summary"]["exit_code"] == 1
    root = ET.parse(files["xml"]).getroot()  # noqa: S314 - our own file
    assert root.get("errors") == "1"
    err_el = root.find("testsuite[@name='run']/testcase[@name='complete']/error")
    assert err_el is not None and why in (err_el.get("message") or "")
    page = files["html"].read_text()
    assert "Every node is compliant." not in page and why in page
    assert "<title>INCOMPLETE - " in page
    text = (prom / "gdsfleet.prom").read_text()
    assert "gdsfleet_report_complete 0" in text


def test_only_incomplete_runs_render_the_newest_marked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.sqlite"
    _interrupted_verify(tmp_path, path, monkeypatch, capsys)
    assert main(["report", "latest", "--ledger", str(path), "--json", "-"]) == Exit.NOT_COMPLIANT
    doc = json.loads(capsys.readouterr().out)
    assert doc["incomplete"].startswith("INCOMPLETE: verify run ")


def test_an_empty_finished_run_and_an_open_one(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as led:
        good = led.start_run("verify", "fleet")
        led.record_verification(good, _direct("gpu-01"))
        led.finish_run(good, "compliant")
        empty = led.start_run("verify", "fleet")
        led.finish_run(empty, "compliant")
        still = led.start_run("verify", "fleet")  # open: running, or its process killed
        led.record_verification(still, _direct("gpu-01"))
    assert main(["report", "latest", "--ledger", str(path), "--json", "-"]) == Exit.OK
    out, err = capsys.readouterr()
    assert json.loads(out)["run_id"] == good
    assert f"EMPTY: verify run {empty} recorded no node" in err
    assert f"INCOMPLETE: verify run {still} is not finished" in err


def test_an_open_rollout_is_incomplete_too(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.rollout.planner import plan_waves
    from provisioner.rollout.state import seed_pending

    path = tmp_path / "l.sqlite"
    plan = plan_waves(["a", "b"], "1,100%")
    with Ledger.open(path) as led:
        run = led.start_run("rollout", "fleet", {"plan": plan.to_dict()})
        seed_pending(led, run, plan)
        led.set_step(run, "a", "interrupted", wave=0, detail={"during": "provisioning"})
        led.record_result(run, {"run_id": run, "status": "interrupted", "exit_code": 130,
                                "message": "interrupted by SIGINT", "waves": [], "nodes": []})
    assert main(["report", run, "--ledger", str(path), "--json", "-"]) == Exit.NOT_COMPLIANT
    doc = json.loads(capsys.readouterr().out)
    assert doc["incomplete"] == (f"INCOMPLETE: rollout {run} was interrupted, 1 node(s) "
                                 f"recorded; the same `provisioner rollout` command resumes it")


def test_a_live_complete_run_is_not_marked(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import provisioner.verify as verify_pkg
    from tests.unit.test_cli_verify import fake_verify_node

    monkeypatch.setattr(verify_pkg, "verify_node", fake_verify_node)
    from tests.unit import test_cli_verify

    state = tmp_path / "fake"
    state.mkdir()
    test_cli_verify._FAKE_DIR.append(state)
    try:
        report = tmp_path / "r.json"
        assert main(["verify", "--local", "--ledger", str(tmp_path / "l.sqlite"), "--json",
                     str(report), "-q"]) == Exit.OK
    finally:
        test_cli_verify._FAKE_DIR.remove(state)
    doc = json.loads(report.read_text())
    assert doc["incomplete"] is None and doc["summary"]["incomplete"] is None
    assert doc["summary"]["exit_code"] == Exit.OK
