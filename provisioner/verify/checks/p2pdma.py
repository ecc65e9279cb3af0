"""PCI P2PDMA route checks (``p2pdma.*``): ``skip`` elsewhere, except the safety rule of
``p2pdma.cufile``."""

from __future__ import annotations

from provisioner.verify.checks.evidence import OFF, P2PDMA_REGISTRY_KEYS, block_nvme_p2pdma_off
from provisioner.verify.checks.registry import Context, Skip, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult
from provisioner.verify.parsers.modprobe import parse_registry_dwords, registry_has

P2PDMA_ONLY: frozenset[str | None] = frozenset({"p2pdma"})
OFF_ROUTE = Skip("n/a", "route {route}", "Skipped: the node is not on the p2pdma route.")


def _machine(ctx: Context) -> str:
    return (ctx.f.get("kernel") or {}).get("machine") or ""


@check("p2pdma.kernel", "kernel PCI P2PDMA", targets=P2PDMA_ONLY, off_target=OFF_ROUTE)
def kernel(ctx: Context) -> CheckResult:
    ks = ctx.f.get("kallsyms") or {}
    expected = "p2pdma_pgmap_ops or pci_p2pdma_add_resource in kallsyms"
    if ks.get("p2pdma") or ks.get("p2pdma_pgmap_ops"):
        return CheckResult("p2pdma.kernel", PASS, expected,
                           str(ks.get("p2pdma_symbol") or "p2pdma_pgmap_ops"),
                           "The kernel has PCI P2PDMA.")
    return CheckResult("p2pdma.kernel", FAIL, expected, "absent",
                       "The kernel lacks PCI P2PDMA: boot a kernel with CONFIG_PCI_P2PDMA (Ubuntu "
                       ">= 6.2) or use the nvfs route.")


@check("p2pdma.nvme_multipath", "the running nvme_core has multipath off",
       targets=P2PDMA_ONLY, off_target=OFF_ROUTE)
def nvme_multipath(ctx: Context) -> CheckResult:
    cid = "p2pdma.nvme_multipath"
    mp = (ctx.f.get("nvme") or {}).get("multipath")
    conf = ctx.f.get("modprobe") or {}
    conf_mp = (conf.get("nvme_multipath") or {}).get("value")
    mp_file = (conf.get("nvme_multipath") or {}).get("file")
    if mp == "N":
        return CheckResult(cid, PASS, "N", "N", "NVMe multipath is off.")
    if not _machine(ctx).startswith("x86"):
        return CheckResult(cid, SKIP, "N (x86 only)", str(mp),
                           "Skipped: the multipath requirement applies to x86.")
    if conf_mp in ("N", "n", "0"):
        return CheckResult(cid, FAIL, "N", f"{mp} (configured N in {mp_file})",
                           f"nvme_core multipath=N is configured in {mp_file} but the running "
                           f"module still has {mp}: reboot the node (the rollout does with "
                           "--allow-reboot) so it takes effect; the initramfs must carry it (the "
                           "gdsfleet.gds.p2pdma role rebuilt it).")
    return CheckResult(cid, FAIL, "N", str(mp),
                       "Set `options nvme_core multipath=N` in /etc/modprobe.d (the "
                       "gdsfleet.gds.p2pdma role writes it), rebuild the initramfs and reboot.")


@check("p2pdma.nvidia_registry", "the running nvidia module has the RegistryDwords keys",
       targets=P2PDMA_ONLY, off_target=OFF_ROUTE)
