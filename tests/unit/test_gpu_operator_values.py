"""The role gdsfleet.gds.gpu_operator renders GPU Operator chart values that the chart knows:
its values tasks run for real with ansible-playbook (connection local, several inventories at
once), and every key path they set must exist, with a value of the same type, in the chart's
own values.yaml of the targeted release (tests/fixtures/gpu-operator/, source in its README).
Helm itself is not run (no Kubernetes API server here; docs/gpu-operator.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
FIXTURES = ROOT / "tests" / "fixtures" / "gpu-operator"
ROLE = ROOT / "roles" / "gpu_operator"

HOSTS: dict[str, dict[str, Any]] = {
    # the defaults: nvfs route, DOCA on the host (mofed role default), chart v26.7.0
    "defaults": {},
    # no MOFED on the host, no RDMA storage: local NVMe with a patched kernel nvme driver
    "no_mofed": {"mofed_flavor": "none"},
    # RDMA storage with MOFED from the Network Operator's container (not the host)
    "rdma_containerized_mofed": {"mofed_flavor": "none", "gds_storage_rdma": True},
    # NFS over RDMA from the netfs role, MOFED from the Network Operator: RDMA without asking
    "netfs_containerized_mofed": {"mofed_flavor": "none", "netfs_nfs_mounts": [
        {"path": "/mnt/vast", "server": "192.0.2.10", "export": "/gds"}]},
    # Lustre over o2ib, Storage Scale, the BeeGFS GDS build: RDMA storage too
    "netfs_lustre": {"mofed_flavor": "none", "netfs_lustre_mounts": [
        {"path": "/mnt/exa", "source": "10.0.0.1@o2ib:/fs0"}]},
    "netfs_gpfs": {"mofed_flavor": "none", "netfs_gpfs_filesystems": ["gpfs0"]},
    "netfs_beegfs": {"mofed_flavor": "none", "netfs_beegfs_gds": True},
    # an older chart (driver.useOpenKernelModules), the host pin set, a driver version
    "chart_v24": {"gpu_operator_chart_version": "v24.9.2", "cuda_nvidia_fs_version": "2.26.6",
                  "gpu_operator_driver_version": "550.144.03"},
    # the two release lines between (each pairs its driver with another nvidia-fs)
    "chart_v25_10": {"gpu_operator_chart_version": "v25.10.1"},
    "chart_v26_3": {"gpu_operator_chart_version": "v26.3.3", "cuda_nvidia_fs_version": "2.25.7"},
    # the operator asks for another nvidia-fs image explicitly
    "asked_nvfs": {"gpu_operator_gds_version": "2.27.3"},
    # extra values merged over the rendered ones
    "extra": {"gpu_operator_values_extra": {"toolkit": {"enabled": False},
                                            "driver": {"rdma": {"enabled": False}}},
              "gds_storage_rdma": "yes"},
}


def ansible_env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0")


def playbook(tmp_path: Path, hosts: dict[str, dict[str, Any]],
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {"hosts": {name: {"ansible_connection": "local", **v}
                                   for name, v in hosts.items()}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    plays = [
        {"name": "Render the values per inventory", "hosts": "all", "gather_facts": False,
         "tasks": [
             {"name": "Render", "ansible.builtin.include_role": {
                 "name": "gpu_operator", "tasks_from": "values.yml"}},
             {"name": "Keep", "ansible.builtin.copy": {
                 "content": "{{ gpu_operator_helm_values | to_json }}",
                 "dest": f"{out}/{{{{ inventory_hostname }}}}.json", "mode": "0644"}},
         ]},
        {"name": "The whole role, Helm off, values file on", "hosts": "all[0]",
         "gather_facts": False,
         # this machine is Debian 12, not on NVIDIA's list for the operator's GDS: declared an
         # OpenShift node so the whole role runs (the refusal: test_gpu_operator_gds_support.py)
         "roles": [{"role": "gpu_operator", "gpu_operator_helm": False,
                    "gpu_operator_openshift": True,
                    "gpu_operator_values_file": f"{out}/values-file.yaml"}]},
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, timeout=240, env=env or ansible_env(),
                          check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("gpu_operator_values")
    proc = playbook(tmp, HOSTS)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = {name: json.loads((tmp / "out" / f"{name}.json").read_text()) for name in HOSTS}
    out["__values_file__"] = yaml.safe_load((tmp / "out" / "values-file.yaml").read_text())
    return out


def chart_values(version: str) -> dict[str, Any]:
    path = FIXTURES / f"values-{version}.yaml"
    assert path.is_file(), f"no chart values fixture for {version}: add {path.name}"
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def leaves(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                            Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out += leaves(value, prefix + (key,))
        else:
            out.append((prefix + (key,), value))
    return out


def assert_known_to_chart(values: dict[str, Any], chart: dict[str, Any]) -> None:
    for path, value in leaves(values):
        node: Any = chart
        for i, key in enumerate(path):
            assert isinstance(node, dict) and key in node, (
                f"{'.'.join(path)}: {'.'.join(path[:i + 1])} is not a value of the chart")
            node = node[key]
        assert type(value) is type(node), (
            f"{'.'.join(path)}: rendered {value!r} ({type(value).__name__}), the chart's default "
            f"is {node!r} ({type(node).__name__})")


def host_chart(name: str) -> str:
    return str(HOSTS[name].get("gpu_operator_chart_version") or "v26.7.0")


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_every_rendered_value_exists_in_the_charts_values_yaml(rendered: dict[str, Any],
                                                               name: str) -> None:
    values = rendered[name]
    assert values["gds"]["enabled"] is True
    assert values["driver"]["enabled"] is True
    assert_known_to_chart(values, chart_values(host_chart(name)))


def test_open_kernel_module_key_follows_the_chart_release(rendered: dict[str, Any]) -> None:
    assert rendered["defaults"]["driver"]["kernelModuleType"] == "open"
    assert "useOpenKernelModules" not in rendered["defaults"]["driver"]
    assert rendered["chart_v24"]["driver"]["useOpenKernelModules"] is True
    assert "kernelModuleType" not in rendered["chart_v24"]["driver"]
    # the other key really is absent (v26.7.0) or present (v24.9.2) in those charts
    assert "useOpenKernelModules" not in chart_values("v26.7.0")["driver"]
    assert "kernelModuleType" not in chart_values("v24.9.2")["driver"]


def test_rdma_and_host_mofed_follow_the_inventory(rendered: dict[str, Any]) -> None:
    rdma = {name: rendered[name]["driver"]["rdma"] for name in HOSTS}
    assert rdma["defaults"] == {"enabled": True, "useHostMofed": True}
    assert rdma["no_mofed"] == {"enabled": False, "useHostMofed": False}
    assert rdma["rdma_containerized_mofed"] == {"enabled": True, "useHostMofed": False}
    assert rdma["netfs_containerized_mofed"] == {"enabled": True, "useHostMofed": False}
    for name in ("netfs_lustre", "netfs_gpfs", "netfs_beegfs"):
        assert rdma[name] == {"enabled": True, "useHostMofed": False}, name
    # gpu_operator_values_extra wins over the rendered values, recursively
    assert rdma["extra"] == {"enabled": False, "useHostMofed": True}
    assert rendered["extra"]["toolkit"] == {"enabled": False}


# nvidia-fs each chart release pairs with its driver container: gds.version in the chart's own
# values.yaml (fixtures, source in tests/fixtures/gpu-operator/README.md).
CHART_NVFS = {"v24.9.2": "2.20.5", "v25.10.1": "2.26.6", "v26.3.3": "2.27.3", "v26.7.0": "2.29.4"}


def test_chart_fixtures_hold_the_nvidia_fs_each_release_pairs_with_its_driver() -> None:
    fixtures = {p.name[len("values-"):-len(".yaml")] for p in FIXTURES.glob("values-*.yaml")}
    assert fixtures == set(CHART_NVFS)
    for release, nvfs in CHART_NVFS.items():
        assert str(chart_values(release)["gds"]["version"]) == nvfs, release


def test_gds_version_is_left_to_the_chart_unless_asked(rendered: dict[str, Any]) -> None:
    # the host pin (cuda_nvidia_fs_version, 2.25.7) is no nvidia-fs any chart release ships
    cuda_defaults = yaml.safe_load((ROOT / "roles" / "cuda" / "defaults" / "main.yml").read_text())
    pinned = str(cuda_defaults["cuda_nvidia_fs_version"])
    assert pinned not in CHART_NVFS.values()
    for name in ("defaults", "no_mofed", "chart_v24", "chart_v25_10", "chart_v26_3", "extra"):
        assert rendered[name]["gds"] == {"enabled": True}, (name, rendered[name]["gds"])
    # set only when the operator asks, in the chart's x.y.z format
    assert rendered["asked_nvfs"]["gds"] == {"enabled": True, "version": "2.27.3"}
    assert rendered["chart_v24"]["driver"]["version"] == "550.144.03"
    for release in CHART_NVFS:
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(chart_values(release)["gds"]["version"]))


def test_the_whole_role_with_helm_off_writes_the_same_values(rendered: dict[str, Any]) -> None:
    # the second play ran the role's main tasks on the inventory's first host (sorted names)
    assert rendered["__values_file__"] == rendered[sorted(HOSTS)[0]]


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "p2pdma_route": ({"gds_route": "p2pdma"}, "gds_route is p2pdma"),
    "old_nvfs": ({"gpu_operator_gds_version": "2.16.1"}, "is 2.16.1: set an nvidia-fs version"),
    "v_prefixed_nvfs": ({"gpu_operator_gds_version": "v2.25.7"}, "is v2.25.7: set an nvidia-fs"),
    "no_release": ({"gpu_operator_chart_version": "latest"}, "is latest: set it to a release"),
    "extra_list": ({"gpu_operator_values_extra": ["gds"]}, "must be a mapping of chart values"),
}


def test_bad_input_is_refused_with_the_fix(tmp_path: Path) -> None:
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = playbook(tmp_path, {name: v for name, (v, _) in BAD.items()}, env=env)
    assert proc.returncode != 0
    doc = json.loads(proc.stdout)
    failures = {host: res for t in doc["plays"][0]["tasks"] for host, res in t["hosts"].items()
                if res.get("failed")}
    for name, (_, needle) in BAD.items():
        assert name in failures, (name, "was not refused")
        msg = " ".join(str(failures[name].get("msg")).split())
        assert needle in msg, (name, msg)
