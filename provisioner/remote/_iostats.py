"""What the I/O test reads while its attempt still holds cuFile and nvidia-fs open (iotest.py;
bundled into it at send time, provisioner/remote/bundle.py). Stdlib only, 3.8+; reads only.

- ``cufile_stats(pid)``: ``gds_stats -p PID -l 3``, cuFile's own per-process statistics. The
  test-scoped cufile.json sets ``profile.cufile_stats`` 3; they prove the direct path where
  nvidia-fs's counters do not move (WekaFS, IBM Storage Scale: NVIDIA's troubleshooting guide).
- ``nvfs_modules()``: /proc/driver/nvidia-fs/modules, the modules nvidia-fs registered with
  (``<name>: <version>`` a line, NVIDIA/gds-nvidia-fs src/nvfs-proc.c). nvidia-fs probes them at
  every open (``probe_module_list()`` from ``nvfs_open``, src/nvfs-core.c), so while the attempt
  holds it open the list is current: a storage driver missing from it never got nvidia-fs's DMA
  hooks (NVIDIA/gds-nvidia-fs#87: I/O bounced through the CPU without an error).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

NVFS_MODULES = "/proc/driver/nvidia-fs/modules"
MAX_TEXT = 65536
TIMEOUT_S = 15.0


def gds_stats_tool() -> str | None:
    """gds-tools' gds_stats: on PATH, else the CUDA toolkit's (the newest cuda-X.Y first)."""
    found = shutil.which("gds_stats")
    if found:
        return found
    for path in ["/usr/local/cuda/gds/tools/gds_stats",
                 *sorted(glob.glob("/usr/local/cuda-*/gds/tools/gds_stats"), reverse=True)]:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def cufile_stats(pid: int) -> dict:
    tool = gds_stats_tool()
    if tool is None:
        return {"tool": None, "rc": None, "out": "", "err": "gds_stats not found (gds-tools)"}
    try:
        p = subprocess.run([tool, "-p", str(int(pid)), "-l", "3"], capture_output=True,
                           timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"tool": tool, "rc": None, "out": "", "err": str(exc)[:300]}
    return {"tool": tool, "rc": p.returncode,
            "out": p.stdout[:MAX_TEXT].decode("utf-8", "replace"),
            "err": p.stderr[:2000].decode("utf-8", "replace")}


def nvfs_modules() -> str | None:
    try:
        with open(NVFS_MODULES, "rb") as fh:
            return fh.read(MAX_TEXT).decode("utf-8", "replace")
    except OSError:
        return None
