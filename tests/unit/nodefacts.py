"""SYNTHETIC node states for the checks/policy tests: gather-script documents and I/O-test
documents in the exact shape the remote scripts print, built from a few knobs. Not captures."""

from __future__ import annotations

import json
from typing import Any

KERNEL = "6.1.0-18-amd64"

STATS = """GDS Version: 1.14.1.1
NVFS statistics(ver: 4.0)
NVFS Driver(version: 2.26.6)
Mellanox PeerDirect Supported: True
IO stats: {io}, peer IO stats: Disabled
Logging level: info

Active Shadow-Buffer (MiB): 0
Active Process: 0
Reads           : n={r} ok={r} err=0 readMiB={rm} io_state_err=0
Reads           : Bandwidth(MiB/s)=0 Avg-Latency(usec)=0
Sparse Reads    : n=0 io=0 holes=0 pages=0
Writes          : n={w} ok={w} err=0 writeMiB={wm} io_state_err=0 {pgc}
Writes          : Bandwidth(MiB/s)=0 Avg-Latency(usec)=0
Mmap            : n={m} ok={m} err=0 munmap={m}
Bar1-map        : n={m} ok={m} err=0 free={m} callbacks=0 active=0 delay-frees=0
Error           : cpu-gpu-pages=0 sg-ext=0 dma-map=0 dma-ref=0
Ops             : Read=0 Write=0 BatchIO=0
GPU 0000:41:00.0 uuid:0000 : Registered_MiB=0 Cache_MiB=0 max_pinned_MiB=0
"""


def stats(writes: int = 0, reads: int = 0, mmap: int = 0, io: str = "Enabled") -> str:
    return STATS.format(io=io, w=writes, wm=writes * 4, r=reads, rm=reads * 4, m=mmap,
                        pgc="pg-cache=0 pg-cache-fail=0 pg-cache-eio=0")


def _ok(out: str, **extra: Any) -> dict[str, Any]:
    return {"rc": 0, "out": out, "err": "", **extra}


def _missing() -> dict[str, Any]:
    return {"rc": None, "out": "", "err": "missing"}


