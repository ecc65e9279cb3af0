"""nvidia-fs route checks (``nvfs.*``, ``mofed.*``): ``skip`` on the p2pdma route."""

from __future__ import annotations

from typing import Any

from provisioner.verify import iostats
from provisioner.verify.checks.evidence import vge
from provisioner.verify.checks.fs import gds_mount, mount_paths, network_gds_mount
from provisioner.verify.checks.registry import Context, Skip, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult
from provisioner.verify.parsers import nvfs_stats
from provisioner.verify.parsers.driver import version_tuple

NOT_P2PDMA: frozenset[str | None] = frozenset({None, "nvfs"})
_OFF_MESSAGE = "Skipped: the p2pdma route does not use nvidia-fs or MOFED/DOCA."
OFF_P2PDMA = Skip("n/a on p2pdma", "p2pdma route", _OFF_MESSAGE)


@check("nvfs.module.loaded", "nvidia_fs loaded", targets=NOT_P2PDMA, off_target=OFF_P2PDMA)
def module_loaded(ctx: Context) -> CheckResult:
    cid = "nvfs.module.loaded"
    n = ctx.f.get("nvfs") or {}
    if n.get("loaded"):
        return CheckResult(cid, PASS, "nvidia_fs loaded", "loaded",
                           "nvidia_fs is loaded (/sys/module/nvidia_fs)" + (
                               ", by the GPU Operator's driver container." if ctx.operator
                               else "."))
    if ctx.operator:
        osf = ctx.f.get("os") or {}
        if not operator_gds_supported(osf):
            # cloud-native-docs gpu-operator/platform-support.rst; gpu-operator#2911, #2416
            # (tests/fixtures/gpu-operator/gds_support.yml)
            return CheckResult(cid, FAIL, "nvidia_fs loaded", "not loaded",
                               "operator-managed node without nvidia_fs, and the GPU Operator's "
                               f"GDS is not supported on {osf.get('pretty_name') or 'this OS'}: "
                               "NVIDIA supports it on Ubuntu 22.04/24.04 and OpenShift only, and "
                               "elsewhere nvidia-fs-ctr crash-loops and the node loses its GPUs "
                               "(NVIDIA/gpu-operator#2911, #2416). Do not enable gds.enabled for "
                               "this node (/run/nvidia/validations/nvidia-fs-ready never "
                               "appears); install GDS on the host instead (playbooks/site.yml).")
        return CheckResult(cid, FAIL, "nvidia_fs loaded", "not loaded",
                           "operator-managed node without nvidia_fs: enable GDS in the GPU "
                           "Operator (gds.enabled, the gdsfleet.gds.gpu_operator playbook does) "
                           "and read the nvidia-fs-ctr container of the node's "
                           "nvidia-driver-daemonset pod (/run/nvidia/validations/nvidia-fs-ready "
                           "appears once it is loaded).")
    installed = n.get("installed_version")
    hint = (f"nvidia-fs {installed} is installed but not loaded: run `modprobe nvidia_fs` "
            "and check dmesg" if installed else
            "nvidia-fs is not installed for this kernel: run the gdsfleet.gds.nvidia_fs "
            "role (nvidia-fs-dkms) and check `dkms status`")
    return CheckResult(cid, FAIL, "nvidia_fs loaded", "not loaded", hint + ".")


def operator_gds_supported(osf: dict[str, Any]) -> bool:
    """Whether NVIDIA supports the GPU Operator's GDS on this OS: Ubuntu 22.04 and 24.04, and
    OpenShift's Red Hat CoreOS (os-release ID rhcos)."""
    osid, ver = str(osf.get("id") or "").lower(), str(osf.get("version_id") or "")
    return osid == "rhcos" or (osid == "ubuntu" and ver in ("22.04", "24.04"))


