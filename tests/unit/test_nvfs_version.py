"""nvfs.version reads the FULL nvidia-fs version, not /proc/driver/nvidia-fs/version.

NVIDIA/gds-nvidia-fs 2.28.4 (src/nvfs-proc.c) prints only `version: <major>.<minor>` in
/proc/driver/nvidia-fs/version; the full x.y.z is the module's MODULE_VERSION (src/nvfs-core.c,
so /sys/module/nvidia_fs/version and `modinfo -F version nvidia_fs`) and the stats header
`NVFS Driver(version: x.y.z)` (src/nvfs-stat.c). On a 2.17.x node /proc says `2.17`, which
compared as a version with the policy minimum 2.17.5 failed every such node.
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.parsers import nvfs_stats
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

MISSING = {"rc": None, "out": "", "err": "missing"}


def doc_with(*, proc: str | None, sysfs: str | None, stats: str | None,
             modinfo: str | None) -> dict[str, Any]:
    """An nvfs node whose version sources say what the arguments say (None: not readable)."""
    doc = nf.gather_doc(route="nvfs")
    items = doc["items"]
    items["nvfs_version"] = {"rc": 0, "out": f"version: {proc}\n", "err": ""} if proc else MISSING
    items["nvfs_module"]["version"] = sysfs
    text = nf.stats(io="Disabled")
    if stats:
        items["nvfs_stats"]["out"] = text.replace("NVFS Driver(version: 2.26.6)",
                                                  f"NVFS Driver(version: {stats})")
    else:
        items["nvfs_stats"]["out"] = text.replace("NVFS Driver(version: 2.26.6)\n", "")
    items["modinfo_nvfs_version"] = ({"rc": 0, "out": modinfo + "\n", "err": ""} if modinfo
                                     else {"rc": None, "out": "", "err": "not found"})
    return doc


def version_check(doc: dict[str, Any]) -> CheckResult:
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_nvfs_io(), route=route)
    policy = Policy.default()
    assert policy.min_nvfs_version == "2.17.5"
    _, results, _ = checks.evaluate(facts, io, policy, route=route, io_path="/mnt/gds")
    return next(c for c in results if c.id == "nvfs.version")


@pytest.mark.parametrize("source", ["sysfs", "stats", "modinfo"])
def test_217_in_proc_with_full_2175_elsewhere_passes(source: str) -> None:
    full = {"sysfs": None, "stats": None, "modinfo": None, source: "2.17.5"}
    c = version_check(doc_with(proc="2.17", **full))
    assert c.status == "pass", c
    assert c.observed == f"2.17.5 ({source})"


def test_2173_fails_although_proc_says_217() -> None:
    c = version_check(doc_with(proc="2.17", sysfs="2.17.3", stats="2.17.3", modinfo="2.17.3"))
    assert c.status == "fail"
    assert c.observed == "2.17.3 (sysfs)"
    assert "Upgrade nvidia-fs" in c.message


def test_only_major_minor_readable_warns_instead_of_failing() -> None:
    c = version_check(doc_with(proc="2.17", sysfs=None, stats=None, modinfo=None))
    assert c.status == "warn", c
    assert c.observed == "2.17 (proc)"
    assert "modinfo -F version nvidia_fs" in c.message
    assert "patch level" in c.message


@pytest.mark.parametrize(("proc", "status"), [("2.18", "pass"), ("2.16", "fail"),
                                              ("3.0", "pass")])
def test_major_minor_only_still_decides_when_it_can(proc: str, status: str) -> None:
    assert version_check(doc_with(proc=proc, sysfs=None, stats=None, modinfo=None)
                         ).status == status


def test_loaded_module_wins_over_the_installed_file() -> None:
    # DKMS installed 2.26.6 for the kernel, the loaded module is still 2.17.3: judge the loaded one
    c = version_check(doc_with(proc="2.17", sysfs="2.17.3", stats=None, modinfo="2.26.6"))
    assert (c.status, c.observed) == ("fail", "2.17.3 (sysfs)")


def test_no_version_anywhere_warns() -> None:
    c = version_check(doc_with(proc=None, sysfs=None, stats=None, modinfo=None))
    assert c.status == "warn"


def test_full_version_helper() -> None:
    assert nvfs_stats.full_version(module_version=None, stats_version="2.28.4",
                                   modinfo_version=None, proc_version="2.28") == ("2.28.4",
                                                                                  "stats")
    assert nvfs_stats.full_version(module_version="2.17", stats_version=None,
                                   modinfo_version=None, proc_version="2.17") == ("2.17",
                                                                                  "sysfs")
    assert nvfs_stats.full_version(module_version=None, stats_version=None,
                                   modinfo_version=None, proc_version=None) == (None, None)
    assert nvfs_stats.is_major_minor_only("2.17")
    assert not nvfs_stats.is_major_minor_only("2.17.5")
