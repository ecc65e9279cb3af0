"""Issue 45, item 5: the trust model, said where an operator reads it.

* ``ansible_connection: local`` on a selected host runs the rollout's playbooks (the site
  playbook, a reboot) on the machine that runs ansible-playbook: the controller itself. Before,
  ``rollout`` did that without a word; now it refuses (exit 64, nothing ran) unless
  ``--allow-local-connection``, and ``plan`` lists it among the problems.
* ``plan --help``, ``verify --help`` and ``rollout --help`` say the inventory is evaluated as
  code (as Ansible evaluates it: lookups run, inventory scripts execute, a ProxyCommand runs on
  the controller); docs/security.md says what is trusted and what is not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- name: Stand-in site playbook (trust model tests)
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
"""


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\nnode01 ansible_host=192.0.2.1\n"
                   f"here ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    pb = tmp_path / "site.yml"
    pb.write_text(PLAYBOOK)
    return {"inv": inv, "pb": pb, "ledger": tmp_path / "l" / "ledger.sqlite", "tmp": tmp_path}


def test_rollout_refuses_a_local_connection_before_anything_runs(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 0, the playbook ran on this machine for ``here``."""
    rc = main(["rollout", "-i", str(fleet["inv"]), "--ledger", str(fleet["ledger"]),
               "--playbook", str(fleet["pb"]), "--no-verify", "--plain", "--limit", "here"])
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    assert "here has ansible_connection=local" in err
    assert "this controller" in err and "--allow-local-connection" in err
    assert not fleet["ledger"].exists()
    assert not (fleet["ledger"].parent / "runner").exists()


def test_rollout_with_the_flag_runs_on_the_controller(fleet: dict[str, Path]) -> None:
    rc = main(["rollout", "-i", str(fleet["inv"]), "--ledger", str(fleet["ledger"]),
               "--playbook", str(fleet["pb"]), "--no-verify", "--plain", "--limit", "here",
               "--allow-local-connection"])
    assert rc == Exit.OK


def test_plan_names_the_local_host_as_a_problem(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "-i", str(fleet["inv"]), "--ledger", str(fleet["ledger"]), "--json", "-"]
    assert main(args) == Exit.USAGE
    doc = json.loads(capsys.readouterr().out)
    assert any("ansible_connection=local" in p for p in doc["problems"])
    assert main([*args, "--allow-local-connection"]) == Exit.OK
    assert json.loads(capsys.readouterr().out)["problems"] == []


@pytest.mark.parametrize("command", ["plan", "verify", "rollout"])
def test_help_says_the_inventory_is_code(command: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "It is evaluated as Ansible evaluates it, on this machine" in text
    assert "use only an inventory you trust as you trust code" in text


def test_the_trust_model_is_written_down() -> None:
    doc = (REPO / "docs" / "security.md").read_text()
    start = doc.index("## The trust model")
    section = doc[start:doc.index("\n## ", start)].lower()
    for trusted in ("inventory", "group_vars", "playbooks", "ssh config", "proxycommand",
                    "lookups"):
        assert trusted in section, trusted
    for untrusted in ("nodes", "execution nodes", "older versions", "other local users"):
        assert untrusted in section, untrusted
    assert "--allow-local-connection" in section
