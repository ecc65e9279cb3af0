# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Which kernel symbols say what about GDS: one copy, shared by `provisioner verify`
(provisioner/verify/parsers/kernel.py, through provisioner/collection_utils.py) and
playbooks/verify.yml (the filter gdsfleet.gds.nvfs_symbols), so both judge a node alike.

- The nvme registration name the LOADED nvidia-fs looks up (NVIDIA/gds-nvidia-fs src/nvfs-dma.c,
  ``modules_list``; tests/fixtures/kallsyms/nvfs-dma-modules-list.yml): ``nvme_v2_...`` when it
  was built with HAVE_BLK_RQ_DMA_MAP_ITER_START (nvidia-fs 2.28.2+ against a kernel with
  blk_rq_dma_map_iter_start, 6.17+), else ``nvme_v1_...``. Only that build has the static
  function ``nvfs_blk_rq_dma_map_iter_start``, which /proc/kallsyms lists among nvidia_fs's
  symbols. A driver exporting the other name never registers (NVIDIA/gds-nvidia-fs#87).
- Kernel PCI P2PDMA: ``p2pdma_pgmap_ops`` (a data symbol, listed only with
  CONFIG_KALLSYMS_ALL) or the exported function ``pci_p2pdma_add_resource``.

Pure Python, standard library only (it also runs inside Ansible's controller).
"""

from __future__ import annotations

import re

NVME_V1 = "nvme_v1_register_nvfs_dma_ops"
NVME_V2 = "nvme_v2_register_nvfs_dma_ops"
NVME_SYMBOLS = (NVME_V1, NVME_V2)
NVME_RDMA = "nvme_rdma_v1_register_nvfs_dma_ops"
BLK_ITER = "nvfs_blk_rq_dma_map_iter_start"
V2_MIN_NVFS = (2, 28, 2)
V2_MIN_KERNEL = (6, 17)
P2PDMA_SYMBOLS = ("p2pdma_pgmap_ops", "pci_p2pdma_add_resource")
# what verify.yml greps out of /proc/kallsyms (whole words)
GREP_PATTERN = "|".join((*NVME_SYMBOLS, NVME_RDMA, BLK_ITER, *P2PDMA_SYMBOLS))
_MAX_LINES = 4096


def kallsyms_modules(text):
    """``<addr> <type> <name> [module]`` lines -> {name: module or None} (bounded)."""
    out = {}
    for line in str(text or "").splitlines()[:_MAX_LINES]:
        parts = line.split()
        if len(parts) < 3:
            continue
        out[parts[2][:200]] = parts[3].strip("[]")[:64] if len(parts) > 3 else None
    return out


def _numbers(text, count=3):
    return tuple(int(x) for x in re.findall(r"\d+", str(text or ""))[:count])


def lookup(symbols, nvfs_version, kernel_release):
    """The name the loaded nvidia-fs looks up: ``{"symbol": name or None, "basis": text}``.
    ``symbols``: {name: module} from /proc/kallsyms; ``nvfs_version``: the loaded module's
    version (None when it is not loaded); ``kernel_release``: the running kernel (text or a
    sequence of numbers). Its own symbols decide when kallsyms lists them, else its version and
    the kernel; None when neither tells."""
    if symbols.get(BLK_ITER) == "nvidia_fs":
        return {"symbol": NVME_V2, "basis": f"nvidia_fs has {BLK_ITER} (the "
                "blk_rq_dma_map_iter build)"}
    if any(m == "nvidia_fs" for m in symbols.values()):
        return {"symbol": NVME_V1, "basis": f"nvidia_fs's symbols lack {BLK_ITER} (the build "
                "without blk_rq_dma_map_iter)"}
    have = _numbers(nvfs_version)
    kern = (tuple(int(x) for x in kernel_release)[:2] if isinstance(kernel_release, (list, tuple))
            else _numbers(kernel_release, 2))
    if len(have) < 2 or len(kern) < 2:
        return {"symbol": None, "basis": "nvidia-fs version or kernel version unknown"}
    kernel = ".".join(map(str, kern))
    if len(have) == 2 and have == V2_MIN_NVFS[:2] and kern >= V2_MIN_KERNEL:
        return {"symbol": None, "basis": f"nvidia-fs {nvfs_version} (major.minor only) on "
                f"kernel {kernel}: v1 before 2.28.2, v2 from it"}
    v2 = have >= V2_MIN_NVFS and kern >= V2_MIN_KERNEL
    return {"symbol": NVME_V2 if v2 else NVME_V1,
            "basis": f"nvidia-fs {nvfs_version} on kernel {kernel}"
            + (" (2.28.2+ on 6.17+)" if v2 else " (v2 only from nvidia-fs 2.28.2 on kernels "
               "6.17+)")}


def registration(symbols, nvfs_version, kernel_release, need_local=True, need_rdma=False):
    """Whether nvidia-fs can register with the nvme driver(s) the GDS mount needs:
    ``{"ok", "wanted", "basis", "exported", "rdma", "mismatch", "message"}``."""
    found = lookup(symbols, nvfs_version, kernel_release)
    wanted = found["symbol"]
    exported = [s for s in NVME_SYMBOLS if s in symbols]
    rdma = NVME_RDMA in symbols
    local_ok = (wanted in exported) if wanted else bool(exported)
    mismatch = bool(need_local and not local_ok and exported)
    ok = (local_ok or not need_local) and (rdma or not need_rdma)
    if ok:
        message = "the nvme driver exports " + (wanted or " or ".join(exported) or NVME_RDMA)
    elif mismatch:
        message = (f"name mismatch: the loaded nvidia-fs looks up {wanted} ({found['basis']}), "
                   f"but the nvme driver exports {', '.join(exported)}, so nvme never registers "
                   "and I/O goes through the CPU (NVIDIA/gds-nvidia-fs#87)")
    else:
        message = ("no GDS-patched nvme driver: "
                   + ", ".join(n for n, miss in (
                       (wanted or "nvme_v1/v2_register_nvfs_dma_ops", need_local and not local_ok),
                       (NVME_RDMA, need_rdma and not rdma)) if miss)
                   + " missing from /proc/kallsyms")
    return {"ok": ok, "wanted": wanted, "basis": found["basis"], "exported": exported,
            "rdma": rdma, "mismatch": mismatch, "message": message}


def p2pdma_symbol(symbols):
    """The symbol that shows kernel PCI P2PDMA, or None."""
    return next((s for s in P2PDMA_SYMBOLS if s in symbols), None)


# (kernel series, oldest nvidia-fs that builds on it), ascending: the nvidia-fs ChangeLog at its
# tags (tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml names them; the kernel.version check
# of provisioner verify and verify.yml's pairing assert both read this table)
KERNEL_FLOORS = (
    ((6, 0), "2.17.0"),
    ((6, 2), "2.18.3"),
    ((6, 5), "2.19.6"),
    ((6, 11), "2.26.6"),
    ((6, 17), "2.28.2"),
)
# The newest kernel series a ChangeLog entry names (2.28.2: "Fix compilation issues for 6.17
# kernel"); on a newer kernel the newest floor still applies, but whether that release builds
# and works there no ChangeLog says (NVIDIA/gds-nvidia-fs#80: 2.28.2 does not build on 6.18):
# "unverified", never a silent pass.
LAST_VERIFIED_SERIES = KERNEL_FLOORS[-1][0]


def kernel_pairing(nvfs_version, kernel_release):
    """Whether nvidia-fs ``nvfs_version`` supports ``kernel_release`` (text or numbers):
    ``{"ok": True, False or None (nothing to compare, or unverified), "floor": text,
    "unverified": text ("" when the ChangeLog covers the kernel)}``."""
    kern = (tuple(int(x) for x in kernel_release)[:2] if isinstance(kernel_release, (list, tuple))
            else _numbers(kernel_release, 2))
    floor = None
    for series, version in KERNEL_FLOORS:
        if len(kern) == 2 and kern >= series:
            floor = (series, version)
    if floor is None:
        return {"ok": None, "floor": "", "unverified": ""}
    (major, minor), version = floor
    text = f"nvidia-fs >= {version} on kernel >= {major}.{minor}"
    unverified = ""
    if kern > LAST_VERIFIED_SERIES:
        last = ".".join(map(str, LAST_VERIFIED_SERIES))
        unverified = (f"no nvidia-fs ChangeLog entry names kernel {kern[0]}.{kern[1]} (the newest "
                      f"it names is {last}, from {version}); NVIDIA/gds-nvidia-fs#80: 2.28.2 "
                      "does not build on 6.18")
    have = _numbers(nvfs_version)
    if len(have) < 2:
        return {"ok": None, "floor": text, "unverified": unverified}
    ok = have >= _numbers(version)
    return {"ok": None if ok and unverified else ok, "floor": text, "unverified": unverified}
