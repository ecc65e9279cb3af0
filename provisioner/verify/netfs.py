"""Network filesystems GDS reaches, and what each needs before cuFile takes the direct path on
it (anything less is compat mode: POSIX through the page cache).

The facts are one table in the collection, ``plugins/module_utils/netfs_caps.json``, and the
rules that read it ``plugins/module_utils/netfs_rules.py`` (shared with playbooks/verify.yml's
``gdsfleet.gds.netfs_prerequisites`` filter and the roles): NFS over RDMA, Lustre, BeeGFS and
ScaTeFS use kernel RDMA through nvidia-fs; WekaFS and IBM Storage Scale cuFile's userspace RDMA;
virtiofs the P2PDMA route. This module adapts them to verify's facts.

The mount types are the kernel's (``/proc/mounts`` field 3); the gdscheck line names are the
ones GDS prints (tests/fixtures/gdscheck/ carries real captures with them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from provisioner import collection_utils

rules = collection_utils.load("netfs_rules.py")


@dataclass(frozen=True)
class NetFs:
    name: str  # what the operator calls it
    gdscheck_line: str  # the first DRIVER CONFIGURATION key in gdscheck -p that speaks for it
    fix: str  # the step that makes GDS support it
    # the kernel module of its GDS client: the one nvidia-fs registers with (NVIDIA/gds-nvidia-fs
    # src/nvfs-dma.h NVFS_PROC_MOD_*_KEY; tests/fixtures/netfs/nvfs_client_modules.yml)
    client_module: str = ""
    cufile_section: str = ""  # its section under cufile.json's fs
    rdma: str = "kernel"  # kernel | userspace | none (netfs_caps.json)
    route: str = "nvfs"  # nvfs | p2pdma
    nvfs_counters: bool = True  # nvidia-fs's counters move with its I/O
    write_key: str = ""  # the cufile.json key that sends its writes over GDS ("" : always)


def _netfs(e: dict[str, Any]) -> NetFs:
    return NetFs(e["name"], e["gdscheck_lines"][0], e["fix"], e.get("client_module") or "",
                 e.get("cufile_section") or "", e["rdma"], e["route"], bool(e["nvfs_counters"]),
                 e.get("write_key") or "")


# every mount type the table knows -> its filesystem (nfs and nfs4 share one entry)
NETWORK_FILESYSTEMS: dict[str, NetFs] = {t: _netfs(rules.filesystems()[name])
                                         for t, name in rules.mount_types().items()}


def is_network(fstype: str) -> bool:
    return fstype in NETWORK_FILESYSTEMS


nfs_transport = rules.nfs_transport


def driver(gdscheck_parsed: dict[str, Any] | None) -> dict[str, str] | None:
    """gdscheck's DRIVER CONFIGURATION (keys lower case) from the parsed facts; None when the
    node gave no gdscheck output."""
    if gdscheck_parsed is None:
        return None
    drv = gdscheck_parsed.get("driver") or {}
    return {str(k).strip().lower(): str(v) for k, v in drv.items()}


def line_supported(fstype: str, value: str | None) -> bool:
    """A line value names one of the filesystem's direct modes: ``Supported`` (up to 1.15), or
    1.16+'s mode list with its token (``nvfs``; ``dmabuf`` / ``nvidia_peermem`` for WekaFS and
    Storage Scale; ``p2pdma`` / ``c2c`` for virtiofs)."""
    e = rules.entry(fstype)
    return bool(e) and bool(set(e["direct_tokens"]) & set(rules.mode_tokens(value)))


def rdma_state(gdscheck_parsed: dict[str, Any] | None) -> dict[str, Any]:
    """The ``--rdma library`` and ``--rdma_device_status`` lines: library loaded, devices up."""
    state: dict[str, Any] = rules.rdma_state(driver(gdscheck_parsed))
    return state


_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def parse_client_modules(text: str | None) -> list[str] | None:
    """The GDS clients' kernel modules loaded (the gather's ``netfs_client_modules``: names
    under /sys/module); None when not gathered. Only known names count."""
    from provisioner.remote._netfs_state import NETFS_CLIENT_MODULES  # what the gather looks for

    if text is None:
        return None
    return sorted({ln.strip() for ln in text.splitlines()} & set(NETFS_CLIENT_MODULES))


def parse_rdma_ports(item: dict[str, Any]) -> dict[str, Any]:
    """``rdma_ports``: each RDMA port (``DEVICE PORT STATE`` lines, the state as sysfs writes
    it, ``4: ACTIVE``) and how many are ACTIVE. ``rdma_readable`` False: not gathered (an
    older gather); ``rdma_ports`` empty with it True: no RDMA device on the node."""
    rc = item.get("rc")
    if rc not in (0, None) or (rc is None and item.get("err") != "missing"):
        return {"rdma_readable": False, "rdma_ports": [], "rdma_active": 0}
    ports: list[dict[str, str]] = []
    for line in str(item.get("out") or "").splitlines()[:64]:
        parts = line.split(None, 2)
        if len(parts) != 3 or not (_NAME.fullmatch(parts[0]) and parts[1].isdigit()):
            continue
        state = parts[2].split(":", 1)[-1].strip().upper()[:32]
        ports.append({"device": parts[0], "port": parts[1][:8],
                      "state": state if re.fullmatch(r"[A-Z_]{1,32}", state) else "UNKNOWN"})
    return {"rdma_readable": True, "rdma_ports": ports,
            "rdma_active": sum(1 for p in ports if p["state"] == "ACTIVE")}


def node_evidence(facts: dict[str, Any]) -> dict[str, Any]:
    """What :func:`prerequisites` reads of the node itself, from its facts (the rules' ``node``:
    netfs_rules.prerequisites)."""
    cf = facts.get("cufile") or {}
    nf = facts.get("netfs") or {}
    ks = facts.get("kallsyms") or {}
    mods = nf.get("client_modules")
    return {**nf,
            "rdma_dev_addr_list": cf.get("rdma_dev_addr_list"),
            "fs_rdma_dev_addr_list": cf.get("fs_rdma_dev_addr_list") or {},
            "symbols": list(ks.get("symbols") or []) if ks.get("readable") else None,
            "peermem_loaded": None if mods is None else "nvidia_peermem" in mods,
            "rdma_peer_type": (cf.get("netfs_keys") or {}).get("properties.rdma_peer_type"),
            "cufile_keys": cf.get("netfs_keys") or {},
            "operator": bool((facts.get("operator") or {}).get("managed"))}


def prerequisites(fstype: str, options: list[str], gdscheck_parsed: dict[str, Any] | None,
                  nvfs_loaded: bool, node: dict[str, Any] | None = None) -> list[str]:
    """What is missing for GDS on this network mount (empty: nothing): the shared rule
    (plugins/module_utils/netfs_rules.py) on gdscheck's DRIVER CONFIGURATION, or, without
    gdscheck on a GPU Operator node, on what the node shows itself."""
    missing: list[str] = rules.prerequisites(fstype, options, driver(gdscheck_parsed),
                                             nvfs_loaded, node or {})
    return missing