def version_check(n: dict[str, Any], minimum: str) -> CheckResult:
    """nvfs.version from the full x.y.z version when any source has it. /proc/driver/nvidia-fs/
    version prints major.minor only: with nothing better, a major.minor equal to the minimum's
    cannot be judged (2.17 may be 2.17.3 or 2.17.5), so it warns instead of failing."""
    cid = "nvfs.version"
    ver = n.get("version")
    src = n.get("version_source") or "unknown source"
    expected = f">= {minimum}"
    observed = f"{ver} ({src})" if ver else "unknown"
    if not ver:
        return CheckResult(cid, WARN, expected, observed,
                           "Could not read the nvidia-fs version (/sys/module/nvidia_fs/version, "
                           "the stats header, `modinfo -F version nvidia_fs`): check the module "
                           "by hand.")
    if nvfs_stats.is_major_minor_only(ver) and len(version_tuple(minimum)) > 2:
        have, want = version_tuple(ver)[:2], version_tuple(minimum)[:2]
        if have > want:
            return CheckResult(cid, PASS, expected, observed,
                               "nvidia-fs version meets the policy (major.minor from /proc).")
        if have == want:
            return CheckResult(cid, WARN, expected, observed,
                               f"Only major.minor ({ver}) is readable (/proc/driver/nvidia-fs/"
                               f"version); the patch level decides against {minimum}. Read it "
                               "with `modinfo -F version nvidia_fs` or `cat /sys/module/"
                               "nvidia_fs/version`.")
    if vge(ver, minimum):
        return CheckResult(cid, PASS, expected, observed, "nvidia-fs version meets the policy.")
    return CheckResult(cid, FAIL, expected, observed,
                       "Upgrade nvidia-fs (nvidia-fs-dkms from the CUDA repository) and reload "
                       "it.")


@check("nvfs.version", "nvidia-fs version at least the policy's", targets=NOT_P2PDMA,
       off_target=OFF_P2PDMA)
def version(ctx: Context) -> CheckResult:
    n = ctx.f.get("nvfs") or {}
    if not n.get("loaded"):
        return CheckResult("nvfs.version", SKIP, f">= {ctx.p.min_nvfs_version}", "not loaded",
                           "Skipped: nvidia_fs is not loaded.")
    return version_check(n, ctx.p.min_nvfs_version)


@check("nvfs.nvme.patched", "GDS-patched nvme driver for the mount's transport",
       targets=NOT_P2PDMA, off_target=OFF_P2PDMA)
