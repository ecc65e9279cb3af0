"""cuFile's own log (``cufile.log``; libcufile 1.15 names it ``cufile_<pid>_<date>.log`` in
``logging.dir``): which mode cuFile says it used.

Line format (real, libcufile 1.15 on the lent H100, tests/fixtures/h100/cufile_*.log)::

     22-11-2026 15:16:49:890 [pid=511 tid=511] NOTICE  cufio:285 cuFileHandleRegister GDS not
     supported or disabled by config, using cuFile posix read/write with compat mode enabled

(one line: date, time with milliseconds, pid/tid, level, ``component:source-line``, message).

What the messages mean here (sources named beside each pattern):

* compat, i.e. cuFile serves I/O through POSIX: "running in compatible mode"; "cuFileHandleRegister
  GDS not supported or disabled by config, using cuFile posix read/write with compat mode
  enabled"; the per-I/O TRACE marker ``p2p mode: <0|1> compat: 1``.
* direct: the per-I/O DEBUG marker "gds path taken with ODIRECT fd: N" (nvidia-fs path), the
  per-I/O TRACE marker ``p2p mode: 1 compat: 0`` (PCI P2PDMA) and ``p2p mode: 0 compat: 0``
  (nvidia-fs). The P2PDMA marker is **unconfirmed**: it comes from one public report quoting
  libcufile 1.15 on an L40S, not from a capture of ours (no P2PDMA node has been lent). A log
  that words it any other way gives no mode, so the I/O stays unproven (fails safe), never
  proven by a guess (tests/unit/test_iotest_libcufile.py).
* why there is no direct path: "nvidia-fs.ko driver not loaded", "NVMe Driver not registered with
  nvidia-fs", "cuFileHandleRegister error...", "GPUDirect Storage not supported on current file".

Only per-I/O markers say which path data took. The DRIVER CONFIGURATION block that cuFile prints
at INFO (``NVMe P2PDMA : Supported``) says what the platform is capable of, like gdscheck, and is
kept as context, never as proof.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_LINE_RE = re.compile(
    r"^\s*(?P<date>\d{1,2}-\d{1,2}-\d{4})\s+(?P<time>\d{1,2}:\d{1,2}:\d{1,2}:\d{1,3})\s+"
    r"\[pid=(?P<pid>\d+)\s+tid=(?P<tid>\d+)\]\s+(?P<level>[A-Z]+)\s+"
    r"(?P<component>[\w\-]+):(?P<lineno>\d+)\s?(?P<msg>.*?)\s*$"
)
_KV_RE = re.compile(r"^(?P<key>[A-Za-z][\w .\-]*?)\s*:\s*(?P<value>.*?)\s*$")
_CONFIG_KEY_RE = re.compile(r"^[a-z_]+(?:\.[a-z_0-9]+)+$")
_P2P_RE = re.compile(r"\bp2p mode:\s*(?P<p2p>\d)\s+compat:\s*(?P<compat>\d)", re.I)
_P2PDMA_STATUS_RE = re.compile(r"Is PCIP2PDMA Supported:\s*\d")
_NUM_PAIR_RE = re.compile(r"([A-Za-z_][\w()]*(?: [A-Za-z_][\w()]*)*):\s*(-?\d+)")

# Messages that say cuFile serves (or will serve) the I/O through POSIX.
# "running in compatible mode": NVIDIA/cudf#13651, NVIDIA/gds-nvidia-fs#31 (cufio-drv NOTICE).
# "... using cuFile posix read/write with compat mode enabled": the H100 capture
# (cufile_off_allowcompat_info.log) and NVIDIA/gds-nvidia-fs#31, #62.
COMPAT_PATTERNS = (
    re.compile(r"running in compatible mode", re.I),
    re.compile(r"using cuFile posix read/write with compat mode", re.I),
    re.compile(r"\bCompatibility Mode:\s*1\b", re.I),
)
# Per-I/O markers of the nvidia-fs path: NVIDIA/gds-nvidia-fs#78 (DEBUG cufio_core, libcufile
# with nvidia-fs 2.27): "gds path taken with ODIRECT fd: 52".
NVFS_IO_PATTERNS = (re.compile(r"gds path taken with O_?DIRECT", re.I),)
# Why the direct path is unavailable (context for the reason; not a mode by themselves).
# H100 capture (cufile_off_nocompat_trace.log): "nvidia-fs.ko driver not loaded";
# NVIDIA's troubleshooting guide and gds-nvidia-fs#31: "NVMe Driver not registered with nvidia-fs".
BLOCKER_PATTERNS = (
    re.compile(r"nvidia-fs\.ko driver not loaded", re.I),
    re.compile(r"NVMe Driver not registered with nvidia-fs", re.I),
    re.compile(r"cuFileHandleRegister error", re.I),
    re.compile(r"GPUDirect Storage not supported on current file", re.I),
    re.compile(r"cuFileDriverOpen failed", re.I),
)

MODE_COMPAT = "compat"
MODE_NVFS = "nvfs"
MODE_P2PDMA = "p2pdma"


@dataclass(frozen=True)
class LogLine:
    date: str
    time: str
    pid: int
    tid: int
    level: str
    component: str
    lineno: int
    message: str

    def render(self) -> str:
        return f"{self.level} {self.component}:{self.lineno} {self.message}"


@dataclass(frozen=True)
class CufileLog:
    """What one cuFile log (or several, concatenated) says."""

    lines: tuple[LogLine, ...] = ()
    unparsed: int = 0
    pids: tuple[int, ...] = ()
    levels: dict[str, int] = field(default_factory=dict)
    driver_configuration: dict[str, str] = field(default_factory=dict)
    cufile_configuration: dict[str, str] = field(default_factory=dict)
    p2pdma_status: dict[str, int] = field(default_factory=dict)
    compat_lines: tuple[LogLine, ...] = ()
    nvfs_io_lines: tuple[LogLine, ...] = ()
    p2pdma_io_lines: tuple[LogLine, ...] = ()
    blocker_lines: tuple[LogLine, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.lines

    @property
    def mode(self) -> str | None:
        """``compat`` when any line says cuFile used (or set up) POSIX, else ``p2pdma``/``nvfs``
        when per-I/O markers show the direct path, else None (the log does not say)."""
        if self.compat_lines:
            return MODE_COMPAT
        if self.p2pdma_io_lines:
            return MODE_P2PDMA
        if self.nvfs_io_lines:
            return MODE_NVFS
        return None

    def evidence(self, limit: int = 6) -> dict[str, Any]:
        """A small JSON-safe summary for the report (counts plus the first lines of each kind)."""

        def first(lines: tuple[LogLine, ...]) -> list[str]:
            return [ln.render() for ln in lines[:limit]]

        return {
            "mode": self.mode,
            "lines": len(self.lines),
            "unparsed": self.unparsed,
            "pids": list(self.pids),
            "levels": dict(self.levels),
            "compat_lines": len(self.compat_lines),
            "nvfs_io_lines": len(self.nvfs_io_lines),
            "p2pdma_io_lines": len(self.p2pdma_io_lines),
            "driver_configuration": dict(self.driver_configuration),
            "p2pdma_status": dict(self.p2pdma_status),
            "allow_compat_mode": self.cufile_configuration.get("properties.use_compat_mode"),
            "use_pci_p2pdma": self.cufile_configuration.get("properties.use_pci_p2pdma"),
            "compat": first(self.compat_lines),
            "direct": first(self.p2pdma_io_lines or self.nvfs_io_lines),
            "blockers": first(self.blocker_lines),
        }


def parse_line(raw: str) -> LogLine | None:
    m = _LINE_RE.match(raw)
    if not m:
        return None
    return LogLine(date=m.group("date"), time=m.group("time"), pid=int(m.group("pid")),
                   tid=int(m.group("tid")), level=m.group("level"),
                   component=m.group("component"), lineno=int(m.group("lineno")),
                   message=m.group("msg"))


def parse(text: str) -> CufileLog:
    lines: list[LogLine] = []
    unparsed = 0
    pids: list[int] = []
    levels: dict[str, int] = {}
    driver_cfg: dict[str, str] = {}
    cufile_cfg: dict[str, str] = {}
    p2pdma_status: dict[str, int] = {}
    compat: list[LogLine] = []
    nvfs_io: list[LogLine] = []
    p2pdma_io: list[LogLine] = []
    blockers: list[LogLine] = []
    section: str | None = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        ln = parse_line(raw)
        if ln is None:
            unparsed += 1
            continue
        lines.append(ln)
        levels[ln.level] = levels.get(ln.level, 0) + 1
        if ln.pid not in pids:
            pids.append(ln.pid)
        msg = ln.message
        stripped = msg.strip()
        # Section headers of the configuration dump cuFile prints at INFO.
        if re.fullmatch(r"=+", stripped):
            continue
        if re.fullmatch(r"[A-Z][A-Z ]+:", stripped):
            section = stripped[:-1]
            continue
        kv = _KV_RE.match(stripped)
        if section == "DRIVER CONFIGURATION" and kv and not stripped.startswith("--"):
            driver_cfg[kv.group("key").strip()] = kv.group("value")
        elif kv and _CONFIG_KEY_RE.match(kv.group("key").strip()):
            cufile_cfg[kv.group("key").strip()] = kv.group("value")
        if _P2PDMA_STATUS_RE.search(msg):
            for key, value in _NUM_PAIR_RE.findall(msg):
                p2pdma_status[key.strip()] = int(value)
        m = _P2P_RE.search(msg)
        if m:
            if m.group("compat") != "0":
                compat.append(ln)
            elif m.group("p2p") != "0":
                p2pdma_io.append(ln)
            else:
                nvfs_io.append(ln)
            continue
        if any(p.search(msg) for p in COMPAT_PATTERNS):
            compat.append(ln)
        elif any(p.search(msg) for p in NVFS_IO_PATTERNS):
            nvfs_io.append(ln)
        if any(p.search(msg) for p in BLOCKER_PATTERNS):
            blockers.append(ln)
    return CufileLog(
        lines=tuple(lines),
        unparsed=unparsed,
        pids=tuple(pids),
        levels=levels,
        driver_configuration=driver_cfg,
        cufile_configuration=cufile_cfg,
        p2pdma_status=p2pdma_status,
        compat_lines=tuple(compat),
        nvfs_io_lines=tuple(nvfs_io),
        p2pdma_io_lines=tuple(p2pdma_io),
        blocker_lines=tuple(blockers),
    )
