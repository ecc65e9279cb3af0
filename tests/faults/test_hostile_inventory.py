"""Fault injection: inventories and environments that weaken host-key checking (issue 17, 10).

The verification half (paramiko, provisioner.ssh) never honours an inventory's host-key
settings; the playbook half is OpenSSH driven by ansible-playbook, where ``ansible_ssh_args``
replaces the provisioner's own arguments (``StrictHostKeyChecking=yes`` among them), and
``ansible_host_key_checking: false`` or ``ansible_connection: paramiko`` change what Ansible
does. Before: each of these passed ``plan`` and ``rollout``. Now both refuse them before
anything runs (exit 64), naming the host and the variable; nothing is created.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout.ansible_env import connection_env

PLAYBOOK = """\
- name: Stand-in site playbook
  hosts: all
  gather_facts: false
  tasks:
    - name: Nothing
      ansible.builtin.command: "true"
      changed_when: false
"""


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for var in ("GDSFLEET_LEDGER", "ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_COMMON_ARGS",
                "ANSIBLE_SSH_EXTRA_ARGS", "ANSIBLE_TRANSPORT"):
        monkeypatch.delenv(var, raising=False)
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "hosts.ini").write_text(
        "[gpu_nodes]\n"
        "node01 ansible_host=127.0.0.1 ansible_port=2201\n"
        "node02 ansible_host=127.0.0.1 ansible_port=2202\n"
    )
    pb = tmp_path / "site.yml"
    pb.write_text(PLAYBOOK)
    return {"inv": inv, "pb": pb, "ledger": tmp_path / "ledger.sqlite", "tmp": tmp_path}


def _plan(lab: dict[str, Path]) -> list[str]:
    return ["plan", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
            "--allow-local-connection"]


def _rollout(lab: dict[str, Path]) -> list[str]:
    return ["rollout", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
            "--playbook", str(lab["pb"]), "--no-verify", "--plain", "--allow-local-connection"]


WEAK = [
    # (file under the inventory, YAML text, variable named in the refusal)
    ("host_vars/node02.yml", "ansible_ssh_args: -C -o ControlMaster=auto\n", "ansible_ssh_args"),
    ("host_vars/node02.yml", "ansible_ssh_common_args: -o StrictHostKeyChecking=no\n",
     "ansible_ssh_common_args"),
    ("host_vars/node02.yml", "ansible_ssh_common_args: '-o UserKnownHostsFile=/dev/null'\n",
     "ansible_ssh_common_args"),
    ("host_vars/node02.yml", "ansible_ssh_extra_args: -oStrictHostKeyChecking=accept-new\n",
     "ansible_ssh_extra_args"),
    ("host_vars/node02.yml", "ansible_ssh_extra_args: '-o \"StrictHostKeyChecking off\"'\n",
     "ansible_ssh_extra_args"),
    ("host_vars/node02.yml", "ansible_scp_extra_args: -o KnownHostsCommand=/bin/true\n",
     "ansible_scp_extra_args"),
    ("host_vars/node02.yml", "ansible_host_key_checking: false\n", "ansible_host_key_checking"),
    ("host_vars/node02.yml", "ansible_ssh_host_key_checking: 'no'\n",
     "ansible_ssh_host_key_checking"),
    ("host_vars/node02.yml", "ansible_host_key_checking: \"{{ 1 == 2 }}\"\n",
     "ansible_host_key_checking"),
    ("host_vars/node02.yml", "ansible_paramiko_host_key_auto_add: true\n",
     "ansible_paramiko_host_key_auto_add"),
    ("host_vars/node02.yml", "ansible_connection: paramiko\n", "ansible_connection"),
    ("host_vars/node02.yml", "ansible_connection: community.docker.docker\n",
     "ansible_connection"),
]


@pytest.mark.parametrize(("where", "text", "var"), WEAK, ids=[f"{w[2]}-{i}"
                                                             for i, w in enumerate(WEAK)])
@pytest.mark.parametrize("command", ["plan", "rollout"])
def test_weakening_variable_is_refused_before_anything_runs(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str], where: str, text: str,
        var: str, command: str) -> None:
    (lab["inv"] / where).write_text(text)
    argv = _plan(lab) if command == "plan" else _rollout(lab)
    code = main(argv)
    err = capsys.readouterr().err
    # before: plan exit 0 and a rollout that ran the playbook with the weaker setting
    assert code == Exit.USAGE, err
    assert "node02" in err and var in err
    assert "node01" not in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not lab["ledger"].exists()
    assert not (lab["tmp"] / "runner").exists()


def test_group_vars_for_many_hosts_give_one_bounded_line(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    (lab["inv"] / "hosts.ini").write_text(
        "[gpu_nodes]\n" + "".join(f"node{i:03d} ansible_host=10.0.0.{i}\n" for i in range(200)))
    (lab["inv"] / "group_vars" / "all.yml").write_text("ansible_host_key_checking: false\n")
    assert main(_plan(lab)) == Exit.USAGE
    err = capsys.readouterr().err
    assert "node000" in err and "197 more such variable(s) on 197 host(s)" in err
    assert len(err) < 2000


@pytest.mark.parametrize("text", [
    "ansible_ssh_common_args: -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/kh\n",
    "ansible_host_key_checking: true\n",
    "ansible_connection: ssh\n",
    f"ansible_connection: local\nansible_python_interpreter: {sys.executable}\n",
    "ansible_paramiko_host_key_auto_add: false\n",
])
def test_strict_settings_still_pass(lab: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                    text: str) -> None:
    (lab["inv"] / "host_vars" / "node02.yml").write_text(text)
    code = main(_plan(lab))
    assert code == Exit.OK, capsys.readouterr().err


@pytest.mark.parametrize(("env", "var"), [
    ({"ANSIBLE_SSH_ARGS": "-o StrictHostKeyChecking=no"}, "ANSIBLE_SSH_ARGS"),
    ({"ANSIBLE_SSH_COMMON_ARGS": "-o UserKnownHostsFile=/dev/null"}, "ANSIBLE_SSH_COMMON_ARGS"),
    ({"ANSIBLE_TRANSPORT": "paramiko"}, "ANSIBLE_TRANSPORT"),
])
def test_weakening_environment_is_refused_by_rollout(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], var: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(_rollout(lab)) == Exit.USAGE
    err = capsys.readouterr().err
    assert var in err and ("host-key" in err or "host keys" in err), err
    assert not lab["ledger"].exists()
    with pytest.raises(UsageError):
        connection_env(environ=env)


def test_operator_ssh_args_keep_strict_host_keys_first() -> None:
    env = connection_env(environ={"ANSIBLE_SSH_ARGS": "-4 -o ControlMaster=no"})
    assert env["ANSIBLE_SSH_ARGS"].startswith("-o StrictHostKeyChecking=yes ")
    assert env["ANSIBLE_SSH_ARGS"].endswith("-4 -o ControlMaster=no")
    assert env["ANSIBLE_TRANSPORT"] == "ssh"


@pytest.mark.parametrize(("args", "weak"), [
    ("-o StrictHostKeyChecking=yes", []),
    ("-o StrictHostKeyChecking=No", ["StrictHostKeyChecking=No"]),
    ("-o 'StrictHostKeyChecking no'", ["StrictHostKeyChecking no"]),
    ("-o GlobalKnownHostsFile=none", ["GlobalKnownHostsFile=none"]),
    ("-o UserKnownHostsFile='/etc/kh /dev/null'", ["UserKnownHostsFile=/etc/kh /dev/null"]),
    ("-o HostKeyAlias=other", ["HostKeyAlias=other"]),
    ("-o VerifyHostKeyDNS=yes", ["VerifyHostKeyDNS=yes"]),
    ("-o NoHostAuthenticationForLocalhost=yes", ["NoHostAuthenticationForLocalhost=yes"]),
    ("-o ProxyJump=bastion -o Compression=yes", []),
])
def test_weakening_options_are_recognised(args: str, weak: list[str]) -> None:
    from provisioner.inventory import weakening_ssh_options

    assert weakening_ssh_options(args) == weak


# ============================================================ issue 27, item 11
@pytest.mark.parametrize(("text", "var"), [
    ('"node02": {ansible_host: "127.0.0.1\\n"}', "ansible_host"),
    ('"node02": {ansible_host: "-oProxyJump"}', "ansible_host"),
    ('"node02": {ansible_host: "-1"}', "ansible_host"),
    ('"node02": {ansible_host: 127.0.0.1, ansible_user: "root\\n"}', "ansible_user"),
    ('"node02\\n": {ansible_host: 127.0.0.1}', "inventory_hostname"),
    ('"node02": {ansible_host: 127.0.0.1, ansible_ssh_executable: /tmp/sshwrap}',
     "ansible_ssh_executable"),
    ('"node02": {ansible_host: 127.0.0.1, ansible_scp_executable: /tmp/scpwrap}',
     "ansible_scp_executable"),
    ('"node02": {ansible_host: 127.0.0.1, ansible_sftp_executable: /tmp/sftpwrap}',
     "ansible_sftp_executable"),
], ids=["host-newline", "host-dash-option", "host-dash", "user-newline", "name-newline",
        "ssh-executable", "scp-executable", "sftp-executable"])
@pytest.mark.parametrize("command", ["plan", "rollout"])
def test_27_11_inventory_value_is_refused_naming_host_and_variable(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str, var: str,
        command: str) -> None:
    """Issue 27 item 11: a trailing newline in a host name, ansible_host or ansible_user (the
    checks used ``$``, which matches before a final newline), an ansible_host starting with
    ``-`` (ssh reads it as an option) and ``ansible_*_executable`` (a wrapper that adds
    ``-o StrictHostKeyChecking=no`` ran the playbook on a host in no known_hosts) are refused
    before anything runs, naming the host and the variable. Before: each passed plan."""
    (lab["inv"] / "hosts.ini").unlink()
    (lab["inv"] / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        node01: {ansible_host: 127.0.0.1}\n"
        f"        {text}\n")
    argv = _plan(lab) if command == "plan" else _rollout(lab)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == Exit.USAGE, err
    assert "node02" in err and var in err, err
    assert "Traceback" not in err
    assert not lab["ledger"].exists()
    assert not (lab["tmp"] / "runner").exists()


@pytest.mark.parametrize("var", ["ANSIBLE_SSH_EXECUTABLE", "ANSIBLE_SCP_EXECUTABLE",
                                 "ANSIBLE_SFTP_EXECUTABLE"])
def test_27_11_executable_in_the_environment_is_refused_by_rollout(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    """Issue 27 item 11, the environment's spelling of the same variables."""
    monkeypatch.setenv(var, "/tmp/wrapper")
    assert main(_rollout(lab)) == Exit.USAGE
    err = capsys.readouterr().err
    assert var in err and "host-key" in err, err
    assert not lab["ledger"].exists()
