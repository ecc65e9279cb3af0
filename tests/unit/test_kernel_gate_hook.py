"""The kernel hook the nvidia_fs role installs (roles/nvidia_fs/templates/kernel-gate-hook.sh.j2):
the argument conventions of Debian's /etc/kernel/postinst.d (VERSION IMAGE) and RHEL's
kernel-install plugins (add|remove VERSION ENTRY-DIR IMAGE), and that it never fails the
package manager. The gate it calls is a TEST STAND-IN that records its arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

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
    assert (tmp_path / "args").read_text() == ("--kernel 6.8.0-50-generic --route nvfs "
                                               "--protect --trigger image")
    assert "FAIL for kernel" in proc.stdout


def test_debian_header_postinst_gates_again_when_the_headers_land(tmp_path: Path) -> None:
    """DKMS builds from header_postinst.d when the headers come after the image (dell/dkms
    Makefile installs its hook there too: tests/fixtures/kernel_gate/dkms_hooks.yml)."""
    p = hook(tmp_path, "kernel/header_postinst.d/zzz-gdsfleet-kernel-gate")
    assert run(p, "6.8.0-50-generic", "/boot/vmlinuz-6.8.0-50-generic").returncode == 0
    assert (tmp_path / "args").read_text() == ("--kernel 6.8.0-50-generic --route nvfs "
                                               "--protect --trigger headers")


def test_rhel_install_d_gates_on_add_only(tmp_path: Path) -> None:
    p = hook(tmp_path, "kernel/install.d/99-gdsfleet-kernel-gate.install", route="p2pdma")
    assert run(p, "remove", "5.14.0-503.el9.x86_64", "/boot/x").returncode == 0
    assert not (tmp_path / "args").exists()
    assert run(p, "add", "5.14.0-503.el9.x86_64", "/boot/x", "/boot/vmlinuz").returncode == 0
    assert (tmp_path / "args").read_text() == ("--kernel 5.14.0-503.el9.x86_64 --route p2pdma "
                                               "--protect --trigger install")


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
    dkms = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/dkms_hooks.yml").read_text())
    header = deb["_nvidia_fs_kernel_header_hook"]
    assert f"{Path(header).parent}/dkms" in dkms["dkms"]["makefile_install_debian"]
    assert sorted(["dkms", "nvidia-common", Path(header).name])[-1] == Path(header).name
    assert rhel["_nvidia_fs_kernel_header_hook"] == ""
    assert rhel["_nvidia_fs_kernel_hook"].startswith("/etc/kernel/install.d/99-")
    assert rhel["_nvidia_fs_kernel_hook"].endswith(".install")


# --- what the gate does when the hook's verdict is not final yet --------------------------------

def _gate_module() -> Any:
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_kernel_gate_hook_test", ROOT / "plugins/module_utils/kernel_gate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kg = _gate_module()
K = "6.8.0-50-generic"
FAILED = {"kernel": K, "passed": False, "reason": f"no headers for {K}", "fix": "f",
          "results": []}


def proc_tree(tmp: Path, chain: list[tuple[int, str]]) -> Path:
    """A stand-in /proc: each (pid, comm) is the parent of the one before it (TEST STAND-IN,
    /proc/<pid>/stat as proc(5) lays it out: pid (comm) state ppid ...)."""
    root = tmp / "proc"
    for i, (pid, comm) in enumerate(chain):
        ppid = chain[i + 1][0] if i + 1 < len(chain) else 1
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")
    return root


def modules(tmp: Path, *, include: bool) -> Path:
    """K's module tree, with its headers (build/include/) or without them."""
    root = tmp / "lib/modules"
    (root / K).mkdir(parents=True)
    if include:
        (root / K / "build/include").mkdir(parents=True)
    return root


class Spawned:
    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def __call__(self, argv: list[str], **kw: object) -> None:
        assert kw.get("start_new_session") is True
        self.argv.append(argv)


