"""Reports: JSON document fields, JUnit XML (parsed back with xml.etree), terminal rendering."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from provisioner.exitcodes import Exit
from provisioner.reports import write_json, write_junit
from provisioner.reports.junit import verify_junit as to_junit
from provisioner.reports.model import SCHEMA_VERSION, build_report, exit_code
from provisioner.reports.terminal import render
from provisioner.verify.model import CheckResult, IoTestResult, NodeReport


def _node(name: str, *, compliant: bool = True, reachable: bool = True,
          statuses: tuple[str, ...] = ("pass", "pass")) -> dict[str, Any]:
    checks = [CheckResult(f"check.{i}", s, "want", "got", f"message {i}")
              for i, s in enumerate(statuses)]
    return NodeReport(
        name=name, reachable=reachable, compliant=compliant and reachable,
        route="nvfs" if reachable else "unknown", checks=checks if reachable else [],
        io_test=IoTestResult(path_taken="direct", write_gbps=2.5, read_gbps=3.25,
                             bytes=1 << 20, verified=True) if compliant else IoTestResult(),
        error=None if reachable else "gpu-03 (root@127.0.0.1:2203): connection refused",
        started_at="2026-11-22T05:00:00.000000Z", duration_s=1.5,
        raw={"gdscheck": "output"},
    ).to_dict()


def _doc(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return build_report(run_id="20261122T050000Z-abcdef", started_at="2026-11-22T05:00:00Z",
                        finished_at="2026-11-22T05:00:09Z", nodes=nodes, fleet="/inv/lab",
                        policy={"expected_route": "any"}, ledger="/x/ledger.sqlite")


def test_json_document_fields(tmp_path: Path) -> None:
    doc = _doc([_node("b", compliant=False, statuses=("pass", "fail", "warn", "skip")),
                _node("a"), _node("c", reachable=False)])
    path = tmp_path / "out" / "report.json"
    write_json(path, doc)
    back = json.loads(path.read_text())
    assert back["schema_version"] == SCHEMA_VERSION
    assert back["run_id"] == "20261122T050000Z-abcdef"
    assert back["started_at"] == "2026-11-22T05:00:00Z"
    assert [n["name"] for n in back["nodes"]] == ["a", "b", "c"]  # sorted by name
    node = back["nodes"][0]
    for key in ("name", "reachable", "compliant", "route", "checks", "io_test", "error"):
        assert key in node
    assert set(node["checks"][0]) >= {"id", "status", "expected", "observed", "message"}
    assert set(node["io_test"]) >= {"path_taken", "write_gbps", "read_gbps", "bytes", "verified"}
    s = back["summary"]
    assert (s["total"], s["compliant"], s["not_compliant"], s["unreachable"]) == (3, 1, 1, 1)
    assert s["exit_code"] == Exit.UNREACHABLE
    assert list(tmp_path.joinpath("out").iterdir()) == [path]  # no temp file left behind


def test_exit_code_precedence() -> None:
    ok, bad, gone = _node("a"), _node("b", compliant=False), _node("c", reachable=False)
    assert exit_code([ok]) == Exit.OK
    assert exit_code([ok, bad]) == Exit.NOT_COMPLIANT
    assert exit_code([ok, bad, gone]) == Exit.UNREACHABLE
    assert exit_code([dict(ok, internal_error=True), gone]) == Exit.INTERNAL
    assert exit_code([]) == Exit.OK


def test_junit_one_suite_per_node_one_case_per_check(tmp_path: Path) -> None:
    doc = _doc([_node("gpu-01"),
                _node("gpu-02", compliant=False, statuses=("pass", "fail", "warn", "skip")),
                _node("gpu-03", reachable=False)])
    path = tmp_path / "junit.xml"
    write_junit(path, doc)
    root = ET.parse(path).getroot()  # noqa: S314 - our own output
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == ["gpu-01", "gpu-02", "gpu-03"]
    s2 = suites["gpu-02"]
    cases = s2.findall("testcase")
    assert [c.get("name") for c in cases] == ["check.0", "check.1", "check.2", "check.3"]
    assert (s2.get("tests"), s2.get("failures"), s2.get("skipped")) == ("4", "1", "1")
    failed = cases[1].find("failure")
    assert failed is not None and failed.get("message") == "message 1"
    assert "expected: want" in (failed.text or "")
    assert cases[3].find("skipped") is not None
    assert cases[2].find("failure") is None  # warn is not a failure
    s3 = suites["gpu-03"]
    err = s3.find("testcase/error")
    assert err is not None and "connection refused" in (err.get("message") or "")
    assert root.get("tests") == str(2 + 4 + 1) and root.get("failures") == "1"
    assert root.get("errors") == "1"


def test_junit_escapes_markup() -> None:
    n = _node("x", compliant=False, statuses=("fail",))
    n["checks"][0]["message"] = 'bad <tag> & "quote"'
    root = ET.fromstring(to_junit(_doc([n])).split("\n", 1)[1])  # noqa: S314
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == 'bad <tag> & "quote"'


def test_plain_render_when_not_a_tty() -> None:
    buf = io.StringIO()
    render(_doc([_node("gpu-01"), _node("gpu-02", compliant=False, statuses=("pass", "fail"))]),
           buf)
    out = buf.getvalue()
    assert "\x1b[" not in out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NODE", "RESULT"]
    assert any(ln.startswith("gpu-01") and "COMPLIANT" in ln and "2.50/3.25" in ln
               for ln in lines)
    assert any(ln.startswith("gpu-02") and "NOT COMPLIANT" in ln and "check.1" in ln
               for ln in lines)
    assert "  FAIL check.1: message 1 [expected want; observed got]" in out
    assert "2 node(s): 1 compliant, 1 not compliant, 0 unreachable (exit 1)" in out


def test_rich_render_on_a_terminal() -> None:
    buf = io.StringIO()
    render(_doc([_node("gpu-01")]), buf, color=True)
    assert "\x1b[" in buf.getvalue()
    assert "gpu-01" in buf.getvalue()
