"""The harness presents the GPU driver's sources and the kernel's packaging like a real node, and
the stand-in dkms fails the nvidia-fs build without nv-p2p.h, as nvidia-fs's Makefile does
(NVIDIA/gds-nvidia-fs src/Makefile: NVIDIA_SRC_DIR from `find /usr/src/nvidia-* -name nv-p2p.h`,
else NVIDIA_DRIVER_MISSING)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.container


def test_driver_sources_and_module_dir_follow_the_profile(module_sim_node) -> None:
    default = module_sim_node("nvfs")
    bare = module_sim_node("nvfs", {"SIM_DRIVER_SOURCES": "0", "SIM_DISTRO_KERNEL": "0"})
    kernel = default.exec("uname -r").stdout.strip()
    assert default.exec("ls /usr/src/nvidia-570.133.20/nvidia/nv-p2p.h").returncode == 0
    assert default.exec(f"test -d /lib/modules/{kernel}").returncode == 0
    assert bare.exec("ls -d /usr/src/nvidia-[0-9]*", check=False).returncode != 0
    assert bare.exec(f"test -e /lib/modules/{kernel}", check=False).returncode != 0
    assert module_sim_node("nogpu").exec("ls -d /usr/src/nvidia-[0-9]*",
                                         check=False).returncode != 0


def test_nvidia_fs_does_not_build_without_nv_p2p_h(module_sim_node, standin_repo) -> None:
    n = module_sim_node("nvfs", {"SIM_DRIVER_SOURCES": "0"})
    n.install_repo(standin_repo, doca=False)
    r = n.apt_install("dkms", "linux-headers-$(uname -r)", "nvidia-fs-dkms=2.25.7-1",
                      check=False)
    assert r.returncode != 0
    assert "Bad return status for module build on kernel" in r.stdout + r.stderr
    log = n.read("/var/lib/dkms/nvidia-fs/2.25.7/build/make.log")
    assert "NVIDIA_SRC_DIR=NVIDIA_DRIVER_MISSING" in log
    assert "fatal error: nv-p2p.h: No such file or directory" in log
    assert n.exec("modprobe nvidia_fs", check=False).returncode == 1
