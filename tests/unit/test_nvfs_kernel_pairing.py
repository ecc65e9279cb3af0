"""`kernel.version` checks the nvidia-fs/kernel pairing from the nvidia-fs ChangeLog
(tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml): a kernel 6.18 node with nvidia-fs 2.25.7
fails; 6.17 with 2.28.2 passes; 6.11/6.14 need 2.26.6."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.verify import checks, iotest, nvfs_kernel
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml").read_text())


def test_table_is_the_changelog_fixture() -> None:
    assert FIXTURE["source"]["path"] == "ChangeLog"
    want = tuple((tuple(int(x) for x in f["kernel"].split(".")), f["nvidia_fs"])
                 for f in FIXTURE["floors"])
    assert want == nvfs_kernel.FLOORS
    for f in FIXTURE["floors"]:
        assert f["tag"] == "v" + f["nvidia_fs"]


def kernel_check(release: str, nvfs: str | None, route: str = "nvfs") -> CheckResult:
    doc: dict[str, Any] = nf.gather_doc(route=route)
    items = doc["items"]
    items["kernel_release"] = {"rc": 0, "out": release, "err": ""}
    if nvfs is None:
        for k in ("nvfs_module", "nvfs_version", "nvfs_stats", "modinfo_nvfs_version"):
            items[k] = {"rc": 1, "out": "", "err": "not found"}
    elif route == "nvfs":
        mod = dict(items["nvfs_module"])
        mod["version"] = nvfs
        items["nvfs_module"] = mod
        items["modinfo_nvfs_version"] = {"rc": 0, "out": nvfs + "\n", "err": ""}
        items["nvfs_stats"] = {"rc": 0, "out": nf.stats().replace("2.26.6", nvfs), "err": ""}
    facts = build_facts(json.loads(json.dumps(doc)))
    route_ = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_nvfs_io() if route == "nvfs" else nf.direct_p2pdma_io(),
                         route=route_)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route_)
    return next(c for c in results if c.id == "kernel.version")


def test_the_6_x_floor_is_2_17_0() -> None:
    """nvidia-fs 2.17.0 "fixed compilations issues wth linux ver 6.x kernels" (ChangeLog)."""
    assert nvfs_kernel.FLOORS[0] == ((6, 0), "2.17.0")
    c = kernel_check("6.1.0-31-amd64", "2.16.1")
    assert c.status == "fail" and "2.17.0" in c.expected


def test_a_kernel_past_the_last_verified_floor_is_unverified_never_a_silent_pass() -> None:
    """6.18+: no ChangeLog entry names it (gds-nvidia-fs#80: 2.28.2 does not build there).
    2.29.4 (GPU Operator v26.7.0) and 2.30 (the latest published) are not in the ChangeLog."""
    assert FIXTURE["last_verified_series"] == "6.17"
    for nvfs in ("2.28.4", "2.29.4", "2.30.1"):
        c = kernel_check("6.18.3-061803-generic", nvfs)
        assert c.status == "warn", c
        assert "unverified" in c.message and "#80" in c.message
    assert kernel_check("6.17.0-5-generic", "2.29.4").status == "pass"


def test_kernel_6_18_with_nvidia_fs_2_25_7_fails() -> None:
    c = kernel_check("6.18.3-061803-generic", "2.25.7")
    assert c.status == "fail", c
    assert "2.28.2" in c.expected and "2.25.7" in c.observed and "ChangeLog" in c.message


@pytest.mark.parametrize(("release", "nvfs", "status"), [
    ("6.17.0-5-generic", "2.28.2", "pass"),
    ("6.17.0-5-generic", "2.26.6", "fail"),
    ("6.14.0-29-generic", "2.26.6", "pass"),
    ("6.11.0-26-generic", "2.25.7", "fail"),
    ("6.8.0-45-generic", "2.25.7", "pass"),
    ("6.1.0-31-amd64", "2.17.0", "pass"),
    ("6.0.0-1-amd64", "2.16.1", "fail"),
    ("5.15.0-124-generic", "2.17.5", "pass"),
    ("5.19.0-50-generic", "2.16.1", "pass"),
    ("5.14.0-427.el9.x86_64", "2.17.5", "pass"),
    ("4.14.0-1-generic", "2.25.7", "fail"),
])
def test_pairing(release: str, nvfs: str, status: str) -> None:
    assert kernel_check(release, nvfs).status == status


def test_unknown_nvidia_fs_version_passes_and_says_the_pairing_was_not_checked() -> None:
    c = kernel_check("6.18.3-061803-generic", None)
    assert c.status == "pass" and "not checked" in c.message


def test_p2pdma_route_does_not_pair() -> None:
    assert kernel_check("6.18.3-061803-generic", "2.25.7", route="p2pdma").status == "pass"