def gather_doc(
    *,
    route: str = "nvfs",
    driver: str | None = "open",
    gpus: int = 1,
    nvfs_loaded: bool | None = None,
    patched_nvme: bool | None = None,
    p2pdma_kernel: bool | None = None,
    multipath: str | None = None,
    cufile: str | None = None,
    gdscheck_nvme: str | None = None,
    fstype: str = "xfs",
    mount_opts: str = "rw,noatime",
    mounted: bool = True,
    iommu: str = "off",
    reboot_reasons: list[str] | None = None,
    packages: str | None = None,
    registry_dwords: str | None = None,
    modprobe_lines: list[str] | None = None,
) -> dict[str, Any]:
    """A gather document for a node set up for ``route`` (nvfs | p2pdma), with overrides."""
    nvfs_route = route == "nvfs"
    nvfs_loaded = nvfs_route if nvfs_loaded is None else nvfs_loaded
    patched_nvme = nvfs_route if patched_nvme is None else patched_nvme
    p2pdma_kernel = (route == "p2pdma") if p2pdma_kernel is None else p2pdma_kernel
    multipath = ("N" if route == "p2pdma" else "Y") if multipath is None else multipath
    if cufile is None:
        p2p = "true" if route == "p2pdma" else "false"
        cufile = (
            "{\n  // rendered by gdsfleet.gds.cufile\n"
            f'  "properties": {{"allow_compat_mode": false, "use_pci_p2pdma": {p2p}}},\n'
            f'  "block": {{"nvme": {{"use_pci_p2pdma": {p2p}}}}},\n'
            '  "logging": {"level": "ERROR"}\n}\n'
        )
    if gdscheck_nvme is None:
        gdscheck_nvme = {"nvfs": "nvfs, compat", "p2pdma": "p2pdma, compat"}.get(route, "compat")
    items: dict[str, Any] = {}
    items["os_release"] = _ok('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                              'VERSION_ID="12"\n')
    items["kernel_release"] = _ok(KERNEL)
    items["machine"] = _ok("x86_64")
    items["hostname"] = _ok("gpu-01")
    items["python"] = _ok("3.11.2")
    if driver:
        flavor = ("NVIDIA UNIX Open Kernel Module for x86_64" if driver == "open"
                  else "NVIDIA UNIX x86_64 Kernel Module")
        items["nvidia_version"] = _ok(f"NVRM version: {flavor}  570.133.20  Release Build\n")
        items["modinfo_license"] = _ok("Dual MIT/GPL\n" if driver == "open" else "NVIDIA\n")
        items["nvidia_module"] = _ok("{}", version="570.133.20")
        lines = [f"{i}, NVIDIA H100 80GB HBM3, 00000000:{0x19 + i:02X}:00.0, 570.133.20, GPU-{i}"
                 for i in range(gpus)]
        items["nvidia_smi_query"] = _ok("\n".join(lines) + "\n")
        items["nvidia_smi_L"] = _ok("".join(
            f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(gpus)))
    else:
        for k in ("nvidia_version", "nvidia_module"):
            items[k] = _missing()
        items["modinfo_license"] = {"rc": 1, "out": "", "err": "modinfo: ERROR: Module nvidia "
                                    "not found."}
        items["nvidia_smi_L"] = {"rc": None, "out": "", "err": "not found"}
        items["nvidia_smi_query"] = {"rc": None, "out": "", "err": "not found"}
    items["nvidia_gpus_information"] = _missing()
    if nvfs_loaded:
        params = {"rw_stats_enabled": {"value": "0", "writable": True},
                  "max_devices": {"value": "16", "writable": False}}
        items["nvfs_module"] = _ok(json.dumps(params), version="2.26.6")
        items["nvfs_version"] = _ok("version: 2.26\n")
        items["nvfs_stats"] = _ok(stats(io="Disabled"))
        items["nvfs_devcount"] = _ok("16\n")
        items["nvfs_modules_load"] = _ok("nvidia_fs\n")
    else:
        for k in ("nvfs_module", "nvfs_version", "nvfs_stats", "nvfs_devcount",
                  "nvfs_modules_load"):
            items[k] = _missing()
    items["modinfo_nvfs_version"] = _ok("2.26.6\n") if route == "nvfs" else {
        "rc": 1, "out": "", "err": "not found"}
    ks = []
    if patched_nvme:
        ks += ["0000000000000000 T nvme_v1_register_nvfs_dma_ops\t[nvme]"]
    if p2pdma_kernel:
        ks += ["0000000000000000 d p2pdma_pgmap_ops"]
    items["kallsyms"] = _ok("\n".join(ks))
    items["nvme_multipath"] = _ok(multipath + "\n")
    items["nvme_module"] = _ok("{}")
    cmd = {"off": "ro quiet intel_iommu=off", "pt": "ro quiet iommu=pt",
           "on": "ro quiet intel_iommu=on"}[iommu]
    items["cmdline"] = _ok(cmd + "\n")
    items["iommu_class"] = _ok("" if iommu == "off" else "dmar0\ndmar1")
    items["cufile_json"] = ({"rc": 0, "out": cufile, "err": "", "path": "/etc/cufile.json",
                             "env_override": False}
                            if cufile != "MISSING" else
                            {"rc": None, "out": "", "err": "missing", "path": "/etc/cufile.json",
                             "env_override": False})
    items["libcufile"] = _ok("/usr/local/cuda-12.9/targets/x86_64-linux/lib/libcufile.so.0")
    if packages is None:
        packages = ("cuda-toolkit-12-9\t12.9.1-1\tii \nnvidia-gds-12-9\t12.9.1-1\tii \n"
                    "libcufile-12-9\t1.14.1.1-1\tii \ngds-tools-12-9\t1.14.1.1-1\tii \n")
        if route == "nvfs":
            packages += ("nvidia-fs\t2.26.6-1\tii \nnvidia-fs-dkms\t2.26.6-1\tii \n"
                         "doca-ofed\t2.9.1-1\tii \nmlnx-nvme-dkms\t24.10-1\tii \n")
    items["packages"] = _ok(packages, manager="dpkg")
    items["dkms_status"] = _ok(f"nvidia-fs/2.26.6, {KERNEL}, x86_64: installed\n"
                               if route == "nvfs" else "")
    items["ofed_info"] = (_ok("OFED-internal-24.10-1.1.4:\n") if route == "nvfs"
                          else {"rc": None, "out": "", "err": "not found"})
    items["mokutil_sb_state"] = _ok("SecureBoot disabled\n")
    mounts = "/dev/sda1 / ext4 rw,relatime 0 0\nproc /proc proc rw 0 0\n"
    if mounted:
        mounts += f"/dev/nvme0n1 /mnt/gds {fstype} {mount_opts} 0 0\n"
    items["mounts"] = _ok(mounts)
    items["lsblk"] = _ok(json.dumps({"blockdevices": [
        {"name": "sda", "tran": "sata", "type": "disk", "children": [{"name": "sda1"}]},
        {"name": "nvme0n1", "tran": "nvme", "type": "disk", "fstype": fstype,
         "mountpoint": "/mnt/gds" if mounted else None}]}))
    items["reboot_required"] = (_ok("\n".join(reboot_reasons) + "\n") if reboot_reasons
                                else _missing())
    gc = (
        " GDS release version: 1.16.0.49\n nvidia_fs version:  2.26 nvidia_fs minimum version: "
        "2.12\n Platform: x86_64\n ============\n ENVIRONMENT:\n ============\n"
        " =====================\n DRIVER CONFIGURATION:\n =====================\n"
        f" NVMe               : {gdscheck_nvme}\n NVMeOF             : compat\n"
        " =========\n GPU INFO:\n =========\n GPU index 0 NVIDIA H100 80GB HBM3 bar:1 bar size "
        "(MiB):131072 supports GDS, IOMMU State: Disabled\n ==============\n PLATFORM INFO:\n"
        " ==============\n"
        + (" IOMMU: disabled\n" if iommu == "off" else " IOMMU: Pass-through or enabled\n")
        + " Platform verification succeeded\n"
    )
    items["gdscheck"] = {"rc": 0, "out": gc, "err": "",
                         "argv": ["/usr/local/cuda-12.9/gds/tools/gdscheck", "-p"]}
    # p2pdma module options: running (/proc/driver/nvidia/params) and configured (modprobe.d);
    # by default a p2pdma node has them in effect, an nvfs node has none.
    p2p_dwords = "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"
    if registry_dwords is None:
        registry_dwords = p2p_dwords if route == "p2pdma" else ""
    if driver:
        items["nvidia_params"] = _ok(
            "EnableStreamMemOPs: 0\nOpenRmEnableUnsupportedGpus: 1\n"
            f'RegistryDwords: "{registry_dwords}"\nRegistryDwordsPerDevice: ""\n')
    else:
        items["nvidia_params"] = _missing()
    if modprobe_lines is None:
        own = "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"
        modprobe_lines = ([f"{own}:options nvme_core multipath=N",
                           f'{own}:options nvidia NVreg_RegistryDwords="{p2p_dwords}"']
                          if route == "p2pdma" else [])
    files = sorted({line.split(":", 1)[0] for line in modprobe_lines})
    items["modprobe_options"] = _ok(json.dumps({"files": files, "options": modprobe_lines}),
                                    kind="probe")
    return {"gdsfleet_gather": 1, "items": items}


def attempt(mode: str, *, ok: bool = True, error: str | None = None, stage: str | None = None,
            write_s: float = 0.25, read_s: float = 0.2, size: int = 1 << 30,
            gds_available: bool = True) -> dict[str, Any]:
    env = {"KVIKIO_COMPAT_MODE": mode}
    if mode == "OFF":
        env["CUFILE_ALLOW_COMPAT_MODE"] = "false"
        env["KVIKIO_GDS_THRESHOLD"] = "4096"
    return {
        "gds_threshold": 4096 if mode == "OFF" else 16384,
        "mode": mode, "ok": ok, "stage": stage or ("done" if ok else "open_write"),
        "error": error, "bytes": size, "verified": ok, "write_s": write_s if ok else None,
        "read_s": read_s if ok else None, "env": env, "cupy_version": "14.2.0",
        "kvikio_version": "26.10.00", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
        "is_gds_available": gds_available, "libcufile_version": 1150100,
        "compat_mode_preferred": mode != "OFF",
    }


def stats_io(*, writes_n: int = 0, write_mib: int = 0, reads_n: int = 0, read_mib: int = 0,
             mmap: int = 0) -> str:
    """nvidia-fs stats (rw_stats on) with explicit n= and MiB counters."""
    return STATS.format(io="Enabled", w=writes_n, wm=write_mib, r=reads_n, rm=read_mib, m=mmap,
                        pgc="pg-cache=0 pg-cache-fail=0 pg-cache-eio=0")


# The driver-open lines of libcufile 1.15 as captured on the H100 (tests/fixtures/h100/), with
# the P2PDMA status of a working p2pdma node; the per-I/O markers follow (docs/checks.md).
_CUFILE_LOG_HEAD = "".join(
    f" 22-11-2026 15:16:4{i}:501 [pid=484 tid=484] INFO   {msg}\n" for i, msg in enumerate((
        "cufio_core:597 Loaded successfully  libcufile_ck.so",
        "cufio-drv:838 Is PCIP2PDMA Supported: {p2p} kernel Support: {p2p} "
        "pci_p2pdma_supported_cuda: 1 checkIfAllGPUsSupportP2PDMA(): {p2p}",
        "cufio-drv:250 DRIVER CONFIGURATION:",
        "cufio-drv:253 NVMe P2PDMA        : {p2p_s}",
        "cufio-drv:254 NVMe               : {nvfs_s}",
        "cufio_core:1070 CUFile initialization complete",
    )))


def cufile_log(mode: str, ios: int = 8) -> dict[str, Any]:
    """SYNTHETIC test-scoped cuFile log as the node returns it (``cufile_log`` of the I/O
    document): ``mode`` p2pdma | nvfs | compat | silent (no per-I/O line)."""
    text = _CUFILE_LOG_HEAD.format(
        p2p=int(mode == "p2pdma"), p2p_s="Supported" if mode == "p2pdma" else "Unsupported",
        nvfs_s="Supported" if mode == "nvfs" else "Unsupported")
    if mode == "compat":
        text += (" 22-11-2026 15:16:49:890 [pid=484 tid=484] NOTICE  cufio:285 cuFileHandleRegister"
                 " GDS not supported or disabled by config, using cuFile posix read/write with "
                 "compat mode enabled\n")
    for i in range(ios if mode != "silent" else 0):
        flag = {"p2pdma": "p2p mode: 1 compat: 0", "nvfs": "p2p mode: 0 compat: 0",
                "compat": "p2p mode: 0 compat: 1"}[mode]
        if mode == "nvfs":
            text += (" 22-11-2026 15:16:50:10 [pid=484 tid=490] DEBUG  cufio_core:2859 gds path "
                     "taken with ODIRECT fd: 37\n")
        text += (f" 22-11-2026 15:16:50:10 [pid=484 tid=490] TRACE  cufio_core:2964 write fd: 37 "
                 f"offset: {i << 22} length: 4194304 {flag}\n")
    return {"files": ["cufile_484_2026-11-22.15:16:47.log"], "bytes": len(text),
            "lines_dropped": 0, "text": text}


def io_doc(*, attempts: list[dict[str, Any]], before: str | None = None,
           after: str | None = None, after_compat: str | None = None, rw_during: str = "1",
           status: str = "ran", reason: str | None = None, size: int = 1 << 30,
           log: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "cufile_log": log,
        "cufile_scope": {"source": "/etc/cufile.json", "json": "/tmp/gdsfleet-iotest-x/cufile.json",
                         "log_dir": "/tmp/gdsfleet-iotest-x/log"} if log else None,
        "gdsfleet_iotest": 1, "status": status, "reason": reason, "path": "/mnt/gds",
        "size_bytes": size, "attempts": attempts,
        "rw_stats": {"present": before is not None, "before": "0", "writable": True,
                     "set_to": "1", "during": rw_during if before is not None else None,
                     "restore_error": None, "after": "0"},
        "stats_before": before, "stats_after_direct": after, "stats_after_compat": after_compat,
        "file": "/mnt/gds/.gdsfleet-iotest-abc.bin", "file_removed": True, "duration_s": 1.0,
    }


def direct_nvfs_io() -> dict[str, Any]:
    return io_doc(attempts=[attempt("OFF")], before=stats(mmap=3),
                  after=stats(writes=1024, reads=1024, mmap=4), log=cufile_log("nvfs"))


def gds_stats_text(*, read_mib: int = 1024, write_mib: int = 0, read_posix: int = 0,
                   write_posix: int = 256) -> str:
    """SYNTHETIC ``gds_stats -p PID -l 3`` output, in the layout of NVIDIA's sample
    (tests/fixtures/gds_stats/config-guide-gdsio-read.yml): one GPU's counters."""
    def side(mib: int, posix: int, extra: str) -> str:
        n = max(mib // 4, posix)
        return f"bw=1.5 util(%)=90 n={n} posix={posix} unalign=0 {extra}err=0 MiB={mib}"
    return ("cuFile STATS VERSION : 3\nGLOBAL STATS:\nTotal Files: 1\nTotal Read Errors : 0\n"
            f"Total Read Size (MiB): {read_mib}\nTotal Write Errors : 0\n"
            f"Total Write Size (MiB): {write_mib}\nPER_GPU STATS:\n"
            f"GPU 0 Read: {side(read_mib, read_posix, 'r_sparse=0 r_inline=0 ')} "
            f"Write: {side(write_mib, write_posix, '')} BufRegister: n=2 err=0 free=0 MiB=2\n")


def direct_userspace_io(*, writes_direct: bool = False, read_posix: int = 0) -> dict[str, Any]:
    """SYNTHETIC direct attempt on WekaFS or Storage Scale: nvidia-fs's counters do not move
    (NVIDIA's troubleshooting guide), cuFile's own statistics count the test's 1 GiB of reads
    (and of writes when the filesystem's write key sends them over GDS; else POSIX writes)."""
    att = attempt("OFF")
    att["cufile_stats"] = {"tool": "/usr/local/cuda/gds/tools/gds_stats", "rc": 0, "err": "",
                           "out": gds_stats_text(write_mib=1024 if writes_direct else 0,
                                                 write_posix=0 if writes_direct else 256,
                                                 read_posix=read_posix)}
    return io_doc(attempts=[att], before=stats(mmap=3), after=stats(mmap=4))


def direct_p2pdma_io() -> dict[str, Any]:
    return io_doc(attempts=[attempt("OFF", gds_available=False)], log=cufile_log("p2pdma"))


def compat_io(error: str = "RuntimeError: cuFile error: GPUDirect Storage not supported on "
              "current file", *, with_stats: bool = False) -> dict[str, Any]:
    return io_doc(
        attempts=[attempt("OFF", ok=False, error=error, gds_available=False),
                  attempt("ON", write_s=0.8, read_s=0.55, gds_available=False)],
        before=stats() if with_stats else None, after=stats() if with_stats else None,
        after_compat=stats() if with_stats else None)


def skipped_io(missing: str, reason: str) -> dict[str, Any]:
    att = {"mode": "OFF", "ok": False, "stage": "import" if missing != "gpu" else "gpu",
           "error": reason, "missing": missing, "env": {"KVIKIO_COMPAT_MODE": "OFF"}}
    return io_doc(attempts=[att], status="skipped", reason=reason)
