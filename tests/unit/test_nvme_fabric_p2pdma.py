"""gdsfleet.gds.nvme refuses an NVMe-oF namespace as the GDS filesystem on the p2pdma route,
before any change (issue 28, item 6).

The p2pdma route (upstream kernel PCI P2PDMA, no nvidia-fs) gives GDS to local PCIe NVMe only;
roles/nvmeof refuses a gds: true target on it, but a namespace picked by nvme_device_patterns or
nvme_discover_all, or connected with gds: false, reached roles/nvme, which formatted and mounted it
as the GDS mount. The role's tasks/fabric.yml (which assert.yml now runs before install and
configure) runs for real against a STAND-IN sysfs tree per case (``__nvme_sysfs``, an extra
variable as -e gives it), one ansible-playbook for every case (tests/unit/playbatch.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, run_cases

ROOT = Path(__file__).resolve().parents[2]
TASKS = [{"name": "The nvme role's fabric check",
          "ansible.builtin.include_role": {"name": "nvme", "tasks_from": "fabric.yml"}},
         {"name": "Show the decision",
          "ansible.builtin.debug": {"msg": "fabric={{ __nvme_fabric }}"}}]


def _sysfs(root: Path, multipath: str, controllers: dict[str, str],
           subsystems: dict[str, list[str]]) -> str:
    """STAND-IN /sys: nvme_core's multipath parameter, /sys/class/nvme/nvmeN/transport and
    /sys/class/nvme-subsystem/nvme-subsysN/nvmeM (controllers of a subsystem)."""
    (root / "module/nvme_core/parameters").mkdir(parents=True)
    (root / "module/nvme_core/parameters/multipath").write_text(multipath + "\n")
    for ctrl, transport in controllers.items():
        (root / "class/nvme" / ctrl).mkdir(parents=True)
        (root / "class/nvme" / ctrl / "transport").write_text(transport + "\n")
    for subsys, ctrls in subsystems.items():
        for ctrl in ctrls:
            (root / "class/nvme-subsystem" / subsys / ctrl).mkdir(parents=True)
            (root / "class/nvme-subsystem" / subsys / ctrl / "transport").write_text(
                controllers[ctrl] + "\n")
    return str(root)


CASES: dict[str, dict[str, Any]] = {
    # route, member, multipath, controllers, subsystems, nvmeof_devices, expected rc, fabric
    "p2pdma-tcp-pattern": {"route": "p2pdma", "member": "/dev/nvme3n1", "mp": "N",
                           "ctrls": {"nvme3": "tcp"}, "subsys": {}, "published": [], "rc": 2},
    "p2pdma-rdma-multipath": {"route": "p2pdma", "member": "/dev/nvme2n1", "mp": "Y",
                              "ctrls": {"nvme4": "rdma", "nvme5": "rdma"},
                              "subsys": {"nvme-subsys2": ["nvme4", "nvme5"]}, "published": [],
                              "rc": 2},
    "p2pdma-published": {"route": "p2pdma", "member": "/dev/nvme1n1", "mp": "N",
                         "ctrls": {"nvme1": "pcie"}, "subsys": {},
                         "published": ["/dev/nvme1n1"], "rc": 2},
    "p2pdma-local": {"route": "p2pdma", "member": "/dev/nvme0n1", "mp": "Y",
                     "ctrls": {"nvme0": "pcie"}, "subsys": {"nvme-subsys0": ["nvme0"]},
                     "published": [], "rc": 0, "fabric": False},
    "nvfs-tcp": {"route": "nvfs", "member": "/dev/nvme3n1", "mp": "N",
                 "ctrls": {"nvme3": "tcp"}, "subsys": {}, "published": [], "rc": 0,
                 "fabric": True},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    folder = tmp_path_factory.mktemp("nvme_fabric")
    cases = {}
    for name, c in CASES.items():
        sysfs = _sysfs(folder / name, c["mp"], c["ctrls"], c["subsys"])
        cases[name] = {"gds_route": c["route"], "__nvme_plan": {"members": [c["member"]]},
                       "nvmeof_devices": c["published"], "__nvme_sysfs": sysfs}
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return run_cases(folder / "batch", TASKS, cases, env, extra_var_names=("__nvme_sysfs",))


@pytest.mark.parametrize("name", sorted(CASES))
def test_p2pdma_refuses_a_fabric_namespace_as_the_gds_mount(runs: dict[str, HostRun],
                                                           name: str) -> None:
    case, run = CASES[name], runs[name]
    assert run.rc == case["rc"], run.out
    if case["rc"]:
        assert "Refusing, nothing was changed: gds_route is p2pdma" in run.out
        assert case["member"] in run.out and "gds_route nvfs" in run.out
        transport = next(iter(case["ctrls"].values()))
        if transport != "pcie":
            assert f"(transport {transport})" in run.out
    else:
        assert f"fabric={case['fabric']}" in run.out


def test_assert_runs_the_fabric_check_before_any_change() -> None:
    # the refusal must come before install.yml (packages) and configure.yml (mkfs, mount)
    tasks = yaml.safe_load((ROOT / "roles/nvme/tasks/assert.yml").read_text())
    names = [next(iter(k for k in t if k.startswith("ansible.builtin.import_tasks")), None)
             and t["ansible.builtin.import_tasks"] for t in tasks]
    assert "fabric.yml" in names
    assert names.index("fabric.yml") < [t["name"] for t in tasks].index(
        "Refuse drives that hold data")
