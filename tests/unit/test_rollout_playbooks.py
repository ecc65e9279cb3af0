"""Which playbook ``provisioner rollout`` runs: collection playbooks by FQCN, found by
ansible-core's own loader, refused before anything runs when missing.

No containers: local-connection hosts and a tiny collection laid out in a temporary
``ansible_collections`` folder (the loader needs nothing more), so these run in seconds. The
wheel-installed provisioner rolling out the simulated lab is tests/fleet/test_wheel_install.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout import playbooks

HELLO = """\
- name: A collection playbook (testns.tiny.hello)
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
"""


def _collection(root: Path, ns: str = "testns", name: str = "tiny") -> Path:
    pb = root / "ansible_collections" / ns / name / "playbooks" / "hello.yml"
    pb.parent.mkdir(parents=True)
    pb.write_text(HELLO)
    return root


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv" / "hosts"
    path.parent.mkdir()
    path.write_text("[gpu_nodes]\n" + "".join(
        f"node{i} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in (1, 2)))
    return path


@pytest.fixture
def clean_ansible_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ANSIBLE_* settings from the caller; an empty working directory."""
    for key in playbooks.FORWARDED_ENV:
        monkeypatch.delenv(key, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_rollout_runs_a_collection_playbook_by_fqcn_through_ansible_runner(
    tmp_path: Path, inv: Path, clean_ansible_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(_collection(tmp_path / "colls")))
    ledger = tmp_path / "ledger.sqlite"
    rc = main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--playbook",
               "testns.tiny.hello", "--no-verify", "--plain", "--waves", "1,100%",
               "--allow-local-connection"])
    assert rc == Exit.OK
    events = [json.loads(x) for x in (tmp_path / "runner" / "events.jsonl").read_text()
              .splitlines()]
    assert {e["host"] for e in events if e["event"] == "outcome:changed"} == {"node1", "node2"}
    commands = [json.loads(p.read_text())["command"]
                for p in (tmp_path / "runner").glob("artifacts/*/command")]
    assert commands and all("testns.tiny.hello" in c for c in commands), commands


def test_missing_collection_is_refused_before_anything_runs(
    tmp_path: Path, inv: Path, clean_ansible_env: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "no-collections"
    empty.mkdir()
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(empty))
    ledger = tmp_path / "ledger.sqlite"
    rc = main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--no-verify", "--plain",
               "--allow-local-connection"])
    err = capsys.readouterr().err
    assert rc == Exit.USAGE
    assert "playbook gdsfleet.gds.site: the collection gdsfleet.gds is not installed" in err
    assert str(empty) in err  # where it looked
    assert "ansible-galaxy collection install" in err and "--playbook" in err
    assert not ledger.exists() and not (tmp_path / "runner").exists()


def test_allow_reboot_needs_the_reboot_playbook(
    tmp_path: Path, inv: Path, clean_ansible_env: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(_collection(tmp_path / "colls")))
    ledger = tmp_path / "ledger.sqlite"
    rc = main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--playbook",
               "testns.tiny.hello", "--allow-reboot", "--no-verify", "--plain",
               "--allow-local-connection"])
    assert rc == Exit.USAGE
    assert "playbook gdsfleet.gds.reboot" in capsys.readouterr().err
    assert not ledger.exists()


def test_a_playbook_the_collection_lacks(tmp_path: Path, clean_ansible_env: Path) -> None:
    colls = _collection(tmp_path / "colls")
    with pytest.raises(UsageError, match="installed at .* but has no playbook nosuch"):
        playbooks.resolve("testns.tiny.nosuch", env={"ANSIBLE_COLLECTIONS_PATH": str(colls)})


def test_a_playbook_file(tmp_path: Path, clean_ansible_env: Path) -> None:
    pb = tmp_path / "site.yml"
    pb.write_text(HELLO)
    got = playbooks.resolve(str(pb))
    assert got.spec == str(pb.resolve()) and not got.fqcn
    with pytest.raises(UsageError, match="does not exist"):
        playbooks.resolve(str(tmp_path / "none.yml"))


def test_ansible_cfg_in_the_working_directory_is_honoured(
    tmp_path: Path, clean_ansible_env: Path
) -> None:
    """ansible-runner starts ansible-playbook in its own folder: the operator's ./ansible.cfg
    travels as ANSIBLE_CONFIG, and its collections_path is where the FQCN is found."""
    colls = _collection(tmp_path / "from-cfg")
    (clean_ansible_env / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {colls}\n")
    env = playbooks.ansible_env()
    assert env == {"ANSIBLE_CONFIG": str(clean_ansible_env / "ansible.cfg")}
    got = playbooks.resolve("testns.tiny.hello", env=env, run_dir=tmp_path)
    assert got.fqcn and got.spec == "testns.tiny.hello"
    assert got.path == colls / "ansible_collections/testns/tiny/playbooks/hello.yml"


def test_what_looks_like_an_fqcn() -> None:
    assert playbooks.looks_like_fqcn("gdsfleet.gds.site")
    assert playbooks.looks_like_fqcn("ns.coll.sub.play")
    assert not playbooks.looks_like_fqcn("site.yml")
    assert not playbooks.looks_like_fqcn("playbooks/site.yml")
    assert not playbooks.looks_like_fqcn("./a.b.c")


def test_a_kernel_update_rollout_provisions_nodes_the_ledger_says_are_compliant(
    tmp_path: Path, inv: Path, clean_ansible_env: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    """A compliant node verifies compliant before a kernel update as after it: a rollout of
    gdsfleet.gds.kernel_update provisions it anyway (as --force), where one of another playbook
    only verifies it (the lab's rollout of the issue 29 command skipped both nodes before)."""
    from provisioner.store import Ledger

    root = tmp_path / "colls"
    for name in ("kernel_update", "other"):
        pb = root / "ansible_collections" / "gdsfleet" / "gds" / "playbooks" / f"{name}.yml"
        pb.parent.mkdir(parents=True, exist_ok=True)
        pb.write_text(HELLO)
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(root))
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as led:
        run = led.start_run("verify", "test")
        for node in ("node1", "node2"):
            led.record_verification(run, {"name": node, "reachable": True, "compliant": True,
                                          "checks": []})
        led.finish_run(run, "succeeded")

    def changed(playbook: str) -> set[str]:
        log = tmp_path / "runner" / "events.jsonl"
        log.unlink(missing_ok=True)
        main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--playbook", playbook,
              "--no-verify", "--plain", "--waves", "1,100%", "--restart",
              "--allow-local-connection"])
        lines = log.read_text().splitlines() if log.exists() else []
        return {e["host"] for e in map(json.loads, lines) if e["event"] == "outcome:changed"}

    assert changed("gdsfleet.gds.other") == set()
    capsys.readouterr()
    assert changed("gdsfleet.gds.kernel_update") == {"node1", "node2"}
    assert "every selected node is provisioned (as with --force)" in capsys.readouterr().err


def test_which_playbooks_always_provision(tmp_path: Path) -> None:
    f = tmp_path / "playbooks" / "kernel_update.yml"
    assert playbooks.always_provisions(playbooks.Playbook("gdsfleet.gds.kernel_update", f, True))
    assert playbooks.always_provisions(playbooks.Playbook(str(f), f, False))
    assert not playbooks.always_provisions(playbooks.Playbook("gdsfleet.gds.site", f, True))
    assert not playbooks.always_provisions(playbooks.Playbook("other.ns.kernel_update", f, True))
    other = tmp_path / "kernel_update.yml"
    assert not playbooks.always_provisions(playbooks.Playbook(str(other), other, False))
