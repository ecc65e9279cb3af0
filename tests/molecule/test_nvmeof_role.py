"""The nvmeof role on a simulated node with a simulated NVMe-oF target (tests/harness
gdsfleet_nvmeof.py + the `nvme` stand-in): it writes a stable host NQN/ID, connects the
subsystem over RDMA (a second run changes nothing), records it for nvmf-autoconnect (the
subsystem is back over RDMA after a simulated reboot), and the
nvme role formats and mounts the fabric namespace under its own rules (a namespace that holds
data is refused without nvme_force_format). The gather script run on the node feeds verify's
fs.mount.transport: rdma passes; the same subsystem connected over NVMe/TCP fails it, and the
role refuses a tcp target meant for GDS, or any GDS target on the p2pdma route, with the reason.
A target given by NQN is reconnected at boot by the role's own unit (one `nvme connect`), not
through discovery.conf, whose `nvme connect-all` would also connect every other subsystem the
port exposes (the simulated array offers a second one); its fstab entry carries _netdev.

One simulated node (sim_node, nvme=True for a local drive, nvmeof=True for the target's
namespace), reached by Ansible over SSH with pipelining (SimNode.ansible_host_vars).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gds_collection import ROOT, VENV_BIN, ansible_env

from provisioner.remote import load_script
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.policy import Policy

NQN = "nqn.2026-01.io.gdsfleet.sim:gds-target"
OTHER_NQN = "nqn.2026-01.io.gdsfleet.sim:other-team"
UNIT = "/etc/systemd/system/gdsfleet-nvmeof-connect.service"
TARGET = {"address": "192.168.100.10", "transport": "rdma", "service_id": "4420", "nqn": NQN}

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def play(module_sim_node: Callable[..., Any], installed_collection: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    node = module_sim_node("nvfs", nvme=True, nvmeof=True, ssh=True)
    tmp = tmp_path_factory.mktemp("nvmeof")
    inventory = tmp / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
    }}}}))

    def run(variables: dict[str, Any], roles: tuple[str, ...] = ("gdsfleet.gds.nvmeof",), *,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        book = tmp / "play.yml"
        book.write_text(json.dumps([{"hosts": "gpu_nodes", "become": True, "gather_facts": False,
                                     "vars": variables,
                                     "roles": [{"role": r} for r in roles]}]))
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(book)]
        if check:
            argv += ["--check", "--diff"]
        return subprocess.run(argv, cwd=ROOT, env=ansible_env(), capture_output=True,
                              text=True, timeout=900, check=False)

    run.node = node  # type: ignore[attr-defined]
    return run


def transport_check(node: Any) -> Any:
    """gather.py on the node -> facts -> the fs.mount.transport check for /mnt/gds."""
    script = load_script("gather.py").decode()  # as verify sends it: bundled
    proc = subprocess.run(["podman", "exec", "-i", node.name, "python3", "-"], input=script,
                          capture_output=True, text=True, timeout=300, check=True)
    facts = build_facts(json.loads(proc.stdout))
    route = checks.determine_route(facts)
    io = iotest.evaluate({}, route=route)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route, io_path="/mnt/gds")
    return {c.id: c for c in results}["fs.mount.transport"]


def test_tcp_for_gds_is_refused_with_the_reason(play: Any) -> None:
    proc = play({"nvmeof_targets": [dict(TARGET, transport="tcp")]})
    assert proc.returncode != 0
    assert "GDS does not work over NVMe/TCP" in proc.stdout
    assert "nothing was changed" in proc.stdout
    seen = play.node.exec("ls /etc/nvme 2>/dev/null; ls /sys/class/nvme").stdout.split()
    assert seen == ["nvme0"]


def test_p2pdma_refuses_gds_targets_before_any_change(play: Any) -> None:
    proc = play({"gds_route": "p2pdma", "nvmeof_targets": [TARGET]})
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "Refusing to connect, nothing was changed: the p2pdma route" in out, out[-3000:]
    assert "does not support NVMe-oF" in out and "Use gds_route nvfs" in out
    seen = play.node.exec("ls /etc/nvme 2>/dev/null; ls /sys/class/nvme").stdout.split()
    assert seen == ["nvme0"]


def test_check_mode_connects_nothing(play: Any) -> None:
    proc = play({"nvmeof_targets": [TARGET]}, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert play.node.exec("ls /sys/class/nvme").stdout.split() == ["nvme0"]
    assert play.node.exec("test -e /etc/nvme/hostnqn", check=False).returncode != 0


def test_connects_over_rdma_formats_mounts_and_verify_passes(play: Any) -> None:
    node = play.node
    variables = {"nvmeof_targets": [TARGET], "nvme_devices": "{{ nvmeof_devices }}"}
    roles = ("gdsfleet.gds.nvmeof", "gdsfleet.gds.nvme")
    # the array also exposes another team's subsystem on the same RDMA port
    fabric = json.loads(node.exec("cat /run/gdsfleet-sim/fabric.json").stdout)
    fabric["subsystems"].append({"nqn": OTHER_NQN, "model": "Linux", "serial": "77aa00bb11cc22dd",
                                 "firmware_rev": "6.1.0", "ports": [1], "namespaces": []})
    node.exec("mkdir -p /etc/gdsfleet-sim && printf '%s' "
              f"{shlex.quote(json.dumps(fabric))} > /etc/gdsfleet-sim/fabric.json")
    # the namespace holds data: the nvme role's rule refuses it without nvme_force_format
    node.exec(f"modprobe nvme-rdma && nvme connect -t rdma -a 192.168.100.10 -s 4420 -n {NQN} && "
              "mkfs.ext4 -q -F /dev/nvme1n1 && nvme disconnect -n " + NQN)
    proc = play(variables, roles)
    assert proc.returncode != 0
    assert "Refusing to format" in proc.stdout, proc.stdout[-3000:]
    node.exec(f"wipefs -a /dev/nvme1n1 >/dev/null; nvme disconnect -n {NQN} >/dev/null")

    proc = play(variables, roles)
    assert proc.returncode == 0, proc.stdout[-4000:]
    sysfs = node.exec("cat /sys/class/nvme/nvme1/transport /sys/class/nvme/nvme1/subsysnqn "
                      "/sys/class/nvme/nvme1/hostnqn /etc/nvme/hostnqn").stdout.split()
    assert sysfs[:2] == ["rdma", NQN] and sysfs[2] == sysfs[3]
    assert sysfs[3].startswith("nqn.2014-08.org.nvmexpress:uuid:")
    # persistence: a per-target connect at boot, nothing in discovery.conf (no discovery target)
    assert node.exec("test -e /etc/nvme/discovery.conf", check=False).returncode != 0
    unit = node.exec(f"cat {UNIT}").stdout
    assert (f"connect --transport=rdma --traddr=192.168.100.10 --trsvcid=4420 --nqn={NQN}"
            in unit), unit
    assert "Before=remote-fs-pre.target" in unit and "After=network-online.target" in unit
    fstab = [ln.split() for ln in node.exec("cat /etc/fstab").stdout.splitlines()
             if " /mnt/gds " in f" {ln} "]
    assert len(fstab) == 1 and "_netdev" in fstab[0][3].split(","), fstab
    assert "nvme_rdma" in node.exec("ls /sys/module").stdout
    assert "nvme-rdma" in node.exec("cat /etc/modules-load.d/gdsfleet-nvmeof.conf").stdout
    mount = node.exec("findmnt -n -o FSTYPE /mnt/gds").stdout.strip()
    assert mount == "xfs"
    ids = node.exec("cat /etc/nvme/hostnqn /etc/nvme/hostid").stdout

    again = play(variables, roles)
    assert again.returncode == 0
    assert "changed=0" in again.stdout, again.stdout[-3000:]
    assert node.exec("cat /etc/nvme/hostnqn /etc/nvme/hostid").stdout == ids
    assert node.exec("ls /sys/class/nvme").stdout.split() == ["nvme0", "nvme1"]

    # persistent: at boot the simulated systemd runs the unit's nvme connect, which reconnects
    # that subsystem (and only it) over RDMA, with nvme-rdma loaded from modules-load.d
    node.reboot()
    assert node.exec("ls /sys/class/nvme").stdout.split() == ["nvme0", "nvme1"]
    assert node.exec("cat /sys/class/nvme/nvme1/transport").stdout.strip() == "rdma"
    assert node.exec("cat /sys/class/nvme/nvme1/subsysnqn").stdout.strip() == NQN
    assert node.exec("findmnt -n -o FSTYPE /mnt/gds").stdout.strip() == "xfs"
    result = transport_check(node)
    assert result.status == "pass", result
    assert result.observed.startswith("rdma (nvme1n1 via nvme1")


def test_verify_fails_the_gds_mount_on_nvme_tcp(play: Any) -> None:
    node = play.node
    node.exec(f"umount /mnt/gds; nvme disconnect -n {NQN} >/dev/null; modprobe nvme-tcp; "
              f"nvme connect -t tcp -a 192.168.100.10 -s 4420 -n {NQN}; mount /mnt/gds")
    assert node.exec("cat /sys/class/nvme/nvme1/transport").stdout.strip() == "tcp"
    result = transport_check(node)
    assert result.status == "fail"
    assert result.observed.startswith("tcp (nvme1n1 via nvme1")
    assert "GDS does not work over NVMe/TCP" in result.message
