"""Value objects of a node verification: commands, checks, the I/O test and the node report.

These are the names other parts of the orchestrator code against (transport, ledger, reports,
CLI). ``NodeReport.to_dict()`` is the node object of the JSON report (docs/report-schema.md);
``NodeReport.from_dict()`` reads it back (ledger, ``status``/``history`` commands).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

# Check statuses, ordered from best to worst for summaries.
PASS = "pass"  # noqa: S105 - a check status, not a password
WARN = "warn"
SKIP = "skip"
FAIL = "fail"
STATUSES = (PASS, WARN, SKIP, FAIL)

# Data routes a node's own evidence can show.
ROUTES = ("nvfs", "p2pdma", "compat", "none", "unknown")

# Which path the I/O test's data took.
PATH_DIRECT = "direct"
PATH_COMPAT = "compat"
PATH_FAILED = "failed"
PATH_SKIPPED = "skipped"
PATHS = (PATH_DIRECT, PATH_COMPAT, PATH_FAILED, PATH_SKIPPED)

# The I/O test's proof kinds that count today (``evidence.proof``; docs/checks.md,
# io.direct_path): nvidia-fs counters covering the test's own bytes, or the test-scoped cuFile
# log's per-I/O direct markers. Kinds written by earlier releases (``counters``: any counter
# movement; ``compat_off``: compat mode merely switched off) proved nothing and never count,
# also when an old ledger record carries them.
PROOF_NVFS_COUNTERS = "nvfs_counters"
PROOF_CUFILE_LOG = "cufile_log"
# cuFile's own per-process statistics (gds_stats): WekaFS and Storage Scale, whose I/O nvidia-fs
# never counts (provisioner/verify/iostats.py)
PROOF_CUFILE_STATS = "cufile_stats"
PROOF_KINDS = (PROOF_NVFS_COUNTERS, PROOF_CUFILE_LOG, PROOF_CUFILE_STATS)

GIB = 1 << 30
# The smallest I/O test that can prove the direct path: nvidia-fs counts whole MiB
# (BYTES_TO_MB, rounded down), and kvikio releases before 25.04 sent calls under 1 MiB through
# POSIX by default (KVIKIO_GDS_THRESHOLD).
MIN_PROVABLE_IO_BYTES = 1 << 20
SMALL_IO_WHY = ("a smaller I/O test cannot prove the direct path (nvidia-fs counts whole MiB, and "
                "kvikio sends small calls through POSIX)")


@dataclass(frozen=True)
class CommandResult:
    """What one remote (or local) command returned."""

    exit_status: int
    stdout: str
    stderr: str
    duration_s: float


class CommandRunner(Protocol):
    """Runs one command on a node. Raises ConnectError (provisioner.errors) when the node cannot
    be reached or the command runs past ``timeout``; a command that ran and failed is a
    CommandResult with a non-zero exit status, never an exception."""

    def run(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult: ...


@dataclass(frozen=True)
class CheckResult:
    """One compliance check: a stable id, pass|fail|warn|skip, and what to do about it."""

    id: str
    status: str
    expected: str
    observed: str
    message: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} not in {STATUSES}")

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.id,
            "status": self.status,
            "expected": self.expected,
            "observed": self.observed,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            expected=str(data.get("expected", "")),
            observed=str(data.get("observed", "")),
            message=str(data.get("message", "")),
        )


@dataclass(frozen=True)
class GdsioOptions:
    """How ``verify --gdsio`` runs NVIDIA's gdsio: one file on the node's GDS mount, the same
    size, I/O size and workers for the GPU Direct run (``-x 0``) and the CPU-only baseline
    (``-x 1``). ``size_bytes`` None: the node's I/O test size, at most
    :data:`GDSIO_DEFAULT_SIZE`."""

    io_type: str = "write"  # write | read (gdsio -I 1 | -I 0)
    size_bytes: int | None = None
    io_size_bytes: int = 1 << 20
    workers: int = 4
    gpu_index: int = 0
    timeout_s: float = 300.0


GDSIO_DEFAULT_SIZE = 128 << 20


@dataclass(frozen=True)
class IoTestOptions:
    """How the kvikio I/O test runs on a node.

    ``path`` is a directory on the node's GDS filesystem; None picks the mount from the node's
    facts (the mount backed by an NVMe device, else ``default_path``).
    """

    size_bytes: int = GIB
    path: str | None = None
    keep_file: bool = False
    timeout_s: float = 600.0
    enable_rw_stats: bool = True
    try_compat: bool = True
    enabled: bool = True
    default_path: str = "/mnt/gds"
    # True when the size came from --io-size (or the inventory's gds_verify_io_size): the
    # policy's io_test_size then never replaces it.
    size_explicit: bool = False
    # verify --gdsio: run NVIDIA's gdsio too (None: not asked for).
    gdsio: GdsioOptions | None = None

    def for_node(self, node_size: int | None) -> IoTestOptions:
        """These options for a node whose inventory sets ``gds_verify_io_size``: an explicit
        ``--io-size`` wins, else the node's size, else (later) the policy's."""
        if node_size is None or self.size_explicit:
            return self
        return replace(self, size_bytes=int(node_size), size_explicit=True)

    def aligned_size(self) -> int:
        """Size rounded up to a 4 KiB multiple (O_DIRECT and cuFile need aligned sizes)."""
        size = max(int(self.size_bytes), 4096)
        return (size + 4095) // 4096 * 4096


@dataclass(frozen=True)
class IoTestResult:
    """The I/O test's outcome: which path the data took, and the evidence for it."""

    path_taken: str = PATH_SKIPPED
    write_gbps: float | None = None
    read_gbps: float | None = None
    bytes: int = 0
    verified: bool = False
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    attempts: tuple[dict[str, Any], ...] = ()
    path: str | None = None
    duration_s: float = 0.0

    @property
    def direct_proven(self) -> bool:
        return (
            self.path_taken == PATH_DIRECT
            and self.verified
            and self.evidence.get("proof") in PROOF_KINDS
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path_taken": self.path_taken,
            "write_gbps": self.write_gbps,
            "read_gbps": self.read_gbps,
            "bytes": self.bytes,
            "verified": self.verified,
            "reason": self.reason,
            "evidence": dict(self.evidence),
            "attempts": [dict(a) for a in self.attempts],
            "path": self.path,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> IoTestResult:
        if not data:
            return cls()
        wg = data.get("write_gbps")
        rg = data.get("read_gbps")
        return cls(
            path_taken=str(data.get("path_taken", PATH_SKIPPED)),
            write_gbps=float(wg) if wg is not None else None,
            read_gbps=float(rg) if rg is not None else None,
            bytes=int(data.get("bytes") or 0),
            verified=bool(data.get("verified", False)),
            reason=str(data.get("reason", "")),
            evidence=dict(data.get("evidence") or {}),
            attempts=tuple(dict(a) for a in data.get("attempts") or ()),
            path=data.get("path"),
            duration_s=float(data.get("duration_s") or 0.0),
        )


@dataclass(frozen=True)
class GdsioRun:
    """One gdsio pass: ``transfer`` gds (``-x 0``, GPU Direct) or cpu (``-x 1``, CPU only)."""

    transfer: str
    xfer_type: int
    throughput_gibps: float
    avg_latency_us: float
    ops: int
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"transfer": self.transfer, "xfer_type": self.xfer_type,
                "throughput_gibps": self.throughput_gibps, "avg_latency_us": self.avg_latency_us,
                "ops": self.ops, "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GdsioRun:
        return cls(transfer=str(data.get("transfer", "")), xfer_type=int(data.get("xfer_type", 0)),
                   throughput_gibps=float(data.get("throughput_gibps") or 0.0),
                   avg_latency_us=float(data.get("avg_latency_us") or 0.0),
                   ops=int(data.get("ops") or 0), duration_s=float(data.get("duration_s") or 0.0))


@dataclass(frozen=True)
class GdsioResult:
    """``verify --gdsio``: both gdsio runs on the same file and their throughput ratio
    (GPU Direct / CPU only); ``min_ratio`` is the policy's floor (``gdsio_min_ratio``)."""

    io_type: str
    file: str
    file_size_bytes: int
    io_size_bytes: int
    workers: int
    runs: tuple[GdsioRun, ...] = ()
    ratio: float | None = None
    min_ratio: float | None = None

    def run(self, transfer: str) -> GdsioRun | None:
        return next((r for r in self.runs if r.transfer == transfer), None)

    def to_dict(self) -> dict[str, Any]:
        return {"io_type": self.io_type, "file": self.file,
                "file_size_bytes": self.file_size_bytes, "io_size_bytes": self.io_size_bytes,
                "workers": self.workers, "runs": [r.to_dict() for r in self.runs],
                "ratio": self.ratio, "min_ratio": self.min_ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GdsioResult | None:
        if not data:
            return None
        ratio, floor = data.get("ratio"), data.get("min_ratio")
        return cls(io_type=str(data.get("io_type", "")), file=str(data.get("file", "")),
                   file_size_bytes=int(data.get("file_size_bytes") or 0),
                   io_size_bytes=int(data.get("io_size_bytes") or 0),
                   workers=int(data.get("workers") or 0),
                   runs=tuple(GdsioRun.from_dict(r) for r in data.get("runs") or ()),
                   ratio=float(ratio) if ratio is not None else None,
                   min_ratio=float(floor) if floor is not None else None)


@dataclass(frozen=True)
class NodeReport:
    """Everything one verification of one node found (the JSON report's node object)."""

    name: str
    reachable: bool
    compliant: bool
    route: str
    checks: list[CheckResult] = field(default_factory=list)
    io_test: IoTestResult = field(default_factory=IoTestResult)
    facts: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    started_at: str = ""
    duration_s: float = 0.0
    gdsio: GdsioResult | None = None  # verify --gdsio; None when it did not run

    def check(self, check_id: str) -> CheckResult | None:
        for c in self.checks:
            if c.id == check_id:
                return c
        return None

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    def summary(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for c in self.checks:
            counts[c.status] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reachable": self.reachable,
            "compliant": self.compliant,
            "route": self.route,
            "error": self.error,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "summary": self.summary(),
            "checks": [c.to_dict() for c in self.checks],
            "io_test": self.io_test.to_dict(),
            "gdsio": self.gdsio.to_dict() if self.gdsio is not None else None,
            "facts": self.facts,
            "raw": dict(self.raw),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeReport:
        return cls(
            name=str(data["name"]),
            reachable=bool(data.get("reachable", False)),
            compliant=bool(data.get("compliant", False)),
            route=str(data.get("route", "unknown")),
            checks=[CheckResult.from_dict(c) for c in data.get("checks") or ()],
            io_test=IoTestResult.from_dict(data.get("io_test")),
            facts=dict(data.get("facts") or {}),
            raw={str(k): str(v) for k, v in (data.get("raw") or {}).items()},
            error=data.get("error"),
            started_at=str(data.get("started_at", "")),
            duration_s=float(data.get("duration_s") or 0.0),
            gdsio=GdsioResult.from_dict(data.get("gdsio")),
        )
