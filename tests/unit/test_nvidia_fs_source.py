"""Where the nvidia_fs role takes nvidia-fs from, by CUDA series (issue 43, item 8): up to CUDA
13.3 the GDS meta package nvidia-gds-X-Y pulls it; from 13.4 it does not, so the role installs
nvidia-fs and nvidia-fs-dkms by name (the cuda role's pin holds them either way). The role's
input checks and variables run for real (one ansible-playbook, tests/unit/playbatch.py).
Source: tests/fixtures/nvidia_fs/packaging.yml."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.playbatch import HostRun, run_cases

ROOT = Path(__file__).resolve().parents[2]
FACTS = yaml.safe_load((ROOT / "tests/fixtures/nvidia_fs/packaging.yml").read_text())
SHOW = "{{ {'pkgs': __nvidia_fs_pkgs} | to_json }}"
TASKS = [{"name": "The role's input checks",
          "ansible.builtin.include_role": {"name": "nvidia_fs", "tasks_from": "assert.yml",
                                           "public": True}},
         {"name": "Show", "ansible.builtin.debug": {"msg": SHOW}}]
BASE = {"gds_route": "nvfs", "nvidia_fs_require_ofed": False}
CASES = {v: {**BASE, "cuda_version": v} for v in ("12.9", "13.0", "13.3", "13.4", "13.10")}
CASES["own"] = {**BASE, "cuda_version": "13.4", "nvidia_fs_packages": ["nvidia-fs=2.30.1-1"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return run_cases(tmp_path_factory.mktemp("nvfs_source") / "batch", TASKS, CASES, env,
                     extra_args=("--check",))


def pkgs(run: HostRun) -> list[str]:
    assert run.rc == 0, run.out
    found = re.findall(r'\{"pkgs": \[.*?\]\}', run.out)
    assert found, run.out
    return list(json.loads(found[-1])["pkgs"])


@pytest.mark.parametrize(("case", "want"), [
    ("12.9", ["nvidia-gds-12-9"]),
    ("13.0", ["nvidia-gds-13-0"]),
    ("13.3", ["nvidia-gds-13-3"]),
    ("13.4", ["nvidia-fs", "nvidia-fs-dkms"]),
    ("13.10", ["nvidia-fs", "nvidia-fs-dkms"]),  # a version compare, not a string compare
    ("own", ["nvidia-fs=2.30.1-1"]),
])
def test_the_nvidia_fs_source_follows_the_cuda_series(runs: dict[str, HostRun], case: str,
                                                       want: list[str]) -> None:
    assert FACTS["meta_package_pulls_nvidia_fs"]["first_separate"] == "13.4"
    assert sorted(FACTS["package_names"]["debian"]) == ["nvidia-fs", "nvidia-fs-dkms"]
    assert pkgs(runs[case]) == want
