"""The kernel gate on a simulated node (issue 29): a second kernel that builds passes and
becomes the default through playbooks/kernel_update.yml; a kernel without headers fails, the
running kernel stays the default and the new one is held; a GDS-patched nvme that exports only
the v2 registration name while the built nvidia-fs looks up v1 fails naming both (DOCA-OFED
26.01, gds-nvidia-fs issue #87: tests/fixtures/kernel_gate/issue87.yml); a kernel installed
behind gdsfleet's back goes through the nvidia_fs role's kernel hook and does not become the
default.

One simulated node (profile nvfs, DOCA-OFED from the stand-in repository). The simulation keeps
running its own kernel (it cannot boot another): /boot and /lib/modules show the new one, the
stand-in dkms builds genuine ELF stand-in modules (tests/harness/standin_repo/payload/dkms), and
the test adds what a real node has that the simulated one lacks: GRUB (a grub.cfg as
grub-mkconfig writes it and a grub-set-default that writes grubenv) and the NVIDIA driver's
module for each kernel (the project never installs the driver). Each is a TEST STAND-IN.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from gds_collection import VENV_BIN, ansible_env

from provisioner.remote import load_script
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit.kernel_gate_standins import elf_module, grub_cfg

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
I87 = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/issue87.yml").read_text())
STACK = """
- name: The stack up to nvidia-fs, with DOCA-OFED
  hosts: gpu_nodes
  become: true
  roles:
    - role: gdsfleet.gds.preflight
    - role: gdsfleet.gds.mofed
    - role: gdsfleet.gds.cuda
    - role: gdsfleet.gds.nvidia_fs
"""
GATE = """
- name: The kernel gate
  hosts: gpu_nodes
  become: true
  gather_facts: false
  roles:
    - role: gdsfleet.gds.kernel_gate
"""
GATHER = load_script("gather.py")
STATE = "/var/lib/gdsfleet/kernel-gate.json"
GRUB_SET_DEFAULT = """#!/bin/sh
# TEST STAND-IN for grub-set-default (GRUB 2): records the saved entry in grubenv.
[ -n "${1:-}" ] || exit 1
mkdir -p /boot/grub
printf '# GRUB Environment Block\\nsaved_entry=%s\\n' "$1" > /boot/grub/grubenv
"""


def put(node: Any, path: str, data: bytes, mode: str = "0644") -> None:
    b64 = base64.b64encode(data).decode()
    node.exec(f"mkdir -p $(dirname {path}) && echo {b64} | base64 -d > {path} && "
              f"chmod {mode} {path}")


def prepare(node: Any, repo: Any, *, next_headers: bool, install_next: bool = True,
            ) -> tuple[str, str]:
    """The node before the play: dkms and the running kernel's headers (and, unless
    install_next is false, the newer stand-in kernel, with or without its headers), GRUB and
    the driver's module for both kernels."""
    kernel = node.exec("uname -r").stdout.strip()
    node.install_repo(repo, doca=False)
    nxt = node.exec("apt-cache pkgnames linux-image- | sort | tail -n 1").stdout.strip()
    nxt = nxt.removeprefix("linux-image-")
    assert nxt and nxt != kernel
    pkgs = ["dkms", f"linux-headers-{kernel}"]
    if install_next:
        pkgs.append(f"linux-image-{nxt}")
        if next_headers:
            pkgs.append(f"linux-headers-{nxt}")
    node.apt_install(*pkgs)
    node.exec("rm -f /etc/apt/sources.list.d/gdsfleet-test.list && rm -rf /var/lib/apt/lists/*")
    # TEST STAND-IN: the running kernel's image, which a real node has in /boot
    node.exec(f"test -e /boot/vmlinuz-{kernel} || echo stand-in > /boot/vmlinuz-{kernel}")
    put(node, "/boot/grub/grub.cfg", grub_cfg(nxt, kernel).encode())
    put(node, "/usr/local/sbin/grub-set-default", GRUB_SET_DEFAULT.encode(), "0755")
    for k in (kernel, nxt):  # TEST STAND-IN: the open driver's module, as its package installs it
        put(node, f"/lib/modules/{k}/kernel/drivers/video/nvidia.ko", elf_module(
            name="nvidia", vermagic=f"{k} SMP preempt mod_unload modversions ",
            license="Dual MIT/GPL"))
    return kernel, nxt


