"""Network filesystems GDS reaches through nvidia-fs and an RDMA NIC: which ``gdscheck -p``
DRIVER CONFIGURATION line speaks for each mount type, and what each needs before cuFile takes
the direct path on it (anything less is compat mode: POSIX through the page cache).

The mount types are the kernel's (``/proc/mounts`` field 3); the gdscheck line names are the
ones GDS prints (tests/fixtures/gdscheck/netfs-*.yml carry real captures with them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NetFs:
    name: str  # what the operator calls it
    gdscheck_line: str  # the DRIVER CONFIGURATION key in gdscheck -p
    fix: str  # the step that makes GDS support it
    # the kernel module of its GDS client: the one nvidia-fs registers with (NVIDIA/gds-nvidia-fs
    # src/nvfs-dma.h NVFS_PROC_MOD_*_KEY, v2.28.4; tests/fixtures/netfs/nvfs_client_modules.yml)
    client_module: str = ""
    cufile_section: str = ""  # its section under cufile.json's fs


NETWORK_FILESYSTEMS: dict[str, NetFs] = {
    "nfs": NetFs("NFS over RDMA", "NFS",
                 "mount it with proto=rdma,port=20049 (gdsfleet.gds.netfs) on the DOCA/MLNX "
                 "NFS-RDMA client (mlnx-nfsrdma-dkms, gdsfleet.gds.mofed)",
                 client_module="rpcrdma", cufile_section="nfs"),
    "nfs4": NetFs("NFS over RDMA", "NFS",
                  "mount it with proto=rdma,port=20049 (gdsfleet.gds.netfs) on the DOCA/MLNX "
                  "NFS-RDMA client (mlnx-nfsrdma-dkms, gdsfleet.gds.mofed)",
                  client_module="rpcrdma", cufile_section="nfs"),
    "lustre": NetFs("DDN EXAScaler (Lustre)", "DDN EXAScaler",
                    "install DDN's EXAScaler client built with GDS support and LNet over o2ib "
                    "(DDN's EXAScaler client guide)",
                    client_module="lnet", cufile_section="lustre"),
    "gpfs": NetFs("IBM Storage Scale", "IBM Spectrum Scale",
                  "enable Storage Scale's GDS support (mmchconfig verbsRdma=enable, verbsPorts, "
                  "verbsGPUDirectStorage=yes; IBM's GDS guide)",
                  client_module="mmfslinux", cufile_section="gpfs"),
    "wekafs": NetFs("WekaFS", "WekaFS",
                    "mount WekaFS with its GDS-capable client over the RDMA NIC (WEKA's GDS "
                    "guide)",
                    client_module="wekafsio", cufile_section="weka"),
    "beegfs": NetFs("BeeGFS", "BeeGFS",
                    "rebuild the BeeGFS client with GDS (beegfs-client-autobuild.conf "
                    "NVFS_INCLUDE_PATH, OFED_INCLUDE_PATH, NVIDIA_INCLUDE_PATH; BeeGFS's GDS "
                    "documentation)",
                    client_module="beegfs", cufile_section="beegfs"),
}


def is_network(fstype: str) -> bool:
    return fstype in NETWORK_FILESYSTEMS


def nfs_transport(options: list[str]) -> str:
    """``proto=`` of an NFS mount (rdma, tcp, rdma6, tcp6...); tcp when absent (the default)."""
    for o in options:
        if o.startswith("proto="):
            return o.split("=", 1)[1][:16]
    return "tcp"


def _driver(gdscheck_parsed: dict[str, Any] | None) -> dict[str, str]:
    drv = (gdscheck_parsed or {}).get("driver") or {}
    return {str(k).strip().lower(): str(v) for k, v in drv.items()}


def line_supported(value: str | None) -> bool:
    """``Supported`` (up to 1.15) or a mode list with a direct token (1.16+: ``nvfs, compat``)."""
    if value is None:
        return False
    toks = {t.strip().lower() for t in value.split(",")}
    return "supported" in toks or "nvfs" in toks


def rdma_state(gdscheck_parsed: dict[str, Any] | None) -> dict[str, Any]:
    """The ``--rdma library`` and ``--rdma_device_status`` lines: library loaded, devices up."""
    drv = _driver(gdscheck_parsed)
    lib = drv.get("--rdma library")
    status = drv.get("--rdma_device_status") or ""
    up = 0
    for part in status.replace(",", " ").split("Down")[0].split():
        if part.isdigit():
            up = int(part)
    return {"library": lib, "library_loaded": (lib or "").lower().startswith("loaded"),
            "devices": drv.get("--rdma devices"), "device_status": status or None,
            "devices_up": up}


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
    """What :func:`prerequisites` reads of the node without gdscheck, from its facts."""
    cf = facts.get("cufile") or {}
    return {**(facts.get("netfs") or {}),
            "rdma_dev_addr_list": cf.get("rdma_dev_addr_list"),
            "fs_rdma_dev_addr_list": cf.get("fs_rdma_dev_addr_list") or {},
            "operator": bool((facts.get("operator") or {}).get("managed"))}


def _without_gdscheck(fs: NetFs, node: dict[str, Any]) -> list[str]:
    """Without gdscheck on a GPU Operator node (the operator puts none on the host): what the
    node itself shows, the same prerequisites gdscheck's lines stand for. The I/O test's
    nvidia-fs counters are then the proof that cuFile took the direct path."""
    missing: list[str] = []
    if not node.get("operator"):
        # a host install has gds-tools (gdsfleet.gds.cuda): its gdscheck is the judge
        missing.append(f"no gdscheck -p output to show {fs.gdscheck_line} support (install "
                       "gds-tools-X-Y: gdsfleet.gds.cuda)")
        return missing
    mods = node.get("client_modules")
    if mods is None:
        missing.append(f"no gdscheck -p output to show {fs.gdscheck_line} support, and the "
                       "node's kernel modules were not read")
        return missing
    if fs.client_module not in mods:
        missing.append(f"the {fs.name} client's kernel module {fs.client_module} is not loaded "
                       f"(nvidia-fs registers with it; load the client's GDS build: modprobe "
                       f"{fs.client_module})")
    addrs = node.get("rdma_dev_addr_list") or (node.get("fs_rdma_dev_addr_list") or {}).get(
        fs.cufile_section)
    if not addrs:
        missing.append(f"cufile.json has no properties.rdma_dev_addr_list (nor "
                       f"fs.{fs.cufile_section}.rdma_dev_addr_list): cuFile loads its RDMA "
                       "library only for the client NICs' addresses listed there (set "
                       "cufile_rdma_dev_addr_list in the inventory: gdsfleet.gds.cufile)")
    if node.get("rdma_readable") and int(node.get("rdma_active") or 0) < 1:
        seen = ", ".join(f"{p['device']}/{p['port']} {p['state']}"
                         for p in node.get("rdma_ports") or []) or "no RDMA device"
        missing.append(f"no RDMA port ACTIVE (/sys/class/infiniband: {seen[:300]}; bring a "
                       "client NIC's link up: ibstat shows its state)")
    return missing


def prerequisites(fstype: str, options: list[str], gdscheck_parsed: dict[str, Any] | None,
                  nvfs_loaded: bool, node: dict[str, Any] | None = None) -> list[str]:
    """What is missing for GDS on this network mount (empty: nothing). ``node``: what the
    node shows without gdscheck (client_modules, rdma_readable, rdma_ports, rdma_active,
    rdma_dev_addr_list), judged only when there is no gdscheck output."""
    fs = NETWORK_FILESYSTEMS[fstype]
    missing: list[str] = []
    if fstype in ("nfs", "nfs4"):
        proto = nfs_transport(options)
        if not proto.startswith("rdma"):
            missing.append(f"the NFS mount is over {proto.upper()} (proto={proto}), not RDMA: "
                           "GDS reaches NFS only over RDMA, over TCP cuFile runs in compat mode")
    if gdscheck_parsed is None:
        missing += _without_gdscheck(fs, node or {})
    else:
        value = _driver(gdscheck_parsed).get(fs.gdscheck_line.lower())
        if not line_supported(value):
            missing.append(f"gdscheck says {fs.gdscheck_line} : {value or 'absent'}")
        rdma = rdma_state(gdscheck_parsed)
        if not rdma["library_loaded"]:
            missing.append(f"the cuFile RDMA library is not loaded (--rdma library : "
                           f"{rdma['library'] or 'absent'}): set properties.rdma_dev_addr_list "
                           "in cufile.json to the client NICs' addresses")
        if rdma["devices_up"] < 1:
            missing.append(f"no RDMA device up (--rdma_device_status : "
                           f"{rdma['device_status'] or 'absent'})")
    if not nvfs_loaded:
        missing.append("nvidia-fs is not loaded (gdsfleet.gds.nvidia_fs)")
    return missing
