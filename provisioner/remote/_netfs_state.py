"""What a node shows of its network filesystems' GDS prerequisites (the gather script,
provisioner/remote/gather.py; bundled into it at send time, provisioner/remote/bundle.py): the
GDS clients' kernel modules loaded and each RDMA port's state. Stdlib only, 3.8+; reads only."""

from __future__ import annotations

import glob
import os

# The kernel module each network filesystem's GDS client registers with nvidia-fs from
# (NVIDIA/gds-nvidia-fs src/nvfs-dma.h NVFS_PROC_MOD_*_KEY at v2.28.4: rpcrdma, lnet,
# mmfslinux, wekafsio, beegfs, scatefs; tests/fixtures/netfs/nvfs_client_modules.yml), and
# nvidia_peermem (cuFile's userspace RDMA for WekaFS and Storage Scale reaches GPU memory through
# it unless cufile.json sets rdma_peer_type dmabuf: NVIDIA/MagnumIO gds-diag checks/rdma.py).
# Present in /sys/module when loaded (or built in).
NETFS_CLIENT_MODULES = ("rpcrdma", "lnet", "ko2iblnd", "mmfslinux", "wekafsio", "beegfs",
                        "scatefs", "nvidia_peermem")
RDMA_PORTS_MAX = 64


def netfs_client_modules() -> dict:
    present = [m for m in NETFS_CLIENT_MODULES if os.path.isdir("/sys/module/" + m)]
    return {"kind": "dir", "path": "/sys/module", "rc": 0, "out": "\n".join(present), "err": ""}


def _state(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return "unreadable"


def rdma_ports() -> dict:
    """Each RDMA port's state, ``DEVICE PORT STATE`` a line (/sys/class/infiniband/*/ports/*/state
    reads ``4: ACTIVE``); at most RDMA_PORTS_MAX ports. rc None: no RDMA device class."""
    if not os.path.isdir("/sys/class/infiniband"):
        return {"kind": "dir", "path": "/sys/class/infiniband", "rc": None, "out": "",
                "err": "missing"}
    lines = []
    for path in sorted(glob.glob("/sys/class/infiniband/*/ports/*/state"))[:RDMA_PORTS_MAX]:
        parts = path.split("/")
        lines.append(f"{parts[4][:64]} {parts[6][:16]} {_state(path)}")
    return {"kind": "dir", "path": "/sys/class/infiniband", "rc": 0, "out": "\n".join(lines),
            "err": ""}
