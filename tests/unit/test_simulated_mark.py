"""A simulated run is never read as hardware (issue 30 item 6): the inventory's
``gdsfleet_simulated`` (set by the operator, as inventories/lab does; never detected) reaches
each node's ledger record through ``verify`` and the rollout's verifier, and ``status``, the
HTML, JSON, JUnit and Prometheus outputs all mark it. Inventory data: a boolean only."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.cli import main
from provisioner.errors import InventoryError
from provisioner.exitcodes import Exit
from provisioner.inventory import Node, load_inventory, simulated_flag
from provisioner.reports.html import to_html
from provisioner.reports.junit import to_junit
from provisioner.reports.model import build_report
from provisioner.reports.prom import to_prometheus
from provisioner.store import Ledger
from tests.unit.reportsfleet import node

ROOT = Path(__file__).resolve().parents[2]
BANNER = "SIMULATED: 1 of 2 node(s) are marked simulated by their inventory (gdsfleet_simulated)"


def _inventory(tmp_path: Path, value: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        n1: {ansible_host: 127.0.0.1, ansible_port: 2991}\n"
        "        n2: {ansible_host: 127.0.0.1, ansible_port: 2992, gdsfleet_simulated: false}\n")
    (inv / "group_vars" / "all" / "sim.yml").write_text(f"gdsfleet_simulated: {value}\n")
    return inv


# ------------------------------------------------------------------ the inventory variable
def test_the_lab_inventory_says_it_is_a_simulation() -> None:
    inv = load_inventory(ROOT / "inventories" / "lab")
    assert inv.nodes and all(n.simulated for n in inv.nodes)


def test_example_inventory_nodes_are_not_simulated() -> None:
    inv = load_inventory(ROOT / "inventories" / "example")
    assert inv.nodes and not any(n.simulated for n in inv.nodes)


def test_a_yaml_boolean_is_read_and_host_vars_win(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "true"))
    assert {n.name: n.simulated for n in inv.nodes} == {"n1": True, "n2": False}


@pytest.mark.parametrize("value", ['"yes"', '"true"', "1", "[true]", "'{{ 1 }}'"])
def test_anything_but_a_boolean_is_refused_naming_the_fix(tmp_path: Path, value: str) -> None:
    with pytest.raises(InventoryError) as exc:
        load_inventory(_inventory(tmp_path, value))
    msg = str(exc.value)
    assert "gdsfleet_simulated=" in msg and "is not a boolean" in msg
    assert "write gdsfleet_simulated: true" in msg and "group_vars/" in msg


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.one_of(st.text(max_size=300), st.integers(), st.floats(allow_nan=True),
                 st.lists(st.booleans(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                     st.booleans(), max_size=2)))
def test_no_other_value_is_guessed_at(value: Any) -> None:
    with pytest.raises(InventoryError) as exc:
        simulated_flag("h", value)
    msg = str(exc.value)
    assert len(msg) < 400  # a long value is cut, not echoed whole
    assert simulated_flag("h", True) is True and simulated_flag("h", None) is False


# ------------------------------------------------------------------ into the records
def test_rollout_verifier_marks_every_record_unreachable_ones_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import provisioner.verify
    from provisioner.errors import ConnectError
    from provisioner.rollout.adapters import SshVerifier
    from provisioner.verify.model import IoTestOptions, NodeReport

    monkeypatch.setattr(provisioner.verify, "verify_node", lambda _r, name, _p, _io: NodeReport(
        name=name, reachable=True, compliant=True, route="nvfs"))

    class Runner:
        def connect(self) -> None: ...
        def close(self) -> None: ...

    def make(n: Node) -> Runner:
        if n.name == "c":
            raise ConnectError("c: no route to host")
        return Runner()

    nodes = {"a": Node("a", "192.0.2.1", simulated=True), "b": Node("b", "192.0.2.2"),
             "c": Node("c", "192.0.2.3", simulated=True)}
    out = SshVerifier(nodes, policy="p", io=IoTestOptions(), cheap_io=IoTestOptions(),
                      parallel=1, make_runner=make).verify(["a", "b", "c"], cheap=False,
                                                           on_report=lambda d: None)
    assert {k: v["simulated"] for k, v in out.items()} == {"a": True, "b": False, "c": True}


def test_verify_records_the_mark_in_the_ledger_and_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import provisioner.ssh
    from provisioner.commands import verify

    monkeypatch.setattr(verify, "verify_one", lambda _r, name, _p, _io, **_k: dict(
        node(name), simulated="stale"))  # verify's own mark replaces whatever came back
    monkeypatch.setattr(provisioner.ssh, "runner_factory", lambda _s: (lambda n: n))
    db, report = tmp_path / "l.sqlite", tmp_path / "r.json"
    code = main(["verify", "-q", "-i", str(_inventory(tmp_path, "true")), "--ledger", str(db),
                 "--json", str(report)])
    assert code == Exit.OK, capsys.readouterr().err
    doc = json.loads(report.read_text())
    assert {n["name"]: n["simulated"] for n in doc["nodes"]} == {"n1": True, "n2": False}
    assert doc["summary"]["simulated"] == 1
    with Ledger.open(db) as led:
        assert {r["node"]: r["simulated"] for r in led.latest()} == {"n1": True, "n2": False}


# ------------------------------------------------------------------ what every output says
@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "lab.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, dict(node("lab-01"), simulated=True))
        led.record_verification(run, node("gpu-02"))
        led.finish_run(run, "compliant")
    return path


def test_status_says_so_under_the_ledger_line_and_on_the_row(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--ledger", str(ledger)]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"ledger {ledger}"
    assert lines[1].startswith(BANNER)
    rows = {ln.split()[0]: ln for ln in lines[2:] if ln.strip()}
    assert "  SIMULATED; failing: io.direct_path" in rows["lab-01"]
    assert "SIMULATED" not in rows["gpu-02"]
    assert main(["status", "--ledger", str(ledger), "--json"]) == Exit.OK
    nodes = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert nodes["lab-01"]["simulated"] is True and nodes["gpu-02"]["simulated"] is False


def test_history_marks_each_simulated_record(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "lab-01", "--ledger", str(ledger)]) == Exit.OK
    assert capsys.readouterr().out.splitlines()[3].endswith("  SIMULATED")
    assert main(["history", "gpu-02", "--ledger", str(ledger)]) == Exit.OK
    assert "SIMULATED" not in capsys.readouterr().out
    assert main(["history", "lab-01", "--ledger", str(ledger), "--json"]) == Exit.OK
    assert json.loads(capsys.readouterr().out)["history"][0]["simulated"] is True


def test_status_of_real_nodes_says_nothing_of_simulation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "real.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        # a hostile or older record: only a JSON true is a mark
        led.record_verification(run, dict(node("gpu-01"), simulated="yes"))
        led.finish_run(run, "compliant")
    assert main(["status", "--ledger", str(path)]) == Exit.OK
    assert "SIMULATED" not in capsys.readouterr().out


def _doc() -> dict[str, Any]:
    return build_report(run_id="r1", started_at="2026-11-22T05:00:00Z",
                        finished_at="2026-11-22T05:01:00Z",
                        nodes=[dict(node("lab-01"), simulated=True), node("gpu-02")])


def test_html_has_a_banner_and_a_mark_per_node() -> None:
    page = to_html(_doc())
    assert f'id="simulated">{BANNER}' in page
    assert "<title>SIMULATED - gdsfleet verify r1</title>" in page
    assert page.count('data-simulated="true"') == 1
    assert '<tr data-node="lab-01" data-simulated="true"><td>lab-01 <span class="sim"' in page
    assert '<tr data-node="gpu-02"><td>gpu-02</td>' in page
    real = to_html(build_report(run_id="r2", started_at="", finished_at="",
                                nodes=[node("gpu-02")]))
    assert "SIMULATED" not in real and 'class="sim"' not in real


def test_rollout_html_junit_and_prometheus_carry_the_mark() -> None:
    ver = dict(node("lab-01"), simulated=True)
    doc = {"kind": "rollout", "run_id": "r9", "plan": {"waves": [{"index": 0, "label": "canary"}]},
           "nodes": [{"name": "lab-01", "wave": 0, "step": "compliant", "verification": ver},
                     {"name": "gpu-02", "wave": 0, "step": "compliant",
                      "verification": node("gpu-02")}]}
    assert "SIMULATED: 1 of 2 node(s)" in to_html(doc)
    root = ET.fromstring(to_junit(doc))  # noqa: S314 - our own document
    marks = {c.get("name"): [p.get("value") for p in
                             c.iterfind("properties/property[@name='simulated']")]
             for c in root.iter("testcase")}
    assert marks == {"lab-01": ["true"], "gpu-02": ["false"]}
    text = to_prometheus(doc, now=0.0)
    assert 'gdsfleet_node_compliant{node="lab-01",route="nvfs",io_path="direct",' \
           'simulated="true"} 1' in text
    assert 'node="gpu-02",route="nvfs",io_path="direct",simulated="false"} 1' in text


def test_verify_junit_and_terminal_summary_carry_the_mark() -> None:
    from provisioner.reports.terminal import summary_line

    root = ET.fromstring(to_junit(_doc()))  # noqa: S314 - our own document
    props = {s.get("name"): [p.get("value") for p in
                             s.iterfind("properties/property[@name='simulated']")]
             for s in root.iter("testsuite")}
    assert props == {"lab-01": ["true"], "gpu-02": ["false"]}
    assert summary_line(_doc()).splitlines()[1].startswith(BANNER)
