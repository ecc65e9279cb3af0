"""A playbook that Ansible cannot start says why, everywhere (issue 47 item 1).

Before: with gdsfleet.gds installed ``--no-deps`` (an offline site) or a playbook naming
``no.such.module``, ``rollout`` printed ``failed: not_run: no result from the playbook run``,
exited 3, and the reason was only in ``runner/artifacts/<id>/hosts.json``. Now Ansible's own
error line is in the terminal, the ledger and ``report latest --json``, the exit is 64 when
nothing ran, and the collection's missing dependencies are refused before anything runs.

No containers: local-connection hosts and a real ``ansible-playbook``; the outputs of two
ansible-core releases are real captures (tests/fixtures/ansible-core/start-errors/).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout import playbooks
from provisioner.rollout.start_error import MAX_LEN, ansible_error, did_not_start

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "fixtures" / "ansible-core" / "start-errors"

EXPECTED = {
    "2.19.14-bad": "[ERROR]: couldn't resolve module/action 'no.such.module'. This often "
                   "indicates a misspelling, missing collection, or incorrect module path. "
                   "(Origin: /tmp/h47/bad.yml:4:7)",
    "2.19.14-nodeps": "[ERROR]: couldn't resolve module/action 'ansible.posix.mount'. This "
                      "often indicates a misspelling, missing collection, or incorrect module "
                      "path. (Origin: /tmp/h47/nodeps.yml:4:7)",
    "2.19.14-missing-role": "[ERROR]: the role 'no_such_role' was not found in /tmp/h47/roles:"
                            "/root/.ansible/roles:/usr/share/ansible/roles:/etc/ansible/roles:"
                            "/tmp/h47 (Origin: /tmp/h47/missing-role.yml:4:7)",
    "2.16.14-bad": "ERROR! couldn't resolve module/action 'no.such.module'. This often "
                   "indicates a misspelling, missing collection, or incorrect module path. "
                   "(Origin: /tmp/h47/bad.yml:4:7)",
    "2.16.14-nodeps": "ERROR! couldn't resolve module/action 'ansible.posix.mount'. This "
                      "often indicates a misspelling, missing collection, or incorrect module "
                      "path. (Origin: /tmp/h47/nodeps.yml:4:7)",
    "2.16.14-syntax": "ERROR! We were unable to read either as JSON nor YAML, these are the "
                      "errors we got from each: JSON: Expecting value: line 1 column 1 (char 0) "
                      "Syntax Error while loading YAML. did not find expected key "
                      "(Origin: /tmp/h47/syntax.yml:5:4)",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ansibles_error_line_from_real_captures(name: str) -> None:
    lines = (CAPTURES / f"{name}.out").read_text(encoding="utf-8").splitlines()
    assert any("\x1b[" in ln for ln in lines)  # coloured, as ansible-runner's runs are
    assert ansible_error(lines) == EXPECTED[name]


@pytest.mark.parametrize("path", sorted(CAPTURES.glob("*.out")), ids=lambda p: p.stem)
def test_every_capture_gives_an_error_with_its_origin(path: Path) -> None:
    found = ansible_error(path.read_text(encoding="utf-8").splitlines())
    assert found is not None and "\x1b" not in found
    assert found.startswith(("[ERROR]:", "ERROR!")) and "(Origin: /tmp/h47/" in found


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=40))
def test_any_output_gives_one_bounded_line(lines: list[str]) -> None:
    """What no capture shows: noise, escapes, huge lines, no error at all."""
    found = ansible_error(lines)
    if found is not None:
        assert len(found) <= 1000 and "\n" not in found and "\x1b[" not in found
    text = did_not_start(lines, "failed", 4)
    assert text.startswith("the playbook did not start: ")
    assert len(text) <= len("the playbook did not start: ") + MAX_LEN


def test_a_run_stopped_before_its_first_play_is_not_a_playbook_that_did_not_start() -> None:
    """Its deadline or a cancel ended it before Ansible said anything: the rollout's doing, not
    a load error (no exit 64, no "install what it names")."""
    for status in ("timeout", "canceled"):
        text = did_not_start([], status, 137, " on e2")
        assert text == f"the playbook did not run on e2 ({status} before its first play, rc=137)"
    assert did_not_start([], "failed", 4).startswith("the playbook did not start: ")


# --------------------------------------------------------------------------- end to end
BAD = """\
- name: A playbook Ansible cannot load
  hosts: all
  gather_facts: false
  tasks:
    - name: A module no collection has
      no.such.module:
        x: 1
