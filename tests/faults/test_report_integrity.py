"""Fault injection: what a secret, a hostile node document or a hostile ledger row may do to
the reports (issue 27, items 2, 5, 8, 9 and 10).

Each test names the issue's item it covers and failed on the code before the fix. The base
document is a real verify report of the H100 node (docs/evidence/h100-reports/
verify-gdsio.json: NOT COMPLIANT, compat route, gdsio runs), rendered by the report writers
the CLI uses; the CLI runs in process with a stand-in node interpreter
(tests/faults/test_hostile_node.py's ``answering``).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provisioner import redact
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.reports import to_json
from provisioner.reports.files import safe_document
from provisioner.reports.junit import to_junit
from provisioner.reports.prom import to_prometheus
from tests.faults.test_hostile_node import answering, gather_doc

REPO = Path(__file__).resolve().parents[2]
H100_REPORT = REPO / "docs" / "evidence" / "h100-reports" / "verify-gdsio.json"


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


def h100_doc() -> dict[str, Any]:
    return dict(json.loads(H100_REPORT.read_text()))


def keys_of(doc: Any) -> set[str]:
    out: set[str] = set()
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.update(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def strict_json(text: str) -> Any:
    """JSON as a strict consumer reads it: NaN and Infinity refused."""
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def rendered(doc: dict[str, Any]) -> dict[str, str]:
    safe = safe_document(doc)
    return {"json": to_json(safe), "junit": to_junit(safe),
            "prom": to_prometheus(safe, now=1_700_000_000.0)}


# ============================================================ 2. a secret's value
def test_2_no_status_word_or_report_key_as_a_secret_alters_a_report() -> None:
    """Item 2: with each check status, node result, route, I/O path and every key of a real
    report as the value of ``PGPASSWORD``, the JSON, JUnit and Prometheus renderings of that
    report are byte for byte those without a secret. Before: ``PGPASSWORD=fail`` turned
    every failed check into ``***`` (JUnit: 0 failures; Prometheus: ``status="***"``),
    ``PGPASSWORD=node`` renamed the key ``nodes``."""
    from provisioner.reports.model import (
        RESULT_COMPLIANT,
        RESULT_ERROR,
        RESULT_NOT_COMPLIANT,
        RESULT_UNREACHABLE,
    )
    from provisioner.verify.model import PATHS, ROUTES, STATUSES

    doc = h100_doc()
    baseline = rendered(doc)
    words = {*STATUSES, *ROUTES, *PATHS, RESULT_COMPLIANT, RESULT_NOT_COMPLIANT,
             RESULT_UNREACHABLE, RESULT_ERROR, "node", "test", *keys_of(doc)}
    changed = []
    for word in sorted(words):
        redact.forget_all()
        redact.register_argv([], {"PGPASSWORD": word})
        if rendered(doc) != baseline:
            changed.append(word)
    assert not changed, changed
    assert len(words) > 250  # the real report's keys were all tried


def test_2_keys_enumerated_values_and_numbers_survive_any_registered_secret() -> None:
    """Item 2: even a secret registered past the refusal (a long one that is part of a
    status word or of a key) never alters a key, a status, a route, a path or a number; a
    secret-named field is masked whole, and free text is still masked."""
    doc = h100_doc()
    node = doc["nodes"][0]
    node["db_password"] = "hunter2-long-secret"  # noqa: S105 - a test canary
    node["error"] = "driver said: hunter2-long-secret is wrong"
    for secret in ("unreachabl", "not compli", "p2pdma_x", "_release"):
        redact.register(secret)
    redact.register("hunter2-long-secret")
    out = strict_json(rendered(doc)["json"])
    got = out["nodes"][0]
    assert keys_of(out) == keys_of(doc)
    assert [c["status"] for c in got["checks"]] == [c["status"] for c in node["checks"]]
    assert got["route"] == node["route"] and got["io_test"]["path_taken"] == \
        node["io_test"]["path_taken"]
    assert got["db_password"] == redact.REDACTED
    assert got["error"] == "driver said: *** is wrong"
    assert out["summary"] == doc["summary"]


@pytest.mark.parametrize("secret", ["fail", "node", "test", "nodes", "passed", "compliant"])
def test_2_verify_with_a_common_secret_keeps_its_verdicts_and_says_why_it_is_not_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        secret: str) -> None:
    """Item 2, through the CLI: ``PGPASSWORD=fail`` (or node, test, ...) on a NOT COMPLIANT
    node: the JUnit report counts its failures, the textfile keeps ``status="fail"`` and
    every per-node metric, the JSON keeps ``nodes``; one warning line names the variable
    (never the value) and why it is not masked in free text. Before: 0 JUnit failures,
    ``status="***"``, ``***s``, and no word about it."""
    monkeypatch.setenv("PGPASSWORD", secret)
    bin_dir = answering(tmp_path, gather_doc(os_release="ID=debian\n"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    prom = tmp_path / "prom"
    prom.mkdir()
    code = main(["verify", "--local", "--no-io-test", "--no-ledger", "--json",
                 str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
                 "--prom-textfile", str(prom)])
    _out, err = capsys.readouterr()
    assert code == Exit.NOT_COMPLIANT
    doc = strict_json((tmp_path / "r.json").read_text())
    assert doc["nodes"][0]["compliant"] is False
    fails = [c for c in doc["nodes"][0]["checks"] if c["status"] == "fail"]
    assert fails
    root = ET.parse(tmp_path / "j.xml").getroot()  # noqa: S314 - our own output
    assert int(root.get("failures") or root[0].get("failures") or 0) == len(fails)
    families = {f.name: f for f in text_string_to_metric_families(
        (prom / "gdsfleet.prom").read_text())}
    statuses = {s.labels["status"] for s in families["gdsfleet_node_checks"].samples}
    assert statuses == {"pass", "warn", "skip", "fail"}
    assert "$PGPASSWORD is not masked in free text" in err
    assert ("too short" in err) if len(secret) < redact.MIN_FREE_TEXT \
        else ("a word every report is made of" in err)


# ============================================================ 5. deep nesting
def deep(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


@pytest.mark.parametrize("levels", [700, 5000])
def test_5_a_deeply_nested_node_document_renders_in_every_format_now_and_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        levels: int) -> None:
    """Item 5: a node whose ``nvme_topology`` is nested 700 (or 5000) levels: verify
    writes every format and exits NOT COMPLIANT, and ``report latest`` renders that stored
    run again as JSON, JUnit and HTML. Before: JUnit and HTML exited 70 (RecursionError in
    printable_document) after the ledger and the JSON were written, and ``report latest
    --junit/--html`` failed on that run forever."""
    from html.parser import HTMLParser

    bin_dir = answering(tmp_path, gather_doc(os_release="ID=debian\n",
                                             nvme_topology=deep(levels)))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    ledger = tmp_path / "l.sqlite"
    fmt = ["--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
           "--html", str(tmp_path / "r.html")]
    code = main(["verify", "--local", "--no-io-test", "--ledger", str(ledger), *fmt])
    _out, err = capsys.readouterr()
    assert code == Exit.NOT_COMPLIANT, err
    for argv in (["report", "latest", "--ledger", str(ledger), *fmt], ["report", "latest",
                                                                      "--ledger", str(ledger)]):
        code = main(argv)
        _out, err = capsys.readouterr()
        assert code == Exit.OK, err
        strict_json((tmp_path / "r.json").read_text())
        ET.parse(tmp_path / "j.xml")  # noqa: S314 - our own output
        HTMLParser().feed((tmp_path / "r.html").read_text())


def test_5_printable_document_walks_any_depth() -> None:
    """Item 5: the escaping walk of the JUnit and HTML writers copes with any depth (it
    raised RecursionError past about 1,000 levels' worth of frames)."""
    from provisioner.sanitize import printable_document

    doc: Any = "\x1b"
    for _ in range(20_000):
        doc = {"a": [doc]}
    out = printable_document(doc)
    for _ in range(20_000):
        out = out["a"][0]
    assert out == "\\x1b"


# ============================================================ 8. NaN and Infinity
def _ledger_with(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    from provisioner.store import Ledger

    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as ledger:
        run = ledger.start_run("verify", "inventories/lab", {})
        for doc in docs:
            ledger.record_verification(run, doc, step="verified")
        ledger.finish_run(run, "not_compliant")
    return path


def test_8_nan_and_infinity_become_null_in_json_and_a_dash_in_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 8: a node record whose I/O figures are NaN and Infinity (and a gdsio ratio of
    NaN): ``report``'s JSON and ``status --json``/``history --json`` parse strictly (the
    figures are null), the table shows ``-``, the textfile parses and drops them. Before:
    ``NaN``/``Infinity`` in the JSON (strict parsers refuse the file), ``nan/inf`` in the
    table."""
    from tests.unit.reportsfleet import node

    doc = node("gpu-01", gdsio=True, write=float("nan"), read=float("inf"))
    doc["gdsio"] = dict(doc["gdsio"], ratio=float("nan"))
    ledger = _ledger_with(tmp_path, doc)
    prom = tmp_path / "prom"
    prom.mkdir()
    assert main(["report", "latest", "--ledger", str(ledger), "--json", "-",
                 "--prom-textfile", str(prom)]) == Exit.OK
    out = strict_json(capsys.readouterr().out)
    io = out["nodes"][0]["io_test"]
    assert io["write_gbps"] is None and io["read_gbps"] is None
    assert out["nodes"][0]["gdsio"]["ratio"] is None
    list(text_string_to_metric_families((prom / "gdsfleet.prom").read_text()))
    assert main(["report", "latest", "--ledger", str(ledger)]) == Exit.OK
    # the first line names the ledger, whose path (this test's tmp_path) says "nan"
    first, table = capsys.readouterr().out.split("\n", 1)
    assert first == f"ledger {ledger}"
    assert "nan" not in table.lower() and "inf/" not in table.lower() and "-/-" in table
    for argv in (["status", "--json"], ["history", "gpu-01", "--json"]):
        assert main([*argv, "--ledger", str(ledger)]) == Exit.OK
        strict_json(capsys.readouterr().out)


def test_8_the_io_test_document_never_yields_a_non_finite_figure() -> None:
    """Item 8, at the source: NaN/Infinity constants in the node's I/O document read as
    null, and a time so small that the throughput overflows (or an integer too large for a
    float) gives no figure."""
    from provisioner.verify.iotest import evaluate, last_json

    line = ('{"status": "ok", "size_bytes": 16777216, "duration_s": NaN, "attempts": ['
            '{"mode": "OFF", "ok": false, "error": "refused"}, {"mode": "ON", "ok": true, '
            '"verified": true, "write_s": 1e-320, "read_s": 1' + "0" * 400 + '}], '
            '"cufile_scope": Infinity, "stats_before": -Infinity}')
    doc = last_json("noise\n" + line + "\n")
    assert doc is not None
    result = evaluate(doc).to_dict()
    text = json.dumps(result, allow_nan=False, default=str)  # raises on NaN/Infinity
    assert result["write_gbps"] is None and result["read_gbps"] is None, text


# ============================================================ 10. Prometheus labels
@pytest.mark.parametrize("bad", ["\r", "\x1b[2J", "\u2028", "\u2029", "\x85", "\x0b", "\x0c",
                                 "\x1c", "\x00", "\n", "\\", '"', "\ud800", "}{x=\"1\""])
def test_10_a_hostile_gdsio_transfer_label_parses_and_holds_no_raw_control(bad: str) -> None:
    """Item 10: the node-controlled gdsio ``transfer`` label (and the node name) holding
    CR, ESC, U+2028 and the like: the textfile holds none of them raw, prometheus_client's
    parser reads it, with the same series as without. Before: raw CR and ESC were written
    (``cat`` ran the escapes; the parser split the line at the CR)."""
    from tests.unit.reportsfleet import node

    n = node("gpu-01", gdsio=True)
    gdsio = dict(n["gdsio"])
    gdsio["runs"] = [dict(r, transfer=f"gds{bad}x") for r in gdsio["runs"][:1]]
    n["gdsio"] = gdsio
    doc: dict[str, Any] = {"kind": "verify", "run_id": "r", "nodes": [n]}
    text = to_prometheus(doc, now=1_700_000_000.0)
    text.encode("utf-8", "surrogatepass")
    for raw in ("\r", "\x1b", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x00",
                "\ud800"):
        assert raw not in text, repr(raw)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    series = families["gdsfleet_gdsio_throughput_bytes_per_second"].samples
    assert len(series) == 1 and series[0].labels["transfer"].startswith("gds")


# ============================================================ 9. another writer's rows
def _insert(ledger: Path, report_json: str, node: str = "gpu-01") -> None:
    """Another writer's row: a verification of the ledger's run, appended by plain SQL
    (the table is append-only), a second later than the first."""
    import sqlite3

    with sqlite3.connect(ledger) as conn:
        conn.execute(
            "INSERT INTO verifications (run_id, node, at, reachable, compliant, route, "
            "path_taken, report_json, raw_json) SELECT run_id, ?, "
            "replace(at, substr(at, 18, 2), printf('%02d', (substr(at, 18, 2) + 1) % 60)), "
            "reachable, compliant, route, path_taken, ?, raw_json FROM verifications "
            "WHERE id = 1", (node, report_json))


READERS = (["report", "latest"], ["report", "latest", "--json", "-"], ["status"],
           ["status", "--json"], ["history", "gpu-01"], ["export", "deepspeed", "--node",
                                                         "gpu-01"],
           ["export", "env", "--node", "gpu-01", "--format", "json"])


@pytest.mark.parametrize(("field", "value"), [
    ("checks", 5), ("io_test", "x"), ("checks", ["x"]), ("gdsio", "x"), ("raw", [1]),
    ("io_test", {"evidence": 5}), ("io_test", {"write_gbps": "fast"}), ("route", [1]),
    ("gdsio", {"runs": [1]}), ("facts", "x"), ("error", {"a": 1}),
    ("checks", [{"id": "nvfs.loaded", "status": "\x00odd"}]), ("gdsio", {"workers": "many"}),
])
def test_9_a_row_of_another_shape_is_exit_74_naming_the_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any) -> None:
    """Item 9: a verification row written by another writer (a shared ledger) with valid
    JSON of another shape: report, status, history and export exit 74 with one line that
    names the row and the field; none exits 70. Before: AttributeError/TypeError, exit 70."""
    from tests.unit.reportsfleet import node

    ledger = _ledger_with(tmp_path, node("gpu-01", gdsio=True))
    doc = node("gpu-01", gdsio=True)
    doc[field] = value
    _insert(ledger, json.dumps(doc))
    for argv in READERS:
        code = main([*argv, "--ledger", str(ledger)])
        _out, err = capsys.readouterr()
        assert code == Exit.LEDGER, (argv, code, err)
        assert "verifications id 2" in err and "gpu-01" in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_9_a_node_name_with_escape_sequences_reaches_no_error_line_raw(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 9: the row's node name holds escape sequences: the error line shows them
    escaped. Before: the top-level error line printed them raw."""
    from tests.unit.reportsfleet import node

    ledger = _ledger_with(tmp_path, node("gpu-01"))
    evil = "gpu-01\x1b]0;owned\x07\x1b[2J\r\u202e"
    doc = node(evil)
    doc["checks"] = 5
    _insert(ledger, json.dumps(doc), node=evil)
    for argv in (["report", "latest"], ["status"], ["export", "deepspeed", "--node", evil]):
        code = main([*argv, "--ledger", str(ledger)])
        _out, err = capsys.readouterr()
        assert code == Exit.LEDGER, (argv, code, err)
        for raw in ("\x1b", "\x07", "\r", "\u202e"):
            assert raw not in err, (argv, err)
        assert "\\x1b]0;owned" in err


def test_9_nan_written_by_another_writer_renders_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 9: NaN and Infinity in a row of another writer (JSON text ``NaN``): every reader
    exits 0 and its JSON parses strictly. Before: NaN reached the JSON output."""
    from tests.unit.reportsfleet import node

    ledger = _ledger_with(tmp_path, node("gpu-01", gdsio=True))
    text = json.dumps(node("gpu-01", gdsio=True)).replace('"read_gbps": 3.25',
                                                          '"read_gbps": NaN').replace(
        '"ratio": 2.5', '"ratio": Infinity')
    assert "NaN" in text and "Infinity" in text
    _insert(ledger, text)
    for argv in READERS:
        code = main([*argv, "--ledger", str(ledger)])
        out, err = capsys.readouterr()
        assert code in (Exit.OK, Exit.NOT_COMPLIANT), (argv, code, err)
        assert "NaN" not in out and "Infinity" not in out, (argv, out)
        if "--json" in argv:
            strict_json(out)


def test_2_a_secret_that_is_not_utf8_is_registered_and_the_command_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Item 2 (found by the fuzzer): an environment secret holding bytes that are not UTF-8
    (os.environ keeps them as lone surrogates) is registered with its URL-encoded form, and
    the command runs. Before: ``quote()`` raised UnicodeEncodeError at start-up, before any
    error handling: a traceback from every command."""
    monkeypatch.setenv("PGPASSWORD", "pw-\udcff\udcfe-long")
    code = main(["status", "--ledger", str(tmp_path / "absent.sqlite")])
    _out, err = capsys.readouterr()
    assert code == Exit.LEDGER, err
    assert "pw-%FF%FE-long" in redact.registered()


def test_9_a_node_name_that_is_not_utf8_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 9 (found by the fuzzer): ``history`` and ``export --node`` with a node name whose
    bytes are not UTF-8 (argv keeps them as lone surrogates) exit 64 with one escaped line.
    Before: UnicodeEncodeError in the ledger query, exit 70."""
    from tests.unit.reportsfleet import node

    ledger = _ledger_with(tmp_path, node("gpu-01"))
    bad = "gpu-\udcff\x1b[2J"
    for argv in (["history", bad], ["export", "deepspeed", "--node", bad],
                 ["export", "env", "--node", bad]):
        code = main([*argv, "--ledger", str(ledger)])
        _out, err = capsys.readouterr()
        assert code == Exit.USAGE, (argv, code, err)
        assert "not UTF-8" in err and "\x1b" not in err and "\udcff" not in err, err


# ============================================================ found by the fuzzer
def test_fuzz_found_the_terminal_title_shows_the_run_id_escaped() -> None:
    """A ledger run id (another writer's) holding escape sequences: the Rich table's title
    shows them escaped. Before: printed raw (only the rows were escaped)."""
    import io

    from provisioner.reports.terminal import render

    buf = io.StringIO()
    render({"run_id": "r\x1b]0;owned\x07\x1c", "nodes": []}, buf, color=True)
    text = buf.getvalue()
    assert "\x1b]0;owned" not in text and "\x07" not in text and "\x1c" not in text
    assert "\\x1b]0;owned" in text


def test_fuzz_found_an_integer_past_any_float_renders_everywhere() -> None:
    """A node's 10**400 (JSON integers have no bound) in its I/O figures: every writer
    renders, the figure is null in JSON and '-' in the table. Before: OverflowError in the
    HTML chart and the table, exit 70."""
    import io
    from html.parser import HTMLParser

    from provisioner.reports.html import to_html
    from provisioner.reports.terminal import render
    from tests.unit.reportsfleet import node

    n = node("gpu-01", gdsio=True)
    n["io_test"]["write_gbps"] = 10 ** 400
    doc = {"kind": "verify", "run_id": "r", "nodes": [n]}
    out = rendered(doc)
    assert strict_json(out["json"])["nodes"][0]["io_test"]["write_gbps"] is None
    HTMLParser().feed(to_html(safe_document(doc)))
    buf = io.StringIO()
    render(doc, buf, color=False)
    assert "-/3.25" in buf.getvalue()
