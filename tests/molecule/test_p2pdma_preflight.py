"""Preflight and the p2pdma role on a fresh p2pdma node (nvme_core multipath=Y, no
NVreg_RegistryDwords): preflight alone refuses it, since nothing in that play writes
`options nvme_core multipath=N`, and names the fix; with gdsfleet.gds.p2pdma in the play, or
through playbooks/preflight.yml (which checks on site.yml's behalf), it passes. A check-mode
run of preflight + p2pdma changes nothing on the node.

One simulated node (tests/harness sim_node, profile p2pdma), reached over SSH with pipelining
(SimNode.ansible_host_vars).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gds_collection import ROOT, VENV_BIN, ansible_env

OWN = "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"


@pytest.fixture(scope="module")
def play(module_sim_node: Callable[..., Any], installed_collection: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    node = module_sim_node("p2pdma", ssh=True)
    tmp = tmp_path_factory.mktemp("p2pdma-preflight")
    inventory = tmp / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"gds_route": "p2pdma"},
    }}}}))

    def run(roles: list[str] | str, *, check: bool = False) -> subprocess.CompletedProcess[str]:
        if isinstance(roles, str):
            target = roles  # a playbook of the collection, by FQCN
        else:
            book = tmp / ("-".join(r.rsplit(".", 1)[-1] for r in roles) + ".yml")
            book.write_text(json.dumps([{"hosts": "gpu_nodes", "become": True,
                                         "gather_facts": True,
                                         "roles": [{"role": r} for r in roles]}]))
            target = str(book)
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), target]
        if check:
            argv += ["--check", "--diff"]
        return subprocess.run(argv, cwd=ROOT, env=ansible_env(), capture_output=True,
                              text=True, timeout=300, check=False)

    run.node = node  # type: ignore[attr-defined]
    return run


def _state(node: Any) -> str:
    return str(node.exec(
        f"cat /sys/module/nvme_core/parameters/multipath; ls /etc/modprobe.d; "
        f"test -e {OWN} && echo own; test -e /var/lib/gdsfleet/reboot-required && echo rr; "
        "grep -c update-initramfs /var/lib/gdsfleet-sim/calls.log; true").stdout)


def test_fresh_node_shows_multipath_y(play: Any) -> None:
    assert play.node.read("/sys/module/nvme_core/parameters/multipath").strip() == "Y"


def test_preflight_alone_refuses_multipath_y(play: Any) -> None:
    before = _state(play.node)
    proc = play(["gdsfleet.gds.preflight"])
    assert proc.returncode != 0
    out = proc.stdout
    assert "Assert NVMe multipath is off or will be turned off (p2pdma route)" in out
    assert "nvme_core multipath is Y" in out
    assert "add the gdsfleet.gds.p2pdma role to the play" in out
    assert _state(play.node) == before


def test_preflight_playbook_checks_on_behalf_of_site(play: Any) -> None:
    proc = play("gdsfleet.gds.preflight")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout


def test_preflight_with_the_role_passes_and_check_mode_changes_nothing(play: Any) -> None:
    before = _state(play.node)
    proc = play(["gdsfleet.gds.preflight", "gdsfleet.gds.p2pdma"], check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout
    # --diff shows what a real run would write
    assert "options nvme_core multipath=N" in proc.stdout
    assert _state(play.node) == before
    assert "own" not in before.split()


def test_check_mode_on_a_node_without_modprobe_d(play: Any) -> None:
    """The H100 image has no /etc/modprobe.d at all: check mode must not fail on it."""
    play.node.exec("mv /etc/modprobe.d /etc/modprobe.d.gdsfleet-test")
    try:
        proc = play(["gdsfleet.gds.p2pdma"], check=True)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert "failed=0" in proc.stdout
        assert "would hold: options nvme_core multipath=N" in proc.stdout
        assert play.node.exec("test -e /etc/modprobe.d", check=False).returncode == 1
    finally:
        play.node.exec("rm -rf /etc/modprobe.d; mv /etc/modprobe.d.gdsfleet-test /etc/modprobe.d")