"""


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    inv = tmp_path / "inv" / "hosts"
    inv.parent.mkdir()
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"node{i} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in (1, 2, 3)))
    pb = tmp_path / "bad.yml"
    pb.write_text(BAD)
    return {"inv": inv, "pb": pb, "ledger": tmp_path / "ledger.sqlite", "tmp": tmp_path}


def test_rollout_says_ansibles_error_and_exits_64(
        lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    report = lab["tmp"] / "r.json"
    rc = main(["rollout", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]), "--playbook",
               str(lab["pb"]), "--no-verify", "--plain", "--json", str(report),
               "--allow-local-connection"])
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    said = "couldn't resolve module/action 'no.such.module'"
    assert f"the playbook did not start: [ERROR]: {said}" in err, err
    assert f"(Origin: {lab['pb']}:5:7)" in err  # the task's first line
    assert "not_run" not in err and "no result from the playbook run" not in err
    assert "exit 64" in err
    # one line for the nodes it left alike, not one per node
    assert sum(1 for ln in err.splitlines() if ln.startswith("node1") and said in ln) == 1
    # the ledger: the step's detail holds the line
    from provisioner.store import open_read_only

    with open_read_only(str(lab["ledger"])) as led:
        run = led.runs(kind="rollout", limit=1)[0]
        steps = led.node_steps(run["id"])
    assert run["status"] == "aborted"
    node1 = steps["node1"]
    assert node1["step"] == "failed" and node1["detail"]["failure"] == "not_started"
    assert said in node1["detail"]["message"]
    assert said in node1["detail"]["outcome"]["message"]
    # the live report and report latest --json say it too
    live = json.loads(report.read_text())
    assert live["exit_code"] == Exit.USAGE
    assert said in {n["name"]: n for n in live["nodes"]}["node1"]["reason"]
    assert main(["report", "latest", "--ledger", str(lab["ledger"]), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert said in {n["name"]: n for n in doc["nodes"]}["node1"]["reason"]
    # hosts.json beside the events names the hosts (the gate's, given at its release)
    hosts = [json.loads(p.read_text())
             for p in (lab["tmp"] / "runner").glob("artifacts/*/hosts.json")]
    assert hosts and all(h["hosts"] for h in hosts), hosts


def _collection(root: Path, deps: dict[str, str], have: dict[str, str]) -> Path:
    """testns.tiny (a playbook hello) needing ``deps``, and the collections ``have``
    (name -> version) beside it."""
    top = root / "ansible_collections"
    pb = top / "testns" / "tiny" / "playbooks" / "hello.yml"
    pb.parent.mkdir(parents=True)
    pb.write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    (top / "testns" / "tiny" / "MANIFEST.json").write_text(json.dumps(
        {"collection_info": {"namespace": "testns", "name": "tiny", "version": "1.0.0",
                             "dependencies": deps}}))
    for name, version in have.items():
        ns, coll = name.split(".")
        d = top / ns / coll
        d.mkdir(parents=True)
        (d / "MANIFEST.json").write_text(json.dumps(
            {"collection_info": {"namespace": ns, "name": coll, "version": version}}))
    return root


def _env(root: Path) -> dict[str, str]:
    # only this folder: not the ansible package's own collections on Python's path
    return {"ANSIBLE_COLLECTIONS_PATH": str(root), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}


def test_missing_and_too_old_dependencies_are_refused(tmp_path: Path) -> None:
    root = _collection(tmp_path / "c", {"depns.present": ">=1.0.0", "depns.old": ">=2.0.0",
                                        "depns.absent": ">=1.5.0"},
                       {"depns.present": "1.2.0", "depns.old": "1.9.9"})
    with pytest.raises(UsageError) as exc:
        playbooks.resolve("testns.tiny.hello", env=_env(root))
    text = str(exc.value)
    assert "depns.absent >=1.5.0 (not found)" in text
    assert "depns.old >=2.0.0 (found 1.9.9 at " in text
    assert "depns.present" not in text.split("To fix:")[0]
    assert "ansible-galaxy collection install depns.absent depns.old" in text
    assert "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH is false" in text


def test_satisfied_dependencies_pass(tmp_path: Path) -> None:
    root = _collection(tmp_path / "c", {"depns.present": ">=1.0.0"}, {"depns.present": "1.0.0"})
    assert playbooks.resolve("testns.tiny.hello", env=_env(root)).fqcn


def test_a_dependency_only_another_playbook_uses(tmp_path: Path) -> None:
    root = tmp_path / "c"
    top = root / "ansible_collections" / "gdsfleet" / "gds"
    for name in ("site", "gpu_operator"):
        (top / "playbooks").mkdir(parents=True, exist_ok=True)
        (top / "playbooks" / f"{name}.yml").write_text("- hosts: all\n  tasks: []\n")
    (top / "MANIFEST.json").write_text(json.dumps({"collection_info": {
        "namespace": "gdsfleet", "name": "gds", "version": "0.2.0",
        "dependencies": {"kubernetes.core": ">=3.0.0"}}}))
    assert playbooks.resolve("gdsfleet.gds.site", env=_env(root)).fqcn
    with pytest.raises(UsageError, match=r"kubernetes.core >=3.0.0 \(not found\)"):
        playbooks.resolve("gdsfleet.gds.gpu_operator", env=_env(root))


def test_gdsfleet_installed_without_its_dependencies_is_refused_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's offline site: scripts/install_collection.sh installs with --no-deps, and
    only the ansible package on Python's path carried ansible.posix and community.general."""
    installed = ROOT / ".lab" / "collections"
    if not (installed / "ansible_collections" / "gdsfleet" / "gds" / "MANIFEST.json").is_file():
        pytest.skip("bash scripts/install_collection.sh first (scripts/test.sh does)")
    for key, value in _env(installed).items():
        monkeypatch.setenv(key, value)
    inv = tmp_path / "hosts"
    inv.write_text(f"[gpu_nodes]\nnode1 ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    ledger = tmp_path / "l.sqlite"
    assert main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--plain"]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "ansible.posix >=1.5.0 (not found)" in err
    assert "community.general >=8.0.0 (not found)" in err
    assert "kubernetes.core" not in err  # the site playbook does not use it
    assert not ledger.exists() and not (tmp_path / "runner").exists()
