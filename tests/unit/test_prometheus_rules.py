"""The alert rules the collection ships (monitoring/prometheus/gdsfleet.rules.yml): Prometheus's
own promtool (Debian 12's prometheus package, installed by scripts/setup.sh) checks them and
runs their unit tests (gdsfleet.rules.test.yml); the metrics they read are ones gdsfleet writes;
and the unit tests can fail (a rule changed against them fails them). A real Prometheus firing
them from a node's textfile: tests/molecule/test_slurm_prometheus_lab.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from provisioner import collection_utils
from provisioner.reports.prom import METRICS

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "monitoring" / "prometheus"
RULES = RULES_DIR / "gdsfleet.rules.yml"
# the unit tests: minutes (rules evaluated every minute) and days (every 10 minutes)
TESTS = (RULES_DIR / "gdsfleet.rules.test.yml", RULES_DIR / "gdsfleet.rules.days.test.yml")


def _attest_metrics() -> dict[str, set[frozenset[str]]]:
    """Metric name -> the label-name sets gdsfleet-attest --textfile writes: its own writer
    (plugins/module_utils/attest.py textfile_text) rendered for a regressed node whose nvidia-fs
    counts bytes and whose job proofs knew p2pdma and compat bytes, parsed by prometheus_client."""
    attest = collection_utils.load("attest.py")
    doc = {"status": "regressed", "verified_at": 1795933500.0, "checked_at": 1795937100.0,
           "simulated": False,
           "regressions": [{"id": "attest.nvfs.loaded"}, {"id": "attest.kernel"}]}
    text = attest.textfile_text(doc, {"rw_stats": True, "read_mib": 3, "write_mib": 5},
                                {"p2pdma": {"read": 1, "write": 2},
                                 "compat": {"read": 3, "write": 4}})
    out: dict[str, set[frozenset[str]]] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:  # a counter's samples carry its _total name
            out.setdefault(sample.name, set()).add(frozenset(sample.labels))
    return out


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `bash scripts/setup.sh --python-only` installs Debian's "
                    "prometheus package, which has it")
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_promtool_checks_the_rules() -> None:
    res = _run("check", "rules", RULES.name, cwd=RULES_DIR)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in res.stdout


def test_promtool_unit_tests_pass() -> None:
    res = _run("test", "rules", *(t.name for t in TESTS), cwd=RULES_DIR)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == len(TESTS)


def test_each_alert_has_a_unit_test_severity_and_words() -> None:
    tested = {t["alertname"] for f in TESTS for case in yaml.safe_load(f.read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    names = [r["alert"] for r in _rules()]
    assert set(names) == tested == {"GdsfleetNodeRegressed", "GdsfleetGdsFallbackSeen",
                                    "GdsfleetVerificationStale", "GdsfleetAttestNotRunning",
                                    "GdsfleetCompatBytesGrowing"}
    for r in _rules():
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def test_the_rules_read_only_metrics_and_labels_gdsfleet_writes() -> None:
    """Every gdsfleet_* metric an expression reads is one that attest's or verify's textfile
    writer produces, and every label a matcher or `by` names is one that metric carries."""
    attest = _attest_metrics()
    assert "gdsfleet_attest_regression" in attest and "gdsfleet_nvfs_bytes_total" in attest
    assert {frozenset({"path", "op"})} == attest["gdsfleet_nvfs_bytes_total"]
    used = {m for r in _rules() for m in re.findall(r"\bgdsfleet_[a-z0-9_]+", r["expr"])}
    assert used, "no gdsfleet metric in the rules"
    assert used <= set(METRICS) | set(attest), used - set(METRICS) - set(attest)
    checks = {
        "gdsfleet_attest_regression": {"check"},
        "gdsfleet_nvfs_bytes_total": {"path", "op"},
    }
    for metric, labels in checks.items():
        assert any(labels <= ls for ls in attest[metric]), (metric, attest[metric])
    for r in _rules():
        for metric, matchers in re.findall(r"\b(gdsfleet_[a-z0-9_]+)\{([^}]*)\}", r["expr"]):
            named = set(re.findall(r"(\w+)\s*=", matchers))
            if metric in attest:
                assert any(named <= ls for ls in attest[metric]), (r["alert"], metric, named)
        for by in re.findall(r"by \(([^)]*)\)", r["expr"]):
            assert {b.strip() for b in by.split(",")} <= {"instance", "job", "op", "path",
                                                            "check", "node"}, by


@pytest.mark.parametrize(("alert", "field", "value"), [
    ("GdsfleetNodeRegressed", "for", "0m"),          # a blip would page
    ("GdsfleetGdsFallbackSeen", "expr", 'gdsfleet_node_compliant{io_path="direct"}'),
    ("GdsfleetVerificationStale", "expr",
     "time() - gdsfleet_attest_verified_timestamp_seconds > 8 * 86400"),
    ("GdsfleetAttestNotRunning", "for", "1h"),
    ("GdsfleetCompatBytesGrowing", "expr",
     'sum by (instance, op) (rate(gdsfleet_nvfs_bytes_total[30m])) > 0'),  # nvfs bytes too
])
def test_the_unit_tests_fail_a_changed_rule(tmp_path: Path, alert: str, field: str,
                                            value: str) -> None:
    doc = yaml.safe_load(RULES.read_text())
    for r in doc["groups"][0]["rules"]:
        if r["alert"] == alert:
            r[field] = value
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc))
    for t in TESTS:
        (tmp_path / t.name).write_text(t.read_text())
    res = _run("test", "rules", *(t.name for t in TESTS), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert f"alertname: {alert}" in res.stdout + res.stderr


DASHBOARD = ROOT / "monitoring" / "grafana" / "gdsfleet.json"


def test_the_grafana_dashboards_queries_parse_and_read_gdsfleets_metrics(tmp_path: Path) -> None:
    """Each panel's PromQL (Grafana's variables put in as Grafana would) is one promtool
    accepts (as recording rules) and reads only metrics gdsfleet writes."""
    import json

    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(exprs) == len(doc["panels"]) >= 6
    known = set(METRICS) | set(_attest_metrics())
    rules = []
    for i, expr in enumerate(exprs):
        concrete = expr.replace("$instance", ".*").replace("$__rate_interval", "5m")
        assert "$" not in concrete, expr
        used = set(re.findall(r"\bgdsfleet_[a-z0-9_]+", concrete))
        assert used and used <= known, (expr, used - known)
        rules.append({"record": f"gdsfleet:dashboard_{i}", "expr": concrete})
    (tmp_path / "dashboard.rules.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = _run("check", "rules", "dashboard.rules.yml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {p["datasource"]["uid"] for p in doc["panels"]} == {"${datasource}"}