def nvidia_registry(ctx: Context) -> CheckResult:
    """The RUNNING nvidia module has the RegistryDwords keys."""
    cid = "p2pdma.nvidia_registry"
    machine = _machine(ctx)
    want = ";".join(f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS) + ";"
    params = ctx.f.get("nvidia_params") or {}
    conf = ctx.f.get("modprobe") or {}
    conf_reg = conf.get("registry") or {}
    conf_file = (conf.get("registry_dwords") or {}).get("file")
    if not machine.startswith("x86"):
        return CheckResult(cid, SKIP, f"RegistryDwords has {want} (x86 only)",
                           machine or "unknown", "Skipped: the RegistryDwords keys apply to x86.")
    if not params.get("present"):
        return CheckResult(cid, SKIP, f"RegistryDwords has {want}",
                           "no /proc/driver/nvidia/params",
                           "Skipped: the NVIDIA driver is not loaded (see gpu.driver.loaded).")
    running = params.get("registry") or {}
    observed = f'RegistryDwords: "{params.get("registry_dwords") or ""}"'
    missing = [f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS if not registry_has(running, k, v)]
    if not missing:
        return CheckResult(cid, PASS, f"RegistryDwords has {want}", observed,
                           "The nvidia module runs with the registry keys P2PDMA needs.")
    if all(registry_has(conf_reg, k, v) for k, v in P2PDMA_REGISTRY_KEYS):
        return CheckResult(cid, FAIL, f"RegistryDwords has {want}",
                           f"{observed} (configured in {conf_file})",
                           f"NVreg_RegistryDwords with {want} is configured in {conf_file} but "
                           f"the loaded nvidia module lacks {';'.join(missing)}: reboot the node "
                           "(the rollout does with --allow-reboot) so the driver loads with it.")
    return CheckResult(cid, FAIL, f"RegistryDwords has {want}", observed,
                       f"The nvidia module runs without {';'.join(missing)}: add "
                       f'`options nvidia NVreg_RegistryDwords="{want}"` (merged with any keys '
                       "you already set) to /etc/modprobe.d - the gdsfleet.gds.p2pdma role does "
                       "- rebuild the initramfs and reboot.")


@check("p2pdma.modprobe_config", "the next boot gets the P2PDMA module options",
       targets=P2PDMA_ONLY, off_target=OFF_ROUTE)
def modprobe_config(ctx: Context) -> CheckResult:
    """The next boot gets both settings - from modprobe.d as the node's kmod reads it, unless a
    built-in nvme_core or the kernel command line (which kmod applies after every modprobe.d
    file) defeats it."""
    cid = "p2pdma.modprobe_config"
    machine = _machine(ctx)
    running_mp = (ctx.f.get("nvme") or {}).get("multipath")
    expected = "multipath=N and the RegistryDwords keys for the next boot"
    if not machine.startswith("x86"):
        return CheckResult(cid, SKIP, expected + " (x86 only)",
                           machine or "unknown", "Skipped: the module options apply to x86.")
    conf = ctx.f.get("modprobe") or {}
    if not conf.get("gathered"):
        return CheckResult(cid, SKIP, expected, "not gathered",
                           "Skipped: this gather did not read modprobe.d.")
    mp = conf.get("nvme_multipath") or {}
    reg = conf.get("registry") or {}
    reg_file = (conf.get("registry_dwords") or {}).get("file")
    now = conf.get("cmdline") or {}
    boot = conf.get("bootloader") or {}
    # the next boot's command line: the boot loader's configuration when it was read
    nxt = boot if boot.get("source") else now
    src = boot.get("source") or "/proc/cmdline"
    builtin = "nvme_core" in (conf.get("builtin") or [])
    gaps: list[str] = []
    karg = False
    if builtin:
        if nxt.get("multipath") not in OFF:
            karg = True
            gaps.append("nvme_core is built into the kernel (modules.builtin), so it never "
                        "reads modprobe.d, and the kernel command line "
                        + (f"sets nvme_core.multipath={nxt.get('multipath')}"
                           if nxt.get("multipath") else "lacks nvme_core.multipath=N")
                        + f" ({src})")
    elif nxt.get("multipath") is not None and nxt.get("multipath") not in OFF:
        karg = True
        gaps.append(f"the kernel command line sets nvme_core.multipath={nxt['multipath']} "
                    f"({src}), which kmod applies after every modprobe.d file")
    elif mp.get("value") not in OFF:
        gaps.append(f"nvme_core multipath={mp.get('value') or 'unset'}"
                    + (f" ({mp.get('file')})" if mp.get("file") else ""))
    reboot_pending = bool((ctx.f.get("reboot") or {}).get("required"))
    if (boot.get("source") and nxt.get("multipath") in OFF and not reboot_pending
            and now.get("multipath") is not None and now.get("multipath") not in OFF):
        karg = True
        gaps.append(f"/proc/cmdline sets nvme_core.multipath={now['multipath']} although "
                    f"{src} gives N and no reboot is pending: something outside the boot "
                    "loader's configuration adds it (firmware, PXE, a built-in command line)")
    if nxt.get("registry_dwords") is not None:
        reg = parse_registry_dwords(nxt["registry_dwords"])
        reg_file = f"the kernel command line ({src})"
    missing = [f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS if not registry_has(reg, k, v)]
    if missing:
        gaps.append("NVreg_RegistryDwords lacks " + ";".join(missing)
                    + (f" ({reg_file})" if reg_file and nxt.get("registry_dwords") else ""))
    if not gaps:
        where = "kernel command line" if builtin else mp.get("file")
        return CheckResult(cid, PASS, expected, f"{where}; {reg_file}",
                           "The next boot gets the P2PDMA module options"
                           + (" (nvme_core is built in: from the kernel command line)."
                              if builtin else " from modprobe.d."))
    params = ctx.f.get("nvidia_params") or {}
    running_ok = running_mp == "N" and all(
        registry_has(params.get("registry") or {}, k, v) for k, v in P2PDMA_REGISTRY_KEYS)
    fix = ("run the gdsfleet.gds.p2pdma role (it writes `options nvme_core multipath=N` "
           "and merges RMForceStaticBar1=1;RmForceDisableIomapWC=1; into "
           "NVreg_RegistryDwords, rebuilds the initramfs and records the reboot)")
    if karg:
        fix = ("put nvme_core.multipath=N last on the kernel command line: the "
               "gdsfleet.gds.p2pdma role does (GRUB: /etc/default/grub.d/"
               "99-gdsfleet-p2pdma.cfg and update-grub; RHEL: grubby --update-kernel=ALL "
               "--args=nvme_core.multipath=N), or remove what sets it otherwise; "
               + fix.replace("run the", "and run the"))
    return CheckResult(cid, WARN if running_ok else FAIL, expected, "; ".join(gaps),
                       ("The running modules have the P2PDMA options but the next boot loses "
                        "them: " if running_ok else
                        "The next boot does not get the P2PDMA module options: ")
                       + "; ".join(gaps) + ". Fix: " + fix + ", then reboot.")


