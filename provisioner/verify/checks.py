"""Checks: facts + I/O test result + policy -> CheckResult list, route and compliance (pure).

Every check has a stable id (docs/checks.md lists them with what to do). A check that does not
apply to the node's route is ``skip`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.verify import iotest, proof
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
    IoTestResult,
)
from provisioner.verify.parsers import nvfs_stats, storage
from provisioner.verify.parsers.driver import version_tuple
from provisioner.verify.parsers.modprobe import parse_registry_dwords, registry_has
from provisioner.verify.policy import Policy

DIRECT_ROUTES = ("nvfs", "p2pdma")


def _gc_nvme(facts: dict[str, Any]) -> dict[str, Any] | None:
    parsed = (facts.get("gdscheck") or {}).get("parsed") or {}
    nvme = parsed.get("nvme")
    return nvme if isinstance(nvme, dict) else None


def stack_present(facts: dict[str, Any]) -> bool:
    """Whether any part of a GDS stack is installed (libcufile, cufile.json, gdscheck,
    nvidia-fs)."""
    pk = facts.get("packages") or {}
    return bool(
        (facts.get("libcufile") or {}).get("found")
        or pk.get("libcufile")
        or pk.get("nvidia_gds")
        or (facts.get("cufile") or {}).get("present")
        or (facts.get("gdscheck") or {}).get("found")
        or (facts.get("nvfs") or {}).get("loaded")
    )


def route_evidence(facts: dict[str, Any]) -> dict[str, Any]:
    nvfs = facts.get("nvfs") or {}
    ks = facts.get("kallsyms") or {}
    cf = facts.get("cufile") or {}
    return {
        # nvidia-fs loaded and a GDS-patched nvme or nvme-rdma it registers with
        "nvfs": bool(nvfs.get("loaded") and (ks.get("nvfs_dma_ops")
                                             or ks.get("nvfs_rdma_dma_ops"))),
        "p2pdma": bool(
            ks.get("p2pdma_pgmap_ops") and cf.get("use_pci_p2pdma")
            and not _block_nvme_p2pdma_off(cf)
        ),
        "gdscheck": (_gc_nvme(facts) or {}).get("route"),
        "stack": stack_present(facts),
    }


# nvme_core's multipath parameter is a bool: N, n and 0 turn it off.
_OFF = ("N", "n", "0")


def _block_nvme_p2pdma_off(cf: dict[str, Any]) -> bool:
    """block.nvme.use_pci_p2pdma explicitly false. Absent is fine: NVIDIA's P2PDMA guide sets
    only properties.use_pci_p2pdma. Facts recorded before the raw value was kept only tell
    false (absent or set false) apart from true."""
    if "block_nvme_use_pci_p2pdma_raw" in cf:
        raw = cf.get("block_nvme_use_pci_p2pdma_raw")
        return raw is not None and not raw
    return cf.get("block_nvme_use_pci_p2pdma") is False


P2PDMA_REGISTRY_KEYS = (("RMForceStaticBar1", "1"), ("RmForceDisableIomapWC", "1"))


def determine_route(facts: dict[str, Any]) -> str:
    """nvfs | p2pdma | compat | none, from the node's own evidence. gdscheck's DRIVER
    CONFIGURATION wins when it names a direct route; otherwise the kernel symbols, the loaded
    module and cufile.json decide."""
    ev = route_evidence(facts)
    gc = ev["gdscheck"]
    if gc in ("p2pdma", "nvfs"):
        return str(gc)
    if gc in ("compat", "unsupported"):
        return "compat"
    if ev["nvfs"]:
        return "nvfs"
    if ev["p2pdma"]:
        return "p2pdma"
    if ev["stack"]:
        return "compat"
    return "none"


def _target_route(route: str, policy: Policy) -> str | None:
    """The route whose prerequisites apply: the policy's, else the observed direct one."""
    if policy.expected_route in DIRECT_ROUTES:
        return policy.expected_route
    if route in DIRECT_ROUTES:
        return route
    return None


def _vge(have: str | None, want: str) -> bool:
    return bool(have) and version_tuple(have) >= version_tuple(want)


def _nvfs_version_check(n: dict[str, Any], minimum: str) -> tuple[str, str, str, str, str]:
    """nvfs.version from the full x.y.z version when any source has it. /proc/driver/nvidia-fs/
    version prints major.minor only: with nothing better, a major.minor equal to the minimum's
    cannot be judged (2.17 may be 2.17.3 or 2.17.5), so it warns instead of failing."""
    ver = n.get("version")
    src = n.get("version_source") or "unknown source"
    expected = f">= {minimum}"
    observed = f"{ver} ({src})" if ver else "unknown"
    if not ver:
        return ("nvfs.version", WARN, expected, observed,
                "Could not read the nvidia-fs version (/sys/module/nvidia_fs/version, the stats "
                "header, `modinfo -F version nvidia_fs`): check the module by hand.")
    if nvfs_stats.is_major_minor_only(ver) and len(version_tuple(minimum)) > 2:
        have, want = version_tuple(ver)[:2], version_tuple(minimum)[:2]
        if have > want:
            return ("nvfs.version", PASS, expected, observed,
                    "nvidia-fs version meets the policy (major.minor from /proc).")
        if have == want:
            return ("nvfs.version", WARN, expected, observed,
                    f"Only major.minor ({ver}) is readable (/proc/driver/nvidia-fs/version); the "
                    f"patch level decides against {minimum}. Read it with `modinfo -F version "
                    "nvidia_fs` or `cat /sys/module/nvidia_fs/version`.")
    if _vge(ver, minimum):
        return ("nvfs.version", PASS, expected, observed, "nvidia-fs version meets the policy.")
    return ("nvfs.version", FAIL, expected, observed,
            "Upgrade nvidia-fs (nvidia-fs-dkms from the CUDA repository) and reload it.")


