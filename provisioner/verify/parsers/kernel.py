"""Kernel facts: the /proc/kallsyms lines the gather script kept, /proc/cmdline, IOMMU state."""

from __future__ import annotations

import re
from typing import Any

NVFS_SYMBOLS = ("nvme_v1_register_nvfs_dma_ops", "nvme_v2_register_nvfs_dma_ops")
# nvidia-fs's registration hook in a GDS-patched nvme-rdma (NVMe-oF): NVIDIA/gds-nvidia-fs
# src/nvfs-dma.c has only this v1 name up to v2.28.4 (tests/fixtures/kallsyms/README.md).
NVFS_RDMA_SYMBOLS = ("nvme_rdma_v1_register_nvfs_dma_ops",)
P2PDMA_SYMBOL = "p2pdma_pgmap_ops"
# Kernel PCI P2PDMA, by either symbol: p2pdma_pgmap_ops is a data symbol (kallsyms lists it only
# with CONFIG_KALLSYMS_ALL), pci_p2pdma_add_resource an exported function (always listed when
# CONFIG_PCI_P2PDMA is set; drivers/pci/p2pdma.c, EXPORT_SYMBOL_GPL).
P2PDMA_SYMBOLS = (P2PDMA_SYMBOL, "pci_p2pdma_add_resource")
# Which nvme registration name the LOADED nvidia-fs looks up (NVIDIA/gds-nvidia-fs src/nvfs-dma.c,
# modules_list; tests/fixtures/kallsyms/nvfs-dma-modules-list.yml): nvme_v2_... when it was
# built with HAVE_BLK_RQ_DMA_MAP_ITER_START (2.28.2+, against a kernel with
# blk_rq_dma_map_iter_start: 6.17+), else nvme_v1_... Only that build has the static function
# below, which kallsyms lists among nvidia_fs's own symbols.
NVFS_V1, NVFS_V2 = NVFS_SYMBOLS
NVFS_BLK_ITER_SYMBOL = "nvfs_blk_rq_dma_map_iter_start"
NVFS_V2_MIN_VERSION = (2, 28, 2)
NVFS_V2_MIN_KERNEL = (6, 17)


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
        "p2pdma_symbol": next((s for s in P2PDMA_SYMBOLS if s in symbols), None),
        "nvfs_module_symbols": any(m == "nvidia_fs" for m in symbols.values()),
        "nvfs_blk_iter": symbols.get(NVFS_BLK_ITER_SYMBOL) == "nvidia_fs",
        "symbols": sorted(symbols),
    }


def _vt(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def nvfs_lookup(ks: dict[str, Any], nvfs_version: str | None,
                kernel_version: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """The nvme registration name the loaded nvidia-fs looks up, and on what basis (pure):
    ``{"symbol": name or None, "basis": text}``. Its own symbols decide when kallsyms lists
    them (nvfs_blk_rq_dma_map_iter_start only in the v2 build); else its version and the
    running kernel (v2 from nvidia-fs 2.28.2 on kernels 6.17+); None when neither is known."""
    if ks.get("nvfs_blk_iter"):
        return {"symbol": NVFS_V2, "basis": f"nvidia_fs has {NVFS_BLK_ITER_SYMBOL} (the "
                "blk_rq_dma_map_iter build)"}
    if ks.get("nvfs_module_symbols"):
        return {"symbol": NVFS_V1, "basis": f"nvidia_fs's symbols lack {NVFS_BLK_ITER_SYMBOL} "
                "(the build without blk_rq_dma_map_iter)"}
    have, kern = _vt(nvfs_version), tuple(kernel_version)[:2]
    if len(have) < 2 or len(kern) < 2:
        return {"symbol": None, "basis": "nvidia-fs version or kernel version unknown"}
    if len(have) == 2 and have == NVFS_V2_MIN_VERSION[:2] and kern >= NVFS_V2_MIN_KERNEL:
        return {"symbol": None, "basis": f"nvidia-fs {nvfs_version} (major.minor only) on "
                f"kernel {'.'.join(map(str, kern))}: v1 before 2.28.2, v2 from it"}
    v2 = have >= NVFS_V2_MIN_VERSION and kern >= NVFS_V2_MIN_KERNEL
    return {"symbol": NVFS_V2 if v2 else NVFS_V1,
            "basis": f"nvidia-fs {nvfs_version} on kernel {'.'.join(map(str, kern))}"
            + (" (2.28.2+ on 6.17+)" if v2 else
               " (v2 only from nvidia-fs 2.28.2 on kernels 6.17+)")}


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
