"""Kernel facts: the /proc/kallsyms lines the gather script kept, /proc/cmdline, IOMMU state."""

from __future__ import annotations

import re
from typing import Any

from provisioner import collection_utils

NVFS_SYMBOLS = ("nvme_v1_register_nvfs_dma_ops", "nvme_v2_register_nvfs_dma_ops")
# nvidia-fs's registration hook in a GDS-patched nvme-rdma (NVMe-oF): NVIDIA/gds-nvidia-fs
# src/nvfs-dma.c has only this v1 name up to v2.28.4 (tests/fixtures/kallsyms/README.md).
NVFS_RDMA_SYMBOLS = ("nvme_rdma_v1_register_nvfs_dma_ops",)
P2PDMA_SYMBOL = "p2pdma_pgmap_ops"
# Kernel PCI P2PDMA and the nvme name the loaded nvidia-fs looks up: one copy, in the collection
# (plugins/module_utils/nvfs_symbols.py), shared with playbooks/verify.yml's filter.
_syms = collection_utils.load("nvfs_symbols.py")
P2PDMA_SYMBOLS: tuple[str, ...] = _syms.P2PDMA_SYMBOLS
NVFS_V1: str = _syms.NVME_V1
NVFS_V2: str = _syms.NVME_V2
NVFS_BLK_ITER_SYMBOL: str = _syms.BLK_ITER
NVFS_V2_MIN_VERSION: tuple[int, ...] = _syms.V2_MIN_NVFS
NVFS_V2_MIN_KERNEL: tuple[int, ...] = _syms.V2_MIN_KERNEL


def parse_kallsyms(text: str) -> dict[str, Any]:
    """Lines ``<addr> <type> <name> [module]`` -> which GDS-relevant symbols exist."""
    symbols: dict[str, str | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        module = parts[3].strip("[]") if len(parts) > 3 else None
        symbols[parts[2]] = module
    nvfs = [s for s in NVFS_SYMBOLS if s in symbols]
    rdma = [s for s in NVFS_RDMA_SYMBOLS if s in symbols]
    return {
        "nvfs_dma_ops": nvfs[0] if nvfs else None,
        "nvfs_dma_ops_module": symbols.get(nvfs[0]) if nvfs else None,
        "nvfs_rdma_dma_ops": rdma[0] if rdma else None,
        "nvfs_rdma_dma_ops_module": symbols.get(rdma[0]) if rdma else None,
        "nvme_register_symbols": nvfs,
        "p2pdma_pgmap_ops": P2PDMA_SYMBOL in symbols,
        "p2pdma": any(s in symbols for s in P2PDMA_SYMBOLS),
        "p2pdma_symbol": _syms.p2pdma_symbol(symbols),
        "nvfs_module_symbols": any(m == "nvidia_fs" for m in symbols.values()),
        "nvfs_blk_iter": symbols.get(NVFS_BLK_ITER_SYMBOL) == "nvidia_fs",
        "symbols": sorted(symbols),
    }


def nvfs_lookup(ks: dict[str, Any], nvfs_version: str | None,
                kernel_version: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """The nvme registration name the loaded nvidia-fs looks up, and on what basis (pure):
    ``{"symbol": name or None, "basis": text}`` (plugins/module_utils/nvfs_symbols.py)."""
    symbols: dict[str, str | None] = dict.fromkeys(ks.get("symbols") or [])
    if ks.get("nvfs_blk_iter"):
        symbols[NVFS_BLK_ITER_SYMBOL] = "nvidia_fs"
    elif ks.get("nvfs_module_symbols"):
        symbols["nvidia_fs"] = "nvidia_fs"
    found: dict[str, Any] = _syms.lookup(symbols, nvfs_version, list(kernel_version))
    return found


def parse_cmdline(text: str) -> dict[str, Any]:
    """IOMMU-relevant kernel parameters from /proc/cmdline."""
    params: dict[str, str] = {}
    for token in text.split():
        if token == "--":  # noqa: S105 - end of kernel arguments
            break  # what follows goes to init
        key, _, value = token.partition("=")
        params[key] = value
    wanted = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough")
    iommu = {k: params[k] for k in wanted if k in params}
    return {"iommu_params": iommu, "args": len(params)}


def iommu_state(cmdline: dict[str, Any], iommu_class_entries: list[str] | None,
                gdscheck_iommu: str | None = None) -> dict[str, Any]:
    """off | pt | on | unknown from the kernel parameters, /sys/class/iommu and gdscheck."""
    params: dict[str, str] = cmdline.get("iommu_params", {})
    values = {k: v.lower() for k, v in params.items()}
    if values.get("iommu") == "pt" or values.get("iommu.passthrough") in ("1", "y", "on"):
        by_cmdline = "pt"
    elif any(values.get(k) == "off" for k in ("intel_iommu", "amd_iommu", "iommu")):
        by_cmdline = "off"
    elif any(values.get(k) in ("on", "force") for k in ("intel_iommu", "amd_iommu", "iommu")):
        by_cmdline = "on"
    else:
        by_cmdline = None
    sysfs_active = bool(iommu_class_entries) if iommu_class_entries is not None else None
    if by_cmdline == "pt":
        state = "pt"
    elif sysfs_active is False:
        state = "off"
    elif sysfs_active:
        state = "on"
    elif by_cmdline is not None:
        state = by_cmdline
    else:
        state = "unknown"
    if gdscheck_iommu is not None and gdscheck_iommu.lower() == "disabled" and state == "unknown":
        state = "off"
    return {
        "state": state,
        "cmdline": by_cmdline,
        "sysfs_entries": iommu_class_entries,
        "gdscheck": gdscheck_iommu,
    }


def parse_kernel_version(release: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release.strip())
    if not m:
        return ()
    return tuple(int(x) for x in m.groups() if x is not None)
