"""The kernel hook the nvidia_fs role installs (roles/nvidia_fs/templates/kernel-gate-hook.sh.j2):
the argument conventions of Debian's /etc/kernel/postinst.d (VERSION IMAGE) and RHEL's
kernel-install plugins (add|remove VERSION ENTRY-DIR IMAGE), and that it never fails the
package manager. The gate it calls is a TEST STAND-IN that records its arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles/nvidia_fs/templates/kernel-gate-hook.sh.j2"


def hook(tmp: Path, where: str, route: str = "nvfs", gate_rc: int = 0) -> Path:
    gate_dir = tmp / "lib"
    gate_dir.mkdir(exist_ok=True)
    (gate_dir / "kernel_gate.py").write_text(
        "# TEST STAND-IN for plugins/module_utils/kernel_gate.py: records its arguments\n"
        "import sys, pathlib\n"
        f"pathlib.Path({str(tmp / 'args')!r}).write_text(' '.join(sys.argv[1:]))\n"
        "print('gdsfleet kernel gate: FAIL for kernel x')\n"
        f"sys.exit({gate_rc})\n")
    text = jinja2.Template(TEMPLATE.read_text()).render(
        gds_route=route, nvidia_fs_kernel_gate_dir=str(gate_dir))
    path = tmp / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(path), *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=30, check=False)


def test_debian_postinst_gates_the_installed_version(tmp_path: Path) -> None:
    p = hook(tmp_path, "kernel/postinst.d/zzz-gdsfleet-kernel-gate")
    proc = run(p, "6.8.0-50-generic", "/boot/vmlinuz-6.8.0-50-generic")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "args").read_text() == "--kernel 6.8.0-50-generic --route nvfs --protect"
    assert "FAIL for kernel" in proc.stdout


def test_rhel_install_d_gates_on_add_only(tmp_path: Path) -> None:
    p = hook(tmp_path, "kernel/install.d/99-gdsfleet-kernel-gate.install", route="p2pdma")
    assert run(p, "remove", "5.14.0-503.el9.x86_64", "/boot/x").returncode == 0
    assert not (tmp_path / "args").exists()
    assert run(p, "add", "5.14.0-503.el9.x86_64", "/boot/x", "/boot/vmlinuz").returncode == 0
    assert (tmp_path / "args").read_text() == ("--kernel 5.14.0-503.el9.x86_64 --route p2pdma "
                                               "--protect")


@pytest.mark.parametrize("gate_rc", [1, 2])
def test_a_crashing_gate_never_fails_the_package_manager(tmp_path: Path, gate_rc: int) -> None:
    p = hook(tmp_path, "kernel/postinst.d/zzz-gdsfleet-kernel-gate", gate_rc=gate_rc)
    assert run(p, "6.8.0-50-generic").returncode == 0
    assert run(p).returncode == 0  # no version: nothing to gate


def test_hook_names_run_after_dkms_and_update_grub() -> None:
    deb = yaml.safe_load((ROOT / "roles/nvidia_fs/vars/Debian.yml").read_text())
    rhel = yaml.safe_load((ROOT / "roles/nvidia_fs/vars/RedHat.yml").read_text())
    name = Path(deb["_nvidia_fs_kernel_hook"]).name
    assert deb["_nvidia_fs_kernel_hook"].startswith("/etc/kernel/postinst.d/")
    assert sorted(["dkms", "zz-update-grub", "initramfs-tools", name])[-1] == name
    assert rhel["_nvidia_fs_kernel_hook"].startswith("/etc/kernel/install.d/99-")
    assert rhel["_nvidia_fs_kernel_hook"].endswith(".install")
