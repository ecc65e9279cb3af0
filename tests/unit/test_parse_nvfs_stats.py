"""/proc/driver/nvidia-fs/stats parser over real outputs with and without rw_stats."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.verify.parsers import nvfs_stats
from tests.unit.fixture_loader import FIXTURES, header, load

CASES = load("nvfs_stats")


def test_fixtures_cover_both_layouts_and_name_their_source() -> None:
    enabled = {d["expected"]["io_stats_enabled"] for _, d in CASES}
    assert enabled == {True, False}
    for path in (FIXTURES / "nvfs_stats").glob("*.yml"):
        assert header(path)[0].startswith("# Source:")


@pytest.mark.parametrize(("name", "case"), CASES, ids=[n for n, _ in CASES])
def test_parse_captured_stats(name: str, case: dict[str, Any]) -> None:
    st = nvfs_stats.parse(case["text"])
    for key, want in case["expected"].items():
        if key == "gpus":
            assert len(st.gpus) == want
        elif key.startswith("gpu0_"):
            assert st.gpus[0][key[5:]] == want
        elif "." in key:
            line, field = key.split(".", 1)
            assert st.get(line, field) == want, key
        else:
            assert getattr(st, key) == want, key


def test_delta_counts_only_what_moved_and_only_when_present() -> None:
    before = nvfs_stats.parse(load_text("nvfs-2.20.5_rw-stats-enabled"))
    tab = "\t" * 4
    after_text = (
        load_text("nvfs-2.20.5_rw-stats-enabled")
        .replace(f"Writes{tab}: n=0 ok=0 err=0 writeMiB=0",
                 f"Writes{tab}: n=256 ok=256 err=0 writeMiB=1024")
        .replace(f"Reads{tab}: n=0 ok=0 err=0 readMiB=0",
                 f"Reads{tab}: n=256 ok=256 err=0 readMiB=1024")
    )
    d = nvfs_stats.delta(before, nvfs_stats.parse(after_text))
    assert d["writes_n"] == 256 and d["write_mib"] == 1024
    assert d["reads_n"] == 256 and d["read_mib"] == 1024
    assert d["mmap_n"] == 0
    # without rw_stats the n= counters do not exist: no delta is invented for them
    off = nvfs_stats.parse(load_text("nvfs-2.25.7_rw-stats-disabled"))
    d2 = nvfs_stats.delta(off, off)
    assert "writes_n" not in d2 and "reads_n" not in d2
    assert d2["mmap_n"] == 0


def test_version_and_devcount_files() -> None:
    assert nvfs_stats.parse_version("version: 2.28\n") == "2.28"
    assert nvfs_stats.parse_version("2.17\n") == "2.17"
    assert nvfs_stats.parse_version("") is None
    assert nvfs_stats.parse_devcount("16\n") == 16


def load_text(stem: str) -> str:
    return next(d["text"] for n, d in CASES if n == stem)