@check("p2pdma.cufile", "cufile.json enables P2PDMA (elsewhere: does not force it)")
def cufile(ctx: Context) -> CheckResult:
    cid = "p2pdma.cufile"
    ks = ctx.f.get("kallsyms") or {}
    cf = ctx.f.get("cufile") or {}
    if ctx.target != "p2pdma":
        block = cf.get("block_nvme_use_pci_p2pdma")
        if block and not (ks.get("p2pdma") or ks.get("p2pdma_pgmap_ops")):
            return CheckResult(cid, FAIL, "block.nvme.use_pci_p2pdma false off p2pdma",
                               "true without kernel P2PDMA",
                               "block.nvme.use_pci_p2pdma is true but the kernel has no P2PDMA: "
                               "NVMe I/O fails instead of falling back. Set it false in "
                               "cufile.json.")
        return OFF_ROUTE.result(cid, ctx)
    a, b = cf.get("use_pci_p2pdma"), cf.get("block_nvme_use_pci_p2pdma_raw",
                                            cf.get("block_nvme_use_pci_p2pdma"))
    expected = "properties.use_pci_p2pdma true, block.nvme.use_pci_p2pdma not false"
    observed = f"properties={a}, block.nvme={'unset' if b is None else b}"
    if a and not block_nvme_p2pdma_off(cf):
        return CheckResult(cid, PASS, expected, observed, "cufile.json enables P2PDMA for NVMe.")
    return CheckResult(cid, FAIL, expected, observed,
                       "Set properties.use_pci_p2pdma to true in cufile.json"
                       + (" and remove block.nvme.use_pci_p2pdma: false (or set it true)"
                          if block_nvme_p2pdma_off(cf) else "")
                       + " (the gdsfleet.gds.cufile role does with gds_route: p2pdma).")
