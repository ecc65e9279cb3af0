"""Property fuzzing of the report writers and the ledger readers (issue 27, the fuzzer).

Hostile node documents (a real H100 node record with its strings, numbers and containers
replaced at random: control characters, lone surrogates, bidi overrides, Rich markup, NaN and
Infinity, huge numbers, deep nesting, values of another type) go through every report writer
(terminal, JSON, JUnit, HTML, Prometheus); hostile ledger rows (another writer's rows: such
documents, text that is not JSON, rows of another shape, node names with escape sequences)
go through ``status``, ``history``, ``report`` (every format) and ``export``. Properties:

* no writer and no command raises or exits 70 (a bug); a row the readers cannot use is exit
  74 naming it;
* terminal, XML, HTML and Prometheus output hold no raw control character;
* each output parses with its consumer's parser: strict JSON (``parse_constant`` refusing
  NaN/Infinity), ``xml.etree``, ``html.parser``, ``prometheus_client.parser``;
* every stored run renders (a run ``report`` reads is rendered in every format).

Hypothesis draws each example's seed, and the generators run on a ``random.Random`` of it
(a node record mutated takes more choices than Hypothesis's buffer holds): the fast lane runs
the derandomized profile of tests/conftest.py with a bounded number of examples; a longer run
is ``GDSFLEET_FUZZ_EXAMPLES=2000 GDSFLEET_FUZZ_RANDOM=1 pytest
tests/faults/test_fuzz_reports.py`` (docs/testing.md). A failure prints its falsifying seed.
"""

from __future__ import annotations

import io
import json
import os
import random
import sqlite3
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from provisioner import redact
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.reports import to_json
from provisioner.reports.files import safe_document
from provisioner.reports.html import to_html
from provisioner.reports.junit import to_junit
from provisioner.reports.prom import to_prometheus
from provisioner.reports.terminal import render

REPO = Path(__file__).resolve().parents[2]
H100_REPORT = REPO / "docs" / "evidence" / "h100-reports" / "verify-gdsio.json"
EXAMPLES = int(os.environ.get("GDSFLEET_FUZZ_EXAMPLES", "0"))  # 0: the fast lane's counts

# what a terminal, an XML or HTML parser or a Prometheus line reader acts on
RAW_CONTROLS = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n"] + ["\x7f"]
    + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u2028", "\u2029", "\u202e", "\u202d", "\u2066", "\u200f", "\ufeff", "\ufffe",
       "\uffff"] + [chr(c) for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF)])
PIECES = [
    "\x1b[2J", "\x1b]0;owned\x07", "\r", "\x00", "\x9b31m", "\u202e", "\u2028", "\u2029",
    "\x85", "\x0b", "\x0c", "\x1c", "\ud800", "\udfff", "\ufffe", "\x7f", "[/x]", "[bold]",
    "<script>", "]]>", "&amp;", '"', "'", "\\", "\n", "\t", "}{", "# HELP x", "fail", "nodes",
    "postgresql://u:pw@h/db", "NaN", "é", "\U0001f600", "x" * 300,
]


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


# Hypothesis draws each example's seed; the generators below make thousands of choices per
# example (a whole node record mutated), more than Hypothesis's own choice buffer holds, so
# they run on a random.Random of that seed: a failure prints its falsifying seed, which
# replays it. capsys is read after every command: it carries nothing between examples.
SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
_HEALTH = [HealthCheck.large_base_example, HealthCheck.data_too_large, HealthCheck.too_slow,
           HealthCheck.function_scoped_fixture]


def count(fast: int) -> int:
    return EXAMPLES or fast


# ----------------------------------------------------------------------------- generators
def hostile_text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) if rng.random() < 0.6 else chr(rng.randrange(0x110000))
                   for _ in range(rng.randrange(1, 6)))


def hostile_number(rng: random.Random) -> Any:
    return rng.choice([float("nan"), float("inf"), float("-inf"), 10 ** 400, -(10 ** 30),
                       1e308, -0.0, 5e-324, True, 0, rng.uniform(-1e9, 1e9)])


def nested(rng: random.Random, levels: int) -> Any:
    doc: Any = hostile_text(rng)
    for _ in range(levels):
        doc = {hostile_text(rng): doc} if rng.random() < 0.5 else [doc]
    return doc


