"""gdsio (NVIDIA's GPUDirect Storage benchmark, gds-tools) result lines.

One line per pass, e.g. (NVIDIA's "Test GDS" page, tests/fixtures/gdsio/)::

    IoType: WRITE XferType: CPUONLY Threads: 4 DataSetSize: 4156416/4194304(KiB) IOSize: 1024(KiB)
    Throughput: 1.049312 GiB/sec, Avg_Latency: 3721.307952 usecs ops: 4059 total_time 3.777586 secs

(printed as a single line). ``-V`` adds ``Verifying data`` and a READ line after a write; error
lines (``file register error: ...``) and anything else are kept as ``other`` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# gdsio's -x transfer types (NVIDIA GDS troubleshooting guide; `gdsio -h`) and the names its
# result line prints for them.
XFER_NAMES = {0: "GPUD", 1: "CPUONLY", 2: "CPU_GPU", 3: "CPU_ASYNC_GPU", 4: "CPU_CACHED_GPU",
              5: "GPUD_ASYNC", 6: "GPU_BATCH", 7: "GPU_BATCH_STREAM"}
XFER_CODES = {name: code for code, name in XFER_NAMES.items()}
# gdsio's -I I/O types.
IO_TYPES = {0: "READ", 1: "WRITE", 2: "RANDREAD", 3: "RANDWRITE"}

_NUM = r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_LINE = re.compile(
    r"IoType:\s*(?P<io>\w+)\s+XferType:\s*(?P<xfer>\w+)\s+Threads:\s*(?P<threads>\d+)\s+"
    r"DataSetSize:\s*(?P<done>\d+)\s*/\s*(?P<total>\d+)\s*\(KiB\)\s+"
    r"IOSize:\s*(?P<io_kib>\d+)\s*\(KiB\)\s+"
    rf"Throughput:\s*(?P<gibps>{_NUM})\s*GiB/sec,?\s+"
    rf"Avg_Latency:\s*(?P<lat>{_NUM})\s*usecs\s+"
    r"ops:\s*(?P<ops>\d+)\s+"
    rf"total_time\s*(?P<secs>{_NUM})\s*secs")


@dataclass(frozen=True)
class GdsioLine:
    """One result line of gdsio."""

    io_type: str  # READ | WRITE | RANDREAD | RANDWRITE
    xfer_name: str  # GPUD, CPUONLY, ... as printed
    threads: int
    dataset_done_kib: int
    dataset_total_kib: int
    io_size_kib: int
    throughput_gibps: float
    avg_latency_us: float
    ops: int
    total_time_s: float

    @property
    def xfer_type(self) -> int | None:
        """The -x code the printed name stands for (None for a name gdsio does not print)."""
        return XFER_CODES.get(self.xfer_name)


@dataclass(frozen=True)
class GdsioOutput:
    lines: list[GdsioLine] = field(default_factory=list)
    verifying: bool = False  # a "Verifying data" line (-V)
    other: list[str] = field(default_factory=list)  # non-result lines (errors, warnings)

    @property
    def first(self) -> GdsioLine | None:
        return self.lines[0] if self.lines else None


def parse(text: str) -> GdsioOutput:
    """Every result line of gdsio's stdout, in order (pure)."""
    lines: list[GdsioLine] = []
    other: list[str] = []
    verifying = False
    for raw in text.splitlines():
        s = raw.strip()
        if not s:
            continue
        m = _LINE.search(s)
        if m is None:
            if s == "Verifying data":
                verifying = True
            else:
                other.append(s)
            continue
        lines.append(GdsioLine(
            io_type=m.group("io").upper(),
            xfer_name=m.group("xfer").upper(),
            threads=int(m.group("threads")),
            dataset_done_kib=int(m.group("done")),
            dataset_total_kib=int(m.group("total")),
            io_size_kib=int(m.group("io_kib")),
            throughput_gibps=float(m.group("gibps")),
            avg_latency_us=float(m.group("lat")),
            ops=int(m.group("ops")),
            total_time_s=float(m.group("secs")),
        ))
    return GdsioOutput(lines=lines, verifying=verifying, other=other)


__all__ = ["IO_TYPES", "XFER_CODES", "XFER_NAMES", "GdsioLine", "GdsioOutput", "parse"]
