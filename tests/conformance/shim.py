"""TEST STAND-IN (conformance matrix): runs a node-side script (provisioner/remote/*, read on
stdin) against a SIMULATED node: a directory tree that holds the node's /proc, /sys, /etc, /run,
/dev, /boot and library files, and a JSON node model for the commands the script runs.

Usage: ``python shim.py ROOT [script args...] < script.py``

In this child process only, the file-system calls the scripts use (open, os.listdir, os.stat,
os.path.*, os.access, glob.glob) see ROOT in place of the node's absolute paths under
:data:`PREFIXES`; ``platform.uname`` answers the node's kernel; ``shutil.which`` and
``subprocess.run`` answer with the stand-in commands below, each rendering the node model the
way the real tool prints it (dpkg-query, rpm, modinfo, nvidia-smi, dkms, ofed_info, lsblk,
mokutil, ldconfig, grubby, modprobe, gdscheck). Nothing here runs on a real node.
"""

from __future__ import annotations

import builtins
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

ROOT = os.path.abspath(sys.argv[1])
PREFIXES = ("/proc/", "/sys/", "/etc/", "/run/", "/dev/", "/boot", "/lib/modules/",
            "/usr/local/cuda", "/usr/lib/x86_64-linux-gnu/libcufile", "/usr/lib64/libcufile",
            "/usr/lib/modprobe.d", "/lib/modprobe.d", "/usr/local/lib/modprobe.d",
            "/var/lib/gdsfleet", "/mnt/", "/opt/gdsfleet")
with open(os.path.join(ROOT, ".sim", "node.json"), encoding="utf-8") as _fh:
    NODE: dict[str, Any] = json.load(_fh)


def _map(path: Any) -> Any:
    if isinstance(path, bytes):
        return os.fsencode(_map(os.fsdecode(path)))
    if isinstance(path, str) and path.startswith(PREFIXES) and not path.startswith(ROOT):
        return ROOT + path
    return path


def _unmap(path: str) -> str:
    return path[len(ROOT):] if path.startswith(ROOT + "/") else path


_open, _listdir, _stat, _access = builtins.open, os.listdir, os.stat, os.access
_isdir, _isfile, _exists, _realpath = (os.path.isdir, os.path.isfile, os.path.exists,
                                       os.path.realpath)
_glob = glob.glob


def _fake_open(file: Any, *args: Any, **kwargs: Any) -> Any:
    return _open(_map(file), *args, **kwargs)


def _fake_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
    dev = NODE.get("devices", {}).get(path) if isinstance(path, str) else None
    st = _stat(_map(path), *args, **kwargs)
    if dev:  # a block device node: its device number from the model
        major, minor = (int(x) for x in dev.split(":"))
        fields = list(st)
        return os.stat_result(fields, {"st_rdev": os.makedev(major, minor)})
    return st


def _fake_glob(pattern: str, *args: Any, **kwargs: Any) -> list[str]:
    mapped = _map(pattern)
    found = _glob(mapped, *args, **kwargs)
    return [_unmap(p) for p in found] if mapped != pattern else found


def _fake_realpath(path: Any, *args: Any, **kwargs: Any) -> Any:
    mapped = _map(path)
    real = _realpath(mapped, *args, **kwargs)
    return _unmap(real) if mapped != path else real


builtins.open = _fake_open  # type: ignore[assignment]
os.listdir = lambda path=".": _listdir(_map(path))  # type: ignore[assignment]
os.stat = _fake_stat  # type: ignore[assignment]
os.access = lambda path, mode, *a, **k: _access(_map(path), mode, *a, **k)  # type: ignore
os.path.isdir = lambda p: _isdir(_map(p))  # type: ignore[assignment]
os.path.isfile = lambda p: _isfile(_map(p))  # type: ignore[assignment]
os.path.exists = lambda p: _exists(_map(p))  # type: ignore[assignment]
os.path.realpath = _fake_realpath  # type: ignore[assignment]
glob.glob = _fake_glob  # type: ignore[assignment]

