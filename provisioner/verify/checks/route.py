"""Route, reboot and Secure Boot checks (``route.*``, ``reboot.*``, ``secureboot.*``)."""

from __future__ import annotations

from provisioner.verify.checks.evidence import DIRECT_ROUTES, block_nvme_p2pdma_off, gc_nvme
from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult


def compat_gap(ctx: Context) -> str:
    """route.expected on a compat node: which parts of GDS are there and what each direct
    route still lacks (a node with only CUDA's libcufile has no GDS stack to speak of)."""
    f = ctx.f
    nvfs = f.get("nvfs") or {}
    ks = f.get("kallsyms") or {}
    cf = f.get("cufile") or {}
    pk = f.get("packages") or {}
    gc = f.get("gdscheck") or {}
    present = [name for name, there in (
        ("nvidia-gds packages", pk.get("nvidia_gds")), ("nvidia_fs loaded", nvfs.get("loaded")),
        ("gdscheck", gc.get("found")),
        ("libcufile", (f.get("libcufile") or {}).get("found") or pk.get("libcufile")),
        ("cufile.json", cf.get("present"))) if there]
    missing = []
    if not nvfs.get("loaded"):
        missing.append("nvidia_fs is not loaded" + (
            "" if nvfs.get("installed_version") or pk.get("nvidia_fs")
            else " (no nvidia-fs installed)"))
    elif not (ks.get("nvfs_dma_ops") or ks.get("nvfs_rdma_dma_ops")):
        missing.append("the nvme driver is not GDS-patched "
                       "(no nvme_v1/v2_register_nvfs_dma_ops)")
    elif (want := (ks.get("nvfs_lookup") or {}).get("symbol")) and ks.get(
            "nvme_register_symbols") and want not in ks["nvme_register_symbols"]:
        missing.append(f"the nvme driver exports {', '.join(ks['nvme_register_symbols'])} but "
                       f"the loaded nvidia-fs looks up {want} (NVIDIA/gds-nvidia-fs#87)")
    if not (ks.get("p2pdma") or ks.get("p2pdma_pgmap_ops")):
        missing.append("the kernel has no PCI P2PDMA (no p2pdma_pgmap_ops, no "
                       "pci_p2pdma_add_resource)")
    elif not cf.get("use_pci_p2pdma") or block_nvme_p2pdma_off(cf):
        missing.append("cufile.json does not enable use_pci_p2pdma")
    if not gc.get("found"):
        missing.append("gdscheck (gds-tools) is not installed")
    elif (gc_nvme(f) or {}).get("route") in ("compat", "unsupported"):
        missing.append("gdscheck reports no direct NVMe route")
    have = (f"Present: {', '.join(present)}, so cuFile runs in compat mode only (POSIX "
            "through the page cache). " if present else "")
    return (f"No direct GDS route on this node: {'; '.join(missing) or 'see below'}. {have}"
            "Run the rollout (site playbook) for the nvfs or p2pdma route; the failing "
            "nvfs.* / p2pdma.* checks say what to do.")


@check("route.expected", "the node's route is the policy's")
def expected(ctx: Context) -> CheckResult:
    want = ctx.p.expected_route
    if want == "any":
        ok = ctx.route in DIRECT_ROUTES
        wanted = "nvfs or p2pdma"
    else:
        ok = ctx.route == want
        wanted = want
    if ok:
        message = f"The node is set up for the {ctx.route} route."
    elif ctx.route == "compat":
        message = compat_gap(ctx)
    elif ctx.route == "none":
        message = "No GDS stack on this node: run the rollout (site playbook)."
    else:
        message = f"The node shows the {ctx.route} route, the policy wants {wanted}."
    return CheckResult("route.expected", PASS if ok else FAIL, wanted, ctx.route, message)


@check("reboot.pending", "no reboot pending")
def reboot_pending(ctx: Context) -> CheckResult:
    rb = ctx.f.get("reboot") or {}
    if rb.get("required"):
        return CheckResult("reboot.pending", FAIL if ctx.p.reboot_pending == "fail" else WARN,
                           "no pending reboot",
                           "; ".join(rb.get("reasons") or []) or "marker present",
                           "A change waits for a reboot (/var/lib/gdsfleet/reboot-required): "
                           "reboot the node (the rollout does) and verify again.")
    return CheckResult("reboot.pending", PASS, "no pending reboot", "none", "No reboot pending.")


@check("secureboot.state", "Secure Boot does not block the DKMS modules")
def secureboot_state(ctx: Context) -> CheckResult:
    sb = ctx.f.get("secure_boot")
    if sb is None:
        return CheckResult("secureboot.state", SKIP, "known", "mokutil absent",
                           "Skipped: mokutil not installed.")
    if sb and ctx.target == "nvfs":
        return CheckResult("secureboot.state", WARN, "DKMS modules can load",
                           "Secure Boot enabled",
                           "Secure Boot is on: DKMS-built nvidia-fs and DOCA modules need MOK "
                           "enrolment to load.")
    return CheckResult("secureboot.state", PASS, "DKMS modules can load",
                       "enabled" if sb else "disabled", "Secure Boot does not block the modules.")