def nvme_patched(ctx: Context) -> CheckResult:
    """The nvme driver exports the registration name the LOADED nvidia-fs looks up, for the
    transport under the GDS mount: nvme_v1_register_nvfs_dma_ops, or nvme_v2_... for nvidia-fs
    2.28.2+ built on a 6.17+ kernel, for local PCIe NVMe; nvme_rdma_v1_register_nvfs_dma_ops for
    NVMe-oF over RDMA (NVIDIA/gds-nvidia-fs src/nvfs-dma.c, modules_list). A driver exporting
    the other nvme name never registers: I/O goes through the CPU (NVIDIA/gds-nvidia-fs#87).
    With no mount or no visible controller, the local one is required."""
    cid = "nvfs.nvme.patched"
    net = network_gds_mount(ctx)
    if net:
        return CheckResult(cid, SKIP, "an NVMe driver under the GDS mount", net,
                           f"Skipped: the GDS mount is {net}, a network filesystem with no NVMe "
                           "under it (fs.mount.type judges its prerequisites).")
    ks = ctx.f.get("kallsyms") or {}
    m = gds_mount(ctx)
    kinds = {p["transport"] for p in mount_paths(ctx, m)} if m else set()
    need_local = not kinds or bool(kinds - {"rdma"})
    need_rdma = "rdma" in kinds
    lookup = ks.get("nvfs_lookup") or {}
    wanted = lookup.get("symbol")
    exported = list(ks.get("nvme_register_symbols")
                    or ([ks["nvfs_dma_ops"]] if ks.get("nvfs_dma_ops") else []))
    rdma_sym = "nvme_rdma_v1_register_nvfs_dma_ops"
    local_sym = wanted or "nvme_v1/v2_register_nvfs_dma_ops"
    expected = (f"{local_sym} and {rdma_sym}" if need_local and need_rdma else
                f"{rdma_sym} (NVMe-oF mount)" if need_rdma else local_sym) + " in kallsyms"
    local_ok = (wanted in exported) if wanted else bool(exported)
    rdma = ks.get("nvfs_rdma_dma_ops")
    missing = ([] if local_ok or not need_local else ["local"]) + (
        [] if rdma or not need_rdma else ["rdma"])
    observed = ", ".join(x for x in ((", ".join(exported) if need_local else None),
                                      rdma if need_rdma else None) if x)
    if not missing:
        return CheckResult(cid, PASS, expected, observed,
                           "The NVMe driver" + (" for NVMe-oF (nvme-rdma)" if need_rdma else "")
                           + " is the GDS-patched one (MOFED/DOCA)"
                           + (f" and exports {wanted}, the name the loaded nvidia-fs looks up "
                              f"({lookup.get('basis')})." if wanted and need_local else "."))
    if not ks.get("readable", True):
        return CheckResult(cid, WARN, expected, "/proc/kallsyms unreadable",
                           "Could not read /proc/kallsyms.")
    if "local" in missing and exported:
        other = ", ".join(exported)
        return CheckResult(cid, FAIL, expected, f"{other} (not {wanted})",
                           f"Name mismatch: the loaded nvidia-fs looks up {wanted} "
                           f"({lookup.get('basis')}), but the nvme driver exports {other}, so "
                           "nvme never registers with nvidia-fs and reads and writes go "
                           "through the CPU without an error (NVIDIA/gds-nvidia-fs#87). Install "
                           "an nvidia-fs and a DOCA/MLNX_OFED mlnx-nvme-dkms built for the same "
                           "registration name (both v1, or both v2 on kernels 6.17+ with "
                           "nvidia-fs 2.28.2+), reload them (or reboot) and verify again.")
    if missing == ["local"]:
        return CheckResult(cid, FAIL, expected, "absent",
                           "The loaded nvme driver is not GDS-patched, so local NVMe I/O can only "
                           "run in compat mode. Install DOCA's mlnx-nvme-dkms (or MLNX_OFED with "
                           "--with-nvmf), rebuild the initramfs and reboot; or switch the node to "
                           "the p2pdma route.")
    return CheckResult(cid, FAIL, expected,
                       (observed + "; " if observed else "") + f"no {rdma_sym}",
                       f"The GDS mount {m['target'] if m else ''} is on NVMe-oF (rdma), but the "
                       "loaded nvme-rdma is not GDS-patched (nvidia-fs registers with "
                       "nvme_rdma_v1_register_nvfs_dma_ops for fabrics), so its I/O can only run "
                       "in compat mode"
                       + (" and local NVMe is not patched either" if "local" in missing else "")
                       + ". Install DOCA's mlnx-nvme-dkms (or MLNX_OFED with --with-nvmf), "
                       "reload nvme-rdma (or reboot) and reconnect.")


@check("nvfs.registered", "nvidia-fs registered with the storage driver the I/O went through",
       targets=NOT_P2PDMA, off_target=OFF_P2PDMA)
