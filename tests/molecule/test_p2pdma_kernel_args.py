"""The p2pdma role where modprobe.d cannot set nvme_core's multipath (kmod applies the kernel
command line's nvme_core.multipath= after every modprobe.d file; a built-in nvme_core reads only
the command line - tests/fixtures/kmod/), on simulated p2pdma nodes:

- the command line overrides (GRUB puts nvme_core.multipath=Y there): the role adds the GRUB
  snippet, runs update-grub and records the reboot; after the reboot multipath is N, verify's
  p2pdma.modprobe_config passes, and the role is idempotent; check mode changes nothing;
- nvme_core built in (SIM_NVME_CORE_BUILTIN=1): the same kernel-argument path;
- the command line's Y comes from outside the boot loader's configuration
  (SIM_KERNEL_CMDLINE, as firmware or PXE would add it): after the recorded reboot nothing
  changed, so the role fails with the reason and records no second reboot, and verify fails.

Simulated nodes (tests/harness sim_node, profile p2pdma), reached by Ansible over SSH with
pipelining (SimNode.ansible_host_vars); the reboot is the harness's (what playbooks/reboot.yml
does: reboot, then clear the flag), after which sshd is back with the same host key.
"""

from __future__ import annotations

import json
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

pytestmark = pytest.mark.container

SNIPPET = "/etc/default/grub.d/99-gdsfleet-p2pdma.cfg"
STATE = "/var/lib/gdsfleet/p2pdma-reboot"
FLAG = "/var/lib/gdsfleet/reboot-required"


def _runner(node: Any, tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    inventory = tmp / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"gds_route": "p2pdma"},
    }}}}))
    book = tmp / "p2pdma.yml"
    book.write_text(json.dumps([{"hosts": "gpu_nodes", "become": True, "gather_facts": True,
                                 "roles": [{"role": "gdsfleet.gds.p2pdma"}]}]))

    def run(*, check: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(book)]
        if check:
            argv += ["--check", "--diff"]
        return subprocess.run(argv, cwd=ROOT, env=ansible_env(), capture_output=True,
                              text=True, timeout=900, check=False)

    return run


def _reboot(node: Any) -> None:
    """What playbooks/reboot.yml does when the flag is there: reboot, then clear the flag."""
    assert node.exec(f"test -e {FLAG}", check=False).returncode == 0, "no reboot was recorded"
    node.reboot()
    node.exec(f"rm -f {FLAG}")


def _multipath(node: Any) -> str:
    return node.read("/sys/module/nvme_core/parameters/multipath").strip()


def _modprobe_config(node: Any) -> Any:
    """gather.py on the node -> facts -> verify's p2pdma.modprobe_config."""
    script = load_script("gather.py").decode()  # as verify sends it: bundled
    proc = subprocess.run(["podman", "exec", "-i", node.name, "python3", "-"], input=script,
                          capture_output=True, text=True, timeout=300, check=True)
    facts = build_facts(json.loads(proc.stdout))
    route = checks.determine_route(facts)
    io = iotest.evaluate({}, route=route)
    _, results, _ = checks.evaluate(facts, io, Policy(expected_route="p2pdma"), route=route,
                                    io_path="/mnt/gds")
    return {c.id: c for c in results}["p2pdma.modprobe_config"]


def _grub_calls(node: Any) -> int:
    return int(node.exec("grep -c update-grub /var/lib/gdsfleet-sim/calls.log || true")
               .stdout.strip() or 0)


def test_command_line_override_gets_the_grub_argument(
        sim_node: Callable[..., Any], installed_collection: Path, tmp_path: Path) -> None:
    node = sim_node("p2pdma", ssh=True)
    # the operator's GRUB puts nvme_core.multipath=Y on the command line; booted with it
    node.exec("mkdir -p /etc/default && printf '%s\\n' 'GRUB_DEFAULT=0' "
              "'GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"' "
              "'GRUB_CMDLINE_LINUX=\"nvme_core.multipath=Y\"' > /etc/default/grub && update-grub")
    node.reboot()
    assert "nvme_core.multipath=Y" in node.read("/proc/cmdline")
    run = _runner(node, tmp_path)
    grub_before = _grub_calls(node)

    check = run(check=True)
    assert check.returncode == 0, check.stdout[-3000:]
    assert node.exec(f"test -e {SNIPPET} || test -e {FLAG} || test -e {STATE}",
                     check=False).returncode == 1, "check mode changed the node"
    assert _grub_calls(node) == grub_before

    first = run()
    assert first.returncode == 0, first.stdout[-4000:]
    assert "nvme_core.multipath=N" in node.read(SNIPPET)
    assert _grub_calls(node) == grub_before + 1
    assert "kernel command line" in node.read(FLAG)
    _reboot(node)
    assert _multipath(node) == "N"
    conf = _modprobe_config(node)
    assert conf.status == "pass", conf

    second = run()
    assert second.returncode == 0, second.stdout[-3000:]
    assert node.exec(f"test -e {FLAG} || test -e {STATE}", check=False).returncode == 1
    third = run()
    assert "changed=0" in third.stdout and "failed=0" in third.stdout, third.stdout[-3000:]


def test_builtin_nvme_core_takes_the_kernel_argument_path(
        sim_node: Callable[..., Any], installed_collection: Path, tmp_path: Path) -> None:
    node = sim_node("p2pdma", env={"SIM_NVME_CORE_BUILTIN": "1"}, ssh=True)
    assert _multipath(node) == "Y"
    conf = _modprobe_config(node)
    assert conf.status == "fail" and "built into the kernel" in conf.message
    run = _runner(node, tmp_path)
    first = run()
    assert first.returncode == 0, first.stdout[-4000:]
    assert "built into the kernel" in first.stdout
    assert node.exec(f"test -e {SNIPPET}", check=False).returncode == 0
    _reboot(node)
    assert _multipath(node) == "N"
    assert _modprobe_config(node).status == "pass"


def test_reboot_that_did_not_take_fails_with_the_reason_and_no_second_reboot(
        sim_node: Callable[..., Any], installed_collection: Path, tmp_path: Path) -> None:
    node = sim_node("p2pdma", env={"SIM_KERNEL_CMDLINE": "nvme_core.multipath=Y"},
                    ssh=True)
    run = _runner(node, tmp_path)
    first = run()
    assert first.returncode == 0, first.stdout[-4000:]
    _reboot(node)
    assert _multipath(node) == "Y"  # the firmware's argument comes after GRUB's
    conf = _modprobe_config(node)
    assert conf.status == "fail" and "outside the boot loader" in conf.message

    for _ in range(2):
        again = run()
        assert again.returncode != 0
        assert "the reboot this role recorded did not take" in again.stdout
        assert "something outside the boot loader's configuration adds it" in again.stdout
        assert "requests no further reboot" in again.stdout
        assert node.exec(f"test -e {FLAG}", check=False).returncode == 1, "a second reboot"
