"""The outputs of the new reports and exports, made on the lent H100 by the merged code
(docs/evidence/h100-reports/, docs/evidence/README.md): a real node's textfile parses with
Prometheus's own parser and says what the JSON report says; the HTML pages and the exports
agree with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EV = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "h100-reports"


@pytest.fixture(scope="module")
def report() -> dict:
    doc = json.loads((EV / "verify-gdsio.json").read_text())
    assert len(doc["nodes"]) == 1
    return doc


def test_textfile_of_the_real_node_parses_and_matches_the_json(report: dict) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    node = report["nodes"][0]
    families = {f.name: f for f in text_string_to_metric_families(
        (EV / "textfile" / "gdsfleet.prom").read_text())}
    assert all(f.type == "gauge" for f in families.values())
    (compliant,) = families["gdsfleet_node_compliant"].samples
    assert compliant.labels == {"node": node["name"], "route": node["route"],
                                "io_path": node["io_test"]["path_taken"]}
    assert compliant.value == (1 if node["compliant"] else 0) == 0
    status = {(s.labels["check"], s.labels["status"]): s.value
              for s in families["gdsfleet_check_status"].samples}
    for check in node["checks"]:  # every check, exactly one status set
        assert status[(check["id"], check["status"])] == 1
        assert sum(v for (cid, _), v in status.items() if cid == check["id"]) == 1


def test_gdsio_skips_on_a_node_without_gds_tools(report: dict) -> None:
    node = report["nodes"][0]
    check = {c["id"]: c for c in node["checks"]}["gdsio.ratio"]
    assert check["status"] == "skip" and "gds-tools" in check["message"]
    assert node.get("gdsio") in (None, {})


def test_html_pages_and_exports_agree(report: dict) -> None:
    node = report["nodes"][0]
    for page in ("verify.html", "report.html"):
        html = (EV / page).read_text()
        assert node["name"] in html and "io.direct_path" in html
        low = html.lower()
        # self-contained: nothing to fetch (the SVG namespace URI is a name, not a fetch)
        assert "<script" not in low and "<link" not in low
        assert 'src="http' not in low and "url(http" not in low and "@import" not in low
    assert report["run_id"] in (EV / "report.txt").read_text()
    exports = (EV / "export.txt").read_text()
    assert "export KVIKIO_COMPAT_MODE=ON" in exports
    assert '"use_gds": false' in exports and "direct path not proven" in exports
