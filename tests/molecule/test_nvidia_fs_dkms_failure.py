"""A node where DKMS cannot build nvidia-fs for the running kernel (profile `dkmsfail`) fails in
gdsfleet.gds.nvidia_fs with a message that says what failed and what to fix: the DKMS state,
the end of make.log, the kernel headers package, the nvidia-fs/kernel compatibility hint and the
command to retry. nvidia_fs is then neither loaded nor set to load at boot."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from gds_collection import VENV_BIN, ansible_env

# the nvidia-fs release the cuda role pins by default (what this node's DKMS tries to build)
NVFS_DEFAULT = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles" / "cuda" / "defaults" / "main.yml")
    .read_text())["cuda_nvidia_fs_version"]

pytestmark = pytest.mark.container

PLAYBOOK = """
- name: The stack up to nvidia-fs, without an OFED
  hosts: gpu_nodes
  become: true
  roles:
    - role: gdsfleet.gds.preflight
    - role: gdsfleet.gds.mofed
    - role: gdsfleet.gds.cuda
    - role: gdsfleet.gds.nvidia_fs
"""


def test_dkms_build_failure_is_explained(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("dkmsfail", ssh=True)
    kernel = node.exec("uname -r").stdout.strip()
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"mofed_flavor": "none",
                 **standin_repo.group_vars()},
    }}}}))
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "hosts.yml", "site.yml"],
        cwd=tmp_path,
        env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    failures = [
        (task["task"]["name"], result.get("msg", ""))
        for play in json.loads(proc.stdout)["plays"]
        for task in play["tasks"]
        for result in task["hosts"].values()
        if result.get("failed")
    ]
    # The apt task inside the block fails first (rescued); the rescue's explanation fails last.
    assert failures, proc.stdout[-3000:]
    task, message = failures[-1]
    assert task.startswith("gdsfleet.gds.nvidia_fs : "), task
    for text in (
        f"nvidia-fs is not built for the running kernel {kernel}",
        f"dkms status: nvidia-fs/{NVFS_DEFAULT}",  # the DKMS state as dkms reports it
        "make.log",  # where the build log is, with its last lines
        "Error! Build of nvidia-fs failed",  # what dpkg's postinst said
        f"linux-headers-{kernel}",  # what to install
        "set cuda_nvidia_fs_version",  # the version knob for newer kernels
        f"dkms install -m nvidia-fs -v <version> -k {kernel}",  # how to retry
    ):
        assert text in message, f"{text!r} not in {message!r}"
    assert node.exec("test -e /sys/module/nvidia_fs", check=False).returncode != 0
    assert node.exec("test -e /etc/modules-load.d/nvidia_fs.conf", check=False).returncode != 0