def play(tmp: Path, node: Any, repo: Any, text: str, nvfs: str,
         playbook: str | None = None, **extra: Any) -> tuple[int, dict[str, Any], str]:
    (tmp / "play.yml").write_text(text)
    (tmp / "hosts.json").write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"mofed_flavor": "doca", "cuda_version": "12.9",
                 "cuda_nvidia_fs_version": nvfs, **repo.group_vars(), **extra},
    }}}}))
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "hosts.json", playbook or "play.yml"],
        cwd=tmp, env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True, text=True, timeout=1200)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def task(report: dict[str, Any], name: str) -> dict[str, Any]:
    for p in report["plays"]:
        for t in p["tasks"]:
            if t["task"]["name"] == name:
                return dict(next(iter(t["hosts"].values())))
    raise AssertionError(f"no task {name!r}")


def state(node: Any) -> dict[str, Any]:
    return dict(json.loads(node.exec(f"cat {STATE}").stdout))


def saved_entry(node: Any) -> str:
    return str(node.exec("sed -n 's/^saved_entry=//p' /boot/grub/grubenv", check=False)
               .stdout.strip())


def gate_check(node: Any) -> CheckResult:
    """Run the real gather script on the node and evaluate gate.boot_kernel."""
    b64 = base64.b64encode(GATHER).decode()
    out = node.exec(f"echo {b64} | base64 -d > /tmp/gdsfleet-gather.py && "
                    "python3 /tmp/gdsfleet-gather.py").stdout
    facts = build_facts(json.loads(out))
    route = checks.determine_route(facts)
    io = iotest.evaluate({"gdsfleet_iotest": 1, "status": "skipped", "reason": "not run",
                          "attempts": []}, route=route)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route)
    return next(c for c in results if c.id == "gate.boot_kernel")


def held(node: Any) -> set[str]:
    return set(node.exec("apt-mark showhold").stdout.split())


def test_a_second_kernel_that_builds_passes_and_becomes_the_default(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    """kernel_update.yml: headers then image (dkms's hook builds, the gate's hook passes),
    dkms autoinstall, the gate passes, the kernel becomes the default, a reboot is asked for."""
    node = sim_node("nvfs", ssh=True)
    kernel, nxt = prepare(node, standin_repo, next_headers=True, install_next=False)
    rc, report, stderr = play(tmp_path, node, standin_repo, STACK, "2.28.4")
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    put(node, "/etc/default/grub", b"GRUB_DEFAULT=saved\n")  # an admin who pins entries
    node.exec(f"grub-set-default 'gnulinux-advanced-UUID>gnulinux-{kernel}-advanced-UUID'")

    rc, report, stderr = play(tmp_path, node, standin_repo, "", "2.28.4",
                              playbook=str(ROOT / "playbooks/kernel_update.yml"),
                              kernel_target=nxt)
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-4000:]
    gate = task(report, "gdsfleet.gds.kernel_gate : Gate the kernel the node will boot")
    assert gate["passed"] is True, gate
    assert [a["action"] for a in gate["actions"]] == ["make_default"], gate
    assert saved_entry(node) == f"gnulinux-advanced-UUID>gnulinux-{nxt}-advanced-UUID"
    assert state(node)["kernels"][nxt]["passed"] is True
    assert f"kernel_update: boot {nxt}" in node.exec("cat /var/lib/gdsfleet/reboot-required").stdout
    assert not held(node)
    c = gate_check(node)
    assert (c.status, c.observed.split(" (")[0]) == ("pass", nxt), c


