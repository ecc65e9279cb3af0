# TEST STAND-IN (gdsfleet test harness): the simulated GPU/GDS "hardware" of a node container.
# Nothing here exists on a real node. It backs the stand-in tools of the node image (modprobe,
# nvidia-smi, mokutil, gdscheck, the kvikio/cupy modules) so that they present the REAL paths
# (/proc/driver/nvidia*, /sys/module/*, /proc/kallsyms, /proc/cmdline) the way a GPU node would.
# Pure Python 3 standard library (no numpy on the node).
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
import time

RUN = "/run/gdsfleet-sim"
PROFILE_FILE = RUN + "/profile.env"
PROFILES_DIR = "/etc/gdsfleet-sim/profiles"
READY = RUN + "/ready"
KALLSYMS = RUN + "/kallsyms"
CMDLINE = RUN + "/cmdline"
COUNTERS = RUN + "/nvfs-counters.json"
LOCK = RUN + "/lock"
NVFS_PROC = "/proc/driver/nvidia-fs"
NVIDIA_PROC = "/proc/driver/nvidia"
SYS_MODULE = "/sys/module"
NVFS_MAJOR = 241

DEFAULTS = {
    "SIM_GPU_DRIVER": "open",
    "SIM_GPU_DRIVER_VERSION": "570.133.20",
    "SIM_GPU_NAME": "NVIDIA H100 80GB HBM3",
    "SIM_GPU_COUNT": "2",
    "SIM_KERNEL_P2PDMA": "0",
    "SIM_NVME_MULTIPATH": "Y",
    "SIM_IOMMU": "off",
    "SIM_SECURE_BOOT": "0",
    "SIM_DKMS_BUILD": "ok",
    "SIM_DRIVER_SOURCES": "1",
    "SIM_DISTRO_KERNEL": "1",
    "SIM_OPERATOR": "0",
    "SIM_OPERATOR_NVFS_VERSION": "2.28.4",
    # nvme_core built into the simulated kernel (listed in modules.builtin): it never reads
    # modprobe.d, its parameters come only from the kernel command line.
    "SIM_NVME_CORE_BUILTIN": "0",
    # Kernel parameters the simulated firmware/boot loader adds after GRUB's (words of
    # [A-Za-z0-9_.=,-]), e.g. nvme_core.multipath=Y: a source the roles cannot edit.
    "SIM_KERNEL_CMDLINE": "",
}
ALLOWED = {
    "SIM_GPU_DRIVER": {"open", "proprietary", "none"},
    "SIM_KERNEL_P2PDMA": {"0", "1"},
    "SIM_NVME_MULTIPATH": {"Y", "N"},
    "SIM_IOMMU": {"off", "pt", "on"},
    "SIM_SECURE_BOOT": {"0", "1"},
    "SIM_DKMS_BUILD": {"ok", "fail"},
    "SIM_DRIVER_SOURCES": {"0", "1"},
    "SIM_DISTRO_KERNEL": {"0", "1"},
    "SIM_OPERATOR": {"0", "1"},
    "SIM_NVME_CORE_BUILTIN": {"0", "1"},
}
GPU_BDFS = ["0000:41:00.0", "0000:61:00.0", "0000:a1:00.0", "0000:c1:00.0",
            "0000:01:00.0", "0000:21:00.0", "0000:81:00.0", "0000:e1:00.0"]
NVFS_PARAMS = {"max_devices": "16", "dbg_enabled": "0", "info_enabled": "1",
               "rw_stats_enabled": "0", "peer_stats_enabled": "0",
               "use_legacy_p2p_allocation": "1"}
# nvidia-fs driver version -> the GDS release it was shipped with (src/GDS_VERSION).
NVFS_GDS_VERSION = {"2.24": "1.13.1.3", "2.25": "1.14.1.1", "2.26": "1.15.1.6"}
# Modules present on the simulated kernel (modprobe can load them); the first list is loaded
# at boot.
BOOT_MODULES = ["nvme", "nvme_core", "loop", "xfs", "ext4", "overlay", "md_mod", "dm_mod"]
AVAILABLE_MODULES = BOOT_MODULES + ["raid0", "raid1", "raid456", "nvme_fabrics", "nvme_rdma",
                                    "nvme_tcp", "ib_core", "mlx5_core", "mlx5_ib", "rdma_cm",
                                    "ib_uverbs", "br_netfilter"]


