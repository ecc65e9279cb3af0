"""Mounts (``/proc/self/mounts``) and block devices (``lsblk --json``)."""

from __future__ import annotations

import json
import os
import re
from typing import Any


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal
    out = field
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        out = out.replace(code, ch)
    return out


def parse_mounts(text: str) -> list[dict[str, Any]]:
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mounts.append({
            "source": _unescape(parts[0]),
            "target": _unescape(parts[1]),
            "fstype": parts[2],
            "options": parts[3].split(","),
        })
    return mounts


def mount_for(path: str, mounts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mount that holds ``path`` (longest target prefix; the last one mounted wins)."""
    path = os.path.normpath(path)
    best: dict[str, Any] | None = None
    for m in mounts:
        target = os.path.normpath(m["target"])
        if (
            path == target or path.startswith(target.rstrip("/") + "/") or target == "/"
        ) and (best is None or len(target) >= len(os.path.normpath(best["target"]))):
            best = m
    return best


def parse_lsblk(text: str) -> list[dict[str, Any]]:
    """Flattened ``lsblk --json`` devices (children carry ``parent``)."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    out: list[dict[str, Any]] = []

    def walk(devs: list[dict[str, Any]], parent: str | None) -> None:
        for d in devs:
            entry = {k: v for k, v in d.items() if k != "children"}
            entry["parent"] = parent
            out.append(entry)
            walk(d.get("children") or [], d.get("name"))

    walk(data.get("blockdevices") or [], None)
    return out


def is_nvme_source(source: str, devices: list[dict[str, Any]]) -> bool:
    """Whether a mount source is an NVMe namespace, a partition of one, or md over NVMe."""
    name = os.path.basename(source)
    if name.startswith("nvme"):
        return True
    by_name = {d.get("name"): d for d in devices}
    dev = by_name.get(name)
    seen = 0
    while dev is not None and seen < 8:
        if str(dev.get("tran") or "").lower() == "nvme" or str(dev.get("name", "")).startswith(
            "nvme"
        ):
            return True
        dev = by_name.get(dev.get("parent") or dev.get("pkname"))
        seen += 1
    return False


def nvme_mount_points(mounts: list[dict[str, Any]], devices: list[dict[str, Any]]) -> list[str]:
    return [m["target"] for m in mounts if is_nvme_source(m["source"], devices)]


# -- NVMe transport under a mount ------------------------------------------------------------
# Transports GDS reads and writes directly: local PCIe NVMe and NVMe over RDMA (NVMe-oF).
GDS_NVME_TRANSPORTS = ("pcie", "rdma")
_NS_RE = re.compile(r"^nvme(\d+)n(\d+)(?:p\d+)?$")


def parse_mountinfo(text: str) -> list[dict[str, str]]:
    """/proc/self/mountinfo: ``{"devno": "maj:min", "target", "source", "fstype"}`` per line
    (fields 3 and 5; source and type after the `` - `` separator)."""
    out: list[dict[str, str]] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if not sep or len(f) < 5:
            continue
        out.append({"devno": f[2], "target": _unescape(f[4]),
                    "fstype": r[0] if r else "", "source": _unescape(r[1]) if len(r) > 1 else ""})
    return out


def parse_nvme_topology(text: str) -> dict[str, Any]:
    """The gather script's ``nvme_topology`` JSON (controllers, subsystems, namespaces, md)."""
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _controllers_of(name: str, topo: dict[str, Any], multipath: bool) -> list[str]:
    m = _NS_RE.match(name)
    if not m:
        return []
    inst = m.group(1)
    ctrls = topo.get("controllers") or {}
    subs = topo.get("subsystems") or {}
    if multipath and subs.get(f"nvme-subsys{inst}"):
        return [c for c in subs[f"nvme-subsys{inst}"] if c in ctrls]
    return [f"nvme{inst}"] if f"nvme{inst}" in ctrls else []


def mount_transports(source: str, devno: str | None, topo: dict[str, Any],
                     multipath: bool = True) -> list[dict[str, str]]:
    """Every NVMe controller path under a mount: the namespace (found by the mount's device
    number among /dev/nvmeXnY, or by the source's name), or the members of an md array, each
    with its controller, transport, address and ``md`` (the array it belongs to, "" for a
    namespace mounted directly). Empty when none is visible."""
    names: list[tuple[str, str]] = []  # (namespace, md array it is a member of or "")
    namespaces = topo.get("namespaces") or {}
    md = topo.get("md") or {}
    base = os.path.basename(source or "")
    if _NS_RE.match(base):
        names.append((base, ""))
    names += [(n, "") for n, d in namespaces.items()
              if devno and d == devno and (n, "") not in names]
    if not names:
        arrays = [a for a, v in md.items() if a == base or (devno and v.get("dev") == devno)]
        for a in arrays:
            names += [(s, str(a)) for s in md[a].get("slaves") or [] if _NS_RE.match(s)]
    out: list[dict[str, str]] = []
    ctrls = topo.get("controllers") or {}
    for n, array in names:
        for c in _controllers_of(n, topo, multipath):
            info = ctrls.get(c) or {}
            out.append({"namespace": n, "controller": c,
                        "transport": str(info.get("transport") or "unknown").lower(),
                        "address": str(info.get("address") or ""),
                        "subsysnqn": str(info.get("subsysnqn") or ""), "md": array})
    return out
