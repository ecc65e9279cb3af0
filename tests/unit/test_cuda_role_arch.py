"""The cuda role per architecture (issue 43, item 9: Grace Hopper / Grace Blackwell, aarch64):
the CUDA repository's sbsa folder, and an nvidia-fs pin new enough for Grace's 4K and 64K
pages (2.17.4, NVIDIA/gds-nvidia-fs ChangeLog). The role's input checks and variables run for
real (one ansible-playbook, tests/unit/playbatch.py), in check mode."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, run_cases

ROOT = Path(__file__).resolve().parents[2]
ARCH = yaml.safe_load((ROOT / "tests/fixtures/nvidia_fs/arch.yml").read_text())
SHOW = "{{ {'repo': __cuda_repo_url} | to_json }}"
TASKS = [{"name": "The role's input checks",
          "ansible.builtin.include_role": {"name": "cuda", "tasks_from": "assert.yml",
                                           "public": True}},
         {"name": "Show", "ansible.builtin.debug": {"msg": SHOW}}]


def case(arch: str, nvfs: str, distro: str = "Ubuntu", version: str = "24.04",
         family: str = "Debian", major: str = "24", route: str = "nvfs") -> dict[str, Any]:
    return {"cuda_version": "13.0", "cuda_nvidia_fs_version": nvfs, "gds_route": route,
            "ansible_facts": {"architecture": arch, "distribution": distro,
                              "distribution_version": version, "os_family": family,
                              "distribution_major_version": major}}


CASES = {
    "grace-ubuntu": case("aarch64", "2.28.4"),
    "grace-rhel": case("aarch64", "2.26.6", "RedHat", "9.6", "RedHat", "9"),
    "grace-old-nvfs": case("aarch64", "2.17.0"),
    "grace-p2pdma-old-pin": case("aarch64", "2.17.0", route="p2pdma"),
    "x86-old-nvfs": case("x86_64", "2.17.0"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return run_cases(tmp_path_factory.mktemp("cuda_arch") / "batch", TASKS, CASES, env,
                     extra_var_names=("ansible_facts",), extra_args=("--check",))


def repo(run: HostRun) -> str:
    assert run.rc == 0, run.out
    return str(json.loads(re.findall(r'\{"repo": "[^"]*"\}', run.out)[-1])["repo"])


def test_grace_nodes_take_the_sbsa_repository(runs: dict[str, HostRun]) -> None:
    base = "https://developer.download.nvidia.com/compute/cuda/repos"
    folder = ARCH["cuda_repo_folder"]
    assert repo(runs["grace-ubuntu"]) == f"{base}/ubuntu2404/{folder}/"
    assert repo(runs["grace-rhel"]) == f"{base}/rhel9/{folder}/"


def test_an_nvidia_fs_older_than_grace_support_is_refused_on_aarch64_only(
        runs: dict[str, HostRun]) -> None:
    role = yaml.safe_load((ROOT / "roles/cuda/vars/main.yml").read_text())
    assert role["_cuda_nvidia_fs_min_by_arch"]["aarch64"] == ARCH["aarch64"]["min"]
    assert "Grace-Hopper" in ARCH["aarch64"]["changelog"]
    run = runs["grace-old-nvfs"]
    assert run.rc == 2, run.out
    assert "2.17.4" in run.out and "64K pages" in run.out and "Nothing was changed" in run.out
    assert runs["x86-old-nvfs"].rc == 0, runs["x86-old-nvfs"].out
    assert runs["grace-p2pdma-old-pin"].rc == 0  # no nvidia-fs on the p2pdma route
