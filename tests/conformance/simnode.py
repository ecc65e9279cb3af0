"""TEST STAND-IN (conformance matrix): a node profile (tests/conformance/profiles/*.yml) becomes a
simulated node: a directory tree with the node's /proc, /sys, /etc, /run, /dev, /boot and library
files plus a JSON model of its commands (read by tests/conformance/shim.py), and the document the
node's I/O test reports. Everything here is SYNTHETIC, built from the profile's axes by the rules
in tests/conformance/README.md; nothing is a capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from provisioner import collection_utils
from provisioner.remote import load_script
from tests.unit import nodefacts as nf

_netfs_rules = collection_utils.load("netfs_rules.py")

HERE = Path(__file__).resolve().parent
SHIM = HERE / "shim.py"

# OS axis -> os-release, its own kernel, package manager (what each distribution ships)
OS = {
    "debian-12": ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
                  "6.1.0-31-amd64", "dpkg"),
    "ubuntu-22.04": ('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\n'
                     'VERSION_ID="22.04"\n', "5.15.0-139-generic", "dpkg"),
    "ubuntu-24.04": ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nID_LIKE=debian\n'
                     'VERSION_ID="24.04"\n', "6.8.0-60-generic", "dpkg"),
    "rhel-8": ('PRETTY_NAME="Red Hat Enterprise Linux 8.10 (Ootpa)"\nID="rhel"\n'
               'ID_LIKE="fedora"\nVERSION_ID="8.10"\n', "4.18.0-553.el8_10.x86_64", "rpm"),
    "rhel-9": ('PRETTY_NAME="Red Hat Enterprise Linux 9.6 (Plow)"\nID="rhel"\n'
               'ID_LIKE="fedora"\nVERSION_ID="9.6"\n', "5.14.0-570.12.1.el9_6.x86_64", "rpm"),
    "rhel-9.5": ('PRETTY_NAME="Red Hat Enterprise Linux 9.5 (Plow)"\nID="rhel"\n'
                 'ID_LIKE="fedora"\nVERSION_ID="9.5"\n', "5.14.0-503.11.1.el9_5.x86_64", "rpm"),
    "rocky-9": ('PRETTY_NAME="Rocky Linux 9.6 (Blue Onyx)"\nID="rocky"\n'
                'ID_LIKE="rhel centos fedora"\nVERSION_ID="9.6"\n',
                "5.14.0-570.17.1.el9_6.x86_64", "rpm"),
}
# kernel axis -> the release that replaces the OS's own (Ubuntu's HWE kernels)
KERNEL = {"6.8": "6.8.0-60-generic", "6.17": "6.17.0-5-generic", "6.18": "6.18.3-061803-generic"}
# arch axis -> the CUDA toolkit's target folder (targets/<folder>/lib), the driver's banner and
# the GPUs nvidia-smi lists (Grace Hopper's GH200 on aarch64)
ARCH = {"x86_64": ("x86_64-linux", "x86_64", "NVIDIA H100 80GB HBM3"),
        "aarch64": ("sbsa-linux", "aarch64", "NVIDIA GH200 480GB")}
# CUDA axis -> (package series, libcufile release): docs gds-reference "Observed pairs"
# (12.8 -> 1.13.x, 12.9 -> 1.14.x, 13.0 -> 1.15.1); "newest": the wheel kvikio's
# cuda-toolkit[cufile]==13.* resolves to (issue 28: nvidia-cufile 1.19.x), its series a stand-in
CUDA = {"12.8": ("12-8", "1.13.1"), "12.9": ("12-9", "1.14.1"), "13.0": ("13-0", "1.15.1"),
        "newest": ("13-2", "1.19.0")}
DRIVER_VERSION = "580.95.05"
NVME_V1, NVME_V2 = "nvme_v1_register_nvfs_dma_ops", "nvme_v2_register_nvfs_dma_ops"
NVME_RDMA = "nvme_rdma_v1_register_nvfs_dma_ops"
# storage axis values that are network filesystems (provisioner/verify/netfs.py): no NVMe under
# the mount; the profile's node.netfs_mount says what is mounted (fstype, source, options)
NETFS = ("nfs-rdma", "nfs-tcp", "lustre", "gpfs", "wekafs", "beegfs", "virtiofs")
NETFS_DEVNO = "0:50"
# the kernel module of each network filesystem's GDS client, the one nvidia-fs registers with, and
# the registration symbol it exports: the one table plugins/module_utils/netfs_caps.json (from
# NVIDIA/gds-nvidia-fs src/nvfs-dma.c modules_list at v2.28.4; a loaded module shows as
# /sys/module/NAME, a client built with GDS exports its symbol; node.netfs_client_symbols
# replaces the list: an rpcrdma without it is []); the RDMA port a netfs node has up unless its
# profile says otherwise
NETFS_CLIENT_MODULE = {t: _netfs_rules.entry(t)["client_module"]
                       for t in _netfs_rules.mount_types()
                       if _netfs_rules.entry(t)["client_module"]}
NETFS_RDMA_PORTS = {"mlx5_0/1": "4: ACTIVE"}
NETFS_RDMA_ADDRS = ["192.0.2.10"]  # TEST-NET-1: the client NIC cufile.json names
# per-mount (VFS) flags: mountinfo's field 6; everything else is the superblock's
VFS_FLAGS = ("rw", "ro", "noatime", "relatime", "strictatime", "nodiratime", "nosuid", "nodev",
             "noexec")  # an anonymous device number, as the kernel gives a network mount


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def kernel_release(profile: dict[str, Any]) -> str:
    ax = profile["axes"]
    k = ax.get("kernel")
    release = KERNEL[k] if k in KERNEL else OS[ax["os"]][1]
    # RHEL names the architecture in the release; Ubuntu's arm64 kernels keep the same names
    return release.replace(".x86_64", "." + ax.get("arch", "x86_64"))


def _lookup_v2(nvfs: str | None, release: str) -> bool:
    """The nvidia-fs build looks up the v2 name (2.28.2+ built on 6.17+; fixture kallsyms)."""
    kern = _vt(".".join(release.split(".")[:2]))
    return bool(nvfs) and _vt(nvfs) >= (2, 28, 2) and kern >= (6, 17)


def model(profile: dict[str, Any]) -> dict[str, Any]:
    """Every fact of the simulated node, from the profile's axes and its ``node`` overrides."""
    ax = profile["axes"]
    over = profile.get("node") or {}
    os_text, _, manager = OS[ax["os"]]
    release = kernel_release(profile)
    series, cufile_ver = CUDA[ax["cuda"]]
    cuda_dir = "13.2" if ax["cuda"] == "newest" else ax["cuda"]
    route, dep, storage = ax["route"], ax["deployment"], ax["storage"]
    operator = dep == "operator"
    host_gds = route in ("nvfs", "p2pdma", "compat") and not operator
    nvfs = ax.get("nvidia_fs") if route == "nvfs" else None
    reg = ax.get("nvme_registration", "none")
    v2 = _lookup_v2(nvfs, release)
    exported = {"v1": [NVME_V1], "v2": [NVME_V2], "rdma": [], "none": [],
                "mismatched": [NVME_V1 if v2 else NVME_V2]}[reg]
    rdma_patched = reg == "rdma" or (storage == "nvmeof-rdma" and reg in ("v1", "v2"))
    kallsyms = [f"ffffffffc0a1{i:04x} T {s}\t[nvme]" for i, s in enumerate(exported)]
    if rdma_patched:
        kallsyms.append(f"ffffffffc0c3d4e0 T {NVME_RDMA}\t[nvme_rdma]")
    if nvfs:
        kallsyms.append("ffffffffc1000010 t nvfs_mgroup_get\t[nvidia_fs]")
        if v2:
            kallsyms.append("ffffffffc1000020 t nvfs_blk_rq_dma_map_iter_start\t[nvidia_fs]")
    p2p_kernel = over.get("p2pdma_kernel", route == "p2pdma")
    if p2p_kernel:
        kallsyms.append("ffffffff81a2b3c0 T pci_p2pdma_add_resource")
        if over.get("kallsyms_all"):
            kallsyms.append("ffffffff82c3d4e0 d p2pdma_pgmap_ops")
    packages: list[dict[str, str]] = []

    def pkg(name: str, version: str, rel: str = "1") -> None:
        packages.append({"name": name, "version": version if manager == "rpm" else
                         f"{version}-{rel}", "release": rel})

    if not operator:
        pkg("nvidia-open" if ax["driver"] == "open" else "cuda-drivers", DRIVER_VERSION)
    if host_gds:
        cv = "13.2.0" if ax["cuda"] == "newest" else f"{ax['cuda']}.1"
        for name in (f"cuda-toolkit-{series}", f"nvidia-gds-{series}"):
            pkg(name, cv)
        for name in (f"libcufile-{series}", f"gds-tools-{series}"):
            pkg(name, cufile_ver)
    if nvfs and not operator:
        pkg("nvidia-fs", nvfs)
        pkg("nvidia-fs-dkms", nvfs)
    ofed = None
    if route == "nvfs" and not operator and (reg != "none" or storage in NETFS):
        # a node whose GDS storage is only a network mount has DOCA for its RDMA NIC (the NFS-RDMA
        # client, o2ib) but, with nvme_registration none, no GDS-patched nvme driver
        pkg("doca-ofed", "3.1.0")
        if reg != "none":
            pkg("mlnx-nvme-dkms", "25.07")
        ofed = "OFED-internal-25.07-0.9.7"
    # storage: the GDS mount and the NVMe controllers under it
    mount: dict[str, Any] = {"target": "/mnt/gds", "fstype": "xfs", "options": "rw,noatime"}
    if storage in NETFS:
        net = over.get("netfs_mount") or {}
        ctrls, namespaces, md = {}, {}, {}
        mount.update(source=str(net["source"]), devno=NETFS_DEVNO, fstype=str(net["fstype"]),
                     options=str(net["options"]))
    elif storage == "raid0":
        ctrls = {"nvme0": "pcie", "nvme1": "pcie"}
        mount.update(source="/dev/md127", devno="9:127")
        namespaces = {"nvme0n1": "259:0", "nvme1n1": "259:1"}
        md = {"md127": {"dev": "9:127", "slaves": ["nvme0n1", "nvme1n1"]}}
    else:
        ctrls = {"nvme0": {"local-nvme": "pcie", "nvmeof-rdma": "rdma",
                           "nvmeof-tcp": "tcp"}[storage]}
        mount.update(source="/dev/nvme0n1", devno="259:0")
        namespaces, md = {"nvme0n1": "259:0"}, {}
    lsblk_devs: list[dict[str, Any]] = [{"name": "sda", "tran": "sata", "type": "disk",
                                         "children": [{"name": "sda1", "mountpoint": "/"}]}]
    for ns in namespaces:
        entry: dict[str, Any] = {"name": ns, "tran": "nvme", "type": "disk"}
        if md:
            entry["children"] = [{"name": "md127", "type": "raid0", "fstype": "xfs",
                                  "mountpoint": "/mnt/gds"}]
        else:
            entry.update(fstype="xfs", mountpoint="/mnt/gds")
        lsblk_devs.append(entry)
    arch = ax.get("arch", "x86_64")
    target, _banner, gpu_name = ARCH[arch]
    gpus = [{"name": gpu_name, "bdf": f"00000000:{0x19 + i:02X}:00.0"} for i in range(2)]
    # a network filesystem's client module loaded, an RDMA port and the client NIC in
    # cufile.json (node.netfs_client_modules, node.rdma_ports, node.rdma_dev_addr_list)
    net_fstype = str((over.get("netfs_mount") or {}).get("fstype")) if storage in NETFS else ""
    client_modules = over.get("netfs_client_modules", [NETFS_CLIENT_MODULE[net_fstype]]
                              if net_fstype in NETFS_CLIENT_MODULE else [])
    cap = _netfs_rules.entry(net_fstype) if net_fstype else None
    client_symbols = over.get("netfs_client_symbols", [cap["registration_symbol"]] if (
        cap and cap.get("registration_symbol") and cap.get("client_module") in client_modules)
        else [])
    kallsyms += [f"ffffffffc0d1{i:04x} T {s}\t[{cap['client_module'] if cap else 'x'}]"
                 for i, s in enumerate(client_symbols)]
    rdma_ports = over.get("rdma_ports", NETFS_RDMA_PORTS if storage in NETFS else {})
    rdma_addrs = over.get("rdma_dev_addr_list", NETFS_RDMA_ADDRS if storage in NETFS else [])
    cufile_json = over.get("cufile_json")
    if cufile_json is None and (host_gds or operator) and route != "none":
        p2p = "true" if route == "p2pdma" else "false"
        addrs = (f', "rdma_dev_addr_list": {json.dumps(rdma_addrs)}' if rdma_addrs else "")
        cufile_json = ('{\n  // rendered by gdsfleet.gds.cufile\n  "properties": '
                       f'{{"allow_compat_mode": false, "use_pci_p2pdma": {p2p}{addrs}}},\n'
                       f'  "block": {{"nvme": {{"use_pci_p2pdma": {p2p}}}}},\n'
                       '  "logging": {"level": "ERROR"}\n}\n')
    nvme_ok = bool(nvfs) and ((NVME_V2 if v2 else NVME_V1) in exported)
    gdscheck = None
    if host_gds:
        gdscheck = {"gds_version": f"{cufile_ver}.6", "nvfs": ".".join((nvfs or "0.0").split(
            ".")[:2]), "p2pdma": over.get("gdscheck_p2pdma", "Supported" if route == "p2pdma"
                                           and p2p_kernel else "Unsupported"),
                    "nvme": over.get("gdscheck_nvme", "Supported" if nvme_ok else "Unsupported"),
                    "nvmeof": "Supported" if nvfs and rdma_patched else "Unsupported",
                    "format": over.get("gdscheck_format", "lines"),
                    # the whole NVMe line in the modes format (Grace's "c2c, nvfs, compat")
                    "nvme_modes": over.get("gdscheck_nvme_modes"),
                    # a network filesystem's lines and the --rdma lines (netfs profiles)
                    "netfs": {str(k): str(v) for k, v in
                              (over.get("gdscheck_netfs") or {}).items()}}
    commands = ["lsblk", "mokutil", "ldconfig", "modprobe"]
    commands += ["dpkg-query"] if manager == "dpkg" else ["rpm", "grubby"]
    if not operator:
        commands += ["modinfo", "nvidia-smi"]
    if host_gds:
        commands += ["gdscheck"]
    if nvfs and not operator:
        commands += ["dkms"]
    if ofed:
        commands += ["ofed_info"]
    modinfo: dict[str, dict[str, str]] = {}
    if not operator:
        modinfo["nvidia"] = {"license": "Dual MIT/GPL" if ax["driver"] == "open" else "NVIDIA",
                             "version": DRIVER_VERSION}
        if nvfs:
            modinfo["nvidia_fs"] = {"version": nvfs}
    validations: list[str] = []
    ready = None
    if dep == "operator":
        validations = ["driver-ready", "nvidia-fs-ready", "toolkit-ready"]
        ready = ("IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"
                 "DRIVER_ROOT_CTR_PATH=/run/nvidia/driver\n")
    elif dep == "operator-host-driver":
        validations = ["driver-ready", "toolkit-ready"]
        ready = "IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\n"
    libcufile = (f"/usr/local/cuda-{cuda_dir}/targets/{target}/lib/libcufile.so.{cufile_ver}"
                 if host_gds else None)
    multipath = "N" if route == "p2pdma" else "Y"
    dwords = "RMForceStaticBar1=1;RmForceDisableIomapWC=1;" if route == "p2pdma" else ""
    m = {
        "hostname": profile["id"][:60], "kernel": release, "os_release": os_text, "arch": arch,
        "manager": manager, "packages": packages, "commands": sorted(set(commands)),
        "modinfo": modinfo, "driver": ax["driver"], "driver_version": DRIVER_VERSION,
        "gpus": gpus, "nvfs": nvfs, "kallsyms": kallsyms, "ofed": ofed,
        "dkms": ([f"nvidia-fs/{nvfs}"] + (["mlnx-nvme/25.07"] if ofed and reg != "none" else []))
        if nvfs and not operator else [],
        "storage": storage, "controllers": ctrls, "namespaces": namespaces, "md": md,
        "mount": mount,
        "devices": {f"/dev/{k}": v for k, v in namespaces.items()},
        "lsblk": {"blockdevices": lsblk_devs}, "cufile_json": cufile_json,
        "gdscheck": gdscheck, "cuda_dir": cuda_dir, "libcufile": libcufile,
        "ldconfig": [libcufile] if libcufile else [], "operator": dep,
        "validations": validations, "driver_ready": ready, "multipath": multipath,
        "registry_dwords": dwords, "cmdline": "BOOT_IMAGE=/vmlinuz ro quiet",
        "p2pdma_modprobe": route == "p2pdma",
        "verify_runtime": route != "none",
        "netfs_client_modules": list(client_modules), "rdma_ports": dict(rdma_ports),
        # the kernel the node boots next (installed beside the running one; grubby's default)
        # and the kernel gate's state file (/var/lib/gdsfleet/kernel-gate.json), as
        # plugins/module_utils/kernel_boot.py record() writes it
        "next_kernel": None, "kernel_gate_state": None,
    }
    m.update(over.get("model") or {})
    return m


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def build_root(profile: dict[str, Any], root: Path) -> dict[str, Any]:
    """Write the simulated node under ``root``; return its model."""
    m = model(profile)
    w = lambda p, t: _write(root, p, t)  # noqa: E731
    w("/.sim/node.json", json.dumps(m))
    w("/etc/os-release", m["os_release"])
    w("/proc/sys/kernel/random/boot_id", "0f0e0d0c-0b0a-0908-0706-050403020100\n")
    w("/proc/cmdline", m["cmdline"] + "\n")
    w("/proc/kallsyms", "".join(line + "\n" for line in m["kallsyms"]))
    flavor = (f"NVIDIA UNIX Open Kernel Module for {m['arch']}" if m["driver"] == "open"
              else f"NVIDIA UNIX {m['arch']} Kernel Module")
    w("/proc/driver/nvidia/version", f"NVRM version: {flavor}  {m['driver_version']}  Release "
      "Build  (dvs-builder@U22)\nGCC version:  gcc version 12.3.0\n")
    w("/sys/module/nvidia/version", m["driver_version"] + "\n")
    w("/sys/module/nvidia/parameters/NVreg_OpenRmEnableUnsupportedGpus", "1\n")
    w("/proc/driver/nvidia/params", "EnableStreamMemOPs: 0\n"
      f'RegistryDwords: "{m["registry_dwords"]}"\nRegistryDwordsPerDevice: ""\n')
    for g in m["gpus"]:
        bdf = g["bdf"][4:].lower()
        w(f"/proc/driver/nvidia/gpus/{bdf}/information",
          f"Model: \t\t {g['name']}\nBus Location: \t {bdf}\n")
    if m["nvfs"]:
        w("/sys/module/nvidia_fs/version", m["nvfs"] + "\n")
        for k, v in (("rw_stats_enabled", "0"), ("max_devices", "16")):
            w(f"/sys/module/nvidia_fs/parameters/{k}", v + "\n")
        w("/proc/driver/nvidia-fs/version", "version: " + ".".join(m["nvfs"].split(".")[:2])
          + "\n")
        w("/proc/driver/nvidia-fs/stats", nf.stats(io="Disabled").replace("2.26.6", m["nvfs"]))
        w("/proc/driver/nvidia-fs/devcount", "16\n")
        if m["operator"] != "operator":
            w("/etc/modules-load.d/nvidia_fs.conf", "nvidia_fs\n")
    w("/sys/module/nvme_core/parameters/multipath", m["multipath"] + "\n")
    w("/sys/module/nvme/parameters/io_queue_depth", "1024\n")
    if m["p2pdma_modprobe"]:
        w("/etc/modprobe.d/zz-gdsfleet-p2pdma.conf", "options nvme_core multipath=N\n"
          f'options nvidia NVreg_RegistryDwords="{m["registry_dwords"]}"\n')
    w("/etc/modprobe.d/blacklist.conf", "blacklist nouveau\n")
    for mod in m.get("netfs_client_modules") or []:
        w(f"/sys/module/{mod}/refcnt", "1\n")
    for devport, state in (m.get("rdma_ports") or {}).items():
        dev, port = devport.split("/")
        w(f"/sys/class/infiniband/{dev}/ports/{port}/state", state + "\n")
    mt = m["mount"]
    w("/proc/self/mounts", "/dev/sda1 / ext4 rw,relatime 0 0\nproc /proc proc rw 0 0\n"
      f"{mt['source']} {mt['target']} {mt['fstype']} {mt['options']} 0 0\n")
    # mountinfo splits them as the kernel does: the VFS flags per mount (field 6), the rest
    # (an NFS mount's vers=, proto=, port=...) after the separator with the superblock's rw/ro
    opts = mt["options"].split(",")
    vfs = [o for o in opts if o in VFS_FLAGS]
    sb = [o for o in opts if o in ("rw", "ro")] + [o for o in opts if o not in VFS_FLAGS]
    w("/proc/self/mountinfo", "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      f"36 22 {mt['devno']} / {mt['target']} {','.join(vfs)} shared:2 - {mt['fstype']} "
      f"{mt['source']} {','.join(sb)}\n")
    (root / "mnt" / "gds").mkdir(parents=True, exist_ok=True)
    for ctrl, tr in m["controllers"].items():
        base = f"/sys/class/nvme/{ctrl}"
        w(f"{base}/transport", tr + "\n")
        w(f"{base}/address", ("0000:41:00.0" if tr == "pcie" else
                              "traddr=192.168.100.10,trsvcid=4420") + "\n")
        w(f"{base}/subsysnqn", f"nqn.2026-01.io.gdsfleet:{ctrl}\n")
        w(f"{base}/state", "live\n")
        (root / f"sys/class/nvme-subsystem/nvme-subsys{ctrl[4:]}/{ctrl}").mkdir(parents=True,
                                                                             exist_ok=True)
    for ns in m["namespaces"]:
        w(f"/dev/{ns}", "")
    for name, entry in m["md"].items():
        w(f"/sys/block/{name}/dev", entry["dev"] + "\n")
        for s in entry["slaves"]:
            (root / f"sys/block/{name}/slaves/{s}").mkdir(parents=True, exist_ok=True)
    if m["cufile_json"] is not None:
        w("/etc/cufile.json", m["cufile_json"])
    if m["libcufile"]:
        w(m["libcufile"], "")
        w(f"/usr/local/cuda-{m['cuda_dir']}/gds/tools/gdscheck", "")
        os.chmod(root / f"usr/local/cuda-{m['cuda_dir']}/gds/tools/gdscheck", 0o700)
    w(f"/boot/vmlinuz-{m['kernel']}", "")
    if m["next_kernel"]:
        w(f"/boot/vmlinuz-{m['next_kernel']}", "")
    if m["kernel_gate_state"] is not None:
        w("/var/lib/gdsfleet/kernel-gate.json", json.dumps(m["kernel_gate_state"], indent=1))
    w(f"/lib/modules/{m['kernel']}/modules.builtin", "kernel/drivers/block/loop.ko\n")
    if m["operator"] == "operator":
        w("/run/nvidia/driver/usr/bin/nvidia-smi", "")
        w("/run/nvidia/driver/lib/modules/.keep", "")
    for v in m["validations"]:
        w(f"/run/nvidia/validations/{v}", m["driver_ready"] if v == "driver-ready" else "")
    if m["verify_runtime"]:
        w("/etc/ansible/facts.d/gdsfleet_verify_runtime.fact", json.dumps({
            "python": "/opt/gdsfleet/venv/bin/python", "kvikio_version": "26.10.00",
            "cupy_version": "14.0.1", "cuda_major": 13 if m["cuda_dir"].startswith("13") else 12,
            "venv": "/opt/gdsfleet/venv", "source": "wheels"}))
    return m