_uname = platform.uname()
platform.uname = lambda: _uname._replace(  # type: ignore[assignment]
    node=NODE["hostname"], release=NODE["kernel"], version="#1 SMP",
    machine=NODE.get("arch", "x86_64"))


# -- stand-in commands ------------------------------------------------------------------------
def _pkg_lines(fmt_rpm: bool) -> str:
    rows = []
    for p in NODE.get("packages", []):
        if fmt_rpm:
            rows.append(f"{p['name']}\t{p['version']}-{p['release']}\tii \n")
        else:
            rows.append(f"{p['name']}\t{p['version']}\tii \n")
    return "".join(rows)


# the node model's keys for gdscheck's --rdma lines (DRIVER CONFIGURATION, after the
# filesystems' lines: tests/fixtures/gdscheck/netfs-gds-1.10.0.4_nfs-supported.yml)
_RDMA_LINES = (("peerdirect", "--Mellanox PeerDirect"), ("dmabuf", "--DmaBuf support"),
               ("rdma_library", "--rdma library"), ("rdma_devices", "--rdma devices"),
               ("rdma_device_status", "--rdma_device_status"))


def _gdscheck_netfs(g: dict[str, Any]) -> str:
    """A network filesystem's DRIVER CONFIGURATION line per key (``NFS : Supported``), then the
    ``--rdma library`` / ``--rdma devices`` / ``--rdma_device_status`` lines."""
    net = dict(g.get("netfs") or {})
    rdma = {label: net.pop(key) for key, label in _RDMA_LINES if key in net}
    return ("".join(f" {k:<18} : {v}\n" for k, v in net.items())
            + "".join(f" {k:<21} : {v}\n" for k, v in rdma.items()))


def _gdscheck() -> str:
    g = NODE["gdscheck"]
    if g.get("format") == "modes":  # GDS 1.16.0.49: the modes a path can take, no P2PDMA line
        nvme = g.get("nvme_modes") or ", ".join(
            [m for m, on in (("p2pdma", g["p2pdma"] == "Supported"),
                             ("nvfs", g["nvme"] == "Supported")) if on] + ["compat"])
        arch = NODE.get("arch", "x86_64")
        gpu = NODE["gpus"][0]["name"]
        of = "nvfs, compat" if g["nvmeof"] == "Supported" else "compat"
        return (f"GDS release version: {g['gds_version']}\nnvidia_fs version: {g['nvfs']} "
                f"nvidia_fs minimum version: 2.12\nPlatform: {arch}\n============\n"
                "ENVIRONMENT:\n============\n=====================\nDRIVER CONFIGURATION:\n"
                f"=====================\nNVMe : {nvme}\nNVMeOF : {of}\nSCSI : compat\n"
                + _gdscheck_netfs(g) +
                f"=========\nGPU INFO:\n=========\nGPU index 0 {gpu} bar:1 bar "
                "size (MiB):131072 supports GDS, IOMMU State: Disabled\n==============\n"
                "PLATFORM INFO:\n==============\nIOMMU: disabled\n"
                "Platform verification succeeded\n")
    return (f" GDS release version: {g['gds_version']}\n nvidia_fs version:  {g['nvfs']} "
            f"libcufile version: 2.12\n Platform: {NODE.get('arch', 'x86_64')}\n ============\n"
            " ENVIRONMENT:\n"
            " ============\n =====================\n DRIVER CONFIGURATION:\n"
            " =====================\n"
            f" NVMe P2PDMA        : {g['p2pdma']}\n NVMe               : {g['nvme']}\n"
            f" NVMeOF             : {g['nvmeof']}\n" + _gdscheck_netfs(g) +
            f" =========\n GPU INFO:\n =========\n GPU index 0 {NODE['gpus'][0]['name']} bar:1 bar "
            "size (MiB):131072 supports GDS, IOMMU State: Disabled\n ==============\n"
            " PLATFORM INFO:\n ==============\n IOMMU: disabled\n"
            " Platform verification succeeded\n")


