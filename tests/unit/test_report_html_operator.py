"""The HTML report as an operator takes it in (issue 30 item 6): warnings in a summary tile and
in the "Every node" table, passing checks collapsed (<details>), timestamps to the second with
the zone named, and no empty gdsio/drift columns. Node bytes stay escaped."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.reports.html import to_html, when
from provisioner.reports.model import build_report
from tests.unit import reportsfleet as rf


def _doc(*nodes: dict) -> dict:
    return build_report(run_id="r-1", started_at="2026-11-22T05:00:00.123456+00:00",
                        finished_at="2026-11-22T05:03:07.999999Z", nodes=list(nodes),
                        fleet="/srv/inventories/prod", policy=None, ledger="/x/l.sqlite")


def _warned(name: str) -> dict:
    doc = rf.node(name)
    doc["checks"].append({"id": "fs.mount.nvme", "status": "warn", "expected": "nvme",
                          "observed": "none", "message": "mount one"})
    return doc


def _section(page: str, sid: str) -> str:
    return page.split(f'id="{sid}"', 1)[1]


def test_warnings_have_a_tile_and_a_column() -> None:
    page = to_html(_doc(_warned("gpu-01"), rf.node("gpu-02")))
    tile = re.search(r'id="count-warnings"><b>(\d+)</b>with warnings', page)
    assert tile and tile.group(1) == "1"
    table = _section(page, "node-table").split("</table>", 1)[0]
    assert "<th>warnings</th>" in table
    row = next(r for r in table.split("<tr") if 'data-node="gpu-01"' in r)
    assert "<code>fs.mount.nvme</code>" in row


def test_passing_checks_are_collapsed() -> None:
    page = to_html(_doc(_warned("gpu-01")))
    node = _section(page, "node-gpu-01").split('<div class="node"', 1)[0]
    shown, collapsed = node.split("<details", 1)
    assert 'data-check="fs.mount.nvme"' in shown  # the warning stays in view
    assert 'data-check="gpu.driver_loaded"' not in shown
    assert "2 passing or skipped checks</summary>" in collapsed
    assert 'data-check="gpu.driver_loaded"' in collapsed


def test_empty_gdsio_and_drift_columns_are_hidden() -> None:
    page = to_html(_doc(rf.node("gpu-01"), rf.node("gpu-02")))
    table = _section(page, "node-table").split("</table>", 1)[0]
    assert "gdsio GDS" not in table and "<th>drift</th>" not in table
    assert "<th>warnings</th>" not in table
    with_gdsio = to_html(_doc(rf.node("gpu-01", gdsio=True)))
    assert "gdsio GDS / CPU GiB/s (ratio)</th>" in _section(with_gdsio, "node-table")


def test_timestamps_are_human_and_name_utc() -> None:
    page = to_html(_doc(rf.node("gpu-01")))
    meta = page.split('<p class="meta">', 1)[1].split("</p>", 1)[0]
    assert "started 2026-11-22 05:00:00 UTC" in meta
    assert "finished 2026-11-22 05:03:07 UTC" in meta
    assert ".123456" not in meta and re.search(r"rendered \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
                                               meta)


def test_when_converts_zones_and_never_fails() -> None:
    assert when("2026-11-22T07:00:00+02:00") == "2026-11-22 05:00:00 UTC"
    assert when("2026-11-22T05:00:00") == "2026-11-22 05:00:00 UTC"
    assert when(None) == "-" and when("") == "-"
    assert when("not a time <b>") == "not a time <b>"  # the template escapes it


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.text(max_size=60))
def test_a_hostile_warning_id_and_timestamp_stay_escaped(text: str) -> None:
    doc = _warned("gpu-01")
    doc["checks"][-1]["id"] = text + "<script>"
    report = _doc(doc)
    report["started_at"] = "<b>" + text
    page = to_html(report)
    assert "<script>" not in page
    meta = page.split('<p class="meta">', 1)[1].split("</p>", 1)[0]
    assert "<b>" not in meta and "&lt;b&gt;" in meta
