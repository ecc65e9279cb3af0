"""``gds_stats -p PID -l 3``: cuFile's own per-process statistics (pure).

cuFile keeps them in shared memory when cufile.json's ``profile.cufile_stats`` is 1-3; the
``gds_stats`` tool of gds-tools reads them while the process runs (NVIDIA's GDS Benchmarking and
Configuration Guide, "gds-stats Tool"; tests/fixtures/gds_stats/). The PER_GPU STATS lines count
each GPU's reads and writes: ``n=`` requests, ``posix=`` those served through POSIX (compat
mode), ``MiB=`` the data. They prove the direct path where nvidia-fs's own counters do not move:
WekaFS and IBM Storage Scale (cuFile's userspace RDMA; NVIDIA's troubleshooting guide). cuFile
in compat mode creates no statistics at all, so ``gds_stats`` then finds nothing to read.
"""

from __future__ import annotations

import re
from typing import Any

COMMAND = "gds_stats -p PID -l 3"
_GPU = re.compile(r"^GPU\s+\d+\s+Read:(?P<read>.*?)\bWrite:(?P<write>.*?)(?:\bBufRegister:|$)")
_FIELD = re.compile(r"\b(n|posix|unalign|err|MiB)=(\d{1,15})\b")
_VERSION = re.compile(r"cuFile STATS VERSION\s*:\s*(\d{1,4})")
_TOTAL = re.compile(r"^Total (Read|Write) Size \(MiB\):\s*(\d{1,15})\s*$")
MAX_LINES = 4096


def _fields(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in _FIELD.findall(text)}


def parse(text: str | None) -> dict[str, Any]:
    """Totals over every GPU: ``read_mib``/``write_mib`` (the GLOBAL STATS totals, else the sum of
    the GPU lines), ``read_n``, ``read_posix``, ``write_n``, ``write_posix``, ``read_err``,
    ``write_err``; ``parsed`` False when the text holds no statistics (the tool failed, or the
    process ran in compat mode and published none)."""
    out: dict[str, Any] = {"parsed": False, "version": None, "gpus": 0}
    sums = dict.fromkeys(("read_n", "read_posix", "read_err", "read_mib", "write_n",
                          "write_posix", "write_err", "write_mib"), 0)
    totals: dict[str, int] = {}
    for line in (text or "").splitlines()[:MAX_LINES]:
        s = line.strip()
        if (m := _VERSION.search(s)) is not None:
            out["version"] = int(m.group(1))
        elif (m := _TOTAL.match(s)) is not None:
            totals[m.group(1).lower()] = int(m.group(2))
        elif (m := _GPU.match(s)) is not None:
            out["gpus"] += 1
            for side in ("read", "write"):
                f = _fields(m.group(side))
                for key, name in (("n", "n"), ("posix", "posix"), ("err", "err"),
                                  ("MiB", "mib")):
                    sums[f"{side}_{name}"] += f.get(key, 0)
    if out["version"] is None and not out["gpus"] and not totals:
        return {**out, **dict.fromkeys(sums)}
    for side in ("read", "write"):
        if side in totals:
            sums[f"{side}_mib"] = totals[side]
    return {**out, **sums, "parsed": True}
