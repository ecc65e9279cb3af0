"""SSH pipelining and connection reuse of the rollout's playbook runs (rollout.ansible_env).

The settings are checked as values, then proven on a real OpenSSH sshd on a loopback port
(started by the test, no container): with them, ``ansible-playbook`` sends modules through
the command's stdin (no file transfer) and leaves a control socket in the private folder;
without them it copies each module over; and an inventory that asks for
``StrictHostKeyChecking=no`` still cannot connect to a host whose key is unknown.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.rollout import ansible_env
from provisioner.rollout.ansible_env import connection_env

PLAYBOOK = """\
- name: Three small tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: One
      ansible.builtin.command: "true"
      changed_when: false
    - name: Two
      ansible.builtin.command: "true"
      changed_when: false
    - name: Three
      ansible.builtin.stat:
        path: /
"""


def test_on_sets_pipelining_reuse_and_strict_host_keys() -> None:
    env = connection_env(environ={})
    # ssh's own spelling: `ansible_connection: local` hosts are not pipelined (each local module
    # process would read its module from stdin one byte per read(2))
    assert env["ANSIBLE_SSH_PIPELINING"] == "True" and "ANSIBLE_PIPELINING" not in env
    args = env["ANSIBLE_SSH_ARGS"].split()
    assert "ControlMaster=auto" in args and "ControlPersist=60s" in args
    assert "StrictHostKeyChecking=yes" in args
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    cp = env["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    assert stat.S_IMODE(os.stat(cp).st_mode) == 0o700
    assert os.stat(cp).st_uid == os.getuid()
    # room for Ansible's 10-character socket name and OpenSSH's 17-character bind suffix
    assert len(cp) + 1 + 10 + 17 < 104
    assert connection_env(environ={})["ANSIBLE_SSH_CONTROL_PATH_DIR"] == cp  # one per process


def test_off_turns_both_off_and_stays_strict() -> None:
    env = connection_env(pipelining=False, environ={})
    assert env["ANSIBLE_PIPELINING"] == "False" and env["ANSIBLE_SSH_PIPELINING"] == "False"
    args = env["ANSIBLE_SSH_ARGS"].split()
    assert "ControlMaster=no" in args and not any("ControlPersist" in a for a in args)
    assert "StrictHostKeyChecking=yes" in args
    assert "ANSIBLE_SSH_CONTROL_PATH_DIR" not in env


def test_operator_choice_in_the_environment_wins_but_not_for_host_keys() -> None:
    env = connection_env(environ={"ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_ARGS": "-4",
                                  "ANSIBLE_HOST_KEY_CHECKING": "False"})
    assert "ANSIBLE_PIPELINING" not in env and "ANSIBLE_SSH_PIPELINING" not in env
    # the operator's SSH arguments, with strict host keys in front (OpenSSH keeps the first)
    assert env["ANSIBLE_SSH_ARGS"] == "-o StrictHostKeyChecking=yes -4"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert not {"ANSIBLE_PIPELINING", "ANSIBLE_SSH_PIPELINING"} & set(
        connection_env(environ={"ANSIBLE_SSH_PIPELINING": "0"}))


def test_long_tmpdir_falls_back_to_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / ("y" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(ansible_env.tempfile, "tempdir", str(deep))
    monkeypatch.setattr(ansible_env, "_control_dir", None)
    path = ansible_env.control_dir()
    try:
        assert path.startswith("/tmp/gdsfleet-cp-")
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_rollout_option_reaches_the_playbook_environment(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """``provisioner rollout --no-pipelining`` is what the bench compares against."""
    from provisioner.cli import build_parser
    from provisioner.commands import rollout

    monkeypatch.delenv("ANSIBLE_PIPELINING", raising=False)
    monkeypatch.delenv("ANSIBLE_SSH_PIPELINING", raising=False)
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    pb = tmp_path / "site.yml"
    pb.write_text(PLAYBOOK)
    for extra, want in (([], "True"), (["--no-pipelining"], "False")):
        args = build_parser().parse_args(["rollout", "-i", str(tmp_path), "--playbook", str(pb),
                                          *extra])
        assert rollout._validate(args)["ansible_env"]["ANSIBLE_SSH_PIPELINING"] == want


# --- against a real sshd ----------------------------------------------------------------------

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
needs_sshd = pytest.mark.skipif(
    not os.path.exists(SSHD) or os.geteuid() != 0,
    reason="needs OpenSSH's sshd (openssh-server, installed by scripts/setup.sh) and root",
)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    from tests.harness.loopback_sshd import keyed_sshd

    root = tmp_path_factory.mktemp("sshd-ansible")
    server, _known = keyed_sshd(root)
    (root / "empty_known_hosts").write_text("")
    (root / "site.yml").write_text(PLAYBOOK)
    try:
        yield {"root": root, "port": server.port}
    finally:
        server.stop()


def _play(sshd: dict, env: dict[str, str], known: str,
          common: str = "") -> subprocess.CompletedProcess[str]:
    root: Path = sshd["root"]  # type: ignore[assignment]
    inv = root / f"hosts-{known}.ini"
    inv.write_text(
        f"n1 ansible_host=127.0.0.1 ansible_port={sshd['port']} ansible_user=root "
        f"ansible_ssh_private_key_file={root / 'client_key'} "
        f"ansible_python_interpreter={sys.executable} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={root / known} {common}'\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_SSH")}
    full.pop("ANSIBLE_PIPELINING", None)
    full.update(env)
    full["ANSIBLE_LOCAL_TEMP"] = str(root / "local-tmp")
    # a loaded machine can take ssh past Ansible's 10 s connect timeout, which is unreachable
    # too but without the refusal these tests read
    full["ANSIBLE_TIMEOUT"] = "60"
    ansible_playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run([str(ansible_playbook), "-i", str(inv), str(root / "site.yml"),
                           "-vvv"], env=full, capture_output=True, text=True, timeout=180,
                          check=False)


@needs_sshd
def test_pipelined_run_sends_no_files_and_reuses_one_connection(sshd: dict) -> None:
    env = connection_env(environ={})
    cp = Path(env["ANSIBLE_SSH_CONTROL_PATH_DIR"])
    p = _play(sshd, env, "known_hosts")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "ok=3" in out
    # no module file went over (sftp/scp PUT) and the master connection's socket is there
    assert " PUT " not in out, [ln for ln in out.splitlines() if " PUT " in ln][:3]
    assert f"ControlPath={cp}/" in out or f'ControlPath="{cp}/' in out
    assert [s for s in cp.iterdir() if s.is_socket()], "no control socket left for reuse"


def test_local_hosts_are_not_pipelined(tmp_path: Path) -> None:
    """The rollout's settings pipeline ssh hosts only: an `ansible_connection: local` host's
    module goes through a file, not the stdin of a process that inherits ansible-runner's
    PYTHONUNBUFFERED and reads it one byte per read(2) (docs/performance.md, issue 31)."""
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    full.update(connection_env(environ={}), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
                PYTHONUNBUFFERED="1")
    p = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                        str(tmp_path / "site.yml"), "-vvv"], env=full, capture_output=True,
                       text=True, timeout=180, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert out.count(" PUT ") >= 3, out[-3000:]  # each task's module as a file, not piped


@needs_sshd
def test_without_them_each_module_is_copied_over(sshd: dict) -> None:
    p = _play(sshd, connection_env(pipelining=False, environ={}), "known_hosts")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert out.count(" PUT ") >= 3  # one transfer per task
    assert "ControlMaster=no" in out


@needs_sshd
def test_unknown_host_key_refused_even_if_the_inventory_says_no(
        sshd: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh control folder: a live master connection (verified earlier) would be reused
    monkeypatch.setattr(ansible_env, "_control_dir", None)
    p = _play(sshd, connection_env(environ={}), "empty_known_hosts",
              common="-o StrictHostKeyChecking=no")
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "unreachable=1" in out
    assert "Host key verification failed" in out
