"""A ledger holding two verify runs of four nodes, for the report tests.

Run 1: every node compliant. Run 2 (the one rendered): gpu-01 compliant with gdsio figures,
gpu-02 failing two checks (drift: compliance lost), gpu-03 unreachable (drift), gpu-04
compliant on the p2pdma route with no change. Node records are built with NodeReport, as
verify builds them; the gdsio block follows the contract of ``verify --gdsio``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provisioner.store import Ledger
from provisioner.verify.model import CheckResult, IoTestResult, NodeReport

NODES = ("gpu-01", "gpu-02", "gpu-03", "gpu-04")
STARTED = "2026-11-22T05:00:00.000000Z"
FIX_NVME = ("nvme is not registered with nvidia-fs: install the MOFED nvme modules "
            "(gds_nvme_mofed: true) and reboot")

GDSIO = {
    "io_type": "read", "file": "/mnt/gds/gdsfleet-gdsio.bin", "file_size_bytes": 1 << 30,
    "io_size_bytes": 1 << 20, "workers": 8,
    "runs": [
        {"transfer": "gds", "xfer_type": 0, "throughput_gibps": 6.25, "avg_latency_us": 1250.5,
         "ops": 8192, "duration_s": 1.28},
        {"transfer": "cpu", "xfer_type": 1, "throughput_gibps": 2.5, "avg_latency_us": 3125.0,
         "ops": 8192, "duration_s": 3.2},
    ],
    "ratio": 2.5, "min_ratio": 1.2,
}


def node(name: str, *, ok: bool = True, reachable: bool = True, route: str = "nvfs",
         gdsio: bool = False, write: float = 2.5, read: float = 3.25) -> dict[str, Any]:
    checks = [CheckResult("gpu.driver_loaded", "pass", "loaded", "loaded", "the driver is up"),
              CheckResult("cufile.json_valid", "pass", "valid", "valid", "cufile.json is valid")
              if ok else
              CheckResult("cufile.json_valid", "warn", "valid", "unknown key",
                          "remove the unknown key from /etc/cufile.json")]
    if not ok:
        checks.append(CheckResult("nvfs.nvme_registered", "fail", "registered",
                                  "not registered", FIX_NVME))
        checks.append(CheckResult("io.direct_path", "fail", "direct", "compat",
                                  "the I/O test fell back to compat mode; fix the checks above"))
    if gdsio:
        checks.append(CheckResult("gdsio.ratio", "pass", ">= 1.2", "2.5",
                                  "GDS reads 2.5x faster than the CPU bounce buffer"))
    io = IoTestResult(
        path_taken="direct" if ok else "compat", write_gbps=write, read_gbps=read,
        bytes=64 << 20, verified=True,
        evidence={"proof": "nvfs_counters" if ok else None,
                  "counter_delta_direct": {"writes_n": 16, "reads_n": 16, "write_mib": 64,
                                           "read_mib": 64} if ok else None,
                  "counter_delta_compat": None if ok else {"writes_n": 0, "reads_n": 0,
                                                           "write_mib": 0, "read_mib": 0}})
    doc = NodeReport(
        name=name, reachable=reachable, compliant=ok and reachable,
        route=(route if ok else "compat") if reachable else "unknown",
        checks=checks if reachable else [], io_test=io if reachable else IoTestResult(),
        error=None if reachable else f"{name} (root@127.0.0.1:2203): connection refused; "
                                     f"is sshd running? check the address in the inventory",
        started_at=STARTED, duration_s=1.5, raw={"gdscheck": "GDS release version: 1.15"},
    ).to_dict()
    if gdsio and reachable:
        doc["gdsio"] = GDSIO
    return doc


def build(tmp: Path) -> tuple[str, str]:
    """The ledger path and the id of run 2."""
    path = str(tmp / "ledger.sqlite")
    with Ledger.open(path) as ledger:
        first = ledger.start_run("verify", "inventories/lab", {})
        for n in NODES:
            ledger.record_verification(first, node(n, route="p2pdma" if n == "gpu-04" else
                                                   "nvfs"), step="verified")
        ledger.finish_run(first, "compliant")
        second = ledger.start_run("verify", "inventories/lab", {})
        for doc in (node("gpu-01", gdsio=True, write=5.5, read=6.75),
                    node("gpu-02", ok=False, write=0.8, read=0.9),
                    node("gpu-03", reachable=False),
                    node("gpu-04", route="p2pdma", write=4.0, read=4.5)):
            ledger.record_verification(second, doc, step="verified")
        ledger.finish_run(second, "unreachable")
    return path, second


LAB_NODES = tuple(f"gdsfleet-lab-{i:02d}" for i in range(1, 9))


def build_lab(tmp: Path) -> tuple[str, str]:
    """A ledger shaped like the lab's first run (issue 30 item 6): 8 compliant nodes marked
    simulated (the lab inventory's ``gdsfleet_simulated``), each with the ``fs.mount.nvme``
    warning the simulated lab gives; the figures are the fixture's.
    The ledger path and the run id."""
    path = str(tmp / "lab-ledger.sqlite")
    with Ledger.open(path) as ledger:
        run = ledger.start_run("verify", "inventories/lab", {})
        for i, name in enumerate(LAB_NODES):
            doc = node(name, write=2.0 + i / 10, read=2.5 + i / 10)
            doc["simulated"] = True  # inventories/lab's gdsfleet_simulated, as verify records it
            doc["checks"].append({"id": "fs.mount.nvme", "status": "warn",
                                  "expected": "an NVMe-backed mount",
                                  "observed": "a loop device",
                                  "message": "mount an NVMe namespace at the GDS mount point"})
            ledger.record_verification(run, doc, step="verified")
        ledger.finish_run(run, "compliant")
    return path, run


def compat_report(name: str, checks: list[CheckResult], compliant: bool = True) -> dict[str, Any]:
    """A reachable node's report with these checks and a compat 1 MiB I/O test, as a ledger
    stores it (the CLI wording tests' one node shape)."""
    return NodeReport(
        name=name, reachable=True, compliant=compliant, route="compat", checks=checks,
        io_test=IoTestResult(path_taken="compat", verified=True, bytes=1 << 20, path="/mnt/gds",
                             evidence={}, reason="compat"),
        facts={},
    ).to_dict()