def registered(ctx: Context) -> CheckResult:
    """/proc/driver/nvidia-fs/modules, read by the I/O test while it held nvidia-fs open (nvidia-fs
    probes its modules at every open: NVIDIA/gds-nvidia-fs src/nvfs-core.c nvfs_open): the
    driver under the I/O test's mount (nvme, nvme_rdma, or the network filesystem's client,
    rpcrdma, lnet, beegfs...) must be listed. A driver exporting the registration symbol can
    still be refused, silently: since Linux 6.6 ``__symbol_get()`` refuses a symbol not exported
    GPL-only (ThinkParQ/beegfs#123), and a v1/v2 name mismatch never registers
    (NVIDIA/gds-nvidia-fs#87); I/O then bounces through the CPU."""
    cid = "nvfs.registered"
    mods = (ctx.io.evidence or {}).get("nvfs_modules")
    m = gds_mount(ctx)
    kinds = [p["transport"] for p in mount_paths(ctx, m)] if m and not network_gds_mount(ctx) \
        else []
    want, what = iostats.expected_module(ctx.f, ctx.io_path or ctx.p.gds_mount, kinds)
    expected = f"{want} in /proc/driver/nvidia-fs/modules" if want else "n/a"
    if want is None:
        return CheckResult(cid, SKIP, expected, what, f"Skipped: {what}.")
    if mods is None:
        return CheckResult(cid, SKIP, expected, "not read",
                           "Skipped: the I/O test did not read /proc/driver/nvidia-fs/modules "
                           "(no direct attempt, nvidia-fs not loaded, or an older node script).")
    listed = ", ".join(mods) or "none"
    if want in mods:
        return CheckResult(cid, PASS, expected, listed,
                           f"nvidia-fs registered with {want} ({what}) while the I/O test ran.")
    return CheckResult(cid, FAIL, expected, listed,
                       f"nvidia-fs did not register with {want} ({what}): its I/O bounces "
                       "through the CPU without an error. The driver does not export the "
                       "registration symbol nvidia-fs looks up, exports it under the other name "
                       "(v1/v2: NVIDIA/gds-nvidia-fs#87), or, on kernels 6.6 and later, not "
                       "GPL-only (__symbol_get refuses it: ThinkParQ/beegfs#123, "
                       "NVIDIA/NV-Kernels#13). Install the driver built for this nvidia-fs "
                       "(DOCA's mlnx-nvme-dkms / mlnx-nfsrdma-dkms, BeeGFS 8.5 or later, the "
                       "filesystem vendor's GDS client), reload it and verify again.")


@check("nvfs.persist", "nvidia_fs loads at boot", targets=NOT_P2PDMA, off_target=OFF_P2PDMA,
       operator_skip=True)
def persist(ctx: Context) -> CheckResult:
    cid, expected = "nvfs.persist", "nvidia_fs in /etc/modules-load.d"
    persist = (ctx.f.get("nvfs") or {}).get("persist_file")
    if ctx.operator:
        return ctx.operator_skip(cid, expected,
                                 "the GPU Operator's driver container loads nvidia_fs at every "
                                 "boot; no modules-load.d entry on the host.")
    if persist is not None and "nvidia_fs" in persist.split():
        return CheckResult(cid, PASS, expected, "present", "nvidia_fs loads at boot.")
    return CheckResult(cid, WARN, expected,
                       "absent" if persist is None else "file without nvidia_fs",
                       "nvidia_fs may not load after a reboot: add it to "
                       "/etc/modules-load.d/nvidia_fs.conf (the nvidia_fs role does).")


@check("nvfs.dkms", "DKMS built nvidia-fs for the running kernel", targets=NOT_P2PDMA,
       off_target=OFF_P2PDMA, operator_skip=True)
def dkms(ctx: Context) -> CheckResult:
    cid = "nvfs.dkms"
    dk = ctx.f.get("dkms") or {}
    release = (ctx.f.get("kernel") or {}).get("release")
    if ctx.operator:
        return ctx.operator_skip(cid, f"nvidia-fs built for {release}",
                                 "nvidia-fs is built in the GPU Operator's driver container for "
                                 "the running kernel, not by host DKMS.")
    if not dk.get("available"):
        return CheckResult(cid, SKIP, "nvidia-fs built for the running kernel", "no dkms",
                           "Skipped: dkms is not installed (nvidia-fs may come from a kmod "
                           "package).")
    mods = [m for m in dk.get("modules") or [] if m.get("module") == "nvidia-fs"]
    built = [m for m in mods if m.get("kernel") == release and m.get("state") == "installed"]
    if built:
        return CheckResult(cid, PASS, f"nvidia-fs installed for {release}",
                           f"nvidia-fs/{built[0].get('version')}: installed",
                           "DKMS built nvidia-fs for the running kernel.")
    seen = "; ".join(f"{m.get('version')} {m.get('kernel')} {m.get('state')}"
                     for m in mods) or "no nvidia-fs entry"
    return CheckResult(cid, WARN, f"nvidia-fs installed for {release}", seen,
                       "DKMS has no nvidia-fs build for the running kernel: run "
                       f"`dkms autoinstall -k {release}` and check the build log before the next "
                       "reboot.")


