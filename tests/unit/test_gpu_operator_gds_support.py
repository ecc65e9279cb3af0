"""The role gdsfleet.gds.gpu_operator enables the operator's GDS (gds.enabled: true) only where
NVIDIA supports it (issue 43, item 7): Ubuntu 22.04/24.04 or OpenShift, not with Secure Boot,
not with precompiled drivers, local NVMe and NFS only. Elsewhere nvidia-fs-ctr crash-loops and
the node loses its GPUs, so the role refuses before any change and says why and what to do.
Its eligibility tasks run for real (one ansible-playbook for every case, tests/unit/playbatch.py).
Sources: tests/fixtures/gpu-operator/gds_support.yml."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, run_cases

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = yaml.safe_load((ROOT / "tests/fixtures/gpu-operator/gds_support.yml").read_text())
TASKS = [{"name": "The role's GDS support check",
          "ansible.builtin.include_role": {"name": "gpu_operator",
                                           "tasks_from": "eligibility.yml"}}]
NO_SB = {"secure_boot": False}


def facts(distribution: str, version: str, family: str) -> dict[str, Any]:
    return {"distribution": distribution, "distribution_version": version, "os_family": family}


CASES: dict[str, dict[str, Any]] = {
    "ubuntu-24.04": {"ansible_facts": facts("Ubuntu", "24.04", "Debian"), "gds_preflight": NO_SB},
    "ubuntu-22.04": {"ansible_facts": facts("Ubuntu", "22.04", "Debian"), "gds_preflight": NO_SB},
    "ubuntu-20.04": {"ansible_facts": facts("Ubuntu", "20.04", "Debian"), "gds_preflight": NO_SB},
    "debian-12": {"ansible_facts": facts("Debian", "12", "Debian"), "gds_preflight": NO_SB},
    "rhel-9": {"ansible_facts": facts("RedHat", "9.6", "RedHat"), "gds_preflight": NO_SB},
    "rocky-9": {"ansible_facts": facts("Rocky", "9.6", "RedHat"), "gds_preflight": NO_SB},
    "openshift": {"ansible_facts": facts("RedHat", "9.6", "RedHat"), "gds_preflight": NO_SB,
                  "gpu_operator_openshift": True},
    "secure-boot": {"ansible_facts": facts("Ubuntu", "24.04", "Debian"),
                    "gds_preflight": {"secure_boot": True}},
    "precompiled": {"ansible_facts": facts("Ubuntu", "24.04", "Debian"), "gds_preflight": NO_SB,
                    "gpu_operator_values_extra": {"driver": {"usePrecompiled": True}}},
    "nfs": {"ansible_facts": facts("Ubuntu", "24.04", "Debian"), "gds_preflight": NO_SB,
            "netfs_nfs_mounts": [{"path": "/mnt/vast", "server": "192.0.2.10",
                                  "export": "/gds"}]},
    "lustre": {"ansible_facts": facts("Ubuntu", "24.04", "Debian"), "gds_preflight": NO_SB,
               "netfs_lustre_mounts": [{"path": "/mnt/exa", "source": "10.0.0.1@o2ib:/fs0"}]},
    "nvmeof": {"ansible_facts": facts("Ubuntu", "22.04", "Debian"), "gds_preflight": NO_SB,
               "nvmeof_targets": [{"address": "192.0.2.20", "transport": "rdma",
                                   "nqn": "nqn.2026-01.io.example:nvme0"}]},
    "weka-and-rhel": {"ansible_facts": facts("RedHat", "9.6", "RedHat"), "gds_preflight": NO_SB,
                      "netfs_wekafs_mounts": [{"path": "/mnt/weka", "source": "weka0/fs0"}]},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return run_cases(tmp_path_factory.mktemp("gds_support") / "batch", TASKS, CASES, env,
                     extra_var_names=("ansible_facts",), extra_args=("--check",))


@pytest.mark.parametrize("case", ["ubuntu-24.04", "ubuntu-22.04", "openshift", "nfs"])
def test_supported_nodes_pass(runs: dict[str, HostRun], case: str) -> None:
    assert runs[case].rc == 0, runs[case].out


@pytest.mark.parametrize(("case", "words"), [
    ("ubuntu-20.04", ["Ubuntu 20.04", "22.04 and 24.04", "OpenShift", "playbooks/site.yml"]),
    ("debian-12", ["Debian 12", "gpu_operator_openshift"]),
    ("rhel-9", ["RedHat 9.6", "DriverToolkit"]),
    ("rocky-9", ["Rocky 9.6"]),
    ("secure-boot", ["Secure Boot", "disable it"]),
    ("precompiled", ["usePrecompiled", "transformGDSContainer"]),
    ("lustre", ["Lustre", "local NVMe and NFS only"]),
    ("nvmeof", ["NVMe over Fabrics", "local NVMe and NFS only"]),
    ("weka-and-rhel", ["RedHat 9.6", "WekaFS"]),
])
def test_unsupported_nodes_are_refused_with_the_why_and_the_fix(
        runs: dict[str, HostRun], case: str, words: list[str]) -> None:
    """Before issue 43 the role rendered gds.enabled: true for all of them."""
    run = runs[case]
    assert run.rc == 2, run.out
    assert "Nothing was changed" in run.out and "gpu-operator#2911" in run.out
    for w in words:
        assert w in run.out, (w, run.out[-2000:])


def test_the_supported_list_is_nvidias() -> None:
    import re

    role = (ROOT / "roles/gpu_operator/vars/main.yml").read_text()
    listed = yaml.safe_load(role)["_gpu_operator_gds_ubuntu"]
    assert listed == SUPPORT["platform_support"]["ubuntu_versions"]
    assert any(o.startswith("Red Hat OpenShift") for o in SUPPORT["platform_support"]
               ["operating_systems"])
    assert re.search(r"local NVMe and NFS only", role)


def test_the_playbook_refuses_every_node_before_any_change() -> None:
    play = yaml.safe_load((ROOT / "playbooks/gpu_operator.yml").read_text())
    first = play[0]
    assert first["any_errors_fatal"] is True
    assert first["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] == "eligibility.yml"
    assert "roles" not in first  # nothing of the install runs in the checking play
