"""testinfra: the GDS filesystems on a node are mounted the way GDS accepts.

Run against real nodes as well as the simulated ones:

    pytest tests/infra/test_mounts.py --hosts=ssh://root@gpu-07
    pytest tests/infra/test_mounts.py --ansible-inventory=inventories/prod --hosts='ansible://gpu_nodes'

What is expected comes from GDSFLEET_EXPECT_MOUNTS ("/mnt/gds=xfs,/raid=ext4") or, when that is
unset, from the filesystems the nvme role recorded in /etc/ansible/facts.d/gdsfleet_nvme.fact
on the node. Each must be: mounted, of that type (xfs or ext4), listed in /etc/fstab by
UUID=<the mounted filesystem's UUID>, and for ext4 carry an explicit data=ordered in fstab
and in the live mount (never data=journal). A node without either skips these tests.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

FACT_FILE = "/etc/ansible/facts.d/gdsfleet_nvme.fact"
GDS_FILESYSTEMS = ("xfs", "ext4")


def _expected(host: Any) -> dict[str, str]:
    spec = os.environ.get("GDSFLEET_EXPECT_MOUNTS", "").strip()
    if spec:
        pairs = (item.split("=", 1) for item in spec.split(",") if item.strip())
        return {mp.strip(): fs.strip() for mp, fs in pairs}
    fact = host.file(FACT_FILE)
    if not fact.exists:
        pytest.skip(f"the nvme role recorded no filesystem on this node ({FACT_FILE} is absent);"
                    " set GDSFLEET_EXPECT_MOUNTS to check mounts made otherwise")
    recorded = json.loads(fact.content_string).get("filesystems", {})
    return {mp: entry["fstype"] for mp, entry in recorded.items()}


def _fstab(host: Any) -> dict[str, list[str]]:
    """mount point -> [source, fstype, options] from /etc/fstab."""
    entries: dict[str, list[str]] = {}
    for line in host.file("/etc/fstab").content_string.splitlines():
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#"):
            entries[fields[1]] = [fields[0], fields[2], fields[3]]
    return entries


def _live(host: Any, mount_point: str) -> dict[str, str]:
    out = host.check_output(
        "findmnt --json --output TARGET,SOURCE,FSTYPE,OPTIONS --mountpoint %s", mount_point
    )
    return json.loads(out)["filesystems"][0]


@pytest.fixture()
def expected(host: Any) -> dict[str, str]:
    mounts = _expected(host)
    assert mounts, "no GDS mount points expected on this node"
    return mounts


def test_expected_filesystems_are_types_gds_accepts(expected: dict[str, str]) -> None:
    for mount_point, fstype in expected.items():
        assert fstype in GDS_FILESYSTEMS, f"{mount_point}: {fstype} runs in compat mode only"


def test_mounted_with_the_expected_type(host: Any, expected: dict[str, str]) -> None:
    for mount_point, fstype in expected.items():
        mount = host.mount_point(mount_point)
        assert mount.exists, f"{mount_point} is not mounted"
        assert mount.filesystem == fstype, f"{mount_point} is {mount.filesystem}, not {fstype}"


def test_fstab_mounts_by_uuid(host: Any, expected: dict[str, str]) -> None:
    fstab = _fstab(host)
    for mount_point, fstype in expected.items():
        assert mount_point in fstab, f"{mount_point} has no /etc/fstab entry"
        source, fs_in_fstab, _ = fstab[mount_point]
        assert source.startswith("UUID="), f"{mount_point} is in fstab as {source}, not by UUID"
        assert fs_in_fstab == fstype
        device = _live(host, mount_point)["source"]
        uuid = host.check_output("blkid -p -o value -s UUID %s", device).strip()
        assert source == f"UUID={uuid}", f"{mount_point}: fstab {source}, {device} has {uuid}"


def test_ext4_has_explicit_data_ordered(host: Any, expected: dict[str, str]) -> None:
    fstab = _fstab(host)
    for mount_point, fstype in expected.items():
        options = fstab.get(mount_point, ["", "", ""])[2].split(",")
        live = _live(host, mount_point)["options"].split(",")
        assert "data=journal" not in options and "data=journal" not in live, mount_point
        if fstype == "ext4":
            assert "data=ordered" in options, f"{mount_point}: fstab options {options}"
            assert "data=ordered" in live, f"{mount_point}: mounted with {live}"
        else:
            assert not [o for o in options if o.startswith("data=")], mount_point
