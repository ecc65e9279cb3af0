"""GPU, driver and kernel checks (``gpu.*``, ``kernel.*``)."""

from __future__ import annotations

from provisioner.verify import nvfs_kernel
from provisioner.verify.checks.evidence import vge
from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult


@check("gpu.driver.loaded", "NVIDIA driver loaded")
def driver_loaded(ctx: Context) -> CheckResult:
    g = ctx.f.get("gpu") or {}
    if g.get("driver_loaded"):
        return CheckResult("gpu.driver.loaded", PASS, "NVIDIA driver loaded",
                           f"loaded, version {g.get('driver_version') or '?'}",
                           "NVIDIA driver is loaded.")
    return CheckResult("gpu.driver.loaded", FAIL, "NVIDIA driver loaded",
                       "no /proc/driver/nvidia/version and no /sys/module/nvidia",
                       "Install and load the NVIDIA open GPU driver (gdsfleet does not install "
                       "drivers), then run verify again.")


@check("gpu.driver.open", "open GPU kernel module")
def driver_open(ctx: Context) -> CheckResult:
    g = ctx.f.get("gpu") or {}
    flavor = g.get("driver_flavor")
    if not g.get("driver_loaded") and not flavor:
        return CheckResult("gpu.driver.open", SKIP, "open kernel module", "no driver",
                           "Skipped: no GPU driver is loaded.")
    if flavor == "open":
        return CheckResult("gpu.driver.open", PASS, "open kernel module", "open",
                           "The open GPU kernel module is loaded, as nvidia-fs >= 2.17.5 "
                           "requires.")
    return CheckResult("gpu.driver.open", FAIL, "open kernel module", str(flavor or "unknown"),
                       "nvidia-fs needs the OPEN NVIDIA kernel module (modinfo -F license nvidia "
                       "prints 'Dual MIT/GPL'). Install the open driver flavour "
                       "(e.g. nvidia-open / nvidia-driver-XXX-open) and reboot.")


@check("gpu.present", "at least one GPU visible")
def present(ctx: Context) -> CheckResult:
    g = ctx.f.get("gpu") or {}
    count = int(g.get("count") or 0)
    if count > 0:
        names = ", ".join(sorted({str(x.get("name")) for x in g.get("gpus") or []}))
        return CheckResult("gpu.present", PASS, ">= 1 GPU", f"{count} ({names})",
                           "GPUs are visible.")
    return CheckResult("gpu.present", FAIL, ">= 1 GPU", "0",
                       "No NVIDIA GPU is visible (nvidia-smi -L lists none). Check the hardware, "
                       "the driver and that this node belongs in the GDS fleet.")


@check("gpu.driver.version", "driver version (p2pdma route: the policy's floor)")
def driver_version(ctx: Context) -> CheckResult:
    version = (ctx.f.get("gpu") or {}).get("driver_version")
    if ctx.target == "p2pdma":
        floor = ctx.p.min_p2pdma_driver
        ok = vge(version, floor)
        return CheckResult("gpu.driver.version", PASS if ok else FAIL,
                           f">= {floor} (p2pdma route)", str(version or "unknown"),
                           "Driver is new enough for the p2pdma route." if ok else
                           f"The p2pdma route needs the open driver >= {floor}: "
                           "upgrade the driver.")
    return CheckResult("gpu.driver.version", PASS if version else SKIP, "a driver version",
                       str(version or "unknown"),
                       "Driver version recorded." if version else "Skipped: no driver version.")


@check("kernel.version", "kernel new enough for nvidia-fs, and nvidia-fs new enough for it")
def kernel_version(ctx: Context) -> CheckResult:
    cid = "kernel.version"
    k = ctx.f.get("kernel") or {}
    ver = tuple(k.get("version") or ())
    if not ver:
        return CheckResult(cid, WARN, ">= 4.15", "unknown", "Could not read the kernel release.")
    release = str(k.get("release"))
    if ver < (4, 15):
        return CheckResult(cid, FAIL, ">= 4.15", release,
                           "nvidia-fs needs kernel 4.15 or newer: upgrade the kernel.")
    # The pairing (provisioner/verify/nvfs_kernel.py, from the nvidia-fs ChangeLog): only where
    # nvidia-fs carries the I/O (not the p2pdma route).
    nvfs_version = (ctx.f.get("nvfs") or {}).get("version")
    ok, floor, unverified = (nvfs_kernel.pairing(ver, nvfs_version) if ctx.target != "p2pdma"
                             else (None, "", ""))
    if ok is False:
        return CheckResult(cid, FAIL, f">= 4.15; {floor}",
                           f"{release} with nvidia-fs {nvfs_version}",
                           f"nvidia-fs {nvfs_version} does not support kernel {release} ({floor}, "
                           "per the nvidia-fs ChangeLog): DKMS builds fail or the module "
                           "misbehaves and GDS drops to compat mode. Install a newer nvidia-fs "
                           "(set cuda_nvidia_fs_version and run the nvidia_fs role) or boot an "
                           "older kernel; gate the kernel first (gdsfleet.gds.kernel_gate).")
    expected = f">= 4.15; {floor}" if floor else ">= 4.15"
    if unverified and ok is None and nvfs_version:
        # past the newest kernel series the nvidia-fs ChangeLog names: never a silent pass
        # (tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml)
        return CheckResult(cid, WARN, expected, f"{release} with nvidia-fs {nvfs_version}",
                           f"Pairing unverified: {unverified}. nvidia-fs {nvfs_version} meets "
                           f"{floor}, but whether it builds and works on {release} no upstream "
                           "source says: gate the kernel (gdsfleet.gds.kernel_gate: DKMS must "
                           "build it) and prove the direct path with the I/O test.")
    if ok:
        return CheckResult(cid, PASS, expected, f"{release} with nvidia-fs {nvfs_version}",
                           f"Kernel is new enough for nvidia-fs, and nvidia-fs {nvfs_version} "
                           "is new enough for the kernel.")
    return CheckResult(cid, PASS, expected, release,
                       "Kernel is new enough for nvidia-fs"
                       + (f" (nvidia-fs version unknown, so {floor} was not checked)." if floor
                          else "."))
