"""The lab fleet: containers reachable over SSH on loopback, per-node profiles, clean teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import paramiko
import pytest
import yaml

from tests.harness import lab as labmod
from tests.harness import run as runmod
from tests.harness.fixtures import TOKEN

pytestmark = [pytest.mark.container, pytest.mark.fleet]


def ssh(node: labmod.LabNode, fleet, command: str) -> str:  # noqa: ANN001
    client = paramiko.SSHClient()
    client.load_host_keys(str(fleet.lab.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(node.host, port=node.port, username="root", key_filename=str(fleet.lab.key),
                   timeout=10, allow_agent=False, look_for_keys=False)
    try:
        _, out, _ = client.exec_command(command, timeout=30)
        return out.read().decode()
    finally:
        client.close()


def test_fleet_ssh_profiles_and_inventory(lab_fleet) -> None:  # noqa: ANN001
    fleet = lab_fleet(2, {"2": {"profile": "p2pdma", "env": {"SIM_IOMMU": "pt"}}})
    one, two = fleet.nodes
    assert (one.profile, two.profile) == ("nvfs", "p2pdma")
    assert ssh(one, fleet, "hostname").strip() == one.name
    assert "p2pdma_pgmap_ops" not in ssh(one, fleet, "cat /proc/kallsyms")
    assert "p2pdma_pgmap_ops" in ssh(two, fleet, "cat /proc/kallsyms")
    assert "iommu=pt" in ssh(two, fleet, "cat /proc/cmdline")
    # the "NVMe" is a block device with the loop device's numbers
    major_minor = ssh(one, fleet, "stat -c '%t:%T' /dev/nvme0n1").strip()
    assert major_minor.startswith("7:")
    inv = yaml.safe_load(fleet.inventory.read_text())
    hosts = inv["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(hosts) == fleet.names
    assert hosts[one.name]["ansible_port"] == one.port
    # the run's own repository port (tests/harness/run.py), never the lab's 8470
    port = labmod.repo_port()
    assert port != 8470
    assert inv["all"]["vars"]["cuda_repo_base_url"] == f"http://127.0.0.1:{port}/cuda/repos"
    # the same arguments give back the same fleet (reuse within a module)
    assert lab_fleet(2, {"2": {"profile": "p2pdma", "env": {"SIM_IOMMU": "pt"}}}) is fleet


def test_fleet_node_survives_ansible_reboot(lab_fleet) -> None:  # noqa: ANN001
    """ansible.builtin.reboot (what playbooks/reboot.yml runs) sees a new boot id and sshd back;
    boot-time configuration (modprobe.d) is applied by the "reboot"."""
    fleet = lab_fleet(2, {"2": {"profile": "p2pdma", "env": {"SIM_IOMMU": "pt"}}})
    node = fleet.nodes[0]
    before = ssh(node, fleet, "cat /proc/sys/kernel/random/boot_id").strip()
    ssh(node, fleet, "echo 'options nvme_core multipath=N' > /etc/modprobe.d/gdsfleet-test.conf")
    ansible = Path(sys.executable).with_name("ansible")
    proc = subprocess.run([str(ansible), "-i", str(fleet.inventory), node.name, "-m",
                           "ansible.builtin.reboot", "-a", "reboot_timeout=120"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"rebooted": true' in proc.stdout
    assert ssh(node, fleet, "cat /proc/sys/kernel/random/boot_id").strip() != before
    assert ssh(node, fleet, "cat /sys/module/nvme_core/parameters/multipath").strip() == "N"


def test_lab_down_removes_containers_and_loops(tmp_path, node_image, standin_repo) -> None:  # noqa: ANN001
    # a name and ports of this process's own: concurrent runs and xdist workers run this too
    name = f"gdsfleet-hx-{TOKEN}-labtest"
    base = runmod.reserve_ports(1) - 1
    lab = labmod.Lab(tmp_path, prefix=name, port_base=base)
    try:
        nodes = lab.up(1, serve_repo=False)  # the run serves the repository
        again = lab.up(1, serve_repo=False)  # idempotent: same container, same loop
        assert [n.loop for n in again] == [n.loop for n in nodes]
        loop, backing = nodes[0].loop, nodes[0].backing
        assert labmod.Lab._loop_backs(loop, backing)
    finally:
        removed = lab.down()
    runmod.release_ports(base + 1)
    assert removed == [f"{name}-01"]
    ps = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                        text=True, env=labmod.podman_env(), check=True).stdout.split()
    assert f"{name}-01" not in ps
    assert not labmod.Lab._loop_backs(loop, backing)
