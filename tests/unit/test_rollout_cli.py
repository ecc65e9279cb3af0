"""``provisioner plan`` / ``provisioner rollout`` end to end on local-connection hosts.

No containers: the hosts use ``ansible_connection=local`` and a small playbook, verification
is off (--no-verify), so these tests exercise the command line, validation, the lock, the
ledger and the ansible-runner path in seconds. The simulated fleet tests (tests/fleet) do the
real thing with SSH and verification.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger

REPO = Path(__file__).resolve().parents[2]

PLAYBOOK = """\
- name: Stand-in site playbook for CLI tests
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait when asked
      ansible.builtin.command: "sleep {{ wait_s | default(0) }}"
      changed_when: false
    - name: Change something
      ansible.builtin.command: "true"
    - name: Fail on demand
      ansible.builtin.fail:
        msg: "install failed on {{ inventory_hostname }}"
      when: inventory_hostname in (fail_on | default('')).split(',')
"""


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    inv = tmp_path / "inv" / "hosts"
    inv.parent.mkdir()
    inv.write_text(
        "[gpu_nodes]\n"
        + "".join(
            f"node{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
            for i in range(1, 7)
        )
    )
    pb = tmp_path / "site.yml"
    pb.write_text(PLAYBOOK)
    return {"inv": inv, "pb": pb, "ledger": tmp_path / "ledger.sqlite", "tmp": tmp_path}


def _args(lab: dict[str, Path], *extra: str) -> list[str]:
    return ["rollout", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
            "--playbook", str(lab["pb"]), "--no-verify", "--plain", "--allow-local-connection",
            *extra]


def test_plan_changes_nothing(lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
               "--allow-local-connection",
               "--waves", "1,2,100%", "--json", "-"])
    assert rc == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert [len(w["nodes"]) for w in doc["waves"]] == [1, 2, 3]
    assert {n["action"] for w in doc["waves"] for n in w["nodes"]} == {"provision"}
    assert not lab["ledger"].exists()  # not even an empty ledger was created


def test_plan_table(lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
                 "--allow-local-connection",
                 "--limit", "node01:node02:node03"]) == Exit.OK
    out = capsys.readouterr().out
    assert "canary" in out and "provision + verify" in out and "node03" in out
    assert "node04" not in out


def test_rollout_no_verify_and_reconcile(lab: dict[str, Path]) -> None:
    assert main(_args(lab, "--waves", "1,2,100%", "--json", str(lab["tmp"] / "r.json"))) == 0
    doc = json.loads((lab["tmp"] / "r.json").read_text())
    assert [w["size"] for w in doc["waves"]] == [1, 2, 3]
    assert {n["step"] for n in doc["nodes"]} == {"skipped"}  # unverified: never "compliant"
    assert all(n["provisioned"] for n in doc["nodes"])
    events = [json.loads(x) for x in (lab["tmp"] / "runner" / "events.jsonl").read_text()
              .splitlines()]
    assert {e["host"] for e in events if e["event"] == "outcome:changed"} == {
        f"node{i:02d}" for i in range(1, 7)}


def test_failed_canary_stops_with_aborted(lab: dict[str, Path]) -> None:
    junit = lab["tmp"] / "r.xml"
    rc = main(_args(lab, "--waves", "1,100%", "-e", "fail_on=node01", "--junit", str(junit)))
    assert rc == Exit.ABORTED
    led = Ledger.open(lab["ledger"])
    run = led.runs(kind="rollout")[0]
    st = led.node_steps(run["id"])
    assert st["node01"]["step"] == "failed"
    assert st["node01"]["detail"]["outcome"]["message"] == "install failed on node01"
    assert {st[f"node{i:02d}"]["step"] for i in range(2, 7)} == {"pending"}
    assert run["status"] == "aborted"
    assert "<failure" in junit.read_text() and "install failed on node01" in junit.read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--waves", "1,x"], "--waves"),
        (["--waves", "0"], "must be above 0"),
        (["--limit", "nosuchhost"], "matches no host"),
        (["--max-failures", "abc"], "--max-failures"),
        (["--health-threshold", "2"], "--health-threshold"),
        (["--drain-cmd", "scontrol {host}"], "unknown field"),
        (["--max-parallel", "0"], "--max-parallel"),
        (["--confirm"], "no terminal"),
        (["-e", "x=$(reboot)"], "command substitution"),
        (["--io-size", "256K"], "cannot prove the direct path"),
        (["--health-io-size", "64K"], "--health-io-size"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(
    lab: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    rc = main(_args(lab, *argv))
    assert rc == Exit.USAGE
    assert message in capsys.readouterr().err
    assert not lab["ledger"].exists()
    assert not (lab["tmp"] / "runner").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[gpu_nodes\nnode01\n", "cannot be parsed"),
        ("node;rm ansible_connection=local\n", "not a valid host name"),
        ("node01 ansible_host='127.0.0.1;reboot'\n", "ansible_host"),
        ("node01 gds_route='$(reboot)'\n", "command substitution"),
        ("node01 ansible_ssh_common_args='-o ProxyCommand=nc|sh'\n", "metacharacters"),
    ],
)
def test_bad_inventories_are_refused(
    lab: dict[str, Path], capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    lab["inv"].write_text(content)
    rc = main(_args(lab))
    assert rc == Exit.USAGE
    assert message in capsys.readouterr().err
    assert not lab["ledger"].exists()


def test_missing_inventory(lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["rollout", "-i", str(lab["tmp"] / "nope"), "--ledger", str(lab["ledger"])])
    assert rc == Exit.USAGE and "does not exist" in capsys.readouterr().err


def _cli(lab: dict[str, Path], *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "provisioner.cli", *_args(lab, *extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )


def _wait_for_step(ledger: Path, step: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ledger.exists():
            led = Ledger.open(ledger)
            try:
                runs = led.runs(kind="rollout")
                if runs:
                    st = {n: s["step"] for n, s in led.node_steps(runs[0]["id"]).items()}
                    if step in st.values():
                        return st
            finally:
                led.close()
        time.sleep(0.1)
    raise AssertionError(f"no node reached {step!r}")


def test_second_rollout_is_refused_while_one_runs(lab: dict[str, Path]) -> None:
    first = _cli(lab, "--waves", "all", "-e", "wait_s=30")
    try:
        _wait_for_step(lab["ledger"], "provisioning")
        second = subprocess.run(
            [sys.executable, "-m", "provisioner.cli", *_args(lab)],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )
        assert second.returncode == Exit.LOCKED
        assert f"pid {first.pid}" in second.stderr and "another rollout holds" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_kill_9_then_resume(lab: dict[str, Path]) -> None:
    first = _cli(lab, "--waves", "2,100%", "-e", "wait_s=3")
    try:
        st = _wait_for_step(lab["ledger"], "skipped")  # canary finished, wave 1 running
        deadline = time.monotonic() + 30
        while "provisioning" not in st.values() and time.monotonic() < deadline:
            st = _wait_for_step(lab["ledger"], "skipped")
        assert "provisioning" in st.values()
    finally:
        first.kill()  # SIGKILL: no cleanup of any kind
        first.wait()
    finished = {n for n, s in st.items() if s == "skipped"}
    assert finished == {"node01", "node02"}
    rc = main(_args(lab, "--waves", "2,100%"))
    assert rc == Exit.OK
    led = Ledger.open(lab["ledger"])
    runs = led.runs(kind="rollout")
    assert len(runs) == 1 and runs[0]["status"] == "succeeded"
    for n in finished:  # provisioned once, by the killed process only
        ev = [e["step"] for e in led.step_events(runs[0]["id"], n)]
        assert ev.count("provisioning") == 1, (n, ev)
    events = [json.loads(x) for x in (lab["tmp"] / "runner" / "events.jsonl").read_text()
              .splitlines()]
    resumed = [e for e in events if e["pid"] == os.getpid()]
    assert resumed and not {e["host"] for e in resumed} & finished


def test_plan_reads_the_ledger(lab: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    led = Ledger.open(lab["ledger"])
    run = led.start_run("verify", "x", {})
    led.record_verification(run, {"name": "node02", "reachable": True, "compliant": True,
                                  "route": "nvfs", "checks": []})
    led.record_verification(run, {"name": "node03", "reachable": True, "compliant": False,
                                  "route": "nvfs", "checks": []})
    led.close()
    assert main(["plan", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
                 "--allow-local-connection",
                 "--waves", "1,100%", "--json", "-"]) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    actions = {n["name"]: n["action"] for w in doc["waves"] for n in w["nodes"]}
    assert actions["node02"] == "verify" and actions["node03"] == "provision"
    assert doc["waves"][0]["nodes"][0]["name"] == "node01"  # a node that changes is the canary
    assert doc["waves"][-1]["nodes"][-1]["name"] == "node02"
    assert main(["plan", "-i", str(lab["inv"]), "--ledger", str(lab["ledger"]),
                 "--allow-local-connection", "--force",
                 "--json", "-"]) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert {n["action"] for w in doc["waves"] for n in w["nodes"]} == {"provision"}


def test_secret_extra_vars_never_reach_the_ledger(lab: dict[str, Path]) -> None:
    assert main(_args(lab, "--waves", "all", "-e", "vault_password=hunter2")) == Exit.OK
    led = Ledger.open(lab["ledger"])
    run = led.runs(kind="rollout")[0]
    led.close()
    assert "hunter2" not in json.dumps(run["args"])
    assert "vault_password=<redacted>" in run["args"]["extra_var"]


def _deadline_for_a_started_playbook(lab: dict[str, Path]) -> int:
    """Seconds of --playbook-timeout that leave ansible-playbook time to start and reach its
    first task here and now: 5 times what a syntax check of the same playbook takes (its start
    and parse, the part a deadline must not cut), at least 10 s, at most the 30 s this test
    used to pass whatever the load (a fixed 30 s made the test wait 30 s on idle cores)."""
    t0 = time.monotonic()
    subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check",
                    "-i", str(lab["inv"]), str(lab["pb"])], capture_output=True, text=True,
                   timeout=180, check=True)
    return min(30, max(10, round(5 * (time.monotonic() - t0))))


def test_a_playbook_cut_by_its_deadline_leaves_the_canary_lost_and_resumable(
        lab: dict[str, Path]) -> None:
    """--playbook-timeout stops the canary's playbook mid-task: its stream ends without
    stats, so the canary is lost (not failed, not provisioned), nothing else is touched, the
    run stays open; the same command redoes it. (Before: the canary 'failed' as a playbook
    that "did not run", the run closed 'aborted'.) The deadline must leave ansible-playbook
    time to start and reach the task (cut before its first event, the playbook "did not run"):
    it is sized from this machine's load at the time, see _deadline_for_a_started_playbook
    (about 10 s on idle cores, 30 s or more on loaded ones)."""
    out = lab["tmp"] / "r.json"
    deadline = _deadline_for_a_started_playbook(lab)
    rc = main(_args(lab, "--waves", "1,100%", "-e", "wait_s=600", "--playbook-timeout",
                    str(deadline), "--json", str(out)))
    assert rc == Exit.ABORTED
    doc = json.loads(out.read_text())
    assert doc["status"] == "lost"
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert (nodes["node01"]["step"], nodes["node01"]["provisioned"],
            nodes["node01"]["failure"]) == ("lost", False, None)
    assert {n["step"] for name, n in nodes.items() if name != "node01"} == {"pending"}
    assert doc["waves"][0]["lost"] == 1 and doc["waves"][0]["failures"] == 0
    led = Ledger.open(lab["ledger"])
    (run,) = led.runs(kind="rollout")
    assert run["finished_at"] is None  # left open: resumable
    led.close()
    assert main(_args(lab, "--waves", "1,100%")) == Exit.OK
    led = Ledger.open(lab["ledger"])
    (run,) = led.runs(kind="rollout")
    assert run["status"] == "succeeded"
    steps = [e["step"] for e in led.step_events(run["id"], "node01")]
    assert steps[:3] == ["pending", "provisioning", "lost"] and steps[-1] == "skipped"


def test_rollout_names_its_ledger_first(lab: dict[str, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """issue 30 item 1: rollout's first line (on stderr, where its progress goes) names the
    ledger, in the words every command uses; the waves line says how the spec collapsed."""
    assert main(_args(lab, "--waves", "1,5,25%,100%", "--limit", "node01:node02")) == Exit.OK
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"ledger {lab['ledger']}"
    assert any(ln.endswith(": 1,5,25%,100% on 2 nodes -> 2 waves of 1, 1 (5: only 1 left; "
                           "25%, 100%: no node left)") for ln in err)