def test_a_kernel_without_headers_fails_keeps_the_default_and_is_held(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("nvfs", ssh=True)
    kernel, nxt = prepare(node, standin_repo, next_headers=False)
    rc, report, stderr = play(tmp_path, node, standin_repo, STACK, "2.28.4")
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    rc, report, _ = play(tmp_path, node, standin_repo, GATE, "2.28.4")
    assert rc != 0
    gate = task(report, "gdsfleet.gds.kernel_gate : Gate the kernel the node will boot")
    assert gate["kernel"] == nxt and gate["passed"] is False
    assert f"no headers for {nxt}" in gate["reason"] and f"linux-headers-{nxt}" in gate["fix"]
    assert [(a["action"], a["ok"]) for a in gate["actions"]] == [("keep_default", True),
                                                                  ("hold", True)], gate
    failed = task(report, "gdsfleet.gds.kernel_gate : Fail with the reason and the fix")
    assert "FAILED" in failed["msg"] and f"boots {kernel} next" in failed["msg"]
    assert saved_entry(node) == f"gnulinux-advanced-UUID>gnulinux-{kernel}-advanced-UUID"
    assert f"linux-image-{nxt}" in held(node)
    doc = state(node)
    assert doc["next_boot"] == kernel and doc["kernels"][nxt]["passed"] is False
    c = gate_check(node)  # the node boots its running kernel: nothing to fail
    assert c.status == "skip" and c.observed.startswith(f"{kernel} (GRUB saved_entry)"), c
    # the pin undone by hand: verify fails before the reboot
    node.exec("rm -f /etc/default/grub.d/99-gdsfleet-kernel-gate.cfg")
    c = gate_check(node)
    assert c.status == "fail" and f"no headers for {nxt}" in c.message, c


def test_v2_only_nvme_and_v1_nvidia_fs_fail_naming_both(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("nvfs", ssh=True)
    v1 = I87["nvidia_fs_without_blk_dma_iter"]["looks_up"]
    v2 = I87["doca_ofed_26_01"]["exports"]
    # TEST STAND-IN knob: the stand-in mlnx-nvme behaves as DOCA-OFED 26.01's (issue #87)
    put(node, "/etc/gdsfleet-sim/standin-dkms.env", f"MLNX_NVME_EXPORT={v2}\n".encode())
    kernel, nxt = prepare(node, standin_repo, next_headers=True)
    rc, report, stderr = play(tmp_path, node, standin_repo, STACK, "2.25.7")  # looks up v1
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    rc, report, _ = play(tmp_path, node, standin_repo, GATE, "2.25.7")
    assert rc != 0
    gate = task(report, "gdsfleet.gds.kernel_gate : Gate the kernel the node will boot")
    bad = [r for r in gate["results"] if not r["ok"]]
    assert [r["check"] for r in bad] == ["nvme.symbol"], gate
    assert v1 in bad[0]["reason"] and v2 in bad[0]["reason"]
    assert f"/lib/modules/{nxt}/updates/dkms/nvme.ko" in bad[0]["reason"]
    assert saved_entry(node).endswith(f"gnulinux-{kernel}-advanced-UUID")


def test_an_unattended_kernel_install_through_the_hook_keeps_the_default(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("nvfs", ssh=True)
    kernel, nxt = prepare(node, standin_repo, next_headers=False, install_next=False)
    rc, report, stderr = play(tmp_path, node, standin_repo, STACK, "2.28.4")
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    assert node.exec("test -x /etc/kernel/postinst.d/zzz-gdsfleet-kernel-gate", check=False
                     ).returncode == 0
    # as unattended-upgrades would: a kernel, no headers, no gdsfleet
    node.exec("apt-get update -qq")  # the repositories the roles configured
    out = node.apt_install(f"linux-image-{nxt}")
    assert f"gdsfleet kernel gate: FAIL for kernel {nxt}" in out.stdout, out.stdout[-3000:]
    assert saved_entry(node) == f"gnulinux-advanced-UUID>gnulinux-{kernel}-advanced-UUID", \
        out.stdout[-3000:]
    doc = state(node)
    assert doc["next_boot"] == kernel and doc["kernels"][nxt]["passed"] is False
    for _ in range(30):  # the hold runs once apt lets go of the dpkg lock
        if f"linux-image-{nxt}" in held(node):
            break
        time.sleep(2)
    assert f"linux-image-{nxt}" in held(node)
    assert gate_check(node).status == "skip"
