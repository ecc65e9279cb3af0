"""What the I/O test's own process saw, read while it held cuFile and nvidia-fs open (pure):

- cuFile's per-process statistics (``gds_stats -p PID -l 3``, :mod:`.parsers.gds_stats`): the
  proof of the direct path on WekaFS and IBM Storage Scale, where nvidia-fs's counters never
  move (NVIDIA's GDS troubleshooting guide: its statistics are "not available through this
  interface" for WekaIO; cuFile's userspace RDMA serves both). Their writes go through POSIX
  unless cufile.json's ``fs.weka.rdma_write_support`` / ``fs.gpfs.gds_write_support`` is true
  (the guide; NVIDIA/MagnumIO gds-diag checks/fs_matrix.py), so writes are judged by that key.
- /proc/driver/nvidia-fs/modules: the modules nvidia-fs registered with (``nvfs.registered``).

The I/O evaluation (:mod:`.iotest`) and the checks read this module; it keeps no state.
"""

from __future__ import annotations

import re
from typing import Any

from provisioner.verify import netfs
from provisioner.verify.model import PATH_COMPAT, PATH_DIRECT
from provisioner.verify.parsers import gds_stats, storage

MIB = 1 << 20
PROOF_CUFILE_STATS = "cufile_stats"
_MODULE = re.compile(r"^\s*([A-Za-z0-9_\-]{1,64})\s*:")


def netfs_context(facts: dict[str, Any], io_path: str | None) -> dict[str, Any] | None:
    """The network filesystem the I/O test writes on (None: a local one): what the evaluation
    needs of it, with the write key's value from the node's cufile.json."""
    mounts = (facts.get("storage") or {}).get("mounts") or []
    m = storage.mount_for(io_path, mounts) if (io_path and mounts) else None
    fs = netfs.NETWORK_FILESYSTEMS.get(str((m or {}).get("fstype")))
    if fs is None or m is None:
        return None
    keys = (facts.get("cufile") or {}).get("netfs_keys") or {}
    return {"fstype": str(m["fstype"]), "name": fs.name, "rdma": fs.rdma,
            "nvfs_counters": fs.nvfs_counters, "write_key": fs.write_key or None,
            "writes_direct": (keys.get(fs.write_key) is True) if fs.write_key else True}


def attempt_stats(attempt: dict[str, Any] | None) -> dict[str, Any] | None:
    """cuFile's statistics the attempt read of itself, parsed; None when it read none (an
    older node script)."""
    item = (attempt or {}).get("cufile_stats")
    if not isinstance(item, dict):
        return None
    out = item.get("out")
    parsed = gds_stats.parse(out[:65536] if isinstance(out, str) else "")
    parsed["tool"] = str(item.get("tool"))[:200] if item.get("tool") else None
    parsed["error"] = str(item.get("err") or "")[:300] or None
    return parsed


def parse_modules(text: Any) -> list[str] | None:
    """/proc/driver/nvidia-fs/modules as module names (``<name>: <version>`` a line,
    NVIDIA/gds-nvidia-fs src/nvfs-proc.c); None when not read."""
    if not isinstance(text, str):
        return None
    names = [m.group(1) for line in text.splitlines()[:64] if (m := _MODULE.match(line))]
    return sorted(set(names))


def judge_without_counters(stats: dict[str, Any] | None, size: int,
                           fs: dict[str, Any]) -> tuple[str, str, str | None]:
    """(path, reason, proof) of a direct attempt on a filesystem whose I/O nvidia-fs does not
    count: cuFile's own statistics must show the test's reads taken directly (no ``posix=``)
    and, when the filesystem's write key sends writes over GDS, its writes too."""
    name, key = fs["name"], fs.get("write_key")
    need = max(size // MIB, 1)
    if stats is None or not stats.get("parsed"):
        why = (stats or {}).get("error") or "cuFile's statistics were not read"
        return PATH_DIRECT, (
            f"I/O succeeded with compat mode off, but nothing proves it took the direct path: "
            f"{name} never moves nvidia-fs's counters (cuFile's userspace RDMA), and {why}. "
            "Install gds-tools (gds_stats) on the node: the I/O test reads cuFile's own "
            "per-process statistics (profile.cufile_stats) with it"), None
    seen = (f"cuFile counted reads {stats['read_mib']} MiB (n={stats['read_n']}, "
            f"posix={stats['read_posix']}), writes {stats['write_mib']} MiB "
            f"(n={stats['write_n']}, posix={stats['write_posix']})")
    if stats["read_posix"] > 0 or stats["read_mib"] < need:
        return PATH_COMPAT, (f"I/O succeeded, but cuFile's own statistics show the reads did not "
                             f"all take the direct path: {seen}, the test's own {need} MiB"), None
    writes_direct = stats["write_posix"] == 0 and stats["write_mib"] >= need
    if fs.get("writes_direct") and not writes_direct:
        return PATH_COMPAT, (f"I/O succeeded, but {key} is true and cuFile's own statistics show "
                             f"the writes went through POSIX: {seen}"), None
    note = ("" if fs.get("writes_direct") else
            f"; writes go through POSIX on {name} unless {key} is true (NVIDIA's default is "
            "false), so only the reads are the direct path's")
    return PATH_DIRECT, f"direct path proven by cuFile's own statistics: {seen}{note}", \
        PROOF_CUFILE_STATS


def expected_module(facts: dict[str, Any], io_path: str | None,
                    transports: list[str]) -> tuple[str | None, str]:
    """The module nvidia-fs must have registered with for the I/O test's mount (its name in
    /proc/driver/nvidia-fs/modules: NVIDIA/gds-nvidia-fs src/nvfs-dma.h NVFS_PROC_MOD_*_KEY), or
    None with why none is asked for. ``transports``: the NVMe transports under a local mount."""
    fs = netfs_context(facts, io_path)
    if fs is not None:
        e = netfs.rules.entry(fs["fstype"]) or {}
        if fs["rdma"] != "kernel" or not e.get("registration_symbol"):
            return None, (f"{fs['name']} reaches GPU memory through cuFile"
                          + ("'s userspace RDMA" if fs["rdma"] == "userspace" else
                             "'s P2PDMA route"))
        return str(e["client_module"]), f"{fs['name']}'s client"
    if transports and set(transports) <= {"rdma"}:
        return "nvme_rdma", "NVMe over RDMA"
    if not transports or set(transports) <= {"pcie"}:
        # no controller visible: local NVMe, as nvfs.nvme.patched assumes
        return "nvme", "local NVMe"
    return None, f"NVMe over {', '.join(sorted(set(transports)))} (fs.mount.transport judges it)"
