"""I/O test checks (``io.*``) and the gdsio benchmark's ``gdsio.ratio`` (emitted by
:mod:`provisioner.verify.gdsio` when ``verify --gdsio`` runs it)."""

from __future__ import annotations

from provisioner.verify import iojudge, proof
from provisioner.verify.checks.registry import Context, check, declare
from provisioner.verify.model import (
    FAIL,
    PASS,
    PATH_COMPAT,
    PATH_DIRECT,
    PATH_FAILED,
    PATH_SKIPPED,
    SKIP,
    WARN,
    CheckResult,
)


@check("io.direct_path", "the I/O test proved the direct path")
def direct_path(ctx: Context) -> CheckResult:
    cid, expected = "io.direct_path", "direct (proven)"
    io = ctx.io
    ev = io.evidence or {}
    detail = (f"path={io.path_taken}, proof={ev.get('proof')}, "
              f"is_gds_available={ev.get('is_gds_available')}, "
              f"write={io.write_gbps} GB/s, read={io.read_gbps} GB/s")
    clash = proof.disagreement(io, ctx.f)
    if io.path_taken == PATH_DIRECT and io.direct_proven and clash:
        return CheckResult(cid, FAIL, expected, detail,
                           f"Not proven: {clash}. Check the node by hand (nvidia-fs, the GPU, the "
                           "P2PDMA prerequisites) and verify again.")
    if io.path_taken == PATH_DIRECT and io.direct_proven:
        return CheckResult(cid, PASS, expected, detail, io.reason)
    if io.path_taken == PATH_DIRECT:
        return CheckResult(cid, FAIL, expected, detail,
                           "I/O succeeded with compat mode off but without proof: " + io.reason)
    if io.path_taken == PATH_COMPAT:
        return CheckResult(cid, FAIL, expected, detail,
                           "I/O works only through POSIX (compat mode), so this node is NOT "
                           "GDS-compliant: " + io.reason)
    if io.path_taken == PATH_FAILED:
        return CheckResult(cid, FAIL, expected, detail, "The I/O test failed: " + io.reason)
    required = ctx.p.require_io_test
    return CheckResult(cid, FAIL if required else SKIP, expected, "skipped",
                       f"The I/O test did not run: {io.reason or 'disabled'}. "
                       + ("Without it the direct path is not proven." if required else ""))


@check("io.data_integrity", "the data read back equals the data written")
def data_integrity(ctx: Context) -> CheckResult:
    cid, expected = "io.data_integrity", "read-back equals written"
    io = ctx.io
    if io.path_taken in (PATH_SKIPPED,):
        return CheckResult(cid, SKIP, expected, "not run", "Skipped: the I/O test did not run.")
    if io.verified:
        return CheckResult(cid, PASS, expected, "equal",
                           f"{io.bytes} bytes read back equal to the data written.")
    compared = any(a.get("stage") == "compare" for a in io.attempts or ())
    return CheckResult(cid, FAIL if compared else SKIP, expected,
                       "differs" if compared else "no complete attempt",
                       "Data read back differs from the data written: check the drive and dmesg."
                       if compared else "Skipped: no attempt completed a read-back.")


@check("io.throughput", "direct-path throughput meets the policy's floors")
def throughput(ctx: Context) -> CheckResult:
    cid = "io.throughput"
    io, p = ctx.io, ctx.p
    floors = []
    if p.min_write_gbps is not None:
        floors.append(("write", io.write_gbps, p.min_write_gbps))
    if p.min_read_gbps is not None:
        floors.append(("read", io.read_gbps, p.min_read_gbps))
    if not floors:
        return CheckResult(cid, SKIP, "no floor set",
                           f"write={io.write_gbps} read={io.read_gbps} GB/s",
                           "No throughput floor in the policy.")
    if io.path_taken != PATH_DIRECT:
        return CheckResult(cid, SKIP, "direct-path throughput", io.path_taken,
                           "Skipped: no direct-path measurement.")
    low = [f"{n} {v} < {f}" for n, v, f in floors if v is None or v < f]
    return CheckResult(cid, FAIL if low else PASS,
                       ", ".join(f"{n} >= {f} GB/s" for n, _, f in floors),
                       f"write={io.write_gbps} read={io.read_gbps} GB/s",
                       ("Throughput below the policy floor: " + "; ".join(low) +
                        ". Check PCIe topology (GPU and NVMe under one switch), ACS and IOMMU.")
                       if low else "Throughput meets the policy.")


@check("io.libcufile", "the host's libcufile ran the test, any wheel is its release "
       "(GPU Operator nodes: the cuFile the workloads bring)")
def libcufile(ctx: Context) -> CheckResult:
    io = ctx.io
    lib = (io.evidence or {}).get("libcufile")
    # judged as the workloads' cuFile when the node is operator-managed, also for a result
    # evaluated before the I/O evaluation knew it (lib["judged"] absent)
    operator = ctx.operator or (lib or {}).get("judged") == "workload"
    status, actual, why = iojudge.libcufile_verdict(
        lib, io.path_taken in (PATH_DIRECT, PATH_COMPAT), operator=operator)
    expected = ("the cuFile the workloads bring (operator-managed: no host libcufile)"
                if operator else "host libcufile, wheel of the same release")
    return CheckResult("io.libcufile", {"pass": PASS, "fail": FAIL}.get(status, SKIP),
                       expected, actual, why)


@check("io.cleanup", "(warn only) the test file was removed")
def cleanup(ctx: Context) -> CheckResult | None:
    io = ctx.io
    ev = io.evidence or {}
    if io.path_taken != PATH_SKIPPED and ev.get("file_removed") is False:
        return CheckResult("io.cleanup", WARN, "test file removed", str(ev.get("test_file")),
                           f"Remove the leftover test file {ev.get('test_file')}.")
    return None


@check("io.rw_stats_restored", "(warn only) rw_stats_enabled was restored")
def rw_stats_restored(ctx: Context) -> CheckResult | None:
    rw = (ctx.io.evidence or {}).get("rw_stats") or {}
    if rw.get("restore_error"):
        return CheckResult("io.rw_stats_restored", WARN, "rw_stats_enabled restored",
                           str(rw.get("after")),
                           f"Could not restore rw_stats_enabled to {rw.get('before')}: "
                           f"{rw.get('restore_error')}.")
    return None


declare("gdsio.ratio", __name__, "gdsio GPU Direct / CPU-only throughput ratio",
        emitted_by="provisioner.verify.gdsio")
