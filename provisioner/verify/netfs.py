"""Network filesystems GDS reaches through nvidia-fs and an RDMA NIC: which ``gdscheck -p``
DRIVER CONFIGURATION line speaks for each mount type, and what each needs before cuFile takes
the direct path on it (anything less is compat mode: POSIX through the page cache).

The mount types are the kernel's (``/proc/mounts`` field 3); the gdscheck line names are the
ones GDS prints (tests/fixtures/gdscheck/netfs-*.yml carry real captures with them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NetFs:
    name: str  # what the operator calls it
    gdscheck_line: str  # the DRIVER CONFIGURATION key in gdscheck -p
    fix: str  # the step that makes GDS support it


NETWORK_FILESYSTEMS: dict[str, NetFs] = {
    "nfs": NetFs("NFS over RDMA", "NFS",
                 "mount it with proto=rdma,port=20049 (gdsfleet.gds.netfs) on the DOCA/MLNX "
                 "NFS-RDMA client (mlnx-nfsrdma-dkms, gdsfleet.gds.mofed)"),
    "nfs4": NetFs("NFS over RDMA", "NFS",
                  "mount it with proto=rdma,port=20049 (gdsfleet.gds.netfs) on the DOCA/MLNX "
                  "NFS-RDMA client (mlnx-nfsrdma-dkms, gdsfleet.gds.mofed)"),
    "lustre": NetFs("DDN EXAScaler (Lustre)", "DDN EXAScaler",
                    "install DDN's EXAScaler client built with GDS support and LNet over o2ib "
                    "(DDN's EXAScaler client guide)"),
    "gpfs": NetFs("IBM Storage Scale", "IBM Spectrum Scale",
                  "enable Storage Scale's GDS support (mmchconfig verbsRdma=enable, verbsPorts, "
                  "verbsGPUDirectStorage=yes; IBM's GDS guide)"),
    "wekafs": NetFs("WekaFS", "WekaFS",
                    "mount WekaFS with its GDS-capable client over the RDMA NIC (WEKA's GDS "
                    "guide)"),
    "beegfs": NetFs("BeeGFS", "BeeGFS",
                    "rebuild the BeeGFS client with GDS (beegfs-client-autobuild.conf "
                    "NVFS_INCLUDE_PATH, OFED_INCLUDE_PATH, NVIDIA_INCLUDE_PATH; BeeGFS's GDS "
                    "documentation)"),
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


def prerequisites(fstype: str, options: list[str], gdscheck_parsed: dict[str, Any] | None,
                  nvfs_loaded: bool) -> list[str]:
    """What is missing for GDS on this network mount (empty: nothing)."""
    fs = NETWORK_FILESYSTEMS[fstype]
    missing: list[str] = []
    if fstype in ("nfs", "nfs4"):
        proto = nfs_transport(options)
        if not proto.startswith("rdma"):
            missing.append(f"the NFS mount is over {proto.upper()} (proto={proto}), not RDMA: "
                           "GDS reaches NFS only over RDMA, over TCP cuFile runs in compat mode")
    if gdscheck_parsed is None:
        missing.append(f"no gdscheck -p output to show {fs.gdscheck_line} support")
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
