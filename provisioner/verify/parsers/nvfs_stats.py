"""``/proc/driver/nvidia-fs/stats`` (and ``version``, ``devcount``).

Layouts differ across nvidia-fs releases and with ``rw_stats_enabled``: with it off the
Reads/Writes lines carry only error counters; with it on they carry ``n= ok= err=
readMiB=/writeMiB=`` plus a second line with ``Bandwidth(MiB/s)=``. Every ``key=value`` pair of a
counter line is kept under the line's normalised name (``reads``, ``writes``, ``mmap``,
``bar1_map``, ``ops``, ...); repeated lines merge.

``Ops`` is a gauge of I/O in flight, not a total; ``Reads n=``/``Writes n=`` move only with
rw_stats_enabled=1; ``Mmap`` and ``Bar1-map`` always count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PATH = "/proc/driver/nvidia-fs/stats"

_PAIR_RE = re.compile(r"([A-Za-z][\w\-()/]*)=(-?\d+(?:\.\d+)?)")
_GPU_RE = re.compile(r"^GPU\s+(?P<bdf>[0-9a-fA-F:.]+)\s+uuid:\s*(?P<uuid>\S+)\s*:\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class NvfsStats:
    gds_version: str | None = None
    stats_version: str | None = None
    driver_version: str | None = None
    peerdirect: bool | None = None
    io_stats_enabled: bool | None = None
    peer_io_stats_enabled: bool | None = None
    logging_level: str | None = None
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    header: dict[str, str] = field(default_factory=dict)

    def get(self, line: str, key: str) -> float | None:
        return self.counters.get(line, {}).get(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gds_version": self.gds_version,
            "stats_version": self.stats_version,
            "driver_version": self.driver_version,
            "peerdirect": self.peerdirect,
            "io_stats_enabled": self.io_stats_enabled,
            "peer_io_stats_enabled": self.peer_io_stats_enabled,
            "logging_level": self.logging_level,
            "counters": {k: dict(v) for k, v in self.counters.items()},
            "gpus": [dict(g) for g in self.gpus],
        }


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def _num(text: str) -> float:
    return float(text)


def parse(text: str) -> NvfsStats:
    header: dict[str, str] = {}
    counters: dict[str, dict[str, float]] = {}
    gpus: list[dict[str, Any]] = []
    gds_version = stats_version = driver_version = logging_level = None
    peerdirect = io_stats = peer_io = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        gm = _GPU_RE.match(line)
        if gm:
            gpu: dict[str, Any] = {"bdf": gm.group("bdf"), "uuid": gm.group("uuid")}
            for k, v in _PAIR_RE.findall(gm.group("rest")):
                gpu[k] = _num(v)
            gpus.append(gpu)
            continue
        m = re.match(r"GDS Version:\s*(\S+)", line)
        if m:
            gds_version = m.group(1)
            continue
        m = re.match(r"NVFS statistics\s*\(ver:\s*([\d.]+)\)", line)
        if m:
            stats_version = m.group(1)
            continue
        m = re.match(r"NVFS Driver\s*\(version:\s*([\d.]+)\)", line)
        if m:
            driver_version = m.group(1)
            continue
        m = re.match(r"Mellanox PeerDirect Supported:\s*(\w+)", line)
        if m:
            peerdirect = m.group(1).lower() == "true"
            continue
        m = re.match(r"IO stats:\s*(\w+)(?:,\s*peer IO stats:\s*(\w+))?", line)
        if m:
            io_stats = m.group(1).lower() == "enabled"
            if m.group(2):
                peer_io = m.group(2).lower() == "enabled"
            continue
        m = re.match(r"Logging level:\s*(\w+)", line)
        if m:
            logging_level = m.group(1)
            continue
        if ":" in line:
            name, _, rest = line.partition(":")
            pairs = _PAIR_RE.findall(rest)
            if pairs:
                entry = counters.setdefault(_norm(name), {})
                for k, v in pairs:
                    entry[k] = _num(v)
            else:
                header[name.strip()] = rest.strip()
    return NvfsStats(
        gds_version=gds_version,
        stats_version=stats_version,
        driver_version=driver_version,
        peerdirect=peerdirect,
        io_stats_enabled=io_stats,
        peer_io_stats_enabled=peer_io,
        logging_level=logging_level,
        counters=counters,
        gpus=gpus,
        header=header,
    )


# The counters whose movement means data went through nvidia-fs, and their names in deltas.
_DELTA_KEYS = (
    ("writes", "n", "writes_n"),
    ("writes", "ok", "writes_ok"),
    ("writes", "err", "writes_err"),
    ("writes", "writeMiB", "write_mib"),
    ("reads", "n", "reads_n"),
    ("reads", "ok", "reads_ok"),
    ("reads", "err", "reads_err"),
    ("reads", "readMiB", "read_mib"),
    ("mmap", "n", "mmap_n"),
    ("bar1_map", "n", "bar1_map_n"),
    ("error", "dma-map", "dma_map_err"),
)


def delta(before: NvfsStats, after: NvfsStats) -> dict[str, float]:
    """Counter increases from ``before`` to ``after`` (only counters present in both)."""
    out: dict[str, float] = {}
    for line, key, name in _DELTA_KEYS:
        b = before.get(line, key)
        a = after.get(line, key)
        if a is not None and b is not None:
            out[name] = a - b
    return out


def parse_version(text: str) -> str | None:
    """``/proc/driver/nvidia-fs/version``: ``version: 2.28`` (older: a bare number)."""
    m = re.search(r"version:\s*([\d.]+)", text) or re.search(r"^\s*([\d.]+)\s*$", text, re.M)
    return m.group(1) if m else None


# Where a full x.y.z version comes from, most authoritative first: the loaded module's
# MODULE_VERSION (/sys/module/nvidia_fs/version), the stats header `NVFS Driver(version:
# x.y.z)` (also the loaded module), `modinfo -F version nvidia_fs` (the module file installed
# for the running kernel, which may be newer than the loaded one). /proc/driver/nvidia-fs/version
# prints major.minor only (nvfs-proc.c: "version: %u.%u"), so it is the last resort.
VERSION_SOURCES = ("sysfs", "stats", "modinfo", "proc")


def full_version(*, module_version: str | None, stats_version: str | None,
                 modinfo_version: str | None, proc_version: str | None
                 ) -> tuple[str | None, str | None]:
    """(version, source) of nvidia-fs: the first source that carries major.minor.patch, else
    the first that carries anything (then possibly major.minor only, from /proc)."""
    values = (module_version, stats_version, modinfo_version, proc_version)
    candidates = list(zip(VERSION_SOURCES, values, strict=True))
    cleaned = [(src, (v or "").strip()) for src, v in candidates]
    for src, v in cleaned:
        if re.fullmatch(r"\d+\.\d+\.\d+(?:[.\-]\S*)?", v):
            return v, src
    for src, v in cleaned:
        if re.match(r"\d+(?:\.\d+)*", v):
            return v, src
    return None, None


def is_major_minor_only(version: str | None) -> bool:
    """True for ``2.17`` (what /proc/driver/nvidia-fs/version prints), False for ``2.17.5``."""
    return bool(version) and re.fullmatch(r"\d+\.\d+", (version or "").strip()) is not None


def parse_devcount(text: str) -> int | None:
    m = re.search(r"(\d+)", text)
    return int(m.group(1)) if m else None