# ----------------------------------------------------------------------------- profile
def parse_env(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def resolve_profile(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Profile file named by GDSFLEET_SIM_PROFILE (default nvfs), then SIM_* overrides."""
    environ = dict(os.environ if environ is None else environ)
    name = environ.get("GDSFLEET_SIM_PROFILE") or "nvfs"
    path = os.path.join(PROFILES_DIR, name + ".env")
    if not os.path.isfile(path):
        raise SystemExit(f"gdsfleet-sim: unknown profile {name!r} (no {path})")
    prof = dict(DEFAULTS)
    with open(path) as fh:
        prof.update(parse_env(fh.read()))
    for key, value in environ.items():
        if key.startswith("SIM_"):
            prof[key] = value
    for key, allowed in ALLOWED.items():
        if prof.get(key) not in allowed:
            raise SystemExit(f"gdsfleet-sim: {key}={prof.get(key)!r} not in {sorted(allowed)}")
    if not re.fullmatch(r"[A-Za-z0-9_.=,\- ]*", prof.get("SIM_KERNEL_CMDLINE", "")):
        raise SystemExit("gdsfleet-sim: SIM_KERNEL_CMDLINE takes words of [A-Za-z0-9_.=,-]")
    if prof["SIM_GPU_DRIVER"] == "none":
        prof["SIM_GPU_COUNT"] = "0"
    prof["GDSFLEET_SIM_PROFILE"] = name
    return prof


_PROFILE: dict[str, str] | None = None


def profile() -> dict[str, str]:
    global _PROFILE
    if _PROFILE is None:
        try:
            with open(PROFILE_FILE) as fh:
                _PROFILE = dict(DEFAULTS) | parse_env(fh.read())
        except FileNotFoundError:
            _PROFILE = dict(DEFAULTS)
    return _PROFILE


def kernel() -> str:
    return os.uname().release


def arch() -> str:
    return os.uname().machine


@contextlib.contextmanager
def locked():
    os.makedirs(RUN, exist_ok=True)
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_in_place(path: str, text: str) -> None:
    """Truncate and rewrite (keeps the inode: bind mounts of the file stay valid)."""
    with open(path, "w") as fh:
        fh.write(text)


def read(path: str, default: str = "") -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return default


# ----------------------------------------------------------------------------- GPUs
def gpu_driver() -> str:
    return profile()["SIM_GPU_DRIVER"]


def driver_version() -> str:
    return profile()["SIM_GPU_DRIVER_VERSION"]


def cuda_driver_version() -> int:
    """The CUDA version the simulated driver supports (nvidia-smi 'CUDA Version')."""
    try:
        major = int(driver_version().split(".")[0])
    except ValueError:
        return 0
    for floor, cuda in ((580, 13000), (575, 12090), (570, 12080), (565, 12070), (560, 12060),
                        (555, 12050), (550, 12040), (545, 12030), (535, 12020)):
        if major >= floor:
            return cuda
    return 12000


SEED_FILE = "/var/lib/gdsfleet-sim/seed"


def machine_seed() -> str:
    """Per-container identity (GPU UUIDs): GDSFLEET_SIM_SEED, else a random one kept on disk."""
    seed = os.environ.get("GDSFLEET_SIM_SEED") or read(SEED_FILE).strip()
    if not seed:
        seed = hashlib.sha256(os.urandom(16)).hexdigest()[:16]
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(SEED_FILE), exist_ok=True)
            write_in_place(SEED_FILE, seed + "\n")
    return seed


def gpus() -> list[dict[str, object]]:
    prof = profile()
    if prof["SIM_GPU_DRIVER"] == "none":
        return []
    count = max(0, min(int(prof.get("SIM_GPU_COUNT") or 0), len(GPU_BDFS)))
    seed = machine_seed()
    out = []
    for i in range(count):
        h = hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()
        uuid = f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        name = prof.get("SIM_GPU_NAME") or "NVIDIA H100 80GB HBM3"
        mem = 81559 if "80GB" in name else (40960 if "40GB" in name else 46068)
        out.append({"index": i, "bdf": GPU_BDFS[i], "uuid": uuid, "name": name,
                    "memory_mib": mem, "bar1_mib": 131072 if "H100" in name else 65536,
                    "compute_cap": "9.0" if "H100" in name else "8.0"})
    return out


# ----------------------------------------------------------------------------- modules
def module_loaded(name: str) -> bool:
    return os.path.isdir(os.path.join(SYS_MODULE, name.replace("-", "_")))


def dkms_module_file(module: str) -> str:
    return f"/lib/modules/{kernel()}/updates/dkms/{module}.ko"


def dkms_module_info(module: str) -> dict[str, str] | None:
    """What the stand-in dkms installed for the running kernel (None when absent)."""
    text = read(dkms_module_file(module), "")
    if not text:
        return None
    return parse_env(text)


def nvfs_version() -> str | None:
    info = dkms_module_info("nvidia-fs")
    return info.get("version") if info else None


def running_nvfs_version() -> str | None:
    """The nvidia-fs that loads: the node's DKMS build, else (GPU Operator node) the driver
    container's, which the host cannot modprobe itself."""
    version = nvfs_version()
    if version is None and operator_managed() and gpu_driver() != "none":
        version = profile().get("SIM_OPERATOR_NVFS_VERSION") or "2.28.4"
    return version


def patched_nvme() -> bool:
    """True when a GDS-patched nvme driver (MLNX_OFED / DOCA mlnx-nvme-dkms) is in place."""
    return dkms_module_info("nvme") is not None


# kmod 30 (what the stand-in modprobe reports): these directories, in this order; one file per
# name (an earlier directory hides the same name later), read in the order of the names; a
# line ending in a backslash continues on the next; the kernel command line's module.param=
# after every file (kmod-project/kmod v30 libkmod/libkmod.c, libkmod-config.c).
KMOD_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/lib/modprobe.d")
GRUB_STATE = "/var/lib/gdsfleet-sim/grub-cmdline"
BUILTIN_MODULES = {"nvme_core": "kernel/drivers/nvme/host/nvme-core.ko"}


def builtin(module: str) -> bool:
    """Whether the simulated kernel has ``module`` built in (SIM_NVME_CORE_BUILTIN)."""
    name = module.replace("-", "_")
    return name == "nvme_core" and profile().get("SIM_NVME_CORE_BUILTIN", "0") == "1"


def _cmdline_params(module: str) -> dict[str, str]:
    """``module.k=v`` words of this boot's command line (written by the init before any module
    loads), in order."""
    want = module.replace("-", "_")
    text = read(CMDLINE) or cmdline_text()
    out: dict[str, str] = {}
    for word in text.split():
        name, eq, value = word.partition("=")
        mod, dot, param = name.partition(".")
        if dot and eq and mod.replace("-", "_") == want:
            out[param] = value.strip('"')
    return out


def modprobe_options(module: str) -> dict[str, str]:
    """The parameters kmod 30 gives ``module``: its `options` lines from the modprobe.d files,
    then the kernel command line's ``module.param=``; a built-in module only the latter."""
    opts: dict[str, str] = {}
    want = module.replace("-", "_")
    if builtin(want):
        return _cmdline_params(want)
    by_name: dict[str, str] = {}
    for directory in KMOD_DIRS:
        for path in sorted(glob.glob(directory + "/*.conf")):
            by_name.setdefault(os.path.basename(path), path)
    for name in sorted(by_name):
        text = read(by_name[name]).replace("\\\n", "")
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0].startswith("#"):
                continue
            if len(parts) >= 3 and parts[0] == "options" and parts[1].replace("-", "_") == want:
                for kv in parts[2:]:
                    k, _, v = kv.partition("=")
                    opts[k] = v.strip('"')
    opts.update(_cmdline_params(want))
    return opts


def _mkmod(name: str, version: str | None = None, params: dict[str, str] | None = None) -> None:
    base = os.path.join(SYS_MODULE, name)
    os.makedirs(base, exist_ok=True)
    write_in_place(base + "/initstate", "live\n")
    write_in_place(base + "/refcnt", "0\n")
    if version:
        write_in_place(base + "/version", version + "\n")
    if params:
        os.makedirs(base + "/parameters", exist_ok=True)
        for k, v in params.items():
            write_in_place(f"{base}/parameters/{k}", v + "\n")


MOK_ENROLLED = "/var/lib/gdsfleet-sim/mok-enrolled"
MOK_PENDING = RUN + "/mok-pending"


def secure_boot_blocks() -> bool:
    """Secure Boot on and no MOK enrolled: unsigned DKMS modules are rejected."""
    return profile()["SIM_SECURE_BOOT"] == "1" and not read(MOK_ENROLLED).strip()


def load_module(name: str, args: dict[str, str] | None = None) -> tuple[int, str]:
    """Simulated insmod. Returns (exit status, message for stderr)."""
    name = name.replace("-", "_")
    if module_loaded(name):
        return 0, ""
    rejected = (f"modprobe: ERROR: could not insert '{name}': Key was rejected by service")
    kr = kernel()
    notfound = f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{kr}"
    params = modprobe_options(name)
    params.update(args or {})
    if name == "nvidia_fs":
        version = nvfs_version()
        if version is None:
            return 1, notfound
        if secure_boot_blocks():
            return 1, rejected
        if not module_loaded("nvidia") or gpu_driver() != "open":
            return 1, ("modprobe: ERROR: could not insert 'nvidia_fs': Unknown symbol in module, "
                       "or unknown parameter (see dmesg)")
        values = dict(NVFS_PARAMS)
        for k, v in params.items():
            if k not in values:
                return 1, ("modprobe: ERROR: could not insert 'nvidia_fs': Unknown symbol in "
                           "module, or unknown parameter (see dmesg)")
            values[k] = v
        with locked():
            _mkmod("nvidia_fs", version, values)
            _nvfs_proc_create(version)
        return 0, ""
    if name in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"):
        if gpu_driver() == "none" or not driver_built_for_kernel():
            return 1, notfound
        _mkmod(name, driver_version())
        return 0, ""
    if name == "nvme" and patched_nvme():
        if secure_boot_blocks():
            return 1, rejected
        _mkmod(name, "1.0")
        if os.path.isdir(NVFS_PROC):  # a loaded nvidia-fs registers it at its next open
            write_in_place(NVFS_PROC + "/modules", "nvme: 1.0\n")
        return 0, ""
    if name in AVAILABLE_MODULES:
        if name == "nvme_core":
            mp = params.get("multipath", profile()["SIM_NVME_MULTIPATH"])
            mp = {"0": "N", "1": "Y", "n": "N", "y": "Y"}.get(mp, mp)
            _mkmod(name, None, {"multipath": mp})
        else:
            _mkmod(name)
        return 0, ""
    return 1, notfound


def unload_module(name: str) -> tuple[int, str]:
    name = name.replace("-", "_")
    path = os.path.join(SYS_MODULE, name)
    if not os.path.isdir(path):
        return 1, f"modprobe: FATAL: Module {name} is not in kernel."
    if name == "nvidia" and module_loaded("nvidia_fs"):
        return 1, "modprobe: FATAL: Module nvidia is in use."
    subprocess.run(["rm", "-rf", path], check=False)
    if name == "nvidia_fs":
        with locked():
            subprocess.run(["rm", "-rf", NVFS_PROC], check=False)
            for dev in glob.glob("/dev/nvidia-fs*"):
                with contextlib.suppress(OSError):
                    os.unlink(dev)
            with contextlib.suppress(OSError):
                os.unlink(COUNTERS)
    return 0, ""


# ----------------------------------------------------------------------------- kallsyms
_BASE_SYMS = [
    ("T", "startup_64"), ("T", "secondary_startup_64"), ("T", "_stext"), ("T", "do_one_initcall"),
    ("T", "printk"), ("T", "kmalloc_trace"), ("T", "kfree"), ("T", "vfs_read"),
    ("T", "vfs_write"), ("T", "do_sys_open"), ("T", "submit_bio"), ("T", "bio_alloc_bioset"),
    ("T", "blk_mq_start_request"), ("T", "dma_map_sg_attrs"), ("T", "dma_unmap_sg_attrs"),
    ("T", "iommu_map"), ("T", "pci_enable_device"), ("T", "pci_find_capability"),
    ("T", "pci_bus_read_config_dword"), ("T", "get_user_pages_fast"), ("T", "pin_user_pages"),
    ("T", "memremap_pages"), ("T", "devm_memremap_pages"), ("T", "ext4_file_write_iter"),
    ("T", "iomap_dio_rw"), ("T", "schedule"), ("T", "mutex_lock"), ("T", "_raw_spin_lock"),
]
_P2PDMA_SYMS = [("r", "p2pdma_pgmap_ops"), ("T", "pci_p2pdma_add_resource"),
                ("T", "pci_p2pdma_distance_many"), ("T", "pci_p2pmem_alloc"),
                ("T", "pci_p2pdma_map_segment")]
_NVME_SYMS = [("T", "nvme_submit_sync_cmd"), ("T", "nvme_setup_cmd"), ("T", "nvme_complete_rq")]


def kernel_at_least(major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", kernel())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def nvme_registration_name() -> str:
    """The name the stand-in GDS-patched nvme exports: nvme_v2_... on kernels 6.17 and later
    (the DOCA-OFED releases for those kernels, e.g. 26.01, export the v2 name:
    NVIDIA/gds-nvidia-fs#87), nvme_v1_... before."""
    return "nvme_v2_register_nvfs_dma_ops" if kernel_at_least(6, 17) \
        else "nvme_v1_register_nvfs_dma_ops"


def nvfs_wanted_name() -> str:
    """The name the loaded stand-in nvidia-fs looks up: v2 from 2.28.2 on kernels 6.17 and
    later, v1 otherwise (NVIDIA/gds-nvidia-fs src/nvfs-dma.c at v2.28.4, ChangeLog 2.28.2;
    tests/fixtures/kallsyms/)."""
    version = tuple(int(x) for x in re.findall(r"\d+", running_nvfs_version() or "0")[:3])
    return "nvme_v2_register_nvfs_dma_ops" if version >= (2, 28, 2) and kernel_at_least(6, 17) \
        else "nvme_v1_register_nvfs_dma_ops"


def _nvme_patched() -> list[tuple[str, str]]:
    name = nvme_registration_name()
    return [("T", name), ("T", name.replace("_register_", "_unregister_"))]
_NVFS_SYMS = [("t", "nvfs_mgroup_get"), ("t", "nvfs_io_start_op"), ("t", "nvfs_blk_rq_map_sg")]


def kallsyms_text() -> str:
    lines = []
    addr = 0xFFFFFFFF81000000
    for kind, sym in _BASE_SYMS + (_P2PDMA_SYMS if profile()["SIM_KERNEL_P2PDMA"] == "1" else []):
        lines.append(f"{addr:016x} {kind} {sym}")
        addr += 0x1A30
    maddr = 0xFFFFFFFFC0600000
    nvme = _NVME_SYMS + (_nvme_patched() if patched_nvme() else [])
    for kind, sym in nvme:
        lines.append(f"{maddr:016x} {kind} {sym}\t[nvme]")
        maddr += 0x2F0
    if module_loaded("nvidia_fs"):
        maddr = 0xFFFFFFFFC0F00000
        # the build against blk_rq_dma_map_iter (2.28.2+ on 6.17+, the one that looks up the
        # v2 name) has the static nvfs_blk_rq_dma_map_iter_start, as the real module does
        # (tests/fixtures/kallsyms/nvfs-dma-modules-list.yml)
        v2 = nvfs_wanted_name() == "nvme_v2_register_nvfs_dma_ops"
        for kind, sym in _NVFS_SYMS + ([("t", "nvfs_blk_rq_dma_map_iter_start")] if v2 else []):
            lines.append(f"{maddr:016x} {kind} {sym}\t[nvidia_fs]")
            maddr += 0x410
    return "\n".join(lines) + "\n"


def refresh_kallsyms() -> None:
    if os.path.exists(KALLSYMS):
        write_in_place(KALLSYMS, kallsyms_text())


def kallsyms_has(symbol: str) -> bool:
    for line in read("/proc/kallsyms").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == symbol:
            return True
    return False


def cmdline_text() -> str:
    iommu = {"off": "intel_iommu=off amd_iommu=off", "pt": "intel_iommu=on iommu=pt",
             "on": "intel_iommu=on"}[profile()["SIM_IOMMU"]]
    # GRUB's arguments as the stand-in update-grub last recorded them, then the firmware's.
    grub = " ".join(read(GRUB_STATE).split())
    extra = " ".join(profile().get("SIM_KERNEL_CMDLINE", "").split())
    return (f"BOOT_IMAGE=/boot/vmlinuz-{kernel()} root=UUID=5b2a7c9e-3f1d-4c6a-9e0b-1d2c3b4a5f60 "
            + " ".join(w for w in (f"ro {iommu}", grub or "quiet", extra) if w) + "\n")


# ----------------------------------------------------------------------------- nvidia-fs
def _nvfs_proc_create(version: str) -> None:
    os.makedirs(NVFS_PROC, exist_ok=True)
    major_minor = ".".join(version.split(".")[:2])
    write_in_place(NVFS_PROC + "/version", f"version: {major_minor}\n")
    ndev = int(read(SYS_MODULE + "/nvidia_fs/parameters/max_devices", "16").strip() or 16)
    write_in_place(NVFS_PROC + "/devcount", f"{ndev}\n")
    write_in_place(NVFS_PROC + "/bridges", "")
    write_in_place(NVFS_PROC + "/modules", "nvme: 1.0\n" if patched_nvme() else "")
    write_in_place(NVFS_PROC + "/peer_affinity",
                   "GPU P2P DMA distribution based on pci-distance\n")
    write_in_place(NVFS_PROC + "/peer_distance",
                   "gpu\t\tpeer\t\tpeerrank\t\tp2pdist\tlink\tclass\n")
    for i in range(ndev):
        dev = f"/dev/nvidia-fs{i}"
        if not os.path.exists(dev):
            with contextlib.suppress(OSError):
                os.mknod(dev, 0o666 | 0o020000, os.makedev(NVFS_MAJOR, i))
    with contextlib.suppress(OSError):
        os.unlink(COUNTERS)
    render_stats()
    refresh_kallsyms()


_COUNTER_KEYS = [
    "reads_n", "reads_ok", "reads_err", "reads_bytes", "reads_iostate_err", "read_bw", "read_lat",
    "writes_n", "writes_ok", "writes_err", "writes_bytes", "writes_iostate_err", "write_bw",
    "write_lat", "pg_cache", "pg_cache_fail", "pg_cache_eio",
    "sparse_n", "sparse_io", "sparse_holes", "sparse_pages",
    "mmap_n", "mmap_ok", "mmap_err", "munmap",
    "bar1_n", "bar1_ok", "bar1_err", "bar1_free", "bar1_callbacks", "bar1_delay_frees",
    "batches_n", "batches_ok", "batches_err", "batch_lat",
]


def load_counters() -> dict:
    try:
        with open(COUNTERS) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = {}
    for k in _COUNTER_KEYS:
        data.setdefault(k, 0)
    data.setdefault("gpus", {})
    data.setdefault("rendered_sha", "")
    return data


def save_counters(data: dict) -> None:
    os.makedirs(RUN, exist_ok=True)
    tmp = COUNTERS + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, COUNTERS)


def nvfs_param(name: str) -> str:
    return read(f"{SYS_MODULE}/nvidia_fs/parameters/{name}", NVFS_PARAMS.get(name, "0")).strip()


def stats_text(c: dict) -> str:
    version = read(SYS_MODULE + "/nvidia_fs/version", "2.25.7").strip()
    gds = NVFS_GDS_VERSION.get(".".join(version.split(".")[:2]), "1.14.1.1")
    rw = nvfs_param("rw_stats_enabled") not in ("0", "")
    peer = nvfs_param("peer_stats_enabled") not in ("0", "")
    level = "debug" if nvfs_param("dbg_enabled") not in ("0", "") else (
        "info" if nvfs_param("info_enabled") not in ("0", "") else "warn")
    mib = 1024 * 1024
    out = [
        f"GDS Version: {gds} ",
        "NVFS statistics(ver: 4.0)",
        f"NVFS Driver(version: {version})",
        "Mellanox PeerDirect Supported: " + ("True" if patched_nvme() else "False"),
        f"IO stats: {'Enabled' if rw else 'Disabled'}, "
        f"peer IO stats: {'Enabled' if peer else 'Disabled'}",
        f"Logging level: {level}",
        "",
        "Active Shadow-Buffer (MiB): 0",
        "Active Process: 0",
    ]
    if rw:
        out.append(f"Batches\t\t\t\t: n={c['batches_n']} ok={c['batches_ok']} "
                   f"err={c['batches_err']} Avg-Submit-Latency(usec)={c['batch_lat']}")
        out.append(f"Reads\t\t\t\t: n={c['reads_n']} ok={c['reads_ok']} err={c['reads_err']} "
                   f"readMiB={c['reads_bytes'] // mib} io_state_err={c['reads_iostate_err']}")
        out.append(f"Reads\t\t\t\t: Bandwidth(MiB/s)={c['read_bw']} "
                   f"Avg-Latency(usec)={c['read_lat']}")
    else:
        out.append(f"Reads\t\t\t\t: err={c['reads_err']} io_state_err={c['reads_iostate_err']}")
    out.append(f"Sparse Reads\t\t        : n={c['sparse_n']} io={c['sparse_io']} "
               f"holes={c['sparse_holes']} pages={c['sparse_pages']} ")
    pg = (f"pg-cache={c['pg_cache']} pg-cache-fail={c['pg_cache_fail']} "
          f"pg-cache-eio={c['pg_cache_eio']}")
    if rw:
        out.append(f"Writes\t\t\t\t: n={c['writes_n']} ok={c['writes_ok']} err={c['writes_err']} "
                   f"writeMiB={c['writes_bytes'] // mib} io_state_err={c['writes_iostate_err']} "
                   + pg)
        out.append(f"Writes\t\t\t\t: Bandwidth(MiB/s)={c['write_bw']} "
                   f"Avg-Latency(usec)={c['write_lat']}")
    else:
        out.append(f"Writes\t\t\t\t: err={c['writes_err']} "
                   f"io_state_err={c['writes_iostate_err']} " + pg)
    out.append(f"Mmap\t\t\t\t: n={c['mmap_n']} ok={c['mmap_ok']} err={c['mmap_err']} "
               f"munmap={c['munmap']}")
    out.append(f"Bar1-map\t\t\t: n={c['bar1_n']} ok={c['bar1_ok']} err={c['bar1_err']} "
               f"free={c['bar1_free']} callbacks={c['bar1_callbacks']} active=0 "
               f"delay-frees={c['bar1_delay_frees']}")
    out.append("Error\t\t\t\t: cpu-gpu-pages=0 sg-ext=0 dma-map=0 dma-ref=0")
    out.append("Ops\t\t\t\t: Read=0 Write=0 BatchIO=0")
    for bdf, g in sorted(c["gpus"].items()):
        hexuuid = g["uuid"]
        out.append(f"GPU {bdf} uuid:{hexuuid} : Registered_MiB=0 Cache_MiB=0 "
                   f"max_pinned_MiB={g['max_pinned_mib']} ")
    return "\n".join(out) + "\n"


def render_stats(c: dict | None = None) -> None:
    """(Re)write /proc/driver/nvidia-fs/stats from the counters (caller holds the lock)."""
    if not module_loaded("nvidia_fs") or not os.path.isdir(NVFS_PROC):
        return
    if c is None:
        c = load_counters()
    text = stats_text(c)
    write_in_place(NVFS_PROC + "/stats", text)
    c["rendered_sha"] = hashlib.sha256(text.encode()).hexdigest()
    c["rw_seen"] = nvfs_param("rw_stats_enabled")
    save_counters(c)


def poll_stats() -> None:
    """Called by the init loop: a write to stats resets the counters (like the real driver);
    a changed module parameter re-renders the header."""
    if not module_loaded("nvidia_fs"):
        return
    with locked():
        c = load_counters()
        current = read(NVFS_PROC + "/stats")
        if hashlib.sha256(current.encode()).hexdigest() != c.get("rendered_sha"):
            gpus_kept = {k: dict(v, max_pinned_mib=0) for k, v in c["gpus"].items()}
            c = load_counters_blank()
            c["gpus"] = gpus_kept
            render_stats(c)
        elif c.get("rw_seen") != nvfs_param("rw_stats_enabled"):
            render_stats(c)


def load_counters_blank() -> dict:
    data: dict = {k: 0 for k in _COUNTER_KEYS}
    data["gpus"] = {}
    data["rendered_sha"] = ""
    return data


def record_direct_io(kind: str, nbytes: int, chunk: int, gpu_index: int, seconds: float) -> None:
    """Count one buffer's direct (GPUDirect) I/O in the simulated nvidia-fs stats."""
    if not module_loaded("nvidia_fs"):
        return
    with locked():
        c = load_counters()
        ops = max(1, -(-nbytes // chunk))
        mib = 1024 * 1024
        c["mmap_n"] += 1
        c["mmap_ok"] += 1
        c["munmap"] += 1
        c["bar1_n"] += 1
        c["bar1_ok"] += 1
        c["bar1_free"] += 1
        c["bar1_callbacks"] += 0
        if nvfs_param("rw_stats_enabled") not in ("0", ""):
            pre = "reads" if kind == "read" else "writes"
            c[pre + "_n"] += ops
            c[pre + "_ok"] += ops
            c[pre + "_bytes"] += nbytes
            bw = int(nbytes / mib / max(seconds, 1e-6))
            c["read_bw" if kind == "read" else "write_bw"] = bw
            c["read_lat" if kind == "read" else "write_lat"] = int(seconds * 1e6 / ops)
        gl = gpus()
        if gl:
            g = gl[min(gpu_index, len(gl) - 1)]
            entry = c["gpus"].setdefault(g["bdf"], {"uuid": g["uuid"], "max_pinned_mib": 0})
            entry["max_pinned_mib"] = max(entry["max_pinned_mib"], -(-nbytes // mib))
        render_stats(c)


# ----------------------------------------------------------------------------- cufile.json
def strip_json_comments(text: str) -> str:
    out = []
    i, n, in_str = 0, len(text), False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(ch)
        i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def cufile_json_path() -> str:
    return os.environ.get("CUFILE_ENV_PATH_JSON") or "/etc/cufile.json"


def cufile_config() -> tuple[dict, str | None]:
    """(parsed cufile.json or {}, error message when present but unparsable)."""
    path = cufile_json_path()
    text = read(path, "")
    if not text:
        return {}, None
    try:
        data = json.loads(strip_json_comments(text))
    except ValueError as exc:
        return {}, f"failed to parse {path}: {exc}"
    return (data if isinstance(data, dict) else {}), None


def _get(cfg: dict, dotted: str, default: object) -> object:
    cur: object = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def _env_bool(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None:
        return None
    return v.strip().lower() in ("1", "true", "yes", "on")


def cufile_settings() -> dict[str, object]:
    cfg, err = cufile_config()
    s = {
        "allow_compat_mode": bool(_get(cfg, "properties.allow_compat_mode", True)),
        "force_compat_mode": bool(_get(cfg, "properties.force_compat_mode", False)),
        "use_pci_p2pdma": bool(_get(cfg, "properties.use_pci_p2pdma", False)),
        "nvme_use_pci_p2pdma": bool(_get(cfg, "block.nvme.use_pci_p2pdma", False)),
        # None when the key is absent (NVIDIA's P2PDMA guide sets only the properties key)
        "nvme_use_pci_p2pdma_set": _get(cfg, "block.nvme.use_pci_p2pdma", None),
        "max_direct_io_size_kb": int(_get(cfg, "properties.max_direct_io_size_kb", 16384)),
        "cufile_stats": int(_get(cfg, "profile.cufile_stats", 0)),
        "parse_error": err,
        "config": cfg,
    }
    for key, env in (("allow_compat_mode", "CUFILE_ALLOW_COMPAT_MODE"),
                     ("force_compat_mode", "CUFILE_FORCE_COMPAT_MODE"),
                     ("use_pci_p2pdma", "CUFILE_USE_PCIP2PDMA")):
        val = _env_bool(env)
        if val is not None:
            s[key] = val
    return s


# ----------------------------------------------------------------------------- filesystems
def mount_of(path: str) -> tuple[str, str, set[str]]:
    """(mount point, fstype, options incl. super options) of the filesystem holding path."""
    path = os.path.realpath(path)
    best = ("/", "unknown", set())
    best_len = -1
    for line in read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        lparts, rparts = left.split(), right.split()
        if len(lparts) < 6 or len(rparts) < 3:
            continue
        mnt = lparts[4].replace("\\040", " ")
        inside = path == mnt or path.startswith(mnt.rstrip("/") + "/") or mnt == "/"
        if inside and len(mnt) >= best_len:
            opts = set(lparts[5].split(",")) | set(rparts[2].split(","))
            best, best_len = (mnt, rparts[0], opts), len(mnt)
    return best


def fs_supports_gds(path: str) -> tuple[bool, str]:
    mnt, fstype, opts = mount_of(path)
    if fstype == "xfs":
        return True, f"xfs at {mnt}"
    if fstype == "ext4":
        if "data=ordered" in opts:
            return True, f"ext4 (data=ordered) at {mnt}"
        return False, f"ext4 at {mnt} is not mounted with data=ordered"
    return False, f"filesystem {fstype} at {mnt} is not supported by GDS"


# ----------------------------------------------------------------------------- routes
def nvfs_route_usable() -> tuple[bool, str]:
    if gpu_driver() != "open":
        return False, "GPU driver is not the open kernel module"
    if not module_loaded("nvidia_fs"):
        return False, "nvidia-fs driver is not loaded"
    if os.path.isdir(NVFS_PROC):
        # nvidia-fs probes its storage modules at every open (src/nvfs-core.c nvfs_open): a GDS
        # nvme that came after nvidia-fs loaded (the operator's driver container) is listed now
        write_in_place(NVFS_PROC + "/modules", "nvme: 1.0\n" if patched_nvme() else "")
    if not kallsyms_has(nvfs_wanted_name()):
        return False, "NVMe Driver not registered with nvidia-fs"
    return True, "nvfs"


def p2pdma_route_usable(settings: dict[str, object] | None = None) -> tuple[bool, str]:
    s = settings or cufile_settings()
    if gpu_driver() != "open":
        return False, "GPU driver is not the open kernel module"
    if not s["use_pci_p2pdma"]:
        return False, "use_pci_p2pdma not enabled in properties"
    if s.get("nvme_use_pci_p2pdma_set") is not None and not s["nvme_use_pci_p2pdma_set"]:
        return False, "block.nvme.use_pci_p2pdma is false"
    if not kallsyms_has("p2pdma_pgmap_ops"):
        return False, "kernel has no P2PDMA support (p2pdma_pgmap_ops missing)"
    ok, why = p2pdma_module_options_in_effect()
    if not ok:
        return False, why
    return True, "p2pdma"


# ----------------------------------------------------------------------------- nvidia params
# /proc/driver/nvidia/params as the open driver 580 prints it (captured on an H100 node,
# tests/fixtures/nvidia_params/h100_driver580_params.txt); RegistryDwords is the value of the
# NVreg_RegistryDwords module option the driver was loaded with.
_NVIDIA_PARAMS = [
    ("ResmanDebugLevel", "4294967295"), ("RmLogonRC", "1"), ("ModifyDeviceFiles", "1"),
    ("DeviceFileUID", "0"), ("DeviceFileGID", "0"), ("DeviceFileMode", "438"),
    ("InitializeSystemMemoryAllocations", "1"), ("UsePageAttributeTable", "4294967295"),
    ("EnableMSI", "1"), ("EnablePCIeGen3", "0"), ("MemoryPoolSize", "0"),
    ("KMallocHeapMaxSize", "0"), ("VMallocHeapMaxSize", "0"), ("IgnoreMMIOCheck", "0"),
    ("EnableStreamMemOPs", "0"), ("EnableUserNUMAManagement", "1"), ("NvLinkDisable", "1"),
    ("RmProfilingAdminOnly", "0"), ("PreserveVideoMemoryAllocations", "0"),
    ("EnableS0ixPowerManagement", "0"), ("S0ixPowerManagementVideoMemoryThreshold", "256"),
    ("DynamicPowerManagement", "3"), ("DynamicPowerManagementVideoMemoryThreshold", "200"),
    ("RegisterPCIDriver", "1"), ("EnablePCIERelaxedOrderingMode", "0"),
    ("EnableResizableBar", "0"), ("EnableGpuFirmware", "18"), ("EnableGpuFirmwareLogs", "2"),
    ("RmNvlinkBandwidthLinkCount", "0"), ("EnableDbgBreakpoint", "0"),
    ("OpenRmEnableUnsupportedGpus", "1"), ("DmaRemapPeerMmio", "1"),
    ("ImexChannelCount", "2048"), ("CreateImexChannel0", "0"),
    ("GrdmaPciTopoCheckOverride", "0"), ("CoherentGPUMemoryMode", '""'),
    ("RegistryDwords", '""'), ("RegistryDwordsPerDevice", '""'), ("RmMsg", '""'),
    ("GpuBlacklist", '""'), ("TemporaryFilePath", '""'), ("ExcludedGpus", '""'),
]
P2PDMA_REGISTRY_KEYS = {"RMForceStaticBar1": "1", "RmForceDisableIomapWC": "1"}


def nvidia_params_text(options: dict[str, str] | None = None) -> str:
    """/proc/driver/nvidia/params for a driver loaded with these NVreg_* module options
    (default: those /etc/modprobe.d gives the nvidia module, i.e. at the simulated boot)."""
    opts = modprobe_options("nvidia") if options is None else options
    lines = []
    for key, default in _NVIDIA_PARAMS:
        value = opts.get("NVreg_" + key)
        if value is None:
            value = default
        elif default.startswith('"'):
            value = '"' + value.strip('"') + '"'
        lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def running_registry_dwords() -> dict[str, str]:
    """Keys of the RegistryDwords the loaded nvidia module runs with (lower-case keys)."""
    out: dict[str, str] = {}
    for line in read(NVIDIA_PROC + "/params").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "RegistryDwords":
            for part in value.strip().strip('"').split(";"):
                k, _, v = part.partition("=")
                if k.strip():
                    out[k.strip().lower()] = v.strip()
    return out


def p2pdma_module_options_in_effect() -> tuple[bool, str]:
    """x86: nvme_core multipath=N and the RegistryDwords keys NVIDIA's guide asks for, as the
    RUNNING modules see them (written to /etc/modprobe.d, they count after a reboot)."""
    if arch() not in ("x86_64", "amd64"):
        return True, "not x86"
    mp = read(SYS_MODULE + "/nvme_core/parameters/multipath").strip()
    if mp != "N":
        return False, (f"nvme_core multipath is {mp or 'unknown'} (P2PDMA needs "
                       "`options nvme_core multipath=N` in effect)")
    have = running_registry_dwords()
    missing = [f"{k}={v}" for k, v in P2PDMA_REGISTRY_KEYS.items() if have.get(k.lower()) != v]
    if missing:
        return False, ("nvidia RegistryDwords lacks " + ";".join(missing)
                       + " (P2PDMA needs NVreg_RegistryDwords in effect)")
    return True, "module options in effect"


def direct_route(path: str | None = None) -> tuple[str | None, str]:
    """The usable direct route for I/O on path ('nvfs'|'p2pdma'), or (None, reason)."""
    s = cufile_settings()
    if not gpus():
        return None, "no CUDA-capable device is detected"
    if s["force_compat_mode"]:
        return None, "force_compat_mode is set"
    if s["use_pci_p2pdma"]:
        ok, why = p2pdma_route_usable(s)
    else:
        ok, why = nvfs_route_usable()
    if not ok:
        return None, why
    if path is not None:
        fs_ok, fs_why = fs_supports_gds(path)
        if not fs_ok:
            return None, fs_why
    return ("p2pdma" if s["use_pci_p2pdma"] else "nvfs"), why


def libcufile_installed_version() -> str | None:
    best: tuple[int, ...] | None = None
    for path in glob.glob("/usr/local/cuda-*/targets/*/lib/libcufile.so.*.*.*"):
        m = re.search(r"libcufile\.so\.(\d+(?:\.\d+)+)$", path)
        if m:
            v = tuple(int(x) for x in m.group(1).split("."))
            best = v if best is None or v > best else best
    return ".".join(map(str, best)) if best else None


def shquote(s: str) -> str:
    return shlex.quote(s)


def now() -> float:
    return time.monotonic()


# ----------------------------------------------------------------------------- cuFile log
# The stand-in cuFile's log, written only when cufile.json sets logging.dir (a test-scoped
# config does). Line format and the driver-open / handle-registration messages are those of REAL
# libcufile 1.15 logs captured on the lent H100 (tests/fixtures/h100/cufile_*.log), file name
# cufile_<pid>_<date>.log as 1.15 writes it. Per-I/O markers: "gds path taken with ODIRECT fd: N"
# (DEBUG, nvidia-fs path) is quoted in NVIDIA/gds-nvidia-fs#78; "p2p mode: 1 compat: 0" (TRACE,
# P2PDMA) is libcufile 1.15's per-I/O marker as a public L40S report quotes it; the
# component:line of these per-I/O lines and the words around the p2p marker are the stand-in's.
CUFILE_LOG_LEVELS = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4, "NOTICE": 4}
_CUFILE_LOG_STATE: dict[str, object] = {}


def cufile_log_path() -> str | None:
    cfg, _ = cufile_config()
    d = _get(cfg, "logging.dir", None)
    if not isinstance(d, str) or not d:
        return None
    started = _CUFILE_LOG_STATE.setdefault("started", time.localtime())
    stamp = time.strftime("%Y-%m-%d.%H:%M:%S", started)  # type: ignore[arg-type]
    return os.path.join(d, f"cufile_{os.getpid()}_{stamp}.log")


def cufile_log_level() -> int:
    cfg, _ = cufile_config()
    name = os.environ.get("CUFILE_LOGGING_LEVEL") or _get(cfg, "logging.level", "ERROR")
    return CUFILE_LOG_LEVELS.get(str(name).upper(), CUFILE_LOG_LEVELS["ERROR"])


def cufile_log(level: str, where: str, message: str) -> None:
    """Append one line in libcufile's format when logging.dir is set and the level passes."""
    path = cufile_log_path()
    if path is None or CUFILE_LOG_LEVELS[level] < cufile_log_level():
        return
    now = time.time()
    stamp = time.strftime("%d-%m-%Y %H:%M:%S", time.localtime(now))
    pad = " " * max(2, 7 - len(level))
    line = (f" {stamp}:{int(now % 1 * 1000)} [pid={os.getpid()} tid={os.getpid()}] "
            f"{level}{pad}{where} {message}\n")
    with contextlib.suppress(OSError), open(path, "a") as fh:
        fh.write(line)


def cufile_log_driver_open() -> None:
    """What libcufile 1.15 logs once per process when the driver opens."""
    if _CUFILE_LOG_STATE.get("opened"):
        return
    _CUFILE_LOG_STATE["opened"] = True
    s = cufile_settings()
    kernel_p2p = kallsyms_has("p2pdma_pgmap_ops")
    p2p_ok, _ = p2pdma_route_usable(s) if s["use_pci_p2pdma"] else (False, "")
    nvfs_ok, _ = nvfs_route_usable()
    log = cufile_log
    log("INFO", "cufio_core:597", "Loaded successfully  libcufile_ck.so")
    if not s["use_pci_p2pdma"]:
        log("INFO", "cufio-cuda:571", "Config doesn't support PCIP2PDMA")
    p2p = int(p2p_ok)
    log("INFO", "cufio-drv:838", f"Is PCIP2PDMA Supported: {p2p} kernel Support: "
        f"{int(kernel_p2p)} pci_p2pdma_supported_cuda: {int(bool(gpus()))} "
        f"checkIfAllGPUsSupportP2PDMA(): {p2p}")
    log("INFO", "0:179", "nvidia_fs driver open invoked")
    if not module_loaded("nvidia_fs"):
        log("WARN", "0:184", "failed to open /proc/driver/nvidia-fs/devcount  error: No such "
            "file or directory")
        if not p2p_ok:
            log("ERROR", "cufio-drv:846", "nvidia-fs.ko driver not loaded")
    for n, text in ((249, "====================="), (250, "DRIVER CONFIGURATION:"),
                    (251, "====================="),
                    (253, "NVMe P2PDMA        : " + ("Supported" if p2p_ok else "Unsupported")),
                    (254, "NVMe               : " + ("Supported" if nvfs_ok else "Unsupported"))):
        log("INFO", f"cufio-drv:{n}", text)
    for n, text in ((1001, "====================="), (1002, "CUFILE CONFIGURATION:"),
                    (1003, "=====================")):
        log("INFO", f"cufio_core:{n}", text)
    log("INFO", "0:1509", "properties.use_pci_p2pdma : " + str(bool(s["use_pci_p2pdma"])).lower())
    log("INFO", "0:1511", "properties.use_compat_mode : "
        + str(bool(s["allow_compat_mode"])).lower())
    log("INFO", "0:1636", f"profile.cufile_stats : {s['cufile_stats']}")
    log("INFO", "cufio_core:1070", "CUFile initialization complete")


def cufile_log_handle(route: str | None, why: str) -> None:
    """cuFileHandleRegister: the compat NOTICE, or the error lines (H100 capture, #31)."""
    s = cufile_settings()
    if route is not None:
        return  # registered: no line worth imitating (the per-I/O markers follow)
    if s["allow_compat_mode"]:
        cufile_log("NOTICE", "cufio:285", "cuFileHandleRegister GDS not supported or disabled by "
                   "config, using cuFile posix read/write with compat mode enabled")
    else:
        if "NVMe Driver not registered" in why:
            cufile_log("ERROR", "cufio-fs:199", "NVMe Driver not registered with nvidia-fs!!!")
        cufile_log("ERROR", "cufio:331", "cuFileHandleRegister error: GPUDirect Storage not "
                   "supported on current file")


def cufile_log_io(kind: str, route: str | None, fd: int, size: int, offset: int) -> None:
    """One per-I/O marker per cuFile call (kvikio issues one call per task)."""
    if route == "nvfs":
        cufile_log("DEBUG", "cufio_core:2859", f"gds path taken with ODIRECT fd: {fd}")
    mode = f"p2p mode: {int(route == 'p2pdma')} compat: {int(route is None)}"
    cufile_log("TRACE", "cufio_core:2964", f"{kind} fd: {fd} offset: {offset} length: {size} "
               + mode)


# ----------------------------------------------------------------------------- driver sources
DRIVER_SOURCES_GLOB = "/usr/src/nvidia-[0-9]*"


def driver_sources_dir() -> str:
    return f"/usr/src/nvidia-{driver_version()}"


def driver_sources_setup() -> None:
    """The GPU driver's kernel sources as its DKMS package leaves them: /usr/src/nvidia-<version>/
    with nvidia/nv-p2p.h, the header nvidia-fs compiles against. Simulated driver state (the
    project never installs the driver); SIM_DRIVER_SOURCES=0 removes them, like a driver
    installed from precompiled modules or a vendor image (the lent H100 has none)."""
    keep = ""
    if gpu_driver() != "none" and profile().get("SIM_DRIVER_SOURCES", "1") == "1":
        keep = driver_sources_dir()
        os.makedirs(keep + "/nvidia", exist_ok=True)
        with open(keep + "/nvidia/nv-p2p.h", "w") as fh:
            fh.write("/* TEST STAND-IN (gdsfleet harness): the NVIDIA driver's nv-p2p.h, "
                     "simulated. */\n#ifndef _NV_P2P_H_\n#define _NV_P2P_H_\n#endif\n")
    for path in glob.glob(DRIVER_SOURCES_GLOB):
        if path != keep:
            subprocess.run(["rm", "-rf", path], check=False)


# ----------------------------------------------------------------------------- GPU Operator
# SIM_OPERATOR=1: the node's driver and nvidia-fs come from the NVIDIA GPU Operator's driver
# container, as a Kubernetes node with gds.enabled leaves the host: the driver container's root
# mounted at /run/nvidia/driver (the chart's hostPaths.driverInstallDir), the validator's status
# files in /run/nvidia/validations (cmd/nvidia-validator of NVIDIA/gpu-operator), the modules
# loaded (so /proc/driver/nvidia-fs and /sys/module/nvidia_fs are visible on the host) but no
# host package, no DKMS tree, no modinfo-visible .ko and no nvidia-smi on the host's PATH.
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
OPERATOR_VALIDATIONS = "/run/nvidia/validations"
OPERATOR_READY_FILES = ("driver-ready", "toolkit-ready", "cuda-ready", "plugin-ready",
                        "nvidia-fs-ready")


def operator_managed() -> bool:
    return profile().get("SIM_OPERATOR", "0") == "1"


def operator_setup() -> None:
    """What the GPU Operator's driver DaemonSet (with GDS enabled) leaves on the host at each
    boot; called by gdsfleet-sim-init after the boot modules."""
    if not operator_managed() or gpu_driver() == "none":
        return
    root = OPERATOR_DRIVER_ROOT
    for d in ("usr/bin", "usr/lib/x86_64-linux-gnu", f"lib/modules/{kernel()}/kernel/drivers"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    smi = "/usr/local/bin/nvidia-smi"
    if os.path.exists(smi):
        # nvidia-smi lives in the driver container's root only (`chroot /run/nvidia/driver ...`)
        subprocess.run(["mv", "-f", smi, os.path.join(root, "usr/bin/nvidia-smi")], check=False)
    with open(os.path.join(root, "usr/lib/x86_64-linux-gnu/libcuda.so." + driver_version()),
              "w") as fh:
        fh.write("TEST STAND-IN: the driver container's libcuda (simulated)\n")
    version = profile().get("SIM_OPERATOR_NVFS_VERSION") or "2.28.4"
    with locked():
        _mkmod("nvidia_fs", version, dict(NVFS_PARAMS))
        _nvfs_proc_create(version)
    os.makedirs(OPERATOR_VALIDATIONS, exist_ok=True)
    for name in OPERATOR_READY_FILES:
        with open(os.path.join(OPERATOR_VALIDATIONS, name), "w") as fh:
            fh.write("")


# ----------------------------------------------------------------------------- the booted kernel
# A container shares the host's kernel; at each simulated boot gdsfleet-sim-init decides which
# kernel GRUB would have loaded (grub_boot_kernel) and, when it is not the host's, writes its
# release to BOOTED_KERNEL: the preloaded uname-shim.c then makes uname() report it, so
# kernel() above, `uname -r`, Ansible's facts and the stand-in dkms agree on it. Modules for it
# come from /lib/modules/<release> only (what the stand-in dkms built there, the driver's
# nvidia.ko as its package would install it). Without a GRUB stand-in (/boot/grub/grub.cfg: the
# kernel-gate tests write one) the node runs the host kernel as always.
BOOTED_KERNEL = RUN + "/booted-kernel"
OSRELEASE = RUN + "/osrelease"
BOOT_DIR = "/boot"
GRUB_CFG = BOOT_DIR + "/grub/grub.cfg"
GRUBENV = BOOT_DIR + "/grub/grubenv"
# GRUB_DEFAULT as the stand-in update-grub (grub-mkconfig) last read it: what grub.cfg's
# `set default=` would say; without it, /etc/default/grub(.d) as they are now.
GRUB_DEFAULT_STATE = "/var/lib/gdsfleet-sim/grub-default"
GRUB_ETC_DEFAULT = "/etc/default/grub"
RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}$")
GRUB_MAX_BYTES = 256 * 1024
GRUB_MAX_ENTRIES = 256


def booted_other_kernel() -> bool:
    """Whether this boot loaded a kernel other than the host's (a GRUB stand-in chose it)."""
    return os.path.exists(BOOTED_KERNEL)


def _read_bounded(path: str, limit: int = GRUB_MAX_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def grub_entries(text: str) -> list[dict[str, object]]:
    """grub.cfg's menu as GRUB builds it: menuentry/submenu lines (title, --id or
    $menuentry_id_option id) and each entry's `linux` path; nested through braces. Lines that
    do not parse are skipped; at most GRUB_MAX_ENTRIES entries."""
    top: list[dict[str, object]] = []
    stack: list[list[dict[str, object]]] = [top]
    current: list[dict[str, object] | None] = [None]
    count = 0
    for raw in text.splitlines():
        line = raw.strip()
        word = line.split(None, 1)[0] if line else ""
        if word in ("menuentry", "submenu") and line.endswith("{"):
            try:
                argv = shlex.split(line[:-1])
            except ValueError:
                continue
            count += 1
            if count > GRUB_MAX_ENTRIES or len(argv) < 2:
                break
            ident = ""
            for i, a in enumerate(argv[:-1]):
                if a in ("$menuentry_id_option", "--id"):
                    ident = argv[i + 1]
            entry: dict[str, object] = {"kind": word, "title": argv[1], "id": ident,
                                        "linux": "", "children": []}
            stack[-1].append(entry)
            stack.append(entry["children"])  # type: ignore[arg-type]
            current.append(entry)
        elif line == "}" and len(stack) > 1:
            stack.pop()
            current.pop()
        elif word in ("linux", "linuxefi", "linux16") and current[-1] is not None:
            parts = line.split()
            if len(parts) > 1:
                current[-1]["linux"] = parts[1]
    return top


def _last_grub_default() -> str:
    value = "0"
    for path in [GRUB_ETC_DEFAULT] + sorted(glob.glob(GRUB_ETC_DEFAULT + ".d/*.cfg"))[:64]:
        for line in _read_bounded(path, 64 * 1024).splitlines():
            m = re.match(r"^\s*GRUB_DEFAULT=(['\"]?)(.*?)\1\s*$", line)
            if m:
                value = m.group(2)
    return value


def grub_default() -> str:
    """The default GRUB would use: grub-mkconfig's value of GRUB_DEFAULT (recorded by the
    stand-in update-grub, else /etc/default/grub then grub.d/*.cfg); `saved` means grubenv's
    saved_entry ("0" when it has none)."""
    state = _read_bounded(GRUB_DEFAULT_STATE, 4096)
    value = state.splitlines()[0].strip() if state.strip() else _last_grub_default()
    if value == "saved":
        saved = ""
        for line in _read_bounded(GRUBENV, 4096).splitlines():
            if line.startswith("saved_entry="):
                saved = line.partition("=")[2].strip()
        value = saved or "0"
    return value or "0"


def grub_select(entries: list[dict[str, object]], value: str) -> dict[str, object] | None:
    """The menu entry GRUB boots for `default=value`: '>' separates submenu levels, each part
    a number (position), an id or a title; a submenu is not bootable itself."""
    level = entries
    chosen: dict[str, object] | None = None
    for part in value.split(">"):
        if part.isdigit():
            idx = int(part)
            chosen = level[idx] if idx < len(level) else None
        else:
            chosen = next((e for e in level if part in (e["id"], e["title"])), None)
        if chosen is None:
            return None
        level = chosen["children"]  # type: ignore[assignment]
    return chosen if chosen is not None and chosen["kind"] == "menuentry" else None


def grub_boot_kernel(host: str) -> tuple[str, str]:
    """(release, how it was found) of the kernel a boot through the GRUB stand-in loads: the
    default entry (GRUB falls back to the first entry when the default names none), its
    `linux /boot/vmlinuz-<release>`, which must exist. Anything else: the host kernel."""
    text = _read_bounded(GRUB_CFG)
    if not text:
        return host, "no GRUB stand-in: the host kernel"
    entries = grub_entries(text)
    value = grub_default()
    entry = grub_select(entries, value)
    how = f"GRUB default {value!r}"
    if entry is None:
        entry, how = grub_select(entries, "0"), f"GRUB default {value!r} names no entry: entry 0"
    if entry is None:
        return host, f"{how}; grub.cfg has no entry: the host kernel"
    image = str(entry["linux"])
    release = os.path.basename(image).removeprefix("vmlinuz-")
    if not os.path.basename(image).startswith("vmlinuz-") or not RELEASE_RE.match(release):
        return host, f"{how}: entry {entry['title']!r} loads {image!r}: the host kernel"
    if not os.path.isfile(f"{BOOT_DIR}/vmlinuz-{release}"):
        return host, f"{how}: {BOOT_DIR}/vmlinuz-{release} is missing: the host kernel"
    return release, f"{how}: {entry['title']!r}"


def driver_built_for_kernel() -> bool:
    """The GPU driver's module is there for the booted kernel: always for the host kernel (the
    image simulates a node whose driver is installed), else only when /lib/modules/<release>
    has nvidia.ko (the project never installs the driver: the tests put it where its package
    would) or the GPU Operator's driver container builds it."""
    if not booted_other_kernel() or operator_managed():
        return True
    return bool(glob.glob(f"/lib/modules/{kernel()}/**/nvidia.ko", recursive=True))