def hostile_value(rng: random.Random, *, shape: bool) -> Any:
    """A replacement for one value; ``shape``: also values of another type or nesting."""
    roll = rng.random()
    if roll < 0.5:
        return hostile_text(rng)
    if roll < 0.75 or not shape:
        return hostile_number(rng)
    # (700 levels: json.dumps of a ledger row cannot go much deeper; the rows test adds a
    # 5000-level row as text, and typed_node a 3000-level value)
    return rng.choice([None, [], {}, nested(rng, rng.choice([3, 80, 700])),
                       [hostile_text(rng), hostile_number(rng)],
                       {hostile_text(rng): hostile_text(rng)}])


def mutate(rng: random.Random, doc: Any, *, shape: bool, rate: float = 0.08) -> Any:
    """A copy of ``doc`` with about ``rate`` of its values replaced (strings and numbers by
    hostile ones; with ``shape``, containers too, and hostile keys added)."""
    if isinstance(doc, dict):
        out: dict[Any, Any] = {}
        for k, v in doc.items():
            if rng.random() < rate and (shape or not isinstance(v, dict | list)):
                out[k] = hostile_value(rng, shape=shape)
            else:
                out[k] = mutate(rng, v, shape=shape, rate=rate)
        if rng.random() < rate:
            out[hostile_text(rng)] = hostile_value(rng, shape=True)
        return out
    if isinstance(doc, list):
        return [mutate(rng, v, shape=shape, rate=rate) for v in doc]
    if isinstance(doc, str | int | float) and rng.random() < rate:
        return hostile_value(rng, shape=False) if isinstance(doc, str) else \
            hostile_number(rng)
    return doc


def h100_node() -> dict[str, Any]:
    return dict(json.loads(H100_REPORT.read_text())["nodes"][0])


def typed_node(rng: random.Random) -> dict[str, Any]:
    """A node record as verify builds it (NodeReport.to_dict()'s types where the writers
    rely on them), holding hostile node text and numbers everywhere else."""
    node = mutate(rng, h100_node(), shape=False)
    node["name"] = hostile_text(rng)
    # the free-form parts a node fills: any shape, any depth
    for key in ("facts", "raw"):
        node[key] = mutate(rng, node.get(key) or {}, shape=True, rate=0.05)
        node[key][hostile_text(rng)] = nested(rng, rng.choice([5, 120, 700, 3000]))
    io_test = node.get("io_test") or {}
    io_test["evidence"] = mutate(rng, io_test.get("evidence") or {}, shape=True)
    node["io_test"] = io_test
    return node


# ----------------------------------------------------------------------------- properties
def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def no_raw_controls(text: str, where: str) -> None:
    bad = sorted({c for c in text if c in RAW_CONTROLS})
    assert not bad, (where, bad, text[:500])


def check_writers(doc: dict[str, Any], where: str) -> None:
    safe = safe_document(doc)
    strict_json(to_json(safe))
    junit = to_junit(safe)
    no_raw_controls(junit, f"{where} junit")
    ET.fromstring(junit.encode("utf-8"))  # noqa: S314 - our own output
    html = to_html(safe)
    no_raw_controls(html, f"{where} html")
    HTMLParser().feed(html)
    prom = to_prometheus(safe, now=1_700_000_000.0)
    no_raw_controls(prom, f"{where} prom")
    list(text_string_to_metric_families(prom))
    for color in (False, True):
        buf = io.StringIO()
        render(doc, buf, details=True, color=color)
        text = buf.getvalue()
        if color:  # Rich's own styling escapes are ours; none may come from the node
            text = text.replace("\x1b[", "")
        no_raw_controls(text, f"{where} terminal")


