"""The connection the container tests use for Ansible (SimNode.ansible_host_vars): SSH to the
node's loopback sshd with pipelining, the host key checked strictly against the node's own
known_hosts, and still there after a simulated reboot (the podman connection was, by nature).

One simulated node (tests/harness sim_node, ssh=True); ad-hoc ansible runs from this checkout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from gds_collection import VENV_BIN, ansible_env

from tests.harness.fixtures import SimNode, SimNodeFactory


def _adhoc(tmp: Path, node: SimNode, host_vars: dict[str, Any], module: str, args: str = ""
           ) -> subprocess.CompletedProcess[str]:
    inventory = tmp / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": {node.name: host_vars}}}))
    argv = [str(VENV_BIN / "ansible"), "-i", str(inventory), "all", "-m", module, "-vvv"]
    if args:
        argv += ["-a", args]
    return subprocess.run(argv, env=ansible_env(), capture_output=True, text=True, timeout=300,
                          check=False)


def test_ssh_with_pipelining_strict_host_key_and_across_a_reboot(
        sim_node: SimNodeFactory, tmp_path: Path) -> None:
    node = sim_node("nvfs", ssh=True)
    hv = node.ansible_host_vars()
    assert hv["ansible_connection"] == "ssh" and hv["ansible_ssh_pipelining"] is True

    # a known_hosts with another key for the same address and port: refused, not accepted
    # (first: a live ControlMaster connection of the same host, port and user would be
    # reused without a new host-key check)
    other = tmp_path / "other-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True,
                   timeout=30)
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{node.ssh_port} "
                     + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n")
    bad = dict(hv, ansible_ssh_common_args=str(hv["ansible_ssh_common_args"]).replace(
        str(node.known_hosts), str(wrong)))
    refused = _adhoc(tmp_path, node, bad, "ansible.builtin.ping")
    assert refused.returncode != 0
    assert "UNREACHABLE" in refused.stdout, refused.stdout[-3000:]
    assert "host key" in (refused.stdout + refused.stderr).lower()

    proc = _adhoc(tmp_path, node, hv, "ansible.builtin.command",
                  "cat /proc/sys/kernel/random/boot_id")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert node.boot_id() in proc.stdout
    # pipelined: the module goes through ssh's stdin, no temporary file is put on the node
    assert "PUT " not in proc.stdout, proc.stdout[-3000:]

    # the simulated reboot (podman restarts the container): same host key, sshd back, and the
    # ControlMaster socket of the run above (ControlPersist) does not get in the way
    before = node.boot_id()
    node.reboot()
    again = _adhoc(tmp_path, node, hv, "ansible.builtin.command",
                   "cat /proc/sys/kernel/random/boot_id")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert before not in again.stdout and node.boot_id() in again.stdout
