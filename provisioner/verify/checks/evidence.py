"""Which data route the node's own evidence shows (pure; registers no check).

:func:`determine_route` and :func:`route_evidence` are used by the checks (the route a check
applies to), by ``verify`` (``facts.route_evidence``) and by :mod:`provisioner.verify.proof`.
"""

from __future__ import annotations

from typing import Any

from provisioner.verify import netfs
from provisioner.verify.parsers.driver import version_tuple
from provisioner.verify.parsers.gdscheck import classify_nvme
from provisioner.verify.policy import Policy

DIRECT_ROUTES = ("nvfs", "p2pdma")

# nvme_core's multipath parameter is a bool: N, n and 0 turn it off.
OFF = ("N", "n", "0")

P2PDMA_REGISTRY_KEYS = (("RMForceStaticBar1", "1"), ("RmForceDisableIomapWC", "1"))


def gc_nvme(facts: dict[str, Any]) -> dict[str, Any] | None:
    """gdscheck's parsed NVMe line (DRIVER CONFIGURATION), None without one."""
    parsed = (facts.get("gdscheck") or {}).get("parsed") or {}
    nvme = parsed.get("nvme")
    if isinstance(nvme, dict) and not nvme.get("direct"):
        # a fabric-only node: nvidia-fs registered with the GDS-patched nvme-rdma only, so
        # gdscheck's NVMe line is not direct but its NVMeOF line is (the nvfs route)
        driver = parsed.get("driver") or {}
        of = next((str(v) for k, v in driver.items() if str(k).lower() == "nvmeof"), "")
        if of and classify_nvme(of).route == "nvfs":  # "Supported", or 1.16's "nvfs, compat"
            return {**nvme, "raw": f"{nvme.get('raw')}; NVMeOF : {of.strip()}", "direct": True,
                    "route": "nvfs", "via": "nvmeof"}
    return nvme if isinstance(nvme, dict) else None


def stack_present(facts: dict[str, Any]) -> bool:
    """Whether any part of a GDS stack is installed (libcufile, cufile.json, gdscheck,
    nvidia-fs)."""
    pk = facts.get("packages") or {}
    return bool(
        (facts.get("libcufile") or {}).get("found")
        or pk.get("libcufile")
        or pk.get("nvidia_gds")
        or (facts.get("cufile") or {}).get("present")
        or (facts.get("gdscheck") or {}).get("found")
        or (facts.get("nvfs") or {}).get("loaded")
    )


def block_nvme_p2pdma_off(cf: dict[str, Any]) -> bool:
    """block.nvme.use_pci_p2pdma explicitly false. Absent is fine: NVIDIA's P2PDMA guide sets
    only properties.use_pci_p2pdma. Facts recorded before the raw value was kept only tell
    false (absent or set false) apart from true."""
    if "block_nvme_use_pci_p2pdma_raw" in cf:
        raw = cf.get("block_nvme_use_pci_p2pdma_raw")
        return raw is not None and not raw
    return cf.get("block_nvme_use_pci_p2pdma") is False


def route_evidence(facts: dict[str, Any]) -> dict[str, Any]:
    nvfs = facts.get("nvfs") or {}
    ks = facts.get("kallsyms") or {}
    cf = facts.get("cufile") or {}
    return {
        # nvidia-fs loaded and a GDS-patched nvme or nvme-rdma it registers with
        "nvfs": bool(nvfs.get("loaded") and (ks.get("nvfs_dma_ops")
                                             or ks.get("nvfs_rdma_dma_ops"))),
        "p2pdma": bool(
            (ks.get("p2pdma") or ks.get("p2pdma_pgmap_ops")) and cf.get("use_pci_p2pdma")
            and not block_nvme_p2pdma_off(cf)
        ),
        "gdscheck": (gc_nvme(facts) or {}).get("route"),
        "stack": stack_present(facts),
        # nvidia-fs loaded and a network filesystem mounted with its GDS prerequisites met
        # (provisioner/verify/netfs.py): the nvfs route without any NVMe (issue 33)
        "netfs": network_gds_ready(facts),
        # virtiofs with its VIRTIOFS line direct: the P2PDMA route (no nvidia-fs)
        "netfs_p2pdma": network_gds_ready(facts, "p2pdma"),
    }


def network_gds_ready(facts: dict[str, Any], route: str = "nvfs") -> list[str]:
    """The mount points of network filesystems GDS reaches on this node over ``route``: each
    one's own prerequisites met (provisioner/verify/netfs.py: gdscheck's line for it, NFS over
    RDMA, cuFile's RDMA pieces for WekaFS and Storage Scale, nvidia-fs loaded on the nvfs
    route). A node whose GDS storage is only such a mount needs no GDS-patched nvme driver."""
    nvfs_loaded = bool((facts.get("nvfs") or {}).get("loaded"))
    if route == "nvfs" and not nvfs_loaded:
        return []
    gc = (facts.get("gdscheck") or {}).get("parsed")
    mounts = (facts.get("storage") or {}).get("mounts") or []
    return [str(m.get("target")) for m in mounts
            if isinstance(m, dict) and netfs.is_network(str(m.get("fstype")))
            and netfs.NETWORK_FILESYSTEMS[str(m["fstype"])].route == route
            and not netfs.prerequisites(str(m["fstype"]), list(m.get("options") or []), gc,
                                        nvfs_loaded, netfs.node_evidence(facts))]


def determine_route(facts: dict[str, Any]) -> str:
    """nvfs | p2pdma | compat | none, from the node's own evidence. gdscheck's DRIVER
    CONFIGURATION wins when it names a direct route; otherwise the kernel symbols, the loaded
    module and cufile.json decide."""
    ev = route_evidence(facts)
    gc = ev["gdscheck"]
    if gc in ("p2pdma", "nvfs"):
        return str(gc)
    if ev["nvfs"] and gc not in ("compat", "unsupported") or ev["netfs"]:
        # gdscheck's NVMe line speaks for NVMe only: on a network mount GDS reaches, nvidia-fs
        # is the route whatever that line says
        return "nvfs"
    if ev["netfs_p2pdma"]:
        return "p2pdma"
    if gc in ("compat", "unsupported"):
        return "compat"
    if ev["p2pdma"]:
        return "p2pdma"
    if ev["stack"]:
        return "compat"
    return "none"


def target_route(route: str, policy: Policy) -> str | None:
    """The route whose prerequisites apply: the policy's, else the observed direct one."""
    if policy.expected_route in DIRECT_ROUTES:
        return policy.expected_route
    if route in DIRECT_ROUTES:
        return route
    return None


def vge(have: str | None, want: str) -> bool:
    """``have`` is a version at least ``want`` (False when ``have`` is empty)."""
    return bool(have) and version_tuple(have) >= version_tuple(want)
