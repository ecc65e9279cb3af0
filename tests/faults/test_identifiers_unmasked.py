"""Issue 45, item 3: a secret never masks an identifier the outputs carry.

Before: with ``PGPASSWORD=gpu.driver.open`` the JSON, JUnit and Prometheus outputs said
``***`` where that check id stands (``gdsfleet_check_status{check="***"}``), so an alert on
``check="gpu.driver.open"`` never fired; a secret spelled like a node name renamed the node.
Now such a secret (equal to a check id, a node name, a label name or value, a metric name, or
part of one) is withdrawn from masking, as a verdict word is refused, and one warning line
names its source, never its value (provisioner/identifiers.py).

The base document is the real verify report of the H100 node used by
test_report_integrity.py (docs/evidence/h100-reports/verify-gdsio.json); the CLI runs in
process with the stand-in node interpreter of tests/faults/test_hostile_node.py.
"""

from __future__ import annotations

import json
import os
import socket
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provisioner import identifiers, redact
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.reports.prom import METRICS
from provisioner.verify.checks import REGISTRY
from tests.faults.test_hostile_node import answering, gather_doc
from tests.faults.test_report_integrity import h100_doc, rendered


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


def _as_cli_does(secret: str) -> None:
    """What cli.main does with the environment before any command runs."""
    redact.forget_all()
    redact.register_argv([], {"PGPASSWORD": secret})
    identifiers.protect_static()


def test_no_check_id_label_or_metric_name_as_a_secret_alters_a_report() -> None:
    """Every check id of the registry, every label and metric name, and a part of a check id,
    as ``PGPASSWORD``: the JSON, JUnit and Prometheus renderings of a real report are byte for
    byte those without a secret. Before: 46 of them changed the report (every check id the
    report holds, ``driver.open``, ``node_compliant`` ...)."""
    doc = h100_doc()
    baseline = rendered(doc)
    words = {*REGISTRY, *identifiers.LABELS, *METRICS, "driver.open", "node_compliant",
             "check_status"}
    changed = []
    for word in sorted(words):
        _as_cli_does(word)
        if rendered(doc) != baseline:
            changed.append(word)
    assert not changed, changed
    assert len(words) > 60


def test_a_secret_spelled_like_a_node_name_never_renames_the_node() -> None:
    doc = h100_doc()
    doc["nodes"][0]["name"] = "gpu-node-alpha-07"
    baseline = rendered(doc)
    for secret in ("gpu-node-alpha-07", "node-alpha"):
        _as_cli_does(secret)
        assert rendered(doc) == baseline, secret
        assert secret not in redact.registered()


def test_a_real_secret_is_still_masked_and_a_refused_one_is_refused_later_too() -> None:
    redact.register("hunter2-long-secret", "$PGPASSWORD")
    redact.register("gpu-node-alpha-07", "$OTHER_TOKEN")
    gone = identifiers.protect(["gpu-node-alpha-07"], "a node name", say=False)
    assert gone == ["$OTHER_TOKEN"]
    assert redact.redact_text("login hunter2-long-secret on gpu-node-alpha-07") == \
        "login *** on gpu-node-alpha-07"
    redact.register("node-alpha", "$LATER_TOKEN")  # a part of a protected name, later
    assert "node-alpha" not in redact.registered()
    assert ("$LATER_TOKEN", "it is an identifier the outputs carry (a check id, a node or "
            "label name)") in redact.refusals()


def _verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str,
            capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], Any, dict[str, Any],
                                                         str, str]:
    monkeypatch.setenv("PGPASSWORD", secret)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-node-alpha-07")
    bin_dir = answering(tmp_path, gather_doc(os_release="ID=debian\n"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    prom = tmp_path / "prom"
    prom.mkdir()
    code = main(["verify", "--local", "--no-io-test", "--no-ledger", "--json",
                 str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
                 "--prom-textfile", str(prom)])
    out, err = capsys.readouterr()
    assert code == Exit.NOT_COMPLIANT, err
    doc = json.loads((tmp_path / "r.json").read_text())
    junit = ET.parse(tmp_path / "j.xml").getroot()  # noqa: S314 - our own output
    families = {f.name: f for f in text_string_to_metric_families(
        (prom / "gdsfleet.prom").read_text())}
    return doc, junit, families, out, err


def test_verify_with_a_check_id_as_secret_keeps_the_check_alertable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``"id": "***"`` in the JSON, a ``***`` testcase in JUnit and
    ``check="***"`` in the textfile, with no word about it."""
    doc, junit, families, _out, err = _verify(tmp_path, monkeypatch, "gpu.driver.open",
                                              capsys)
    assert "gpu.driver.open" in [c["id"] for c in doc["nodes"][0]["checks"]]
    assert "gpu.driver.open" in {tc.get("name") for tc in junit.iter("testcase")}
    checks = {s.labels["check"] for s in families["gdsfleet_check_status"].samples}
    assert "gpu.driver.open" in checks and "***" not in checks
    assert "$PGPASSWORD is not masked in free text: it is a check id" in err


def test_verify_with_the_node_name_as_secret_keeps_the_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the node was ``***`` in the JSON and the textfile."""
    doc, _junit, families, out, err = _verify(tmp_path, monkeypatch, "gpu-node-alpha-07",
                                              capsys)
    assert doc["nodes"][0]["name"] == "gpu-node-alpha-07"
    assert {s.labels["node"] for s in families["gdsfleet_node_reachable"].samples} == {
        "gpu-node-alpha-07"}
    assert "gpu-node-alpha-07" in out
    assert "$PGPASSWORD is not masked in free text: it is a node name" in err
    assert err.count("$PGPASSWORD is not masked") == 1  # said once