def actions(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, trigger: str, include: bool,
            chain: list[tuple[int, str]], image: bool = True) -> tuple[list[dict], dict,
                                                                       Spawned, list[str]]:
    spawned, protected = Spawned(), []
    monkeypatch.setattr(kg._boot.subprocess, "Popen", spawned)
    monkeypatch.setattr(kg, "protect", lambda g, **kw: protected.append(str(kw)) or
                        [{"action": "hold", "ok": True, "detail": "held"}])
    boot = tmp / "boot"
    boot.mkdir(parents=True, exist_ok=True)
    if image:
        (boot / f"vmlinuz-{K}").write_text("stand-in")
    gate = dict(FAILED)
    got = kg.hook_actions(gate, trigger=trigger, protect_on=True, running="6.8.0-40-generic",
                          family="debian", rerun=["python3", "kernel_gate.py", "--trigger",
                                                  "final"],
                          modules_root=str(modules(tmp, include=include)), boot_dir=str(boot),
                          proc_root=str(proc_tree(tmp, chain)))
    return got, gate, spawned, protected


HOOK_CHAIN = [(4005, "zzz-gdsfleet-ke"), (4004, "run-parts"), (4003, "linux-image-6.8"),
              (4002, "dpkg"), (4001, "apt-get"), (4000, "bash")]


def test_image_before_its_headers_defers_and_gates_again_after_the_package_manager(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the image's hook failed on the missing headers and held a good kernel; DKMS
    built at the headers' hook and nothing gated again."""
    monkeypatch.setattr(os, "getppid", lambda: 4004)
    got, gate, spawned, protected = actions(tmp_path, monkeypatch, trigger="image",
                                            include=False, chain=HOOK_CHAIN[1:])
    assert protected == [] and gate["deferred"] is True and gate["reason"].startswith("DEFERRED")
    assert [a["action"] for a in got] == ["defer"] and "header_postinst.d" in got[0]["detail"]
    # the re-run waits for apt-get (the outermost package manager), not the dpkg it runs
    assert spawned.argv[0][:2] == ["sh", "-c"] and spawned.argv[0][4] == "4001"
    assert spawned.argv[0][5:] == ["python3", "kernel_gate.py", "--trigger", "final"]


def test_image_hook_with_headers_in_place_protects(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getppid", lambda: 4004)
    got, gate, spawned, protected = actions(tmp_path, monkeypatch, trigger="image",
                                            include=True, chain=HOOK_CHAIN[1:])
    assert "deferred" not in gate and spawned.argv == [] and len(protected) == 1
    assert "defer_hold': True" in protected[0]


def test_headers_before_the_image_defer_to_the_images_hook(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getppid", lambda: 4004)
    got, gate, spawned, protected = actions(tmp_path, monkeypatch, trigger="headers",
                                            include=True, chain=HOOK_CHAIN[1:], image=False)
    assert gate["deferred"] is True and protected == [] and spawned.argv == []
    assert "postinst.d" in got[0]["detail"]


def test_without_a_package_manager_a_deferral_schedules_nothing_and_final_protects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getppid", lambda: 4000)
    got, gate, spawned, _ = actions(tmp_path, monkeypatch, trigger="image", include=False,
                                    chain=[(4000, "bash")])
    assert gate["deferred"] is True and spawned.argv == [] and got[0]["action"] == "defer"
    got, gate, spawned, protected = actions(tmp_path / "final", monkeypatch, trigger="final",
                                            include=False, chain=[(4000, "bash")])
    assert "deferred" not in gate and "defer_hold': False" in protected[0]


def test_package_manager_pid_reads_comm_with_spaces_and_parens(tmp_path: Path) -> None:
    root = proc_tree(tmp_path, [(30, "sh"), (20, "a (b) c"), (10, "unattended-upgr")])
    assert kg._boot.package_manager_pid(str(root), start=30) == 10
    assert kg._boot.package_manager_pid(str(root), start=99) is None


def test_the_regate_runs_once_the_package_manager_has_exited(tmp_path: Path) -> None:
    """The detached shell loop for real: a stand-in package manager (sleep) first, the gate's
    re-run (a stand-in that writes a file) only after it exits."""
    import sys
    import time

    manager = subprocess.Popen(["sleep", "1"])
    mark = tmp_path / "ran"
    ok, _ = kg._boot.regate_after(manager.pid, [
        sys.executable, "-c",
        f"import os, pathlib; pathlib.Path({str(mark)!r}).write_text(str(os.getpid()))"],
        tries=200, interval=0.05)
    assert ok and not mark.exists()
    manager.wait()
    deadline = time.monotonic() + 20
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists()
