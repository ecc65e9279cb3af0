#!/usr/bin/python
# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read-only probe of the NVMe drives the nvme role is asked to use, and the plan for them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvme_probe
short_description: Find NVMe drives, probe what they hold, and plan filesystem/RAID0 work
description:
  - Resolves the drives to use from explicit paths, globs under /dev/disk/by-id, or every
    non-boot NVMe namespace.
  - Probes each drive read-only (sysfs, /proc/self/mountinfo, C(wipefs --no-act --json),
    C(blkid -p)) for filesystem, partition-table, RAID and LVM signatures, partitions,
    holders, mounts, and whether it carries the root or /boot filesystem.
  - Returns a plan - C(keep) (the wanted filesystem is already there, made by this role),
    C(format), C(create_raid) or C(refuse) - and never changes anything.
  - A drive with data is refused unless I(force) is true; a drive that carries the root or
    /boot filesystem, is mounted elsewhere or is held by another device (md, dm) is refused
    even then.
version_added: 0.1.0
author: gdsfleet developers (@gdsfleet)
options:
  devices:
    description: Device paths (C(/dev/nvme0n1), C(/dev/disk/by-id/nvme-...)).
    type: list
    elements: str
    default: []
  patterns:
    description: Globs; relative ones are matched under C(/dev/disk/by-id).
    type: list
    elements: str
    default: []
  discover_all:
    description: Use every NVMe namespace that does not carry the root or /boot filesystem.
    type: bool
    default: false
  raid_device:
    description: The md device for a RAID0 over several drives.
    type: str
  filesystem:
    description: The wanted filesystem.
    type: str
    choices: [xfs, ext4]
    default: xfs
  label:
    description: Filesystem label that marks a filesystem made by the role.
    type: str
    default: gdsfleet
  known_uuids:
    description: Filesystem UUIDs recorded by the role earlier (local fact file).
    type: list
    elements: str
    default: []
  fact_path:
    description: The role's local fact file; the UUIDs recorded there count as the role's own.
    type: path
  mount_point:
    description: Where the role mounts the filesystem (a mount there is not "in use").
    type: path
    required: true
  force:
    description: Plan to wipe drives that hold signatures or partitions.
    type: bool
    default: false
  raid_chunk_kb:
    description: RAID0 chunk size in KiB for the planned C(mdadm --create).
    type: int
    default: 512
"""

EXAMPLES = r"""
- name: Probe the NVMe drives and plan the work
  gdsfleet.gds.nvme_probe:
    devices: [/dev/nvme0n1]
    filesystem: xfs
    mount_point: /mnt/gds
  register: probe
"""

RETURN = r"""
devices:
  description: Resolved device paths, in order.
  type: list
  returned: always
missing:
  description: Inputs that do not name a block device, with the reason.
  type: list
  returned: always
info:
  description: Per device - kernel name, signatures, partitions, holders, mounts, state, reasons.
  type: dict
  returned: always
raid:
  description: The md device when several drives are selected - C(path), C(exists), and for an
    existing array its C(slaves) and probe C(info).
  type: dict
  returned: when more than one drive is selected
recorded:
  description: Content of I(fact_path); an empty C(filesystems) mapping when absent or unreadable.
  type: dict
  returned: always
tools:
  description: Whether C(mkfs.xfs), C(mkfs.ext4), C(mdadm) and C(wipefs) are on the PATH.
  type: dict
  returned: always
mdstat:
  description: C(present) (bool) and C(personalities) from /proc/mdstat.
  type: dict
  returned: always
plan:
  description: C(action), C(target), C(members), C(refusals), C(wipe), C(mdadm_create), C(fstype),
    C(uuid) and C(label) of an existing filesystem of ours.
  type: dict
  returned: always
