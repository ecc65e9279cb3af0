"""What the I/O test reads while its attempt still holds cuFile and nvidia-fs open (iotest.py;
bundled into it at send time, provisioner/remote/bundle.py). Stdlib only, 3.8+; reads only.
cuFile's per-process statistics (``gds_stats -p PID -l 3``) come from the collection's
plugins/module_utils/attest_counters.py, which attest runs for a job's proof too.

- ``nvfs_modules()``: /proc/driver/nvidia-fs/modules, the modules nvidia-fs registered with
  (``<name>: <version>`` a line, NVIDIA/gds-nvidia-fs src/nvfs-proc.c). nvidia-fs probes them at
  every open (``probe_module_list()`` from ``nvfs_open``, src/nvfs-core.c), so while the attempt
  holds it open the list is current: a storage driver missing from it never got nvidia-fs's DMA
  hooks (NVIDIA/gds-nvidia-fs#87: I/O bounced through the CPU without an error).
"""

from __future__ import annotations

NVFS_MODULES = "/proc/driver/nvidia-fs/modules"
MAX_TEXT = 65536


def nvfs_modules() -> str | None:
    try:
        with open(NVFS_MODULES, "rb") as fh:
            return fh.read(MAX_TEXT).decode("utf-8", "replace")
    except OSError:
        return None
