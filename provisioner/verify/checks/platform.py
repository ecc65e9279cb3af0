"""gdscheck and platform checks (``gdscheck.*``, ``iommu.*``, ``pcie.*``)."""

from __future__ import annotations

from typing import Any

from provisioner.verify.checks.evidence import DIRECT_ROUTES, gc_nvme
from provisioner.verify.checks.fs import network_gds_mount
from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult


def _parsed(ctx: Context) -> dict[str, Any] | None:
    parsed: dict[str, Any] | None = (ctx.f.get("gdscheck") or {}).get("parsed")
    return parsed


@check("gdscheck.present", "gdscheck -p runs", operator_skip=True)
def present(ctx: Context) -> CheckResult:
    cid = "gdscheck.present"
    gc = ctx.f.get("gdscheck") or {}
    parsed = gc.get("parsed")
    if not gc.get("found") and ctx.operator:
        return ctx.operator_skip(cid, "gdscheck installed",
                                 "no host CUDA, so no host gdscheck (it ships in CUDA container "
                                 "images); the route comes from nvidia_fs and the kernel "
                                 "symbols, the proof from the I/O test.")
    if not gc.get("found"):
        return CheckResult(cid, WARN, "gdscheck installed", "not found",
                           "Install gds-tools-X-Y (gdscheck lives in /usr/local/cuda/gds/tools/).")
    if parsed is None:
        return CheckResult(cid, WARN, "gdscheck -p output", f"rc={gc.get('rc')}",
                           f"gdscheck -p produced no output: {gc.get('error') or ''}".strip())
    return CheckResult(cid, PASS, "gdscheck -p output", f"GDS {parsed.get('gds_version')}",
                       "gdscheck -p ran.")


@check("gdscheck.nvme", "gdscheck reports a direct NVMe route")
def nvme(ctx: Context) -> CheckResult:
    cid = "gdscheck.nvme"
    line = gc_nvme(ctx.f)
    gc_errors = (_parsed(ctx) or {}).get("errors") or []
    if line is None and gc_errors:
        return CheckResult(cid, FAIL, "NVMe direct route", "; ".join(gc_errors)[:300],
                           "gdscheck could not initialise cuFile, so no direct route is usable: "
                           + gc_errors[0] + " (see the failing nvfs.* / p2pdma.* checks).")
    if line is None:
        return CheckResult(cid, SKIP, "NVMe direct route", "no NVMe line",
                           "Skipped: no gdscheck DRIVER CONFIGURATION to read.")
    net = network_gds_mount(ctx)
    if net and not line.get("direct"):
        return CheckResult(cid, SKIP, "NVMe direct route", f"NVMe : {line.get('raw')}",
                           f"Skipped: the GDS mount is {net}, a network filesystem; gdscheck's "
                           "line for it is judged in fs.mount.type.")
    if line.get("direct"):
        want = ctx.target
        got = line.get("route")
        if want and got in DIRECT_ROUTES and got != want:
            return CheckResult(cid, FAIL, f"NVMe: {want}", str(line.get("raw")),
                               f"gdscheck reports the {got} route, the policy expects {want}.")
        return CheckResult(cid, PASS, "NVMe direct route",
                           f"NVMe : {line.get('raw')}" + (
                               f"; NVMe P2PDMA : {line.get('p2pdma_raw')}"
                               if line.get("p2pdma_raw") else ""),
                           "gdscheck reports a direct NVMe route (not proof that I/O uses it: see "
                           "io.direct_path).")
    return CheckResult(cid, FAIL, "NVMe direct route", f"NVMe : {line.get('raw')}",
                       "gdscheck sees no direct NVMe route, so I/O falls back to compat: on the "
                       "nvfs route load nvidia_fs and install the GDS-patched nvme driver; on the "
                       "p2pdma route enable the p2pdma prerequisites.")


@check("gdscheck.platform", "(warn only) platform verified while NVMe is not direct")
def platform(ctx: Context) -> CheckResult | None:
    parsed = _parsed(ctx)
    line = gc_nvme(ctx.f)
    if parsed and parsed.get("verification_succeeded") and line and not line.get("direct") \
            and not network_gds_mount(ctx):
        return CheckResult("gdscheck.platform", WARN, "direct NVMe route",
                           "Platform verification succeeded, NVMe not direct",
                           "'Platform verification succeeded' only says the platform is "
                           "capable; the storage route is not active.")
    return None


@check("iommu.state", "IOMMU off")
def iommu_state(ctx: Context) -> CheckResult:
    state = (ctx.f.get("iommu") or {}).get("state")
    if state == "off":
        return CheckResult("iommu.state", PASS, "off", "off", "IOMMU is off.")
    status = FAIL if ctx.p.iommu == "fail" and state in ("on", "pt") else WARN
    return CheckResult("iommu.state", status, "off", str(state),
                       "IOMMU is "
                       + {"pt": "in pass-through", "on": "on"}.get(str(state),
                                                                   "in an unknown state")
                       + ": GDS P2P traffic may fail or slow down. Boot with intel_iommu=off / "
                       "amd_iommu=off (iommu=pt works on some platforms).")


@check("pcie.acs", "ACS disabled on PCIe switches")
def pcie_acs(ctx: Context) -> CheckResult:
    parsed = _parsed(ctx)
    acs = (parsed or {}).get("acs_warnings") or []
    if acs:
        return CheckResult("pcie.acs", WARN, "ACS disabled on PCIe switches",
                           "; ".join(acs)[:300],
                           "ACS on PCIe switch ports redirects P2P traffic through the root "
                           "complex: disable it in the BIOS or with setpci.")
    if parsed:
        return CheckResult("pcie.acs", PASS, "ACS disabled on PCIe switches", "no ACS warning",
                           "gdscheck reports no ACS.")
    return CheckResult("pcie.acs", SKIP, "ACS disabled on PCIe switches", "no gdscheck",
                       "Skipped: no gdscheck output.")