@check("mofed.installed", "MOFED or DOCA-OFED installed", targets=NOT_P2PDMA,
       off_target=OFF_P2PDMA)
def mofed_installed(ctx: Context) -> CheckResult:
    of = ctx.f.get("ofed") or {}
    if of.get("version"):
        return CheckResult("mofed.installed", PASS, "MOFED or DOCA-OFED", f"{of.get('raw')}",
                           "MOFED/DOCA is installed.")
    nvfs_route = ctx.target == "nvfs"
    return CheckResult("mofed.installed", WARN if nvfs_route else SKIP,
                       "MOFED or DOCA-OFED", "ofed_info not found",
                       "The nvfs route needs the GDS-patched NVMe driver from DOCA (doca-ofed + "
                       "mlnx-nvme-dkms) or MLNX_OFED: run the gdsfleet.gds.mofed role."
                       if nvfs_route else "Skipped: route is not nvfs.")


_BOOT_EXPECTED = "nvidia-fs (and mlnx-nvme) built for the boot kernel"


@check("nvfs.dkms.boot_kernel", "GDS modules built for the kernel that boots next",
       targets=NOT_P2PDMA, off_target=Skip(_BOOT_EXPECTED, "p2pdma route", _OFF_MESSAGE),
       operator_skip=True)
def boot_kernel(ctx: Context) -> CheckResult:
    cid, expected = "nvfs.dkms.boot_kernel", _BOOT_EXPECTED
    boot = ctx.f.get("boot") or {}
    dk = ctx.f.get("dkms") or {}
    mods = dk.get("modules") or []
    nvfs = [m for m in mods if m.get("module") == "nvidia-fs"]
    kernel = boot.get("default")
    if ctx.operator:
        return ctx.operator_skip(cid, expected, "the GPU Operator's driver container builds "
                                 "nvidia-fs for whichever kernel boots; there is no host DKMS "
                                 "build to check.")
    if not kernel:
        return CheckResult(cid, SKIP, expected, "boot kernel unknown",
                           "Skipped: cannot tell which kernel boots next (no /boot/vmlinuz-*, no "
                           "grubby).")
    if not dk.get("available") or not nvfs:
        return CheckResult(cid, SKIP, expected, f"boot kernel {kernel}",
                           "Skipped: nvidia-fs is not a DKMS module on this node.")
    missing = []
    for name, entries in (("nvidia-fs", nvfs),
                          ("mlnx-nvme", [m for m in mods if m.get("module") == "mlnx-nvme"])):
        if entries and not any(m.get("kernel") == kernel and m.get("state") == "installed"
                               for m in entries):
            missing.append(name)
    observed = f"{kernel} ({boot.get('source')})"
    if not missing:
        return CheckResult(cid, PASS, expected, observed,
                           f"DKMS built the GDS modules for {kernel}, the kernel the node boots "
                           "next.")
    release = (ctx.f.get("kernel") or {}).get("release")
    headers_pkg = f"linux-headers-{kernel}" if (ctx.f.get("os") or {}).get(
        "family") != "redhat" else f"kernel-devel-{kernel}"
    return CheckResult(cid, WARN, expected, observed + ": no " + ", ".join(missing),
                       f"The node boots {kernel} next (running: {release}) and DKMS has no "
                       f"{' or '.join(missing)} built for it: after that reboot GDS I/O drops "
                       f"silently to compat mode. Install {headers_pkg} and run `dkms autoinstall "
                       f"-k {kernel}` (the nvidia_fs and mofed roles do this for every kernel with "
                       "headers), or make the running kernel the default boot entry.")