class _Checks:
    def __init__(self, facts: dict[str, Any], io: IoTestResult, policy: Policy, route: str,
                 io_path: str | None) -> None:
        self.f = facts
        self.io = io
        self.p = policy
        self.route = route
        self.target = _target_route(route, policy)
        self.io_path = io_path
        op = facts.get("operator") or {}
        # The NVIDIA GPU Operator's driver container brings the driver, nvidia-fs and CUDA:
        # host-package and host-DKMS checks do not apply (they skip and say so).
        self.operator = bool(op.get("managed"))
        self.operator_evidence = str(op.get("evidence") or "")
        self.out: list[CheckResult] = []

    def add(self, cid: str, status: str, expected: str, observed: str, message: str) -> None:
        self.out.append(CheckResult(cid, status, expected, observed, message))

    def operator_skip(self, cid: str, expected: str, why: str) -> None:
        self.add(cid, SKIP, expected, f"operator-managed ({self.operator_evidence})",
                 f"operator-managed node: {why}")

    # -- GPU and driver -------------------------------------------------------------------
    def gpu(self) -> None:
        g = self.f.get("gpu") or {}
        if g.get("driver_loaded"):
            self.add("gpu.driver.loaded", PASS, "NVIDIA driver loaded",
                     f"loaded, version {g.get('driver_version') or '?'}",
                     "NVIDIA driver is loaded.")
        else:
            self.add("gpu.driver.loaded", FAIL, "NVIDIA driver loaded",
                     "no /proc/driver/nvidia/version and no /sys/module/nvidia",
                     "Install and load the NVIDIA open GPU driver (gdsfleet does not install "
                     "drivers), then run verify again.")
        flavor = g.get("driver_flavor")
        if not g.get("driver_loaded") and not flavor:
            self.add("gpu.driver.open", SKIP, "open kernel module", "no driver",
                     "Skipped: no GPU driver is loaded.")
        elif flavor == "open":
            self.add("gpu.driver.open", PASS, "open kernel module", "open",
                     "The open GPU kernel module is loaded, as nvidia-fs >= 2.17.5 requires.")
        else:
            self.add("gpu.driver.open", FAIL, "open kernel module", str(flavor or "unknown"),
                     "nvidia-fs needs the OPEN NVIDIA kernel module (modinfo -F license nvidia "
                     "prints 'Dual MIT/GPL'). Install the open driver flavour "
                     "(e.g. nvidia-open / nvidia-driver-XXX-open) and reboot.")
        count = int(g.get("count") or 0)
        if count > 0:
            names = ", ".join(sorted({str(x.get("name")) for x in g.get("gpus") or []}))
            self.add("gpu.present", PASS, ">= 1 GPU", f"{count} ({names})", "GPUs are visible.")
        else:
            self.add("gpu.present", FAIL, ">= 1 GPU", "0",
                     "No NVIDIA GPU is visible (nvidia-smi -L lists none). Check the hardware, "
                     "the driver and that this node belongs in the GDS fleet.")
        version = g.get("driver_version")
        if self.target == "p2pdma":
            ok = _vge(version, self.p.min_p2pdma_driver)
            self.add("gpu.driver.version", PASS if ok else FAIL,
                     f">= {self.p.min_p2pdma_driver} (p2pdma route)", str(version or "unknown"),
                     "Driver is new enough for the p2pdma route." if ok else
                     f"The p2pdma route needs the open driver >= {self.p.min_p2pdma_driver}: "
                     "upgrade the driver.")
        else:
            self.add("gpu.driver.version", PASS if version else SKIP, "a driver version",
                     str(version or "unknown"),
                     "Driver version recorded." if version else "Skipped: no driver version.")

    # -- kernel, OS --------------------------------------------------------------------------
    def kernel(self) -> None:
        k = self.f.get("kernel") or {}
        ver = tuple(k.get("version") or ())
        if not ver:
            self.add("kernel.version", WARN, ">= 4.15", "unknown",
                     "Could not read the kernel release.")
        elif ver < (4, 15):
            self.add("kernel.version", FAIL, ">= 4.15", k.get("release", "?"),
                     "nvidia-fs needs kernel 4.15 or newer: upgrade the kernel.")
        else:
            self.add("kernel.version", PASS, ">= 4.15", str(k.get("release")),
                     "Kernel is new enough for nvidia-fs (new kernels need a matching nvidia-fs "
                     "release: 2.26.6 for 6.11/6.14, 2.28.2 for 6.17).")

    # -- nvidia-fs (nvfs route) --------------------------------------------------------------
    def nvfs(self) -> None:
        n = self.f.get("nvfs") or {}
        if self.target == "p2pdma":
            for cid in ("nvfs.module.loaded", "nvfs.version", "nvfs.nvme.patched", "nvfs.persist",
                        "nvfs.dkms", "mofed.installed"):
                self.add(cid, SKIP, "n/a on p2pdma", "p2pdma route",
                         "Skipped: the p2pdma route does not use nvidia-fs or MOFED/DOCA.")
            return
        if n.get("loaded"):
            self.add("nvfs.module.loaded", PASS, "nvidia_fs loaded", "loaded",
                     "nvidia_fs is loaded (/sys/module/nvidia_fs)" + (
                         ", by the GPU Operator's driver container." if self.operator else "."))
        elif self.operator:
            self.add("nvfs.module.loaded", FAIL, "nvidia_fs loaded", "not loaded",
                     "operator-managed node without nvidia_fs: enable GDS in the GPU Operator "
                     "(gds.enabled, the gdsfleet.gds.gpu_operator playbook does) and read the "
                     "nvidia-fs-ctr container of the node's nvidia-driver-daemonset pod "
                     "(/run/nvidia/validations/nvidia-fs-ready appears once it is loaded).")
        else:
            installed = n.get("installed_version")
            hint = (f"nvidia-fs {installed} is installed but not loaded: run `modprobe nvidia_fs` "
                    "and check dmesg" if installed else
                    "nvidia-fs is not installed for this kernel: run the gdsfleet.gds.nvidia_fs "
                    "role (nvidia-fs-dkms) and check `dkms status`")
            self.add("nvfs.module.loaded", FAIL, "nvidia_fs loaded", "not loaded", hint + ".")
        if not n.get("loaded"):
            self.add("nvfs.version", SKIP, f">= {self.p.min_nvfs_version}", "not loaded",
                     "Skipped: nvidia_fs is not loaded.")
        else:
            self.add(*_nvfs_version_check(n, self.p.min_nvfs_version))
        self.nvme_patched()
        persist = n.get("persist_file")
        if self.operator:
            self.operator_skip("nvfs.persist", "nvidia_fs in /etc/modules-load.d",
                               "the GPU Operator's driver container loads nvidia_fs at every "
                               "boot; no modules-load.d entry on the host.")
        elif persist is not None and "nvidia_fs" in persist.split():
            self.add("nvfs.persist", PASS, "nvidia_fs in /etc/modules-load.d", "present",
                     "nvidia_fs loads at boot.")
        else:
            self.add("nvfs.persist", WARN, "nvidia_fs in /etc/modules-load.d",
                     "absent" if persist is None else "file without nvidia_fs",
                     "nvidia_fs may not load after a reboot: add it to "
                     "/etc/modules-load.d/nvidia_fs.conf (the nvidia_fs role does).")
        dk = self.f.get("dkms") or {}
        release = (self.f.get("kernel") or {}).get("release")
        if self.operator:
            self.operator_skip("nvfs.dkms", f"nvidia-fs built for {release}",
                               "nvidia-fs is built in the GPU Operator's driver container for "
                               "the running kernel, not by host DKMS.")
        elif not dk.get("available"):
            self.add("nvfs.dkms", SKIP, "nvidia-fs built for the running kernel", "no dkms",
                     "Skipped: dkms is not installed (nvidia-fs may come from a kmod package).")
        else:
            mods = [m for m in dk.get("modules") or [] if m.get("module") == "nvidia-fs"]
            built = [m for m in mods
                     if m.get("kernel") == release and m.get("state") == "installed"]
            if built:
                self.add("nvfs.dkms", PASS, f"nvidia-fs installed for {release}",
                         f"nvidia-fs/{built[0].get('version')}: installed",
                         "DKMS built nvidia-fs for the running kernel.")
            else:
                seen = "; ".join(f"{m.get('version')} {m.get('kernel')} {m.get('state')}"
                                 for m in mods) or "no nvidia-fs entry"
                self.add("nvfs.dkms", WARN, f"nvidia-fs installed for {release}", seen,
                         "DKMS has no nvidia-fs build for the running kernel: run "
                         f"`dkms autoinstall -k {release}` and check the build log before the next "
                         "reboot.")
        of = self.f.get("ofed") or {}
        if of.get("version"):
            self.add("mofed.installed", PASS, "MOFED or DOCA-OFED", f"{of.get('raw')}",
                     "MOFED/DOCA is installed.")
        else:
            self.add("mofed.installed", WARN if self.target == "nvfs" else SKIP,
                     "MOFED or DOCA-OFED", "ofed_info not found",
                     "The nvfs route needs the GDS-patched NVMe driver from DOCA (doca-ofed + "
                     "mlnx-nvme-dkms) or MLNX_OFED: run the gdsfleet.gds.mofed role."
                     if self.target == "nvfs" else "Skipped: route is not nvfs.")

    # -- the kernel the node boots next (nvfs route) -----------------------------------------
    def boot_kernel(self) -> None:
        cid = "nvfs.dkms.boot_kernel"
        expected = "nvidia-fs (and mlnx-nvme) built for the boot kernel"
        if self.target == "p2pdma":
            self.add(cid, SKIP, expected, "p2pdma route",
                     "Skipped: the p2pdma route does not use nvidia-fs or MOFED/DOCA.")
            return
        boot = self.f.get("boot") or {}
        dk = self.f.get("dkms") or {}
        mods = dk.get("modules") or []
        nvfs = [m for m in mods if m.get("module") == "nvidia-fs"]
        kernel = boot.get("default")
        if self.operator:
            self.operator_skip(cid, expected, "the GPU Operator's driver container builds "
                               "nvidia-fs for whichever kernel boots; there is no host DKMS "
                               "build to check.")
            return
        if not kernel:
            self.add(cid, SKIP, expected, "boot kernel unknown",
                     "Skipped: cannot tell which kernel boots next (no /boot/vmlinuz-*, no "
                     "grubby).")
            return
        if not dk.get("available") or not nvfs:
            self.add(cid, SKIP, expected, f"boot kernel {kernel}",
                     "Skipped: nvidia-fs is not a DKMS module on this node.")
            return
        missing = []
        for name, entries in (("nvidia-fs", nvfs),
                              ("mlnx-nvme", [m for m in mods if m.get("module") == "mlnx-nvme"])):
            if entries and not any(m.get("kernel") == kernel and m.get("state") == "installed"
                                   for m in entries):
                missing.append(name)
        observed = f"{kernel} ({boot.get('source')})"
        if not missing:
            self.add(cid, PASS, expected, observed,
                     f"DKMS built the GDS modules for {kernel}, the kernel the node boots next.")
            return
        release = (self.f.get("kernel") or {}).get("release")
        headers_pkg = f"linux-headers-{kernel}" if (self.f.get("os") or {}).get(
            "family") != "redhat" else f"kernel-devel-{kernel}"
        self.add(cid, WARN, expected, observed + ": no " + ", ".join(missing),
                 f"The node boots {kernel} next (running: {release}) and DKMS has no "
                 f"{' or '.join(missing)} built for it: after that reboot GDS I/O drops silently "
                 f"to compat mode. Install {headers_pkg} and run `dkms autoinstall -k {kernel}` "
                 "(the nvidia_fs and mofed roles do this for every kernel with headers), or make "
                 "the running kernel the default boot entry.")

    # -- p2pdma route ------------------------------------------------------------------------
    def p2pdma(self) -> None:
        ks = self.f.get("kallsyms") or {}
        cf = self.f.get("cufile") or {}
        mp = (self.f.get("nvme") or {}).get("multipath")
        machine = (self.f.get("kernel") or {}).get("machine") or ""
        if self.target != "p2pdma":
            for cid in ("p2pdma.kernel", "p2pdma.nvme_multipath", "p2pdma.nvidia_registry",
                        "p2pdma.modprobe_config"):
                self.add(cid, SKIP, "n/a", f"route {self.route}",
                         "Skipped: the node is not on the p2pdma route.")
            block = cf.get("block_nvme_use_pci_p2pdma")
            if block and not ks.get("p2pdma_pgmap_ops"):
                self.add("p2pdma.cufile", FAIL, "block.nvme.use_pci_p2pdma false off p2pdma",
                         "true without kernel P2PDMA",
                         "block.nvme.use_pci_p2pdma is true but the kernel has no P2PDMA: NVMe "
                         "I/O fails instead of falling back. Set it false in cufile.json.")
            else:
                self.add("p2pdma.cufile", SKIP, "n/a", f"route {self.route}",
                         "Skipped: the node is not on the p2pdma route.")
            return
        if ks.get("p2pdma_pgmap_ops"):
            self.add("p2pdma.kernel", PASS, "p2pdma_pgmap_ops in kallsyms", "present",
                     "The kernel has PCI P2PDMA.")
        else:
            self.add("p2pdma.kernel", FAIL, "p2pdma_pgmap_ops in kallsyms", "absent",
                     "The kernel lacks PCI P2PDMA: boot a kernel with CONFIG_PCI_P2PDMA (Ubuntu "
                     ">= 6.2) or use the nvfs route.")
        conf = self.f.get("modprobe") or {}
        conf_mp = (conf.get("nvme_multipath") or {}).get("value")
        mp_file = (conf.get("nvme_multipath") or {}).get("file")
        if mp == "N":
            self.add("p2pdma.nvme_multipath", PASS, "N", "N", "NVMe multipath is off.")
        elif not machine.startswith("x86"):
            self.add("p2pdma.nvme_multipath", SKIP, "N (x86 only)", str(mp),
                     "Skipped: the multipath requirement applies to x86.")
        elif conf_mp in ("N", "n", "0"):
            self.add("p2pdma.nvme_multipath", FAIL, "N", f"{mp} (configured N in {mp_file})",
                     f"nvme_core multipath=N is configured in {mp_file} but the running module "
                     f"still has {mp}: reboot the node (the rollout does with --allow-reboot) so "
                     "it takes effect; the initramfs must carry it (the gdsfleet.gds.p2pdma role "
                     "rebuilt it).")
        else:
            self.add("p2pdma.nvme_multipath", FAIL, "N", str(mp),
                     "Set `options nvme_core multipath=N` in /etc/modprobe.d (the "
                     "gdsfleet.gds.p2pdma role writes it), rebuild the initramfs and reboot.")
        self._p2pdma_registry(machine)
        self._p2pdma_modprobe_config(machine, mp)
        a, b = cf.get("use_pci_p2pdma"), cf.get("block_nvme_use_pci_p2pdma_raw",
                                                cf.get("block_nvme_use_pci_p2pdma"))
        if a and not _block_nvme_p2pdma_off(cf):
            self.add("p2pdma.cufile", PASS,
                     "properties.use_pci_p2pdma true, block.nvme.use_pci_p2pdma not false",
                     f"properties={a}, block.nvme={'unset' if b is None else b}",
                     "cufile.json enables P2PDMA for NVMe.")
        else:
            self.add("p2pdma.cufile", FAIL,
                     "properties.use_pci_p2pdma true, block.nvme.use_pci_p2pdma not false",
                     f"properties={a}, block.nvme={'unset' if b is None else b}",
                     "Set properties.use_pci_p2pdma to true in cufile.json"
                     + (" and remove block.nvme.use_pci_p2pdma: false (or set it true)"
                        if _block_nvme_p2pdma_off(cf) else "")
                     + " (the gdsfleet.gds.cufile role does with gds_route: p2pdma).")

    def _p2pdma_registry(self, machine: str) -> None:
        """p2pdma.nvidia_registry: the RUNNING nvidia module has the RegistryDwords keys."""
        want = ";".join(f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS) + ";"
        params = self.f.get("nvidia_params") or {}
        conf = self.f.get("modprobe") or {}
        conf_reg = conf.get("registry") or {}
        conf_file = (conf.get("registry_dwords") or {}).get("file")
        if not machine.startswith("x86"):
            self.add("p2pdma.nvidia_registry", SKIP, f"RegistryDwords has {want} (x86 only)",
                     machine or "unknown", "Skipped: the RegistryDwords keys apply to x86.")
            return
        if not params.get("present"):
            self.add("p2pdma.nvidia_registry", SKIP, f"RegistryDwords has {want}",
                     "no /proc/driver/nvidia/params",
                     "Skipped: the NVIDIA driver is not loaded (see gpu.driver.loaded).")
            return
        running = params.get("registry") or {}
        observed = f'RegistryDwords: "{params.get("registry_dwords") or ""}"'
        missing = [f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS if not registry_has(running, k, v)]
        if not missing:
            self.add("p2pdma.nvidia_registry", PASS, f"RegistryDwords has {want}", observed,
                     "The nvidia module runs with the registry keys P2PDMA needs.")
        elif all(registry_has(conf_reg, k, v) for k, v in P2PDMA_REGISTRY_KEYS):
            self.add("p2pdma.nvidia_registry", FAIL, f"RegistryDwords has {want}",
                     f"{observed} (configured in {conf_file})",
                     f"NVreg_RegistryDwords with {want} is configured in {conf_file} but the "
                     f"loaded nvidia module lacks {';'.join(missing)}: reboot the node (the "
                     "rollout does with --allow-reboot) so the driver loads with it.")
        else:
            self.add("p2pdma.nvidia_registry", FAIL, f"RegistryDwords has {want}", observed,
                     f"The nvidia module runs without {';'.join(missing)}: add "
                     f'`options nvidia NVreg_RegistryDwords="{want}"` (merged with any keys you '
                     "already set) to /etc/modprobe.d - the gdsfleet.gds.p2pdma role does - "
                     "rebuild the initramfs and reboot.")

    def _p2pdma_modprobe_config(self, machine: str, running_mp: str | None) -> None:
        """p2pdma.modprobe_config: the next boot gets both settings - from modprobe.d as the
        node's kmod reads it, unless a built-in nvme_core or the kernel command line (which kmod
        applies after every modprobe.d file) defeats it."""
        expected = "multipath=N and the RegistryDwords keys for the next boot"
        if not machine.startswith("x86"):
            self.add("p2pdma.modprobe_config", SKIP, expected + " (x86 only)",
                     machine or "unknown", "Skipped: the module options apply to x86.")
            return
        conf = self.f.get("modprobe") or {}
        if not conf.get("gathered"):
            self.add("p2pdma.modprobe_config", SKIP, expected, "not gathered",
                     "Skipped: this gather did not read modprobe.d.")
            return
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
            if nxt.get("multipath") not in _OFF:
                karg = True
                gaps.append("nvme_core is built into the kernel (modules.builtin), so it never "
                            "reads modprobe.d, and the kernel command line "
                            + (f"sets nvme_core.multipath={nxt.get('multipath')}"
                               if nxt.get("multipath") else "lacks nvme_core.multipath=N")
                            + f" ({src})")
        elif nxt.get("multipath") is not None and nxt.get("multipath") not in _OFF:
            karg = True
            gaps.append(f"the kernel command line sets nvme_core.multipath={nxt['multipath']} "
                        f"({src}), which kmod applies after every modprobe.d file")
        elif mp.get("value") not in _OFF:
            gaps.append(f"nvme_core multipath={mp.get('value') or 'unset'}"
                        + (f" ({mp.get('file')})" if mp.get("file") else ""))
        reboot_pending = bool((self.f.get("reboot") or {}).get("required"))
        if (boot.get("source") and nxt.get("multipath") in _OFF and not reboot_pending
                and now.get("multipath") is not None and now.get("multipath") not in _OFF):
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
            self.add("p2pdma.modprobe_config", PASS, expected, f"{where}; {reg_file}",
                     "The next boot gets the P2PDMA module options"
                     + (" (nvme_core is built in: from the kernel command line)." if builtin
                        else " from modprobe.d."))
            return
        params = self.f.get("nvidia_params") or {}
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
        self.add("p2pdma.modprobe_config", WARN if running_ok else FAIL, expected,
                 "; ".join(gaps),
                 ("The running modules have the P2PDMA options but the next boot loses them: "
                  if running_ok else "The next boot does not get the P2PDMA module options: ")
                 + "; ".join(gaps) + ". Fix: " + fix + ", then reboot.")

    # -- cuFile ------------------------------------------------------------------------------
    def cufile(self) -> None:
        cf = self.f.get("cufile") or {}
        path = cf.get("path") or "/etc/cufile.json"
        if not cf.get("present"):
            self.add("cufile.json.valid", FAIL, f"{path} present and valid", "missing",
                     f"{path} does not exist: run the gdsfleet.gds.cufile role.")
        elif not cf.get("valid"):
            self.add("cufile.json.valid", FAIL, f"{path} present and valid",
                     str(cf.get("error")), f"Fix {path}: {cf.get('error')}.")
        elif cf.get("unknown_keys"):
            sug = cf.get("suggestions") or {}
            items = ", ".join(f"{k}" + (f" (did you mean {sug[k]}?)" if k in sug else "")
                              for k in cf["unknown_keys"])
            self.add("cufile.json.valid", WARN, "only known keys", f"unknown: {items}",
                     "cuFile ignores unknown keys: rename or remove them.")
        elif cf.get("type_errors"):
            self.add("cufile.json.valid", WARN, "values of the documented types",
                     "; ".join(cf["type_errors"]),
                     "Fix these values (the gdsfleet.gds.cufile role validates them the same way).")
        else:
            self.add("cufile.json.valid", PASS, f"{path} present and valid", "valid",
                     "cufile.json parses" + (" (after stripping comments)." if cf.get(
                         "had_comments") else "."))
        if not cf.get("valid"):
            self.add("cufile.compat_mode", SKIP, "allow_compat_mode false", "no valid file",
                     "Skipped: cufile.json is missing or invalid.")
        elif cf.get("force_compat_mode"):
            self.add("cufile.compat_mode", FAIL, "force_compat_mode false",
                     "force_compat_mode true",
                     "force_compat_mode sends all I/O through the CPU: set it false.")
        elif self.p.require_allow_compat_false and cf.get("allow_compat_mode"):
            self.add("cufile.compat_mode", FAIL, "allow_compat_mode false",
                     "allow_compat_mode true",
                     "With allow_compat_mode true a broken node silently runs through the CPU. "
                     "Set properties.allow_compat_mode false (gdsfleet.gds.cufile role).")
        else:
            self.add("cufile.compat_mode", PASS,
                     "allow_compat_mode false" if self.p.require_allow_compat_false else
                     "force_compat_mode false",
                     f"allow_compat_mode {str(cf.get('allow_compat_mode')).lower()}",
                     "cuFile cannot silently fall back to POSIX." if not cf.get(
                         "allow_compat_mode") else "Compat fallback allowed by policy.")
        lib = self.f.get("libcufile") or {}
        pk = self.f.get("packages") or {}
        if lib.get("found") or pk.get("libcufile"):
            where = ", ".join(sorted(pk.get("libcufile") or {})) or ", ".join(lib.get("paths", []))
            self.add("libcufile.present", PASS, "libcufile installed", where,
                     "libcufile is installed.")
        elif self.operator:
            self.operator_skip("libcufile.present", "libcufile installed",
                               "no host CUDA: libcufile comes with the workload's CUDA container "
                               "image (and with the verification runtime's kvikio for the I/O "
                               "test).")
        else:
            self.add("libcufile.present", FAIL, "libcufile installed", "not found",
                     "Install libcufile-X-Y from the CUDA repository (gdsfleet.gds.cuda role).")
        look = pk.get("distro_lookalikes") or []
        if look:
            self.add("packages.gds", WARN, "CUDA repository GDS packages",
                     ", ".join(look),
                     "Packages from the distribution's own archive are installed: remove them "
                     "and use the CUDA repository's -X-Y packages.")
        elif pk.get("nvidia_gds") or pk.get("gds_tools"):
            names = sorted({**(pk.get("nvidia_gds") or {}), **(pk.get("gds_tools") or {})}.items())
            self.add("packages.gds", PASS, "CUDA repository GDS packages",
                     ", ".join(f"{k}={v}" for k, v in names), "GDS packages are installed.")
        elif self.operator:
            self.operator_skip("packages.gds", "CUDA repository GDS packages",
                               "the GPU Operator brings nvidia-fs and the workloads bring CUDA "
                               "and cuFile; no host GDS packages are expected.")
        elif pk.get("manager"):
            self.add("packages.gds", WARN, "CUDA repository GDS packages", "none found",
                     "No nvidia-gds-X-Y / gds-tools-X-Y package is installed: run the "
                     "gdsfleet.gds.cuda role.")
        else:
            self.add("packages.gds", SKIP, "CUDA repository GDS packages", "no package manager",
                     "Skipped: neither dpkg-query nor rpm is available.")

    # -- filesystem --------------------------------------------------------------------------
    def filesystem(self) -> None:
        st = self.f.get("storage") or {}
        path = self.io_path or self.p.gds_mount
        mounts = st.get("mounts") or []
        m = storage.mount_for(path, mounts) if mounts else None
        if m is None or m.get("target") == "/":
            self.add("fs.mount.present", FAIL, f"a filesystem mounted at {path}",
                     "not mounted" if m is None else "only the root filesystem",
                     f"Mount the NVMe filesystem at {path} (gdsfleet.gds.nvme role), or point the "
                     "I/O test elsewhere with --io-path.")
            for cid in ("fs.mount.type", "fs.mount.options", "fs.mount.nvme",
                        "fs.mount.transport"):
                self.add(cid, SKIP, "a GDS mount", "not mounted", "Skipped: no GDS mount.")
            return
        self.add("fs.mount.present", PASS, f"a filesystem mounted at {path}",
                 f"{m['source']} on {m['target']} ({m['fstype']})", "GDS mount present.")
        fstype = m["fstype"]
        if fstype in self.p.allowed_filesystems:
            self.add("fs.mount.type", PASS, " or ".join(self.p.allowed_filesystems), fstype,
                     "Filesystem type supported by GDS.")
        else:
            self.add("fs.mount.type", FAIL, " or ".join(self.p.allowed_filesystems), fstype,
                     f"{fstype} only runs in compat mode: reformat as XFS or ext4 "
                     "(data=ordered).")
        opts = m.get("options") or []
        if fstype == "ext4":
            data = [o for o in opts if o.startswith("data=")]
            if "data=ordered" in data:
                self.add("fs.mount.options", PASS, "data=ordered", ",".join(opts),
                         "ext4 is mounted with an explicit data=ordered.")
            elif "data=journal" in data:
                self.add("fs.mount.options", FAIL, "data=ordered", ",".join(opts),
                         "ext4 with data=journal is not supported by GDS: remount with "
                         "data=ordered.")
            else:
                self.add("fs.mount.options", FAIL, "data=ordered", ",".join(opts),
                         "GDS needs ext4 mounted with an explicit data=ordered: add it to the "
                         "mount options in /etc/fstab and remount.")
        else:
            self.add("fs.mount.options", PASS, "no GDS-incompatible options", ",".join(opts),
                     "Mount options are acceptable.")
        devices = st.get("devices") or []
        if storage.is_nvme_source(m["source"], devices):
            self.add("fs.mount.nvme", PASS, "backed by NVMe", m["source"], "Mount is on NVMe.")
        else:
            self.add("fs.mount.nvme", WARN, "backed by NVMe", m["source"],
                     "The mount is not on an NVMe device: local GDS needs NVMe (or md RAID0 over "
                     "NVMe).")
        self.transport(m)

    def gds_mount(self) -> dict[str, Any] | None:
        """The mount that holds the I/O path (or the policy's GDS mount), None for none or /."""
        st = self.f.get("storage") or {}
        mounts = st.get("mounts") or []
        m = storage.mount_for(self.io_path or self.p.gds_mount, mounts) if mounts else None
        return None if m is None or m.get("target") == "/" else m

    def mount_paths(self, m: dict[str, Any]) -> list[dict[str, str]]:
        """The NVMe controller paths under mount ``m`` (storage.mount_transports)."""
        st = self.f.get("storage") or {}
        info = [i for i in st.get("mountinfo") or [] if i.get("target") == m["target"]]
        devno = info[-1]["devno"] if info else None
        mp = str(((self.f.get("nvme") or {}).get("multipath")) or "Y").upper() != "N"
        return storage.mount_transports(m["source"], devno, st.get("nvme_topology") or {}, mp)

    def nvme_patched(self) -> None:
        """nvfs.nvme.patched: the nvme driver nvidia-fs registers with is the GDS-patched one,
        for the transport under the GDS mount: nvme_v1/v2_register_nvfs_dma_ops for local PCIe
        NVMe, nvme_rdma_v1_register_nvfs_dma_ops for NVMe-oF over RDMA (NVIDIA/gds-nvidia-fs
        src/nvfs-dma.c). With no mount or no visible controller, the local one is required."""
        cid = "nvfs.nvme.patched"
        ks = self.f.get("kallsyms") or {}
        m = self.gds_mount()
        kinds = {p["transport"] for p in self.mount_paths(m)} if m else set()
        need_local = not kinds or bool(kinds - {"rdma"})
        need_rdma = "rdma" in kinds
        local_sym, rdma_sym = ("nvme_v1/v2_register_nvfs_dma_ops",
                               "nvme_rdma_v1_register_nvfs_dma_ops")
        expected = (f"{local_sym} and {rdma_sym}" if need_local and need_rdma else
                    f"{rdma_sym} (NVMe-oF mount)" if need_rdma else local_sym) + " in kallsyms"
        local, rdma = ks.get("nvfs_dma_ops"), ks.get("nvfs_rdma_dma_ops")
        missing = ([] if local or not need_local else ["local"]) + (
            [] if rdma or not need_rdma else ["rdma"])
        observed = ", ".join(str(x) for x in (local if need_local else None,
                                               rdma if need_rdma else None) if x)
        if not missing:
            self.add(cid, PASS, expected, observed,
                     "The NVMe driver" + (" for NVMe-oF (nvme-rdma)" if need_rdma else "")
                     + " is the GDS-patched one (MOFED/DOCA).")
        elif not ks.get("readable", True):
            self.add(cid, WARN, expected, "/proc/kallsyms unreadable",
                     "Could not read /proc/kallsyms.")
        elif missing == ["local"]:
            self.add(cid, FAIL, expected, "absent",
                     "The loaded nvme driver is not GDS-patched, so local NVMe I/O can only run in "
                     "compat mode. Install DOCA's mlnx-nvme-dkms (or MLNX_OFED with --with-nvmf), "
                     "rebuild the initramfs and reboot; or switch the node to the p2pdma route.")
        else:
            self.add(cid, FAIL, expected,
                     (observed + "; " if observed else "") + f"no {rdma_sym}",
                     f"The GDS mount {m['target'] if m else ''} is on NVMe-oF (rdma), but the "
                     "loaded nvme-rdma is not GDS-patched (nvidia-fs registers with "
                     "nvme_rdma_v1_register_nvfs_dma_ops for fabrics), so its I/O can only run "
                     "in compat mode"
                     + (" and local NVMe is not patched either" if "local" in missing else "")
                     + ". Install DOCA's mlnx-nvme-dkms (or MLNX_OFED with --with-nvmf), reload "
                     "nvme-rdma (or reboot) and reconnect.")

    def transport(self, m: dict[str, Any]) -> None:
        """fs.mount.transport: the NVMe transport of every controller path under the GDS
        mount (mountinfo device number -> /dev/nvmeXnY or md members -> /sys/class/nvme)."""
        cid, expected = "fs.mount.transport", "NVMe over " + " or ".join(
            storage.GDS_NVME_TRANSPORTS)
        paths = self.mount_paths(m)
        if not paths:
            self.add(cid, SKIP, expected, "no NVMe controller visible",
                     f"Skipped: no NVMe controller found under {m['source']} (/sys/class/nvme).")
            return
        seen = "; ".join(f"{p['transport']} ({p['namespace']} via {p['controller']}"
                         + (f" {p['address']}" if p["address"] else "") + ")" for p in paths)
        kinds = {p["transport"] for p in paths}
        arrays = sorted({p["md"] for p in paths if p.get("md")})
        if "tcp" in kinds:
            self.add(cid, FAIL, expected, seen,
                     "GDS does not work over NVMe/TCP: cuFile only reaches this mount in compat "
                     "mode (POSIX through the page cache). Connect the subsystem over RDMA "
                     "(gdsfleet.gds.nvmeof, transport rdma) and put the GDS filesystem on that "
                     "namespace, or use local NVMe.")
        elif self.target == "p2pdma" and ("rdma" in kinds or arrays):
            # NVIDIA's P2PDMA guide: neither NVMe-oF nor RAID0 over NVMe is supported there
            what = " and ".join(
                (["NVMe-oF (rdma)"] if "rdma" in kinds else [])
                + ([f"md RAID ({', '.join(arrays)})"] if arrays else []))
            self.add(cid, FAIL, "one local PCIe NVMe namespace (p2pdma route)", seen,
                     f"The p2pdma route does not support {what} (NVIDIA's GDS P2PDMA guide): "
                     "cuFile cannot reach this mount over PCI P2PDMA. Put the GDS filesystem on "
                     "a single local PCIe NVMe namespace, or use the nvfs route (nvidia-fs), "
                     "which supports NVMe-oF over RDMA and md RAID0.")
        elif kinds <= set(storage.GDS_NVME_TRANSPORTS):
            self.add(cid, PASS, expected, seen, "The GDS mount is on a transport GDS supports.")
        else:
            self.add(cid, WARN, expected, seen,
                     "The GDS mount is on an NVMe transport GDS does not document "
                     f"({', '.join(sorted(kinds))}): use local PCIe NVMe or NVMe over RDMA.")

    # -- gdscheck, platform -----------------------------------------------------------------
    def gdscheck(self) -> None:
        gc = self.f.get("gdscheck") or {}
        parsed = gc.get("parsed")
        if not gc.get("found") and self.operator:
            self.operator_skip("gdscheck.present", "gdscheck installed",
                               "no host CUDA, so no host gdscheck (it ships in CUDA container "
                               "images); the route comes from nvidia_fs and the kernel symbols, "
                               "the proof from the I/O test.")
        elif not gc.get("found"):
            self.add("gdscheck.present", WARN, "gdscheck installed", "not found",
                     "Install gds-tools-X-Y (gdscheck lives in /usr/local/cuda/gds/tools/).")
        elif parsed is None:
            self.add("gdscheck.present", WARN, "gdscheck -p output", f"rc={gc.get('rc')}",
                     f"gdscheck -p produced no output: {gc.get('error') or ''}".strip())
        else:
            self.add("gdscheck.present", PASS, "gdscheck -p output",
                     f"GDS {parsed.get('gds_version')}", "gdscheck -p ran.")
        nvme = _gc_nvme(self.f)
        gc_errors = (parsed or {}).get("errors") or []
        if nvme is None and gc_errors:
            self.add("gdscheck.nvme", FAIL, "NVMe direct route", "; ".join(gc_errors)[:300],
                     "gdscheck could not initialise cuFile, so no direct route is usable: "
                     + gc_errors[0] + " (see the failing nvfs.* / p2pdma.* checks).")
        elif nvme is None:
            self.add("gdscheck.nvme", SKIP, "NVMe direct route", "no NVMe line",
                     "Skipped: no gdscheck DRIVER CONFIGURATION to read.")
        elif nvme.get("direct"):
            want = self.target
            got = nvme.get("route")
            if want and got in DIRECT_ROUTES and got != want:
                self.add("gdscheck.nvme", FAIL, f"NVMe: {want}", str(nvme.get("raw")),
                         f"gdscheck reports the {got} route, the policy expects {want}.")
            else:
                self.add("gdscheck.nvme", PASS, "NVMe direct route",
                         f"NVMe : {nvme.get('raw')}" + (
                             f"; NVMe P2PDMA : {nvme.get('p2pdma_raw')}"
                             if nvme.get("p2pdma_raw") else ""),
                         "gdscheck reports a direct NVMe route (not proof that I/O uses it: see "
                         "io.direct_path).")
        else:
            self.add("gdscheck.nvme", FAIL, "NVMe direct route", f"NVMe : {nvme.get('raw')}",
                     "gdscheck sees no direct NVMe route, so I/O falls back to compat: on the nvfs "
                     "route load nvidia_fs and install the GDS-patched nvme driver; on the "
                     "p2pdma route enable the p2pdma prerequisites.")
        if parsed and parsed.get("verification_succeeded") and nvme and not nvme.get("direct"):
            self.add("gdscheck.platform", WARN, "direct NVMe route",
                     "Platform verification succeeded, NVMe not direct",
                     "'Platform verification succeeded' only says the platform is capable; the "
                     "storage route is not active.")
        iommu = self.f.get("iommu") or {}
        state = iommu.get("state")
        if state == "off":
            self.add("iommu.state", PASS, "off", "off", "IOMMU is off.")
        else:
            status = FAIL if self.p.iommu == "fail" and state in ("on", "pt") else WARN
            self.add("iommu.state", status, "off", str(state),
                     "IOMMU is "
                     + {"pt": "in pass-through", "on": "on"}.get(str(state), "in an unknown state")
                     + ": GDS P2P traffic may fail or slow down. Boot with intel_iommu=off / "
                     "amd_iommu=off (iommu=pt works on some platforms).")
        acs = (parsed or {}).get("acs_warnings") or []
        if acs:
            self.add("pcie.acs", WARN, "ACS disabled on PCIe switches", "; ".join(acs)[:300],
                     "ACS on PCIe switch ports redirects P2P traffic through the root complex: "
                     "disable it in the BIOS or with setpci.")
        elif parsed:
            self.add("pcie.acs", PASS, "ACS disabled on PCIe switches", "no ACS warning",
                     "gdscheck reports no ACS.")
        else:
            self.add("pcie.acs", SKIP, "ACS disabled on PCIe switches", "no gdscheck",
                     "Skipped: no gdscheck output.")

    # -- route, reboot, secure boot ----------------------------------------------------------
    def compat_gap(self) -> str:
        """route.expected on a compat node: which parts of GDS are there and what each direct
        route still lacks (a node with only CUDA's libcufile has no GDS stack to speak of)."""
        f = self.f
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
        if not ks.get("p2pdma_pgmap_ops"):
            missing.append("the kernel has no PCI P2PDMA (no p2pdma_pgmap_ops)")
        elif not cf.get("use_pci_p2pdma") or _block_nvme_p2pdma_off(cf):
            missing.append("cufile.json does not enable use_pci_p2pdma")
        if not gc.get("found"):
            missing.append("gdscheck (gds-tools) is not installed")
        elif (_gc_nvme(f) or {}).get("route") in ("compat", "unsupported"):
            missing.append("gdscheck reports no direct NVMe route")
        have = (f"Present: {', '.join(present)}, so cuFile runs in compat mode only (POSIX "
                "through the page cache). " if present else "")
        return (f"No direct GDS route on this node: {'; '.join(missing) or 'see below'}. {have}"
                "Run the rollout (site playbook) for the nvfs or p2pdma route; the failing "
                "nvfs.* / p2pdma.* checks say what to do.")

    def route_checks(self) -> None:
        want = self.p.expected_route
        if want == "any":
            ok = self.route in DIRECT_ROUTES
            expected = "nvfs or p2pdma"
        else:
            ok = self.route == want
            expected = want
        self.add("route.expected", PASS if ok else FAIL, expected, self.route,
                 f"The node is set up for the {self.route} route." if ok else
                 {"compat": self.compat_gap(),
                  "none": "No GDS stack on this node: run the rollout (site playbook)."}.get(
                      self.route, f"The node shows the {self.route} route, the policy wants "
                      f"{expected}."))
        rb = self.f.get("reboot") or {}
        if rb.get("required"):
            self.add("reboot.pending", FAIL if self.p.reboot_pending == "fail" else WARN,
                     "no pending reboot", "; ".join(rb.get("reasons") or []) or "marker present",
                     "A change waits for a reboot (/var/lib/gdsfleet/reboot-required): reboot the "
                     "node (the rollout does) and verify again.")
        else:
            self.add("reboot.pending", PASS, "no pending reboot", "none", "No reboot pending.")
        sb = self.f.get("secure_boot")
        if sb is None:
            self.add("secureboot.state", SKIP, "known", "mokutil absent",
                     "Skipped: mokutil not installed.")
        elif sb and self.target == "nvfs":
            self.add("secureboot.state", WARN, "DKMS modules can load", "Secure Boot enabled",
                     "Secure Boot is on: DKMS-built nvidia-fs and DOCA modules need MOK "
                     "enrolment to load.")
        else:
            self.add("secureboot.state", PASS, "DKMS modules can load",
                     "enabled" if sb else "disabled", "Secure Boot does not block the modules.")

    # -- I/O test ----------------------------------------------------------------------------
    def io_checks(self) -> None:
        io = self.io
        ev = io.evidence or {}
        detail = (f"path={io.path_taken}, proof={ev.get('proof')}, "
                  f"is_gds_available={ev.get('is_gds_available')}, "
                  f"write={io.write_gbps} GB/s, read={io.read_gbps} GB/s")
        clash = proof.disagreement(io, self.f)
        if io.path_taken == PATH_DIRECT and io.direct_proven and clash:
            self.add("io.direct_path", FAIL, "direct (proven)", detail,
                     f"Not proven: {clash}. Check the node by hand (nvidia-fs, the GPU, the "
                     "P2PDMA prerequisites) and verify again.")
        elif io.path_taken == PATH_DIRECT and io.direct_proven:
            self.add("io.direct_path", PASS, "direct (proven)", detail, io.reason)
        elif io.path_taken == PATH_DIRECT:
            self.add("io.direct_path", FAIL, "direct (proven)", detail,
                     "I/O succeeded with compat mode off but without proof: " + io.reason)
        elif io.path_taken == PATH_COMPAT:
            self.add("io.direct_path", FAIL, "direct (proven)", detail,
                     "I/O works only through POSIX (compat mode), so this node is NOT "
                     "GDS-compliant: " + io.reason)
        elif io.path_taken == PATH_FAILED:
            self.add("io.direct_path", FAIL, "direct (proven)", detail,
                     "The I/O test failed: " + io.reason)
        else:
            self.add("io.direct_path", FAIL if self.p.require_io_test else SKIP,
                     "direct (proven)", "skipped",
                     f"The I/O test did not run: {io.reason or 'disabled'}. "
                     + ("Without it the direct path is not proven." if self.p.require_io_test
                        else ""))
        if io.path_taken in (PATH_SKIPPED,):
            self.add("io.data_integrity", SKIP, "read-back equals written", "not run",
                     "Skipped: the I/O test did not run.")
        elif io.verified:
            self.add("io.data_integrity", PASS, "read-back equals written", "equal",
                     f"{io.bytes} bytes read back equal to the data written.")
        else:
            attempts = io.attempts or ()
            compared = any(a.get("stage") == "compare" for a in attempts)
            self.add("io.data_integrity", FAIL if compared else SKIP, "read-back equals written",
                     "differs" if compared else "no complete attempt",
                     "Data read back differs from the data written: check the drive and dmesg."
                     if compared else "Skipped: no attempt completed a read-back.")
        floors = []
        if self.p.min_write_gbps is not None:
            floors.append(("write", io.write_gbps, self.p.min_write_gbps))
        if self.p.min_read_gbps is not None:
            floors.append(("read", io.read_gbps, self.p.min_read_gbps))
        if not floors:
            self.add("io.throughput", SKIP, "no floor set",
                     f"write={io.write_gbps} read={io.read_gbps} GB/s",
                     "No throughput floor in the policy.")
        elif io.path_taken != PATH_DIRECT:
            self.add("io.throughput", SKIP, "direct-path throughput", io.path_taken,
                     "Skipped: no direct-path measurement.")
        else:
            low = [f"{n} {v} < {f}" for n, v, f in floors if v is None or v < f]
            self.add("io.throughput", FAIL if low else PASS,
                     ", ".join(f"{n} >= {f} GB/s" for n, _, f in floors),
                     f"write={io.write_gbps} read={io.read_gbps} GB/s",
                     ("Throughput below the policy floor: " + "; ".join(low) +
                      ". Check PCIe topology (GPU and NVMe under one switch), ACS and IOMMU.")
                     if low else "Throughput meets the policy.")
        # io.libcufile: the host's libcufile ran the test, the wheel beside it is its release.
        status, actual, why = iotest.libcufile_verdict(
            ev.get("libcufile"), io.path_taken in (PATH_DIRECT, PATH_COMPAT))
        self.add("io.libcufile", {"pass": PASS, "fail": FAIL}.get(status, SKIP),
                 "host libcufile, wheel of the same release", actual, why)
        if io.path_taken != PATH_SKIPPED and ev.get("file_removed") is False:
            self.add("io.cleanup", WARN, "test file removed", str(ev.get("test_file")),
                     f"Remove the leftover test file {ev.get('test_file')}.")
        rw = ev.get("rw_stats") or {}
        if rw.get("restore_error"):
            self.add("io.rw_stats_restored", WARN, "rw_stats_enabled restored",
                     str(rw.get("after")),
                     f"Could not restore rw_stats_enabled to {rw.get('before')}: "
                     f"{rw.get('restore_error')}.")

    def run(self) -> list[CheckResult]:
        steps: list[Callable[[], None]] = [
            self.gpu, self.kernel, self.nvfs, self.boot_kernel, self.p2pdma, self.cufile,
            self.filesystem,
            self.gdscheck, self.route_checks, self.io_checks,
        ]
        for step in steps:
            step()
        return self.out


def evaluate(facts: dict[str, Any], io: IoTestResult, policy: Policy, *,
             route: str | None = None, io_path: str | None = None) -> tuple[
                 str, list[CheckResult], bool]:
    """(route, checks, compliant). Compliant only when no check fails and the I/O test proved
    the direct path."""
    route = route or determine_route(facts)
    checks = _Checks(facts, io, policy, route, io_path).run()
    io_ok = proof.counts(io, facts) or (not policy.require_io_test
                                        and io.path_taken == PATH_SKIPPED)
    compliant = route in DIRECT_ROUTES and io_ok and not any(c.status == FAIL for c in checks)
    return route, checks, compliant


__all__ = ["determine_route", "evaluate", "route_evidence", "stack_present"]
