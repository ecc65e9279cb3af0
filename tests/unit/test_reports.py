"""provisioner.reports: documents rebuilt from the ledger, the Prometheus textfile (parsed by
prometheus_client's own parser), JSON/JUnit/HTML from one module, and ``provisioner report``."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.reports import write_prom_textfile, write_reports
from provisioner.reports.html import to_html
from provisioner.reports.model import from_ledger
from provisioner.reports.prom import METRICS, to_prometheus
from provisioner.store import Ledger
from tests.unit import reportsfleet as rf


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, Any]]:
    path, run_id = rf.build(tmp_path_factory.mktemp("reports"))
    with Ledger.open(path, read_only=True) as ledger:
        doc = from_ledger(ledger, run_id, location=path)
    return path, run_id, doc


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict[str, Any], name: str, **labels: str) -> float:
    hits = [s.value for s in fams[name].samples
            if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return float(hits[0])


def test_document_from_the_ledger_marks_drift_and_keeps_gdsio(fleet: Any) -> None:
    _, run_id, doc = fleet
    assert doc["kind"] == "verify" and doc["run_id"] == run_id and doc["schema_version"] == 1
    by = {n["name"]: n for n in doc["nodes"]}
    assert list(by) == list(rf.NODES)
    assert by["gpu-01"]["gdsio"] == rf.GDSIO  # passed through untouched
    assert by["gpu-01"]["raw"] == {"gdscheck": "GDS release version: 1.15"}  # re-attached
    assert by["gpu-01"]["drift"] == [] and by["gpu-04"]["drift"] == []
    assert by["gpu-02"]["drift"][0].startswith("compliance lost")
    assert any(d.startswith("route changed: nvfs -> compat") for d in by["gpu-02"]["drift"])
    assert by["gpu-03"]["drift"][0].startswith("unreachable")
    s = doc["summary"]
    assert (s["compliant"], s["not_compliant"], s["unreachable"]) == (2, 1, 1)
    assert s["routes"] == {"compat": 1, "nvfs": 1, "p2pdma": 1, "unknown": 1}
    assert s["exit_code"] == Exit.UNREACHABLE


def test_prometheus_textfile_parses_with_names_types_labels_and_help(
        fleet: Any, tmp_path: Path) -> None:
    _, run_id, doc = fleet
    target = write_prom_textfile(tmp_path / "textfile", doc, now=1_790_000_000.0)
    assert target.name == "gdsfleet.prom"
    assert [p.name for p in target.parent.iterdir()] == ["gdsfleet.prom"]  # no temp left
    fams = _families(target.read_text())
    assert set(fams) <= set(METRICS)
    for f in fams.values():
        assert f.type == "gauge" and f.name.startswith("gdsfleet_")
        assert f.documentation == METRICS[f.name]
    assert _value(fams, "gdsfleet_node_compliant", node="gpu-01", route="nvfs",
                  io_path="direct") == 1
    assert _value(fams, "gdsfleet_node_compliant", node="gpu-02", route="compat",
                  io_path="compat") == 0
    assert _value(fams, "gdsfleet_node_reachable", node="gpu-03") == 0
    assert _value(fams, "gdsfleet_node_drift", node="gpu-02") == 1
    assert _value(fams, "gdsfleet_node_drift", node="gpu-04") == 0
    assert _value(fams, "gdsfleet_check_status", node="gpu-02", check="nvfs.nvme_registered",
                  status="fail") == 1
    assert _value(fams, "gdsfleet_check_status", node="gpu-02", check="nvfs.nvme_registered",
                  status="pass") == 0
    assert _value(fams, "gdsfleet_io_test_throughput_bytes_per_second", node="gpu-01",
                  direction="read") == pytest.approx(6.75e9)
    assert _value(fams, "gdsfleet_nvfs_io_test_bytes", node="gpu-01", attempt="direct",
                  op="write") == 64 * 2**20
    assert _value(fams, "gdsfleet_nvfs_io_test_operations", node="gpu-02", attempt="compat",
                  op="read") == 0
    assert _value(fams, "gdsfleet_gdsio_throughput_bytes_per_second", node="gpu-01",
                  transfer="gds") == pytest.approx(6.25 * 2**30)
    assert _value(fams, "gdsfleet_gdsio_ratio", node="gpu-01") == 2.5
    assert _value(fams, "gdsfleet_node_verification_timestamp_seconds",
                  node="gpu-01") == pytest.approx(1795323600.0)  # 2026-11-22T05:00:00Z
    assert _value(fams, "gdsfleet_fleet_nodes", result="unreachable") == 1
    assert _value(fams, "gdsfleet_report_info", run_id=run_id, kind="verify") == 1
    # node_exporter runs as its own user: readable, but never wider than the umask allows
    mode = stat.S_IMODE(target.stat().st_mode)
    assert mode == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_label_values_are_escaped_for_the_parser() -> None:
    doc = {"kind": "verify", "run_id": 'r"1', "nodes": [rf.node('odd"name\\x')]}
    fams = _families(to_prometheus(doc, now=0))
    assert _value(fams, "gdsfleet_node_reachable", node='odd"name\\x') == 1


def test_every_format_from_one_call_private_files(fleet: Any, tmp_path: Path) -> None:
    _, _, doc = fleet
    out = {k: str(tmp_path / f"r.{k}") for k in ("json", "xml", "html")}
    write_reports(doc, json_path=out["json"], junit=out["xml"], html=out["html"])
    back = json.loads(Path(out["json"]).read_text())
    assert back["nodes"][0]["gdsio"]["runs"][0]["throughput_gibps"] == 6.25
    suites = ET.parse(out["xml"]).getroot().findall("testsuite")  # noqa: S314 - our file
    assert [s.get("name") for s in suites] == list(rf.NODES)
    assert suites[1].get("failures") == "2" and suites[2].get("errors") == "1"
    for path in out.values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_html_is_self_contained_and_ordered(fleet: Any) -> None:
    _, _, doc = fleet
    page = to_html(doc)
    low = page.lower()
    for banned in ("<script", "<link", "<img", "<iframe", "@import", "url(", "src=", "href="):
        assert banned not in low, banned
    # summary first, then the failing nodes, then the chart, then every node
    order = [page.index(f'id="{s}"') for s in ("summary", "failing", "throughput", "nodes")]
    assert order == sorted(order)
    assert rf.FIX_NVME in page.split('id="throughput"')[0]  # what to do, in the failing part
    assert 'id="failing-gpu-01"' not in page and 'id="failing-gpu-02"' in page
    assert "6.25 / 2.50 (2.50, min 1.20)" in page  # gdsio column of gpu-01


def test_report_command_renders_a_run_of_the_ledger(fleet: Any, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path, run_id, _ = fleet
    before = Path(path).stat().st_mtime_ns
    html, prom = tmp_path / "r.html", tmp_path / "prom"
    rc = main(["report", run_id, "--ledger", path, "--html", str(html),
               "--prom-textfile", str(prom), "--json", str(tmp_path / "r.json")])
    assert rc == Exit.OK
    assert f"run {run_id} (verify): wrote" in capsys.readouterr().out
    assert "gdsfleet_gdsio_ratio" in (prom / "gdsfleet.prom").read_text()
    assert 'class="drift"' in html.read_text()
    assert main(["report", "latest", "--ledger", path]) == Exit.OK
    table = capsys.readouterr().out
    assert "gpu-03" in table and "UNREACHABLE" in table
    assert Path(path).stat().st_mtime_ns == before  # read-only
    assert main(["report", "nope", "--ledger", path]) == Exit.USAGE
    assert "no run 'nope' in the ledger" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["report", run_id, "--ledger", path, "--prom-textfile",
                 str(tmp_path / "file")]) == Exit.USAGE
    assert "is not a directory" in capsys.readouterr().err


def test_rollout_run_from_the_ledger(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "l.sqlite")
    with Ledger.open(path) as ledger:
        plan = {"spec": "1,100%", "waves": [{"index": 0, "label": "canary", "nodes": []},
                                            {"index": 1, "label": "wave 1", "nodes": []}]}
        rid = ledger.start_run("rollout", "inventories/lab", {"plan": plan})
        ledger.record_verification(rid, rf.node("a", gdsio=True), step="compliant", wave=0)
        ledger.set_step(rid, "b", "failed", wave=1,
                        detail={"reason": "failed: task 'Install': boom", "failure": "failed"})
        ledger.finish_run(rid, "not_compliant")
    with Ledger.open(path, read_only=True) as ledger:
        doc = from_ledger(ledger, rid)
    assert doc["kind"] == "rollout" and doc["counts"] == {"compliant": 1, "failed": 1}
    a, b = doc["nodes"]
    assert a["verification"]["gdsio"]["ratio"] == 2.5 and b["verification"] is None
    root = ET.fromstring(write_and_read_junit(doc, tmp_path))  # noqa: S314 - our file
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["canary", "wave 1"]
    assert suites[1].get("failures") == "1"
    page = to_html(doc)
    assert "failed: task &#39;Install&#39;: boom" in page and 'id="failing-b"' in page
    fams = _families(to_prometheus(doc, now=0))
    assert _value(fams, "gdsfleet_gdsio_ratio", node="a") == 2.5
    assert _value(fams, "gdsfleet_node_compliant", node="b", route="unknown",
                  io_path="skipped") == 0
    capsys.readouterr()
    assert main(["report", rid, "--ledger", path]) == Exit.OK
    assert "wave 1  b: failed (failed: task 'Install': boom)" in capsys.readouterr().out


def write_and_read_junit(doc: dict[str, Any], tmp_path: Path) -> str:
    write_reports(doc, junit=str(tmp_path / "j.xml"))
    return (tmp_path / "j.xml").read_text()


class _Report:
    """What verify_node returns (anything with to_dict), here with gdsio's block."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def to_dict(self) -> dict[str, Any]:
        return self.doc


