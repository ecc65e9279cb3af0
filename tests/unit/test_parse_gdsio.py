"""gdsio result-line parser over real outputs (tests/fixtures/gdsio/, sources in their headers)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from provisioner.verify.parsers import gdsio
from tests.unit.fixture_loader import FIXTURES, header, load

CASES = load("gdsio")


def test_fixtures_are_real_and_name_their_source() -> None:
    assert len(CASES) >= 5
    for path in (FIXTURES / "gdsio").glob("*.yml"):
        lines = header(path)
        assert lines and lines[0].startswith("# Source:"), path
    xfers = {ln["xfer_name"] for _, c in CASES for ln in c["expected"]["lines"]}
    assert {"GPUD", "CPUONLY"} <= xfers  # both runs verify --gdsio compares


@pytest.mark.parametrize(("name", "case"), CASES, ids=[n for n, _ in CASES])
def test_parse_captured_output(name: str, case: dict[str, Any]) -> None:
    out = gdsio.parse(case["text"])
    exp = case["expected"]
    assert out.verifying is exp["verifying"]
    got = [dict(asdict(ln), xfer_type=ln.xfer_type) for ln in out.lines]
    assert got == exp["lines"]
    if "other" in exp:
        assert len(out.other) == exp["other"]


def test_throughput_is_done_kib_over_time() -> None:
    # what the stand-in reproduces: GiB/s = done KiB / 2^20 / total_time (on every capture)
    for _, case in CASES:
        for ln in gdsio.parse(case["text"]).lines:
            assert ln.throughput_gibps == pytest.approx(
                ln.dataset_done_kib / (1 << 20) / ln.total_time_s, rel=1e-3)


def test_error_lines_are_kept_not_parsed() -> None:
    out = gdsio.parse("file register error: GPUDirect Storage not supported on current file "
                      "filename:/mnt/gds/x\n")
    assert out.lines == [] and out.first is None
    assert out.other == ["file register error: GPUDirect Storage not supported on current file "
                         "filename:/mnt/gds/x"]
