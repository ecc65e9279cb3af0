"""A kernel update must not drop GDS at the next reboot: the nvidia_fs and mofed roles build
nvidia-fs and the OFED modules (the GDS-patched mlnx-nvme among them) with DKMS for every
installed kernel that has headers (the one the node boots next included), and `verify`'s check
nvfs.dkms.boot_kernel warns when the boot kernel lacks them.

One simulated node (profile nvfs, DOCA-OFED from the stand-in repository). Before the play, as
the distribution archive and an unattended kernel update would: dkms, the running kernel's
headers, and a NEWER stand-in kernel (linux-image-<next> with /boot/vmlinuz-<next>,
linux-headers-<next>; tests/harness/standin_repo).
The simulation keeps running its own kernel; /boot and /lib/modules show the new one.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gds_collection import VENV_BIN, ansible_env

from provisioner.remote import load_script
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy

pytestmark = pytest.mark.container

PLAYBOOK = """
- name: The stack up to nvidia-fs, with DOCA-OFED
  hosts: gpu_nodes
  become: true
  roles:
    - role: gdsfleet.gds.preflight
    - role: gdsfleet.gds.mofed
    - role: gdsfleet.gds.cuda
    - role: gdsfleet.gds.nvidia_fs
"""
BUILD_TASK = ("gdsfleet.gds.nvidia_fs : "
              "Build and install nvidia-fs for the other installed kernels")
OFED_TASK = ("gdsfleet.gds.mofed : "
             "Build and install the OFED modules for the other installed kernels")
GATHER = load_script("gather.py")  # bundled with its shared modules, as verify sends it


def boot_kernel_check(node: Any) -> CheckResult:
    """Run the real gather script on the node and evaluate nvfs.dkms.boot_kernel."""
    b64 = base64.b64encode(GATHER).decode()
    out = node.exec(f"echo {b64} | base64 -d > /tmp/gdsfleet-gather.py && "
                    "python3 /tmp/gdsfleet-gather.py").stdout
    facts = build_facts(json.loads(out))
    route = checks.determine_route(facts)
    io = iotest.evaluate({"gdsfleet_iotest": 1, "status": "skipped", "reason": "not run",
                          "attempts": []}, route=route)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route)
    return next(c for c in results if c.id == "nvfs.dkms.boot_kernel")


def play(tmp: Path, node: Any, repo: Any) -> tuple[int, dict[str, Any], str]:
    (tmp / "site.yml").write_text(PLAYBOOK)
    (tmp / "hosts.json").write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"mofed_flavor": "doca",
                 "cuda_version": "12.9", "cuda_nvidia_fs_version": "2.25.7",
                 **repo.group_vars()},
    }}}}))
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "hosts.json", "site.yml"], cwd=tmp,
        env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True, text=True, timeout=900)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def task_result(report: dict[str, Any], name: str) -> dict[str, Any]:
    for p in report["plays"]:
        for t in p["tasks"]:
            if t["task"]["name"] == name:
                return dict(next(iter(t["hosts"].values())))
    raise AssertionError(f"no task {name!r}")


def test_nvidia_fs_is_built_for_the_next_boot_kernel(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("nvfs", ssh=True)
    kernel = node.exec("uname -r").stdout.strip()
    node.install_repo(standin_repo, doca=False)
    nxt = node.exec("apt-cache pkgnames linux-image- | sort | tail -n 1").stdout.strip()
    nxt = nxt.removeprefix("linux-image-")
    assert nxt and nxt != kernel
    node.apt_install("dkms", f"linux-headers-{kernel}", f"linux-image-{nxt}",
                     f"linux-headers-{nxt}")
    node.exec("rm -f /etc/apt/sources.list.d/gdsfleet-test.list && rm -rf /var/lib/apt/lists/*")

    rc, report, stderr = play(tmp_path, node, standin_repo)
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    for name in (BUILD_TASK, OFED_TASK):
        built = task_result(report, name)
        assert built.get("changed") is True, built
    status = node.exec("dkms status").stdout
    for k in (kernel, nxt):
        assert f"nvidia-fs/2.25.7, {k}, x86_64: installed" in status, status
        nvme = rf"^mlnx-nvme/\S+, {re.escape(k)}, x86_64: installed$"
        assert re.search(nvme, status, re.M), status
    c = boot_kernel_check(node)
    assert (c.status, c.observed) == ("pass", f"{nxt} (newest /boot/vmlinuz-*)"), c

    # again: nothing left to build
    rc, report, stderr = play(tmp_path, node, standin_repo)
    assert rc == 0, stderr[-2000:]
    for name in (BUILD_TASK, OFED_TASK):
        again = task_result(report, name)
        assert not again.get("changed"), again

    # the module disappears for the next kernel: verify warns before that reboot
    node.exec(f"dkms uninstall -m nvidia-fs -v 2.25.7 -k {nxt} && "
              f"dkms unbuild -m nvidia-fs -v 2.25.7 -k {nxt}")
    c = boot_kernel_check(node)
    assert c.status == "warn", c
    assert c.observed.endswith(": no nvidia-fs"), c
    assert f"dkms autoinstall -k {nxt}" in c.message and "compat" in c.message
