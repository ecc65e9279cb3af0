"""The simulated node's hardware layer presents what each profile promises (test harness).

These tests pin the stand-ins' behaviour that roles, molecule scenarios and the verifier rely on.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def nodes(module_sim_node):
    return {p: module_sim_node(p) for p in ("nvfs", "p2pdma", "proprietary", "nogpu")}


def test_open_driver_paths(nodes) -> None:
    p = nodes["nvfs"].probe({
        "version": "cat /proc/driver/nvidia/version",
        "sysver": "cat /sys/module/nvidia/version",
        "gpus": "ls /proc/driver/nvidia/gpus",
        "info": "cat /proc/driver/nvidia/gpus/0000:41:00.0/information",
        "license": "modinfo -F license nvidia",
        "csv": "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader",
        "multipath": "cat /sys/module/nvme_core/parameters/multipath",
        "p2pdma": "grep -c p2pdma_pgmap_ops /proc/kallsyms",
        "cmdline": "cat /proc/cmdline",
        "iommu": "ls /sys/class/iommu",
        "sb": "mokutil --sb-state",
        "nvfs_sys": "test -e /sys/module/nvidia_fs",
        "nvfs_proc": "test -e /proc/driver/nvidia-fs",
        "modprobe": "modprobe nvidia_fs",
        "loaded": "test -d /sys/module/nvme && test -d /sys/module/nvidia",
        "proc_modules": "test -e /proc/modules",
    })
    assert "NVIDIA UNIX Open Kernel Module for x86_64  570.133.20" in p["version"][1]
    assert p["sysver"] == (0, "570.133.20\n")
    assert p["gpus"][1].split() == ["0000:41:00.0", "0000:61:00.0"]
    assert "Model: \t\t NVIDIA H100 80GB HBM3" in p["info"][1]
    assert p["license"] == (0, "Dual MIT/GPL\n")
    assert p["csv"][1].splitlines() == ["NVIDIA H100 80GB HBM3, 570.133.20"] * 2
    assert p["multipath"] == (0, "Y\n")
    assert p["p2pdma"][1].strip() == "0"
    assert "intel_iommu=off" in p["cmdline"][1]
    assert p["iommu"] == (0, "")
    assert p["sb"] == (0, "SecureBoot disabled\n")
    # nvidia-fs is not there until the DKMS package is installed
    assert p["nvfs_sys"][0] == 1 and p["nvfs_proc"][0] == 1
    assert p["modprobe"][0] == 1
    assert "Module nvidia_fs not found in directory /lib/modules/" in p["modprobe"][1]
    # /proc/modules does not exist here: modules are tested through /sys/module
    assert p["loaded"][0] == 0 and p["proc_modules"][0] == 1


def test_p2pdma_profile(nodes) -> None:
    n = nodes["p2pdma"]
    assert n.exec("grep -w p2pdma_pgmap_ops /proc/kallsyms").stdout.split()[1:] == [
        "r", "p2pdma_pgmap_ops"]
    # a fresh node: multipath Y and no NVreg_RegistryDwords until the p2pdma options boot
    assert n.read("/sys/module/nvme_core/parameters/multipath").strip() == "Y"
    params = n.read("/proc/driver/nvidia/params").splitlines()
    assert 'RegistryDwords: ""' in params and "EnableStreamMemOPs: 0" in params
    assert len(params) == 42  # driver 580's list (tests/fixtures/nvidia_params)
    assert "575.57.08" in n.read("/proc/driver/nvidia/version")


def test_proprietary_profile(nodes) -> None:
    n = nodes["proprietary"]
    first = n.read("/proc/driver/nvidia/version").splitlines()[0]
    assert first.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20")
    assert "Open" not in first
    assert n.exec("modinfo -F license nvidia").stdout.strip() == "NVIDIA"


def test_nogpu_profile(nodes) -> None:
    n = nodes["nogpu"]
    assert n.exec("test -e /proc/driver/nvidia", check=False).returncode == 1
    assert n.exec("test -e /sys/module/nvidia", check=False).returncode == 1
    r = n.exec("nvidia-smi", check=False)
    assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout
    assert n.exec("python3 -c 'import kvikio'", check=False).returncode == 1
    assert n.exec("modinfo nvidia", check=False).returncode == 1


def test_overrides_and_ready(module_sim_node) -> None:
    n = module_sim_node("nvfs", {"SIM_IOMMU": "pt", "SIM_SECURE_BOOT": "1", "SIM_GPU_COUNT": "4"})
    assert n.exec("gdsfleet-sim-ready").returncode == 0
    assert "iommu=pt" in n.read("/proc/cmdline")
    assert n.exec("ls /sys/class/iommu").stdout.split() == ["dmar0"]
    assert n.exec("mokutil --sb-state").stdout.strip() == "SecureBoot enabled"
    assert len(n.exec("nvidia-smi -L").stdout.splitlines()) == 4
    assert n.exec("python3 -c 'import cupy'", check=False).returncode == 1