def test_live_verify_writes_html_and_textfile_with_drift(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """verify --local with the node core replaced (its own tests cover it): the second run
    fails, and its live HTML and textfile carry the drift the ledger knows and gdsio's
    figures."""
    import provisioner.verify as verify_pkg

    state = {"ok": True}

    def fake(runner: Any, name: str, policy: Any, io: Any) -> _Report:
        return _Report(rf.node(name, ok=state["ok"], gdsio=True))

    monkeypatch.setattr(verify_pkg, "verify_node", fake)
    ledger, prom, html = tmp_path / "l.sqlite", tmp_path / "prom", tmp_path / "v.html"
    argv = ["verify", "--local", "--ledger", str(ledger), "-q", "--html", str(html),
            "--prom-textfile", str(prom), "--json", str(tmp_path / "v.json")]
    assert main(argv) == Exit.OK
    fams = _families((prom / "gdsfleet.prom").read_text())
    node = fams["gdsfleet_node_compliant"].samples[0].labels["node"]
    assert _value(fams, "gdsfleet_node_drift", node=node) == 0
    state["ok"] = False
    assert main(argv) == Exit.NOT_COMPLIANT
    fams = _families((prom / "gdsfleet.prom").read_text())
    assert _value(fams, "gdsfleet_node_drift", node=node) == 1
    assert _value(fams, "gdsfleet_gdsio_ratio", node=node) == 2.5
    assert _value(fams, "gdsfleet_check_status", node=node, check="gdsio.ratio",
                  status="pass") == 1
    assert "compliance lost" in html.read_text()
    assert json.loads((tmp_path / "v.json").read_text())["nodes"][0]["gdsio"] == rf.GDSIO
    capsys.readouterr()
    (tmp_path / "notadir").write_text("")
    assert main([*argv[:-4], "--prom-textfile", str(tmp_path / "notadir")]) == Exit.USAGE
    assert "--prom-textfile" in capsys.readouterr().err


def test_live_rollout_html(tmp_path: Path) -> None:
    """rollout --html renders RolloutResult's document (as the command does after a run)."""
    from provisioner.reports.cli import write_live
    from provisioner.rollout.progress import report_dict
    from tests.unit.test_rollout_progress import _result

    html = tmp_path / "rollout.html"
    write_live(report_dict(_result(), location="x"), html=str(html), location=None, run_id="run-1")
    page = html.read_text()
    assert "gdsfleet rollout report" in page and 'id="failing-b"' in page
    assert "failed: task &#39;Install&#39;: boom" in page and 'id="failing-a"' not in page
    assert stat.S_IMODE(html.stat().st_mode) == 0o600


def test_json_report_one_node_per_line_parses_as_the_document() -> None:
    """to_json writes each node on one line (the C encoder, 4x faster than indenting a
    fleet's report) and the rest indented; the text parses back to the same document."""
    from datetime import date

    from provisioner.reports import to_json

    doc = {"schema_version": 1, "kind": "verify", "policy": {"expected_route": "any"},
           "nodes": [{"name": f"gpu-{i}", "facts": {"cmdline": "a\nb \"q\" é", "n": [1, 2.5]},
                      "when": date(2026, 11, 24)} for i in range(3)],
           "summary": {"total": 3}}
    text = to_json(doc)
    assert json.loads(text) == json.loads(json.dumps(doc, default=str))
    lines = text.splitlines()
    assert [ln.strip().startswith('{"name": "gpu-') for ln in lines].count(True) == 3
    assert '  "policy": {' in lines and '    "expected_route": "any"' in lines
    assert text.isascii() and text.endswith("}\n")
    # no nodes (or no list of them): indented as a whole, as before
    assert to_json({"nodes": [], "a": 1}) == json.dumps({"nodes": [], "a": 1}, indent=2) + "\n"
