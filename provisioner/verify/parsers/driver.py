"""NVIDIA GPU driver: /proc/driver/nvidia/version, ``modinfo -F license nvidia``, nvidia-smi."""

from __future__ import annotations

import re
from typing import Any

_VERSION_RE = re.compile(r"Kernel Module(?: for \S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")


def parse_proc_version(text: str) -> dict[str, Any]:
    """``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build ...``
    (open) or ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20 ...`` (proprietary)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NVRM")), "")
    if not line:
        return {"loaded": False, "flavor": None, "version": None}
    flavor = "open" if "Open Kernel Module" in line else "proprietary"
    m = _VERSION_RE.search(line) or re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", line)
    return {"loaded": True, "flavor": flavor, "version": m.group(1) if m else None}


def flavor_from_license(text: str) -> str | None:
    """``Dual MIT/GPL`` -> open, ``NVIDIA`` -> proprietary."""
    lic = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not lic:
        return None
    if "MIT" in lic or "GPL" in lic:
        return "open"
    if lic.upper() == "NVIDIA":
        return "proprietary"
    return None


def parse_smi_list(text: str) -> list[dict[str, str]]:
    """``nvidia-smi -L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``."""
    gpus = []
    for line in text.splitlines():
        m = re.match(r"GPU (\d+):\s*(.+?)\s*\(UUID:\s*([^)]+)\)", line.strip())
        if m:
            gpus.append({"index": m.group(1), "name": m.group(2), "uuid": m.group(3)})
    return gpus


def parse_smi_query(text: str) -> list[dict[str, str]]:
    """``--query-gpu=index,name,pci.bus_id,driver_version,uuid --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5 and parts[0].isdigit():
            gpus.append({"index": parts[0], "name": parts[1], "pci_bus_id": parts[2],
                         "driver_version": parts[3], "uuid": parts[4]})
    return gpus


def parse_gpu_information(text: str) -> list[dict[str, str]]:
    """Concatenated /proc/driver/nvidia/gpus/*/information (``Model: ...``)."""
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("# "):
            current = {"path": line[2:].strip()}
            gpus.append(current)
            continue
        if current is not None and ":" in line:
            k, _, v = line.partition(":")
            current[k.strip()] = v.strip()
    return gpus


def version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(x) for x in re.findall(r"\d+", version))
