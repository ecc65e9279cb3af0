"""The kernel gate's verdict on the kernel the node boots next (``gate.*``).

The gate (gdsfleet.gds.kernel_gate, and the kernel hook the nvidia_fs role installs) records
its result per kernel in /var/lib/gdsfleet/kernel-gate.json; this check reads it for the kernel
the node would really boot (grubby's default, GRUB's saved entry, else the newest
/boot/vmlinuz-*), so a node that would reboot into a kernel that failed the gate fails verify
before that reboot, and the ledger records it.
"""

from __future__ import annotations

from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult

_EXPECTED = "the kernel the node boots next passed the kernel gate"
_HOW = ("run the gate: `ansible-playbook ... -e kernel_gate_kernel=<kernel>` with the "
        "gdsfleet.gds.kernel_gate role (playbooks/kernel_update.yml runs it)")


@check("gate.boot_kernel", "the next-boot kernel passed the kernel gate", operator_skip=True)
def boot_kernel(ctx: Context) -> CheckResult:
    cid = "gate.boot_kernel"
    if ctx.operator:
        return ctx.operator_skip(cid, _EXPECTED, "the GPU Operator's driver container builds "
                                 "the GDS modules for whichever kernel boots; there is no host "
                                 "build to gate.")
    g = ctx.f.get("kernel_gate") or {}
    kernel, source = g.get("boot_kernel"), g.get("boot_source")
    running = (ctx.f.get("kernel") or {}).get("release")
    if not kernel:
        return CheckResult(cid, SKIP, _EXPECTED, "boot kernel unknown",
                           "Skipped: cannot tell which kernel boots next (no /boot/vmlinuz-*, "
                           "no grubby).")
    observed = f"{kernel} ({source})"
    if g.get("error"):
        return CheckResult(cid, WARN, _EXPECTED, f"{observed}: unreadable gate state",
                           f"/var/lib/gdsfleet/kernel-gate.json is unreadable ({g['error']}): "
                           f"{_HOW}.")
    rec = (g.get("kernels") or {}).get(kernel)
    if rec is None:
        if kernel == running:
            return CheckResult(cid, SKIP, _EXPECTED, observed + ": the running kernel",
                               "Skipped: the node boots the kernel it runs; the other checks "
                               "judge it as it is.")
        return CheckResult(cid, WARN, _EXPECTED, observed + ": not gated",
                           f"The node boots {kernel} next (running: {running}) and the kernel "
                           f"gate has not checked it: after that reboot GDS may be gone. {_HOW}, "
                           "or install the kernel hook (the nvidia_fs role does).")
    when = f", gated {rec.get('checked_at')}" if rec.get("checked_at") else ""
    if rec.get("passed"):
        return CheckResult(cid, PASS, _EXPECTED, f"{observed}: passed{when}",
                           f"The kernel gate passed {kernel}, the kernel the node boots next.")
    if rec.get("deferred"):
        # the kernel hook ran before the kernel's other half (image or headers) was configured;
        # DKMS builds, and the gate runs again, when it is (plugins/module_utils/kernel_gate.py
        # deferral)
        return CheckResult(cid, WARN, _EXPECTED, f"{observed}: deferred{when}",
                           f"The kernel gate deferred its verdict on {kernel}, the kernel the "
                           f"node boots next: {rec.get('reason') or 'no reason recorded'}. It "
                           "gates again when the package manager is done; until then do not "
                           f"reboot. If it stays deferred: {rec.get('fix') or _HOW}.")
    return CheckResult(cid, FAIL, _EXPECTED, f"{observed}: FAILED{when}",
                       f"The node would boot {kernel} (running: {running}), which FAILED the "
                       f"kernel gate: {rec.get('reason') or 'no reason recorded'}. After that "
                       f"reboot GDS drops to compat mode. To fix: {rec.get('fix') or _HOW}; or "
                       f"make {running} the default boot entry again (grub-set-default / "
                       "grubby --set-default) and hold the failing kernel's packages.")