def run_gather(root: Path) -> dict[str, Any]:
    """The REAL gather script (provisioner/remote/gather.py, bundled as it is sent to a node)
    run against the simulated node: its one JSON document."""
    proc = subprocess.run([sys.executable, str(SHIM), str(root)], input=load_script("gather.py"),
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert not doc.get("error"), doc.get("error")
    return doc


# -- the I/O test's report --------------------------------------------------------------------
WHEEL = "/opt/gdsfleet/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0"


def io_document(profile: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    """What the node's I/O test reports (the document provisioner/remote/iotest.py prints),
    for the profile's ``io`` outcome: direct-nvfs (nvidia-fs counters cover the bytes),
    direct-p2pdma (cuFile's log shows P2PDMA I/O), direct-cufile-stats (WekaFS, Storage Scale:
    cuFile's own statistics, nvidia-fs's counters still), compat (direct refused, POSIX works),
    skipped (no verification runtime). ``libcufile``: the host's library when the node has one,
    else the runtime's nvidia-cufile wheel; ``wheel`` sets the wheel's version (default: the
    host's release, as a pinned runtime has)."""
    io = profile.get("io") or {}
    outcome = io.get("outcome")
    if outcome == "skipped":
        return nf.skipped_io("kvikio", "No module named 'kvikio'")
    if outcome == "direct-nvfs":
        doc = nf.direct_nvfs_io()
    elif outcome == "direct-p2pdma":
        doc = nf.direct_p2pdma_io()
    elif outcome == "direct-cufile-stats":
        # WekaFS, Storage Scale: nvidia-fs's counters still, cuFile's own statistics count the
        # reads; the writes through POSIX unless io.writes is direct
        doc = nf.direct_userspace_io(writes_direct=io.get("writes") == "direct")
    else:
        doc = nf.compat_io()
    if "nvfs_modules" in io:
        # /proc/driver/nvidia-fs/modules as the direct attempt read it (nvfs-proc.c: "name:
        # version"; the version column as nvidia-fs prints a module it found: an assumption)
        doc["attempts"][0]["nvfs_modules"] = "".join(f"{n}: (null)\n"
                                                     for n in io["nvfs_modules"])
    host_ver = m["libcufile"].rsplit(".so.", 1)[1] if m["libcufile"] else None
    wheel_ver = io.get("wheel", f"{host_ver}.6" if host_ver else "1.15.1.6")
    used = m["libcufile"] if m["libcufile"] else WHEEL
    doc["libcufile"] = {"host": {"path": m["libcufile"], "real": m["libcufile"],
                                 "source": "ldconfig" if m["libcufile"] else None,
                                 "version": host_ver},
                        "wheel": {"distribution": "nvidia-cufile", "version": wheel_ver,
                                  "path": WHEEL},
                        "prefer_host": True}
    for att in doc["attempts"]:
        att["libcufile_preload"] = {"path": m["libcufile"],
                                    "error": None if m["libcufile"] else "no host libcufile"}
        att["libcufile_mapped"] = [used]
    return doc
