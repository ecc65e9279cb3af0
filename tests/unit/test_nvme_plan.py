"""The nvme role's decisions (plugins/modules/nvme_probe.py classify/plan) on probe data that
containers cannot produce: a drive carrying /boot, partitions, LVM holders, assembled arrays."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_nvme_probe", ROOT / "plugins" / "modules" / "nvme_probe.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _load()


def drive(path: str = "/dev/nvme0n1", devno: str = "259:0", **over: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "path": path, "devno": devno, "kernel_name": Path(path).name, "signatures": [],
        "wipefs": "", "blkid": {}, "partitions": [], "holders": [], "mounts": [], "boot": [],
    }
    info.update(over)
    return info


XFS_DATA = {
    "signatures": [{"device": "nvme0n1", "offset": "0x0", "type": "xfs", "uuid": "u-1",
                    "label": "data"}],
    "wipefs": "DEVICE  OFFSET TYPE UUID LABEL\nnvme0n1 0x0    xfs  u-1  data",
    "blkid": {"TYPE": "xfs", "UUID": "u-1", "LABEL": "data"},
}
XFS_OURS = {
    "signatures": [{"device": "nvme0n1", "offset": "0x0", "type": "xfs", "uuid": "u-2",
                    "label": "gdsfleet"}],
    "wipefs": "nvme0n1 0x0 xfs u-2 gdsfleet",
    "blkid": {"TYPE": "xfs", "UUID": "u-2", "LABEL": "gdsfleet"},
}


def classified(info: dict[str, Any], *, fstype: str = "xfs", known: tuple[str, ...] = (),
               holders: frozenset[str] = frozenset()) -> dict[str, Any]:
    probe.classify(info, fstype=fstype, label="gdsfleet", known_uuids=list(known),
                   mount_point="/mnt/gds", ours_holders=holders)
    return info


def plan_for(infos: list[dict[str, Any]], *, force: bool = False,
             raid: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(probe.plan(infos, raid, force=force, raid_device="/dev/md/gds", chunk_kb=512))


def test_blank_drive_is_formatted() -> None:
    result = plan_for([classified(drive())])
    assert result["action"] == "format" and result["target"] == "/dev/nvme0n1"


def test_drive_with_data_is_refused_naming_the_force_variable() -> None:
    result = plan_for([classified(drive(**XFS_DATA))])
    assert result["action"] == "refuse"
    (message,) = result["refusals"]
    assert "xfs signature at offset 0x0 (LABEL=data, UUID=u-1)" in message
    assert "nvme_force_format: true" in message


def test_force_plans_a_wipe_with_the_wipefs_listing() -> None:
    result = plan_for([classified(drive(**XFS_DATA))], force=True)
    assert result["action"] == "format"
    assert result["wipe"][0]["device"] == "/dev/nvme0n1"
    assert "u-1" in result["wipe"][0]["wipefs"]


def test_own_filesystem_is_kept_by_label_or_recorded_uuid() -> None:
    result = plan_for([classified(drive(**XFS_OURS))], force=True)
    assert result["action"] == "keep" and result["uuid"] == "u-2" and result["wipe"] == []
    relabelled = dict(XFS_OURS, blkid={"TYPE": "xfs", "UUID": "u-2", "LABEL": "scratch"})
    assert plan_for([classified(drive(**relabelled), known=("u-2",))])["action"] == "keep"
    assert plan_for([classified(drive(**relabelled))])["action"] == "refuse"


def test_own_filesystem_of_another_type_is_not_kept() -> None:
    result = plan_for([classified(drive(**XFS_OURS), fstype="ext4")])
    assert result["action"] == "refuse"


def test_own_filesystem_mounted_at_the_mount_point_is_kept() -> None:
    info = classified(drive(mounts=["/mnt/gds"], **XFS_OURS))
    assert plan_for([info])["action"] == "keep"


def test_boot_drive_is_refused_even_with_force() -> None:
    info = classified(drive(boot=["/boot"], partitions=["nvme0n1p1", "nvme0n1p2"],
                            signatures=[{"type": "gpt", "offset": "0x200"}],
                            blkid={"PTTYPE": "gpt"}))
    result = plan_for([info], force=True)
    assert result["action"] == "refuse"
    assert "holds the /boot filesystem" in result["refusals"][0]
    assert "nvme_force_format or not" in result["refusals"][0]
    assert result["wipe"] == []


def test_mounted_and_held_drives_are_refused_even_with_force() -> None:
    mounted = classified(drive(mounts=["/scratch"], **XFS_DATA))
    assert "mounted at /scratch" in plan_for([mounted], force=True)["refusals"][0]
    lvm = classified(drive(holders=["dm-0"], signatures=[{"type": "LVM2_member",
                                                            "offset": "0x218"}]))
    message = plan_for([lvm], force=True)["refusals"][0]
    assert "in use by dm-0" in message and "LVM2_member" in message


def test_partition_table_alone_is_refused_and_wiped_with_force() -> None:
    info = classified(drive(partitions=["nvme0n1p1"], signatures=[{"type": "gpt",
                                                                   "offset": "0x200"}]))
    assert "has partitions nvme0n1p1" in plan_for([info])["refusals"][0]
    assert plan_for([info], force=True)["wipe"][0]["partitions"] == ["nvme0n1p1"]


def test_raid0_over_blank_drives_plans_the_mdadm_command() -> None:
    a = classified(drive("/dev/nvme0n1", "259:0"))
    b = classified(drive("/dev/nvme1n1", "259:1"))
    result = plan_for([a, b])
    assert result["action"] == "create_raid"
    assert result["target"] == "/dev/md/gds"
    assert " ".join(result["mdadm_create"]) == (
        "mdadm --create /dev/md/gds --run --level=0 --metadata=1.2 --chunk=512 "
        "--raid-devices=2 /dev/nvme0n1 /dev/nvme1n1")


def test_raid0_refuses_a_member_with_data() -> None:
    a = classified(drive("/dev/nvme0n1", "259:0"))
    b = classified(drive("/dev/nvme1n1", "259:1", **XFS_DATA))
    result = plan_for([a, b])
    assert result["action"] == "refuse" and "/dev/nvme1n1" in result["refusals"][0]


def test_raid0_does_not_build_over_a_single_drive_filesystem_of_ours() -> None:
    a = classified(drive("/dev/nvme0n1", "259:0", **XFS_OURS))
    b = classified(drive("/dev/nvme1n1", "259:1"))
    assert plan_for([a, b])["action"] == "refuse"
    assert plan_for([a, b], force=True)["action"] == "create_raid"


def test_existing_array_of_ours_is_kept() -> None:
    member = {"signatures": [{"type": "linux_raid_member", "offset": "0x1000"}],
              "holders": ["md127"], "wipefs": "linux_raid_member"}
    a = classified(drive("/dev/nvme0n1", "259:0", **member), holders=frozenset({"md127"}))
    b = classified(drive("/dev/nvme1n1", "259:1", **member), holders=frozenset({"md127"}))
    assert a["state"] == "member"
    md = classified(drive("/dev/md/gds", "9:127", **XFS_OURS))
    raid = {"exists": True, "slave_devnos": ["259:0", "259:1"],
            "slaves": ["nvme0n1", "nvme1n1"], "info": md}
    result = plan_for([a, b], raid=raid)
    assert result["action"] == "keep" and result["uuid"] == "u-2"


def test_existing_array_with_other_members_is_refused() -> None:
    a = classified(drive("/dev/nvme0n1", "259:0"))
    b = classified(drive("/dev/nvme1n1", "259:1"))
    raid = {"exists": True, "slave_devnos": ["259:4", "259:5"],
            "slaves": ["nvme4n1", "nvme5n1"], "info": classified(drive("/dev/md/gds", "9:1"))}
    message = plan_for([a, b], raid=raid)["refusals"][0]
    assert "already exists with members nvme4n1, nvme5n1" in message


def test_member_of_a_foreign_array_is_refused_even_with_force() -> None:
    member = {"signatures": [{"type": "linux_raid_member", "offset": "0x1000"}],
              "holders": ["md5"]}
    info = classified(drive(**member))
    assert "in use by md5" in plan_for([info], force=True)["refusals"][0]