"""

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

BY_ID = "/dev/disk/by-id"
BOOT_MOUNTS = ("/", "/boot", "/boot/efi")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def _sysdir(devno: str) -> str:
    return os.path.realpath(f"/sys/dev/block/{devno}")


def _devno_of(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def _partitions(sysdir: str) -> list[dict[str, str]]:
    out = []
    try:
        entries = sorted(os.listdir(sysdir))
    except OSError:
        return out
    for name in entries:
        sub = os.path.join(sysdir, name)
        if os.path.isfile(os.path.join(sub, "partition")):
            out.append({"name": name, "devno": _read(os.path.join(sub, "dev")).strip()})
    return out


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _mountinfo() -> list[dict[str, str]]:
    mounts = []
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _sep, right = line.partition(" - ")
        fields = left.split()
        rest = right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        mounts.append({
            "devno": fields[2],
            "mount_point": fields[4].replace("\\040", " "),
            "fstype": rest[0],
            "source": rest[1],
        })
    return mounts


def _expand(devno: str, seen: set[str]) -> None:
    """Add devno, its whole disk (for a partition) and its slaves (md, dm), recursively."""
    if not devno or devno in seen:
        return
    seen.add(devno)
    sysdir = _sysdir(devno)
    if os.path.isfile(os.path.join(sysdir, "partition")):
        _expand(_read(os.path.join(os.path.dirname(sysdir), "dev")).strip(), seen)
    for slave in _listdir(os.path.join(sysdir, "slaves")):
        _expand(_read(os.path.join(sysdir, "slaves", slave, "dev")).strip(), seen)


def _boot_devnos(mounts: list[dict[str, str]]) -> dict[str, str]:
    """devno -> the boot mount point it carries (whole disks, partitions, md/dm members)."""
    out: dict[str, str] = {}
    for mount in mounts:
        if mount["mount_point"] not in BOOT_MOUNTS:
            continue
        devnos = set()
        if not mount["devno"].startswith("0:"):
            devnos.add(mount["devno"])
        if mount["source"].startswith("/dev/"):
            source = _devno_of(mount["source"])
            if source:
                devnos.add(source)
        for devno in devnos:
            seen: set[str] = set()
            _expand(devno, seen)
            for item in seen:
                out.setdefault(item, mount["mount_point"])
    return out


def _holders_closure(devno: str) -> list[str]:
    """devnos of everything stacked on devno (md, dm), recursively."""
    out: list[str] = []
    todo = [devno]
    while todo:
        current = todo.pop()
        sysdir = _sysdir(current)
        for holder in _listdir(os.path.join(sysdir, "holders")):
            hdev = _read(os.path.join(sysdir, "holders", holder, "dev")).strip()
            if hdev and hdev not in out:
                out.append(hdev)
                todo.append(hdev)
    return out


def _kernel_name(devno: str) -> str:
    return os.path.basename(_sysdir(devno))


class Prober:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.mounts = _mountinfo()
        self.boot = _boot_devnos(self.mounts)

    def run(self, args: list[str]) -> tuple[int, str, str]:
        return self.module.run_command(args, environ_update={"LC_ALL": "C"})

    def signatures(self, path: str) -> tuple[list[dict[str, Any]], str]:
        rc, out, _err = self.run(["wipefs", "--no-act", "--json", path])
        sigs: list[dict[str, Any]] = []
        if rc == 0 and out.strip():
            try:
                sigs = json.loads(out).get("signatures", [])
            except ValueError:
                sigs = []
        rc, text, _err = self.run(["wipefs", "--no-act", path])
        return sigs, text.strip() if rc == 0 else ""

    def blkid(self, path: str) -> dict[str, str]:
        rc, out, _err = self.run(["blkid", "-p", "-o", "export", path])
        values: dict[str, str] = {}
        if rc == 0:
            for line in out.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    values[key] = value
        return values

    def probe(self, path: str, devno: str) -> dict[str, Any]:
        sysdir = _sysdir(devno)
        parts = _partitions(sysdir)
        holders = [_kernel_name(d) for d in _holders_closure(devno)]
        related = {devno} | {p["devno"] for p in parts}
        mounts = [m for m in self.mounts if m["devno"] in related]
        boot = sorted({self.boot[d] for d in related if d in self.boot})
        sigs, sig_text = self.signatures(path)
        size = _read(os.path.join(sysdir, "size")).strip()
        return {
            "path": path,
            "devno": devno,
            "kernel_name": os.path.basename(sysdir),
            "size_bytes": int(size) * 512 if size.isdigit() else None,
            "signatures": sigs,
            "wipefs": sig_text,
            "blkid": self.blkid(path),
            "partitions": [p["name"] for p in parts],
            "holders": holders,
            "holder_devnos": _holders_closure(devno),
            "mounts": [m["mount_point"] for m in mounts],
            "boot": boot,
        }


def _describe(sig: dict[str, Any]) -> str:
    text = f"{sig.get('type', '?')} signature at offset {sig.get('offset', '?')}"
    extra = [f"{k.upper()}={sig[k]}" for k in ("label", "uuid") if sig.get(k)]
    return text + (f" ({', '.join(extra)})" if extra else "")


def classify(info: dict[str, Any], *, fstype: str, label: str, known_uuids: list[str],
             mount_point: str, ours_holders: frozenset[str] = frozenset()) -> None:
    """Set info['state'] (blank|ours|member|used), 'reasons' and 'hard' (force cannot help)."""
    hard: list[str] = []
    reasons: list[str] = []
    blk = info["blkid"]
    is_ours_fs = (
        blk.get("TYPE") == fstype
        and (blk.get("LABEL") == label or blk.get("UUID") in known_uuids)
        and not info["partitions"]
    )
    if info["boot"]:
        hard.append(f"holds the {' and '.join(info['boot'])} filesystem")
    foreign_mounts = [m for m in info["mounts"] if not (is_ours_fs and m == mount_point)]
    if foreign_mounts:
        hard.append(f"is mounted at {', '.join(foreign_mounts)} (unmount it first)")
    foreign_holders = [h for h in info["holders"] if h not in ours_holders]
    if foreign_holders:
        hard.append(f"is in use by {', '.join(foreign_holders)} (md/dm device stacked on it)")
    sig_types = [s.get("type") for s in info["signatures"]]
    is_member = (
        bool(info["holders"]) and not foreign_holders
        and sig_types == ["linux_raid_member"] and not info["partitions"]
    )
    if not is_ours_fs and not is_member:
        if info["signatures"]:
            reasons.append("has " + "; ".join(_describe(s) for s in info["signatures"]))
        elif blk.get("TYPE") or blk.get("PTTYPE"):
            reasons.append(f"has a {blk.get('TYPE') or blk.get('PTTYPE')} signature (blkid)")
        if info["partitions"]:
            reasons.append(f"has partitions {', '.join(info['partitions'])}")
    if hard:
        state = "used"
    elif is_ours_fs:
        state = "ours"
    elif is_member:
        state = "member"
    elif reasons:
        state = "used"
    else:
        state = "blank"
    info["state"] = state
    info["hard"] = hard
    info["reasons"] = hard + reasons


def _refusal(info: dict[str, Any], force: bool) -> str:
    why = "; ".join(info["reasons"])
    if info["hard"]:
        tail = "the role never touches such a device, nvme_force_format or not"
    elif force:
        tail = ""
    else:
        tail = ("refusing to format it; wipe it yourself or set nvme_force_format: true to "
                "let the role wipe it (wipefs -n shows: "
                + (info["wipefs"].replace("\n", " / ") or "no signatures") + ")")
    return f"{info['path']} {why}" + (f": {tail}" if tail else "")


def plan(infos: list[dict[str, Any]], raid: dict[str, Any] | None, *, force: bool,
         raid_device: str | None, chunk_kb: int) -> dict[str, Any]:
    result: dict[str, Any] = {"action": "refuse", "target": None, "refusals": [], "wipe": [],
                              "members": [i["path"] for i in infos], "mdadm_create": [],
                              "uuid": None, "label": None, "fstype": None}

    def settle(info: dict[str, Any]) -> bool:
        """True when info can be used (blank, ours, or wiped by force)."""
        if info["state"] in ("blank", "ours", "member"):
            return True
        if info["hard"] or not force:
            result["refusals"].append(_refusal(info, force))
            return False
        result["wipe"].append({"device": info["path"], "wipefs": info["wipefs"],
                               "partitions": info["partitions"],
                               "reasons": info["reasons"]})
        return True

    if len(infos) == 1:
        info = infos[0]
        result["target"] = info["path"]
        if settle(info):
            if info["state"] == "ours":
                result["action"] = "keep"
                result["uuid"] = info["blkid"].get("UUID")
                result["label"] = info["blkid"].get("LABEL")
                result["fstype"] = info["blkid"].get("TYPE")
            else:
                result["action"] = "format"
        return result

    result["target"] = raid_device
    if raid is not None and raid.get("exists"):
        member_devnos = set(raid.get("slave_devnos", []))
        wanted = {i["devno"] for i in infos}
        if member_devnos != wanted:
            result["refusals"].append(
                f"{raid_device} already exists with members "
                f"{', '.join(raid.get('slaves', [])) or 'none'}, not the requested "
                f"{', '.join(i['path'] for i in infos)}: stop it (mdadm --stop) or choose "
                "another nvme_raid_device"
            )
            return result
        if settle(raid["info"]):
            if raid["info"]["state"] == "ours":
                result["action"] = "keep"
                result["uuid"] = raid["info"]["blkid"].get("UUID")
                result["label"] = raid["info"]["blkid"].get("LABEL")
                result["fstype"] = raid["info"]["blkid"].get("TYPE")
            else:
                result["action"] = "format"
        return result

    usable = [settle(i) for i in infos]
    for info in infos:
        if info["state"] in ("ours", "member"):
            # A filesystem of ours on a single member, or a member of an array that is not
            # assembled: both would be destroyed by --create.
            if force:
                result["wipe"].append({"device": info["path"], "wipefs": info["wipefs"],
                                       "partitions": info["partitions"],
                                       "reasons": info["reasons"] or ["holds " + ", ".join(
                                           _describe(s) for s in info["signatures"])]})
            else:
                result["refusals"].append(
                    f"{info['path']} holds a filesystem or RAID member signature "
                    f"({info['wipefs'].replace(chr(10), ' / ')}) but is not part of "
                    f"{raid_device}: refusing to build the array over it; set "
                    "nvme_force_format: true to wipe it")
    if all(usable) and not result["refusals"]:
        result["action"] = "create_raid"
        result["mdadm_create"] = [
            "mdadm", "--create", str(raid_device), "--run", "--level=0", "--metadata=1.2",
            f"--chunk={chunk_kb}", f"--raid-devices={len(infos)}",
            *[i["path"] for i in infos],
        ]
    return result


def resolve(module: AnsibleModule, prober: Prober) -> tuple[list[tuple[str, str]], list[str]]:
    params = module.params
    found: list[tuple[str, str]] = []
    missing: list[str] = []
    seen: set[str] = set()

    def add(path: str, origin: str) -> None:
        devno = _devno_of(path)
        if devno is None:
            reason = "does not exist" if not os.path.exists(path) else "is not a block device"
            missing.append(f"{origin}: {path} {reason}")
            return
        if devno not in seen:
            seen.add(devno)
            found.append((path, devno))

    for path in params["devices"]:
        add(path, "nvme_devices")
    for pattern in params["patterns"]:
        full = pattern if pattern.startswith("/") else os.path.join(BY_ID, pattern)
        matches = sorted(m for m in glob.glob(full) if not m.rsplit("-", 1)[-1].startswith("part"))
        if not matches:
            missing.append(f"nvme_device_patterns: {pattern!r} matches nothing under {BY_ID}")
        for match in matches:
            add(os.path.realpath(match), f"nvme_device_patterns ({match})")
    if params["discover_all"]:
        for name in _listdir("/sys/block"):
            # nvme<ctrl>n<ns>; nvme<ctrl>c<path>n<ns> are hidden multipath paths.
            if not name.startswith("nvme") or "c" in name[4:] or "n" not in name[4:]:
                continue
            devno = _read(f"/sys/block/{name}/dev").strip()
            if devno in prober.boot:
                continue
            add(f"/dev/{name}", "nvme_discover_all")
        if not found and not missing:
            missing.append("nvme_discover_all: no NVMe namespace without the root or /boot "
                           "filesystem was found under /sys/block")
    return found, missing


def mdstat() -> dict[str, Any]:
    text = _read("/proc/mdstat")
    present = os.path.exists("/proc/mdstat")
    personalities: list[str] = []
    for line in text.splitlines():
        if line.startswith("Personalities"):
            personalities = [p.strip("[]") for p in line.split(":", 1)[1].split()]
    return {"present": present, "personalities": personalities,
            "raid0_module": os.path.isdir("/sys/module/raid0")}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "str", "default": []},
            "patterns": {"type": "list", "elements": "str", "default": []},
            "discover_all": {"type": "bool", "default": False},
            "raid_device": {"type": "str"},
            "filesystem": {"type": "str", "choices": ["xfs", "ext4"], "default": "xfs"},
            "label": {"type": "str", "default": "gdsfleet"},
            "known_uuids": {"type": "list", "elements": "str", "default": []},
            "mount_point": {"type": "path", "required": True},
            "fact_path": {"type": "path"},
            "force": {"type": "bool", "default": False},
            "raid_chunk_kb": {"type": "int", "default": 512},
        },
        supports_check_mode=True,
    )
    params = module.params
    recorded: dict[str, Any] = {"filesystems": {}}
    if params["fact_path"] and os.path.isfile(params["fact_path"]):
        try:
            loaded = json.loads(_read(params["fact_path"]))
            if isinstance(loaded, dict) and isinstance(loaded.get("filesystems"), dict):
                recorded = loaded
        except ValueError:
            module.warn(f"{params['fact_path']} is not JSON; ignoring it")
    known_uuids = list(params["known_uuids"]) + [
        str(entry.get("uuid")) for entry in recorded["filesystems"].values()
        if isinstance(entry, dict) and entry.get("uuid")
    ]
    prober = Prober(module)
    found, missing = resolve(module, prober)
    infos = [prober.probe(path, devno) for path, devno in found]

    raid: dict[str, Any] | None = None
    ours_holders: frozenset[str] = frozenset()
    raid_device = params["raid_device"]
    if len(infos) > 1 and raid_device:
        raid = {"path": raid_device, "exists": False}
        raid_devno = _devno_of(raid_device)
        if raid_devno is not None:
            sysdir = _sysdir(raid_devno)
            slaves = _listdir(os.path.join(sysdir, "slaves"))
            raid.update({
                "exists": True,
                "kernel_name": os.path.basename(sysdir),
                "slaves": slaves,
                "slave_devnos": [_read(os.path.join(sysdir, "slaves", s, "dev")).strip()
                                 for s in slaves],
                "info": prober.probe(raid_device, raid_devno),
            })
            classify(raid["info"], fstype=params["filesystem"], label=params["label"],
                     known_uuids=known_uuids, mount_point=params["mount_point"])
            ours_holders = frozenset([raid["kernel_name"]])
    for info in infos:
        classify(info, fstype=params["filesystem"], label=params["label"],
                 known_uuids=known_uuids, mount_point=params["mount_point"],
                 ours_holders=ours_holders)

    result_plan = plan(infos, raid, force=params["force"], raid_device=raid_device,
                       chunk_kb=params["raid_chunk_kb"]) if infos else {
        "action": "refuse", "target": None, "refusals": [], "wipe": [], "members": [],
        "mdadm_create": [], "uuid": None, "label": None, "fstype": None}
    module.exit_json(
        changed=False,
        devices=[i["path"] for i in infos],
        missing=missing,
        info={i["path"]: i for i in infos},
        raid=raid,
        mdstat=mdstat(),
        recorded=recorded,
        tools={tool: module.get_bin_path(tool) is not None
               for tool in ("mkfs.xfs", "mkfs.ext4", "mdadm", "wipefs")},
        plan=result_plan,
    )


if __name__ == "__main__":
    main()
