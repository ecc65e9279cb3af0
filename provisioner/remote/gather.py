"""gdsfleet read-only gather script: runs ON a node, prints ONE JSON document.

Sent over SSH on stdin to ``python3 -``, bundled with the shared modules it declares
(provisioner/remote/bundle.py). Stdlib only, Python 3.8+. It changes nothing on the
node: it reads files under /proc, /sys and /etc and runs read-only commands (uname, modinfo,
nvidia-smi, ofed_info, dpkg-query/rpm, dkms status, lsblk, mokutil, gdscheck -p), each with
a timeout. Every item is returned raw ({"rc", "out", "err"}); the orchestrator parses.

Output: {"gdsfleet_gather": 1, "items": {name: {"kind", "rc", "out", "err", ...}}}
rc: 0 = read/ran fine; None = file missing or command not found; otherwise the exit status.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

# gdsfleet:bundle-begin
from provisioner.remote.bundle import shared as _shared  # controller side; bundle() inlines

# gdsfleet:bundle-end
# How kmod reads modprobe.d: plugins/module_utils/modprobe_conf.py (one copy, shared with
# provisioner verify and the collection's filter gdsfleet.gds.modprobe_plan).
_modprobe_conf = _shared("modprobe_conf.py")
# Network filesystems: the GDS clients' kernel modules and the RDMA ports (issue 33).
_netfs_state = _shared("_netfs_state.py")

SCHEMA = 1
CMD_TIMEOUT = 30.0
GDSCHECK_TIMEOUT = 120.0
MAX_TEXT = 512 * 1024
# Written by the role gdsfleet.gds.verify_runtime: which interpreter has kvikio and cupy.
VERIFY_RUNTIME_FACT = "/etc/ansible/facts.d/gdsfleet_verify_runtime.fact"
# What the NVIDIA GPU Operator leaves on a host: its driver container's root and the
# validator's status files (driver-ready, nvidia-fs-ready, ...).
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
OPERATOR_VALIDATIONS = "/run/nvidia/validations"

# -- GPU Operator: the validator's driver-ready file ------------------------------------------
# cmd/nvidia-validator of NVIDIA/gpu-operator writes KEY=value lines there (IS_HOST_DRIVER=true
# for a driver installed on the host, false for its driver container; NVIDIA_DRIVER_ROOT, ...;
# tests/fixtures/gpu-operator/README.md): five short lines, read up to a few KiB.
OPERATOR_DRIVER_READY = OPERATOR_VALIDATIONS + "/driver-ready"
OPERATOR_DRIVER_READY_MAX = 4096


def operator_driver_ready() -> dict:
    path = OPERATOR_DRIVER_READY
    try:
        with open(path, "rb") as fh:
            data = fh.read(OPERATOR_DRIVER_READY_MAX)
    except FileNotFoundError:
        return {"kind": "file", "path": path, "rc": None, "out": "", "err": "missing"}
    except OSError as exc:
        return {"kind": "file", "path": path, "rc": 1, "out": "", "err": str(exc)[:200]}
    return {"kind": "file", "path": path, "rc": 0, "out": data.decode("utf-8", "replace"),
            "err": ""}


KALLSYMS_WANTED = (
    "nvme_v1_register_nvfs_dma_ops",
    "nvme_v2_register_nvfs_dma_ops",
    "nvme_v1_unregister_nvfs_dma_ops",
    "nvme_v2_unregister_nvfs_dma_ops",
    "p2pdma_pgmap_ops",
    "pci_p2pdma_add_resource",
)
# -- NVMe-oF: nvidia-fs's hook in a GDS-patched nvme-rdma ------------------------------------
# nvidia-fs looks these up for fabrics (NVIDIA/gds-nvidia-fs src/nvfs-dma.c, modules_list,
# v2.25.7 to v2.28.4: only a v1 name for nvme_rdma; tests/fixtures/kallsyms/README.md). Kept even
# when the "nvfs" substring matches of nvidia_fs's own symbols reach their cap.
KALLSYMS_NVMEOF = (
    "nvme_rdma_v1_register_nvfs_dma_ops",
    "nvme_rdma_v1_unregister_nvfs_dma_ops",
)
# -- which nvme name the loaded nvidia-fs looks up ----------------------------------------------
# Only an nvidia-fs built with HAVE_BLK_RQ_DMA_MAP_ITER_START (2.28.2+ on 6.17+ kernels) has this
# function, and it looks up nvme_v2_register_nvfs_dma_ops (NVIDIA/gds-nvidia-fs src/nvfs-dma.c;
# tests/fixtures/kallsyms/). Kept past the cap on nvidia_fs's own symbols.
KALLSYMS_NVFS_BUILD = ("nvfs_blk_rq_dma_map_iter_start",)
KALLSYMS_EXACT_MAX = 64
KALLSYMS_NVFS_MAX = 400

# Package names that matter for GDS (CUDA repo, distro archive look-alikes, MOFED/DOCA).
PACKAGE_RE = re.compile(
    r"^(nvidia-gds|libcufile|gds-tools|nvidia-fs|cuda-toolkit|cuda-drivers|cuda-cudart|"
    r"doca-|mlnx-|mlnx_ofed|kmod-mlnx|kmod-nvidia|ofed|nvidia-driver|nvidia-open|"
    r"nvidia-kernel|libnvidia-compute|dkms|linux-image|kernel-core|kernel$)"
)


def _trim(text: str) -> str:
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + "\n[gdsfleet: truncated]\n"
    return text


def read_file(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEXT + 1)
        return {
            "kind": "file",
            "path": path,
            "rc": 0,
            "out": _trim(data.decode("utf-8", "replace")),
            "err": "",
        }
    except FileNotFoundError:
        return {"kind": "file", "path": path, "rc": None, "out": "", "err": "missing"}
    except OSError as exc:
        return {"kind": "file", "path": path, "rc": 1, "out": "", "err": str(exc)}


def run(argv: list, timeout: float = CMD_TIMEOUT, env: dict | None = None) -> dict:
    exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=_search_path())
    if exe is None:
        return {"kind": "cmd", "argv": argv, "rc": None, "out": "", "err": "not found"}
    full_env = dict(os.environ)
    full_env.setdefault("LC_ALL", "C")
    full_env["PATH"] = _search_path()
    if env:
        full_env.update(env)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [exe] + list(argv[1:]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=full_env,
        )
    except subprocess.TimeoutExpired:
        return {
            "kind": "cmd",
            "argv": argv,
            "rc": 124,
            "out": "",
            "err": f"timed out after {timeout}s",
        }
    except OSError as exc:
        return {"kind": "cmd", "argv": argv, "rc": 126, "out": "", "err": str(exc)}
    return {
        "kind": "cmd",
        "argv": [exe] + list(argv[1:]),
        "rc": proc.returncode,
        "out": _trim(proc.stdout.decode("utf-8", "replace")),
        "err": _trim(proc.stderr.decode("utf-8", "replace")),
        "duration_s": round(time.monotonic() - started, 3),
    }


def _search_path() -> str:
    extra = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    parts = [p for p in os.environ.get("PATH", "").split(":") if p]
    for p in extra:
        if p not in parts:
            parts.append(p)
    return ":".join(parts)


def listdir(path: str) -> dict:
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return {"kind": "dir", "path": path, "rc": None, "out": "", "err": "missing"}
    except OSError as exc:
        return {"kind": "dir", "path": path, "rc": 1, "out": "", "err": str(exc)}
    return {"kind": "dir", "path": path, "rc": 0, "out": "\n".join(names), "err": ""}


def module_params(module: str) -> dict:
    """Parameters of a loaded module: name -> {value, writable}; rc None when not loaded."""
    base = f"/sys/module/{module}"
    if not os.path.isdir(base):
        return {"kind": "module", "path": base, "rc": None, "out": "", "err": "not loaded"}
    params = {}
    pdir = os.path.join(base, "parameters")
    if os.path.isdir(pdir):
        for name in sorted(os.listdir(pdir)):
            p = os.path.join(pdir, name)
            try:
                with open(p) as fh:
                    value = fh.read().strip()
            except OSError as exc:
                value = None
                params[name] = {"value": value, "writable": False, "error": str(exc)}
                continue
            params[name] = {"value": value, "writable": os.access(p, os.W_OK)}
    version = read_file(os.path.join(base, "version"))
    return {
        "kind": "module",
        "path": base,
        "rc": 0,
        "out": json.dumps(params, sort_keys=True),
        "err": "",
        "version": version["out"].strip() if version["rc"] == 0 else None,
    }


def grep_kallsyms() -> dict:
    wanted = set(KALLSYMS_WANTED) | set(KALLSYMS_NVMEOF) | set(KALLSYMS_NVFS_BUILD)
    hits = []
    exact = substring = 0
    try:
        with open("/proc/kallsyms", "rb") as fh:
            for raw in fh:
                line = raw.decode("utf-8", "replace")
                parts = line.split()
                if len(parts) < 3:
                    continue
                if parts[2] in wanted and exact < KALLSYMS_EXACT_MAX:
                    exact += 1
                elif "nvfs" in parts[2] and substring < KALLSYMS_NVFS_MAX:
                    substring += 1
                else:
                    continue
                hits.append(line.rstrip("\n")[:512])
    except FileNotFoundError:
        return {"kind": "grep", "path": "/proc/kallsyms", "rc": None, "out": "", "err": "missing"}
    except OSError as exc:
        return {"kind": "grep", "path": "/proc/kallsyms", "rc": 1, "out": "", "err": str(exc)}
    return {"kind": "grep", "path": "/proc/kallsyms", "rc": 0, "out": "\n".join(hits), "err": ""}


def packages() -> dict:
    if shutil.which("dpkg-query", path=_search_path()):
        res = run(["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"])
        res["manager"] = "dpkg"
    elif shutil.which("rpm", path=_search_path()):
        res = run(["rpm", "-qa", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\tii \\n"])
        res["manager"] = "rpm"
    else:
        return {
            "kind": "cmd",
            "rc": None,
            "out": "",
            "err": "no dpkg-query or rpm",
            "manager": None,
        }
    if res.get("out"):
        keep = [ln for ln in res["out"].splitlines() if PACKAGE_RE.match(ln.split("\t", 1)[0])]
        res["out"] = "\n".join(sorted(keep))
    return res


def lsblk() -> dict:
    cols = "NAME,KNAME,PATH,TYPE,SIZE,TRAN,MODEL,SERIAL,WWN,FSTYPE,MOUNTPOINT,PKNAME,MAJ:MIN"
    res = run(["lsblk", "--json", "--bytes", "-o", cols])
    if res["rc"] not in (0, None):
        # Older util-linux lacks some columns: fall back to the defaults.
        res = run(["lsblk", "--json", "--bytes"])
    return res


def find_gdscheck() -> str | None:
    found = shutil.which("gdscheck", path=_search_path())
    if found:
        return found
    candidates = ["/usr/local/cuda/gds/tools/gdscheck"]
    versioned = glob.glob("/usr/local/cuda-*/gds/tools/gdscheck")

    def version_key(path: str) -> tuple:
        m = re.search(r"cuda-(\d+)\.(\d+)", path)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    candidates += sorted(versioned, key=version_key, reverse=True)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def find_libcufile() -> dict:
    hits = []
    ld = run(["ldconfig", "-p"])
    for line in ld.get("out", "").splitlines():
        if "libcufile.so" in line and "=>" in line:
            hits.append(line.split("=>", 1)[1].strip())
    for pattern in (
        "/usr/local/cuda*/targets/*/lib/libcufile.so*",
        "/usr/local/cuda*/lib64/libcufile.so*",
        "/usr/lib/x86_64-linux-gnu/libcufile.so*",
        "/usr/lib64/libcufile.so*",
    ):
        hits.extend(sorted(glob.glob(pattern)))
    uniq = []
    for h in hits:
        if h not in uniq:
            uniq.append(h)
    return {"kind": "probe", "rc": 0 if uniq else None, "out": "\n".join(uniq), "err": ""}


# -- modprobe.d, the kernel command line and built-in modules (the p2pdma route) -------------
# Every directory some kmod reads (kmod >= 32 order); which of them the node's kmod reads, and
# in which order, the orchestrator decides from `modprobe --version`. The list is the shared
# parser's (plugins/module_utils/modprobe_conf.py, bundled in at send time). Whole files are
# sent (bounded), so that lines ending in a backslash are joined there as kmod joins them.
MODPROBE_DIRS = _modprobe_conf.MODPROBE_DIRS
MODPROBE_MAX_FILE = 64 * 1024
MODPROBE_MAX_TOTAL = 256 * 1024
# Built-in modules whose parameters come only from the kernel command line.
BUILTIN_WANTED = ("nvme_core", "nvme-core", "nvme", "nvidia")
GRUB_DEFAULT = "/etc/default/grub"
GRUB_DEFAULT_D = "/etc/default/grub.d"


def _read_bounded(path: str, limit: int) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def modprobe_options() -> dict:
    """Every *.conf file of the modprobe.d directories with its text (bounded) and the node's
    kmod version: out = {"files": [...], "texts": {path: text}, "kmod_version": "..."}."""
    files = []
    texts = {}
    total = 0
    truncated = []
    for directory in MODPROBE_DIRS:
        for path in sorted(glob.glob(os.path.join(directory, "*.conf")))[:512]:
            files.append(path)
            if total >= MODPROBE_MAX_TOTAL:
                truncated.append(path)
                continue
            text = _read_bounded(path, min(MODPROBE_MAX_FILE, MODPROBE_MAX_TOTAL - total))
            if text is None:
                continue
            total += len(text)
            texts[path] = text
    version = run(["modprobe", "--version"])
    doc = {"files": files, "texts": texts, "truncated": truncated,
           "kmod_version": (version.get("out") or "")[:200]}
    return {"kind": "probe", "rc": 0, "out": json.dumps(doc, sort_keys=True), "err": ""}


def boot_args_items() -> dict:
    """What sets kernel parameters for the next boot: the boot loader's kernel arguments
    (/etc/default/grub and grub.d on Debian/Ubuntu, `grubby --info=DEFAULT` on RHEL) and which
    of BUILTIN_WANTED are built into the running kernel (modules.builtin: they never read
    modprobe.d). /proc/cmdline is the item "cmdline"."""
    items = {"grub_default": read_file(GRUB_DEFAULT)}
    parts = {}
    for path in sorted(glob.glob(os.path.join(GRUB_DEFAULT_D, "*.cfg")))[:64]:
        text = _read_bounded(path, MODPROBE_MAX_FILE)
        if text is not None:
            parts[path] = text
    items["grub_default_d"] = {"kind": "probe", "rc": 0 if parts else None,
                               "out": json.dumps(parts, sort_keys=True), "err": ""}
    items["grubby_info_default"] = run(["grubby", "--info=DEFAULT"])
    release = platform.uname().release
    path = os.path.join("/lib/modules", os.path.basename(release), "modules.builtin")
    try:
        with open(path, "rb") as fh:
            text = fh.read(4 * MAX_TEXT).decode("utf-8", "replace")
    except OSError:
        items["modules_builtin"] = {"kind": "file", "path": path, "rc": None, "out": "",
                                    "err": "missing"}
    else:
        keep = [ln for ln in text.splitlines()
                if os.path.basename(ln.strip())[:-3] in BUILTIN_WANTED
                and ln.strip().endswith(".ko")]
        items["modules_builtin"] = {"kind": "file", "path": path, "rc": 0,
                                    "out": "\n".join(keep[:64]), "err": ""}
    return items


def nvme_topology() -> dict:
    """NVMe controllers (transport, address, subsystem NQN, state) from /sys/class/nvme, the
    controllers of each /sys/class/nvme-subsystem entry, the device numbers of the namespace
    nodes /dev/nvmeXnY[pZ] and the members of md arrays: what verify needs to tell the transport
    under a mount (its device number in /proc/self/mountinfo)."""
    doc: dict = {"controllers": {}, "subsystems": {}, "namespaces": {}, "md": {}}
    for d in sorted(glob.glob("/sys/class/nvme/nvme*")):
        entry: dict = {}
        for key in ("transport", "address", "subsysnqn", "state"):
            try:
                with open(os.path.join(d, key), encoding="utf-8", errors="replace") as fh:
                    entry[key] = fh.read().strip()
            except OSError:
                entry[key] = None
        doc["controllers"][os.path.basename(d)] = entry
    for d in sorted(glob.glob("/sys/class/nvme-subsystem/nvme-subsys*")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        doc["subsystems"][os.path.basename(d)] = sorted(
            n for n in names if re.match(r"^nvme\d+$", n))
    for path in sorted(glob.glob("/dev/nvme*n*")):
        name = os.path.basename(path)
        if not re.match(r"^nvme\d+n\d+(p\d+)?$", name):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        doc["namespaces"][name] = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    for d in sorted(glob.glob("/sys/block/md*")):
        try:
            with open(os.path.join(d, "dev"), encoding="utf-8") as fh:
                devno = fh.read().strip()
            doc["md"][os.path.basename(d)] = {
                "dev": devno,
                "slaves": sorted(os.listdir(os.path.join(d, "slaves"))),
            }
        except OSError:
            continue
    found = any(doc[k] for k in doc)
    return {"kind": "probe", "rc": 0 if found else None, "out": json.dumps(doc), "err": ""}


def gather() -> dict:
    items = {}
    uname = platform.uname()
    items["uname"] = {
        "kind": "probe",
        "rc": 0,
        "err": "",
        "out": f"{uname.system} {uname.release} {uname.version} {uname.machine}",
    }
    items["kernel_release"] = {"kind": "probe", "rc": 0, "out": uname.release, "err": ""}
    items["machine"] = {"kind": "probe", "rc": 0, "out": uname.machine, "err": ""}
    items["hostname"] = {"kind": "probe", "rc": 0, "out": uname.node, "err": ""}
    items["python"] = {"kind": "probe", "rc": 0, "out": sys.version.split()[0], "err": ""}
    files = {
        "os_release": "/etc/os-release",
        "boot_id": "/proc/sys/kernel/random/boot_id",
        "uptime": "/proc/uptime",
        "nvidia_version": "/proc/driver/nvidia/version",
        "nvfs_version": "/proc/driver/nvidia-fs/version",
        "nvfs_stats": "/proc/driver/nvidia-fs/stats",
        "nvfs_devcount": "/proc/driver/nvidia-fs/devcount",
        "nvme_multipath": "/sys/module/nvme_core/parameters/multipath",
        "cmdline": "/proc/cmdline",
        "mounts": "/proc/self/mounts",
        "mountinfo": "/proc/self/mountinfo",
        "reboot_required": "/var/lib/gdsfleet/reboot-required",
        "nvfs_modules_load": "/etc/modules-load.d/nvidia_fs.conf",
        "nvidia_params": "/proc/driver/nvidia/params",
    }
    for key, path in files.items():
        items[key] = read_file(path)
    cufile_path = os.environ.get("CUFILE_ENV_PATH_JSON") or "/etc/cufile.json"
    items["cufile_json"] = read_file(cufile_path)
    items["cufile_json"]["env_override"] = bool(os.environ.get("CUFILE_ENV_PATH_JSON"))
    items["cufile_files"] = cufile_files()  # block "cufile.json files for export env" below
    items["verify_runtime"] = read_file(VERIFY_RUNTIME_FACT)
    info = []
    for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        res = read_file(path)
        if res["rc"] == 0:
            info.append("# " + path + "\n" + res["out"])
    items["nvidia_gpus_information"] = {
        "kind": "file",
        "rc": 0 if info else None,
        "out": "\n".join(info),
        "err": "",
    }
    items["nvidia_module"] = module_params("nvidia")
    items["nvfs_module"] = module_params("nvidia_fs")
    items["nvme_module"] = module_params("nvme")
    items["iommu_class"] = listdir("/sys/class/iommu")
    items["kallsyms"] = grep_kallsyms()
    items["netfs_client_modules"] = _netfs_state.netfs_client_modules()
    items["rdma_ports"] = _netfs_state.rdma_ports()
    items["modinfo_license"] = run(["modinfo", "-F", "license", "nvidia"])
    items["modinfo_nvfs_version"] = run(["modinfo", "-F", "version", "nvidia_fs"])
    items["nvidia_smi_L"] = run(["nvidia-smi", "-L"])
    items["nvidia_smi_query"] = run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,pci.bus_id,driver_version,uuid",
            "--format=csv,noheader",
        ]
    )
    items["ofed_info"] = run(["ofed_info", "-s"])
    items["packages"] = packages()
    items["dkms_status"] = run(["dkms", "status"])
    # The kernel the node boots next: RHEL's grubby names it; elsewhere the newest
    # /boot/vmlinuz-* (GRUB's default entry on Debian/Ubuntu with GRUB_DEFAULT=0).
    items["boot_dir"] = listdir("/boot")
    items["grubby_default_kernel"] = run(["grubby", "--default-kernel"])
    items.update(kernel_gate_items())  # block "kernel gate state" below
    items["lsblk"] = lsblk()
    items["nvme_topology"] = nvme_topology()
    items["mokutil_sb_state"] = run(["mokutil", "--sb-state"])
    items["libcufile"] = find_libcufile()
    items["modprobe_options"] = modprobe_options()
    items.update(boot_args_items())
    items["operator_driver_root"] = listdir(OPERATOR_DRIVER_ROOT)
    items["operator_validations"] = listdir(OPERATOR_VALIDATIONS)
    items["operator_driver_ready"] = operator_driver_ready()
    gdscheck = find_gdscheck()
    if gdscheck is None:
        items["gdscheck"] = {"kind": "cmd", "rc": None, "out": "", "err": "not found"}
    else:
        items["gdscheck"] = run([gdscheck, "-p"], timeout=GDSCHECK_TIMEOUT)
    return {"gdsfleet_gather": SCHEMA, "items": items}


# --- block: cufile.json files for `export env` (issue 15 item 10) -----------------------------
# Which cufile.json files exist on the node, so that `provisioner export env` can point a job's
# CUFILE_ENV_PATH_JSON at one that exists and says allow_compat_mode false: the fixed lookup
# path and the CUDA toolkits' own copies (the H100 capture has /usr/local/cuda/gds/cufile.json,
# tests/fixtures/h100/README.md). Each file's text travels in "files" (parsed by the controller,
# provisioner/verify/facts.py), not in "out", so the raw outputs stay small.
CUFILE_FILE_CANDIDATES = ("/etc/cufile.json", "/usr/local/cuda/gds/cufile.json")
CUFILE_FILE_GLOB = "/usr/local/cuda-*/gds/cufile.json"
CUFILE_FILE_MAX = 6
CUFILE_FILE_BYTES = 256 * 1024


def cufile_files() -> dict:
    paths = list(CUFILE_FILE_CANDIDATES)
    paths += [p for p in sorted(glob.glob(CUFILE_FILE_GLOB)) if p not in paths]
    files = []
    for path in paths[:CUFILE_FILE_MAX]:
        entry: dict = {"path": path, "exists": os.path.isfile(path), "text": None, "err": ""}
        if entry["exists"]:
            entry["realpath"] = os.path.realpath(path)
            try:
                with open(path, "rb") as fh:
                    data = fh.read(CUFILE_FILE_BYTES + 1)
                if len(data) > CUFILE_FILE_BYTES:
                    entry["err"] = f"larger than {CUFILE_FILE_BYTES} bytes"
                else:
                    entry["text"] = data.decode("utf-8", "replace")
            except OSError as exc:
                entry["err"] = str(exc)
        files.append(entry)
    found = [f["path"] for f in files if f["exists"]]
    return {"kind": "probe", "rc": 0, "out": "\n".join(found), "err": "", "files": files}
# --- end of block: cufile.json files ---------------------------------------------------------


# --- block: kernel gate state (issue 29) ------------------------------------------------------
# What the kernel gate (gdsfleet.gds.kernel_gate, and the kernel hook the nvidia_fs role
# installs) recorded, and the GRUB settings that say which entry boots next on Debian/Ubuntu
# (the gate keeps a kernel the default with GRUB_DEFAULT=saved and grub-set-default).
# Parsed on the controller (provisioner/verify/parsers/kernel_gate.py).
KERNEL_GATE_STATE = "/var/lib/gdsfleet/kernel-gate.json"


def kernel_gate_items() -> dict:
    default_lines = []
    for path in ["/etc/default/grub"] + sorted(glob.glob("/etc/default/grub.d/*.cfg"))[:32]:
        res = read_file(path)
        for line in res["out"].splitlines():
            if line.strip().startswith("GRUB_DEFAULT="):
                default_lines.append(line.strip()[:512])
    return {
        "kernel_gate_state": read_file(KERNEL_GATE_STATE),
        "grub_default_entry": {"kind": "probe", "rc": 0, "out": "\n".join(default_lines[-64:]),
                         "err": ""},
        "grubenv": read_file("/boot/grub/grubenv"),
    }
# --- end of block: kernel gate state ---------------------------------------------------------


def main() -> int:
    try:
        doc = gather()
    except Exception as exc:  # noqa: BLE001 - report, never crash without a document
        doc = {"gdsfleet_gather": SCHEMA, "items": {}, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(doc, sort_keys=True))
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
