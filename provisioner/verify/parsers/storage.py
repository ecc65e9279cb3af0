"""Mounts (``/proc/self/mounts``) and block devices (``lsblk --json``)."""

from __future__ import annotations

import json
import os
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