@settings(max_examples=count(25), suppress_health_check=_HEALTH)
@given(seed=SEEDS)
def test_fuzz_hostile_node_documents_through_every_report_writer(seed: int) -> None:
    """Every writer takes any hostile node document: no exception, no raw control character,
    and each output parses with its consumer's parser."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible fuzzer, not a secret
    nodes = [typed_node(rng) for _ in range(rng.randrange(1, 3))]
    doc = {"schema_version": 1, "kind": "verify", "run_id": hostile_text(rng),
           "started_at": hostile_text(rng), "finished_at": None, "fleet": hostile_text(rng),
           "ledger": None, "policy": None, "nodes": nodes, "summary": {}}
    if rng.random() < 0.3:  # and the registered secrets of the run
        redact.forget_all()
        redact.register_argv([], {"PGPASSWORD": rng.choice(
            ["fail", "nodes", "s3cr3t-value", hostile_text(rng)])})
    check_writers(doc, "example")


def hostile_row(rng: random.Random) -> tuple[str, str]:
    """(node name, report_json) of a row another writer appended."""
    name = rng.choice(["gpu-01", hostile_text(rng)])
    roll = rng.random()
    if roll < 0.15:
        text = rng.choice(["not json", "[1, 2]", "5", '"x"', "{", "null", "{}",
                           '{"a": ' * 5000 + "1" + "}" * 5000])
    else:
        node = mutate(rng, h100_node(), shape=roll < 0.6, rate=0.06)
        node["name"] = name
        text = json.dumps(node, allow_nan=True)
    return name, text


def sql_text(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogatepass")


def _ledger(tmp_path: Path) -> Path:
    from provisioner.store import Ledger
    from tests.unit.reportsfleet import node

    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as ledger:
        run = ledger.start_run("verify", "inventories/lab", {})
        ledger.record_verification(run, node("gpu-01", gdsio=True), step="verified")
        ledger.finish_run(run, "compliant")
    return path


@settings(max_examples=count(6), suppress_health_check=_HEALTH)
@given(seed=SEEDS)
def test_fuzz_hostile_ledger_rows_through_status_history_report_and_export(
        seed: int, tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every reader takes any row another writer appended: never exit 70, a row it cannot
    use is exit 74, no raw control character on the terminal, every JSON output strict, and
    a run that ``report`` reads renders in every format (files that parse)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible fuzzer, not a secret
    case = tmp_path_factory.mktemp("case")
    ledger = _ledger(case)
    name, text = hostile_row(rng)
    route = rng.choice(["nvfs", hostile_text(rng), None])
    with sqlite3.connect(ledger) as conn:
        # the texts as another writer may store them: their bytes, lone surrogates
        # included (SQLite keeps text that is not UTF-8)
        conn.execute(
            "INSERT INTO verifications (run_id, node, at, reachable, compliant, route, "
            "path_taken, report_json, raw_json) SELECT run_id, CAST(? AS TEXT), "
            "at || 'Z', ?, ?, CAST(? AS TEXT), path_taken, CAST(? AS TEXT), raw_json "
            "FROM verifications WHERE id = 1",
            (sql_text(name), rng.choice([0, 1]), rng.choice([0, 1]), sql_text(route),
             sql_text(text)))
    prom = case / "prom"
    prom.mkdir()
    files = ["--json", str(case / "r.json"), "--junit", str(case / "j.xml"),
             "--html", str(case / "r.html"), "--prom-textfile", str(prom)]
    readers = [["status"], ["status", "--json"], ["history", name],
               ["history", name, "--json"], ["report", "latest"],
               ["report", "latest", *files], ["export", "deepspeed", "--node", name],
               ["export", "env", "--node", name, "--format", "json"]]
    for argv in readers:
        where = f"{argv[:2]}"
        code = main([*argv, "--ledger", str(ledger)])
        out, err = capsys.readouterr()
        assert code not in (Exit.INTERNAL, 2), (where, code, err)
        no_raw_controls(out + err, where)
        if code == Exit.LEDGER:
            assert len(err.strip().splitlines()) == 1, (where, err)
            continue
        if (argv[-1] == "--json" or argv[-2:] == ["--format", "json"]) and out.strip():
            strict_json(out)
        if argv[:2] == ["report", "latest"] and "--json" in argv:
            assert code == Exit.OK, (where, err)
            strict_json((case / "r.json").read_text())
            ET.parse(case / "j.xml")  # noqa: S314 - our own output
            html = (case / "r.html").read_text()
            no_raw_controls(html, where)
            HTMLParser().feed(html)
            prom_text = (prom / "gdsfleet.prom").read_text()
            no_raw_controls(prom_text, where)
            list(text_string_to_metric_families(prom_text))