def _command(argv: list[str]) -> tuple[int, str, str] | None:
    """(rc, stdout, stderr) of a stand-in command; None: not installed on the node."""
    name = os.path.basename(argv[0])
    cmds = NODE.get("commands", [])
    if name not in cmds:
        return None
    if name == "dpkg-query":
        return 0, _pkg_lines(False), ""
    if name == "rpm":
        return 0, _pkg_lines(True), ""
    if name == "modinfo":
        mod = argv[-1]
        value = NODE.get("modinfo", {}).get(mod, {}).get(argv[2] if len(argv) > 2 else "")
        if value is None:
            return 1, "", f"modinfo: ERROR: Module {mod} not found.\n"
        return 0, value + "\n", ""
    if name == "nvidia-smi":
        gpus = NODE.get("gpus", [])
        if "-L" in argv:
            return 0, "".join(f"GPU {i}: {g['name']} (UUID: GPU-{i})\n"
                              for i, g in enumerate(gpus)), ""
        return 0, "".join(f"{i}, {g['name']}, {g['bdf']}, {NODE['driver_version']}, GPU-{i}\n"
                          for i, g in enumerate(gpus)), ""
    if name == "ofed_info":
        return 0, NODE["ofed"] + ":\n", ""
    if name == "dkms":
        return 0, "".join(f"{m}, {NODE['kernel']}, {NODE.get('arch', 'x86_64')}: installed\n"
                          for m in NODE.get("dkms", [])), ""
    if name == "lsblk":
        return 0, json.dumps(NODE["lsblk"]), ""
    if name == "mokutil":
        return 0, "SecureBoot disabled\n", ""
    if name == "ldconfig":
        tag = "AArch64" if NODE.get("arch") == "aarch64" else "x86-64"
        return 0, "".join(f"\tlibcufile.so.0 (libc6,{tag}) => {p}\n"
                          for p in NODE.get("ldconfig", [])), ""
    if name == "grubby":
        default = NODE.get("next_kernel") or NODE["kernel"]
        if "--default-kernel" in argv:
            return 0, f"/boot/vmlinuz-{default}\n", ""
        return 0, (f'index=0\nkernel="/boot/vmlinuz-{default}"\n'
                   f'args="{NODE["cmdline"]}"\n'), ""
    if name == "modprobe":
        return 0, "kmod version 31\n+ZSTD +XZ -ZLIB +LIBCRYPTO -EXPERIMENTAL\n", ""
    if name == "gdscheck":
        return 0, _gdscheck(), ""
    return 127, "", f"{name}: no stand-in\n"


def _fake_which(cmd: str, *args: Any, **kwargs: Any) -> str | None:
    name = os.path.basename(cmd)
    # the CUDA packages put gdscheck in /usr/local/cuda-X.Y/gds/tools, not on PATH: the gather
    # finds it there (its file in the simulated tree)
    if name in NODE.get("commands", []) and name != "gdscheck":
        return NODE.get("command_paths", {}).get(name, f"/usr/bin/{name}")
    return None


def _fake_run(argv: Any, *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    argv = [argv] if isinstance(argv, str) else list(argv)
    res = _command(argv)
    if res is None:
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    rc, out, err = res
    return subprocess.CompletedProcess(argv, rc, out.encode(), err.encode())


shutil.which = _fake_which  # type: ignore[assignment]
subprocess.run = _fake_run  # type: ignore[assignment]

if __name__ == "__main__":
    source = sys.stdin.read()
    sys.argv = ["-", *sys.argv[2:]]
    exec(compile(source, "<node script>", "exec"), {"__name__": "__main__"})  # noqa: S102
