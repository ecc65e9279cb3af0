"""The role gdsfleet.gds.nvmeof refuses what GDS cannot use before any change: its validation
tasks (tasks/validate.yml, imported first by tasks/connect.yml) run for real with
ansible-playbook over several inventories at once (connection local; the tasks only assert).
NVIDIA's GDS P2PDMA guide: NVMe-oF is not supported on the p2pdma route
(tests/fixtures/nvmeof/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
NQN = "nqn.2024-01.com.example:gds-pool-a"
TARGET = {"address": "10.20.0.5", "nqn": NQN}

HOSTS: dict[str, dict[str, Any]] = {
    "nvfs_rdma": {"gds_route": "nvfs", "nvmeof_targets": [TARGET]},
    # no gds_route in the inventory: the collection's default, nvfs
    "default_route_rdma": {"nvmeof_targets": [TARGET]},
    "p2pdma_rdma": {"gds_route": "p2pdma", "nvmeof_targets": [TARGET]},
    "p2pdma_discovery": {"gds_route": "p2pdma",
                         "nvmeof_targets": [{"address": "10.20.0.6", "discovery": True}]},
    "p2pdma_not_for_gds": {"gds_route": "p2pdma",
                           "nvmeof_targets": [dict(TARGET, gds=False),
                                              dict(TARGET, address="10.20.0.7", gds=False,
                                                   transport="tcp")]},
    "nvfs_tcp": {"gds_route": "nvfs", "nvmeof_targets": [dict(TARGET, transport="tcp")]},
    # values the role writes into discovery.conf lines and a systemd unit's ExecStart
    "bad_address": {"nvmeof_targets": [dict(TARGET, address="10.20.0.5\n--traddr=10.9.9.9")]},
    "bad_nqn_space": {"nvmeof_targets": [dict(TARGET, nqn=NQN + " --hostnqn=x")]},
    "bad_nqn_newline": {"nvmeof_targets": [dict(TARGET, nqn=NQN + "\n")]},
    "bad_nqn_specifier": {"nvmeof_targets": [dict(TARGET, nqn=NQN + "%n")]},
    "bad_service_id": {"nvmeof_targets": [dict(TARGET, service_id="4420;reboot")]},
    "bad_host_traddr": {"nvmeof_targets": [dict(TARGET, host_traddr="10.0.0.1 -a 1")]},
    "good_ipv6_and_uuid_nqn": {"nvmeof_targets": [dict(
        TARGET, address="fd00::5", host_traddr="fd00::11",
        nqn="nqn.2014-08.org.nvmexpress:uuid:4b4d3e1a-4b6f-4f0e-9c2a-0d6c1f6e7a10")]},
}
BAD = ("bad_address", "bad_nqn_space", "bad_nqn_newline", "bad_nqn_specifier",
       "bad_service_id", "bad_host_traddr")


def run(tmp_path: Path) -> dict[str, dict[str, Any]]:
    hosts = {name: {"ansible_connection": "local", **v} for name, v in HOSTS.items()}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = [{"name": "Validate", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate the targets", "ansible.builtin.include_role": {
            "name": "nvmeof", "tasks_from": "validate.yml"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, timeout=240, env=env, check=False)
    doc = json.loads(proc.stdout)
    failed: dict[str, dict[str, Any]] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            if res.get("failed"):
                failed[host] = res
    return failed


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run(tmp_path_factory.mktemp("nvmeof_inputs"))


def test_gds_targets_are_refused_on_the_p2pdma_route_only(
        failed: dict[str, dict[str, Any]]) -> None:
    assert set(failed) == {"p2pdma_rdma", "p2pdma_discovery", "nvfs_tcp", *BAD}, sorted(failed)
    for name in ("p2pdma_rdma", "p2pdma_discovery"):
        msg = " ".join(str(failed[name].get("msg")).split())
        assert msg.startswith("Refusing to connect, nothing was changed: the p2pdma route"), msg
        assert "does not support NVMe-oF" in msg and "NVIDIA's GDS P2PDMA guide" in msg
        assert "Use gds_route nvfs" in msg and "gds: false" in msg
    assert "10.20.0.5" in str(failed["p2pdma_rdma"]["msg"])
    assert "GDS does not work over NVMe/TCP" in str(failed["nvfs_tcp"]["msg"])


def test_values_written_to_boot_files_are_refused_unless_plain(
        failed: dict[str, dict[str, Any]]) -> None:
    for name in BAD:
        msg = " ".join(str(failed[name].get("msg")).split())
        assert msg.startswith("Refusing to connect, nothing was changed: these nvmeof_targets"), (
            name, msg)
        assert "Use an IPv4/IPv6 address or host name" in msg
    assert "good_ipv6_and_uuid_nqn" not in failed
