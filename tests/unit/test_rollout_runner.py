"""ansible-runner driver: per-host outcomes from events (recorded and live), never exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.rollout.runner import (
    EventCollector,
    HostStatus,
    redact,
    run_playbook,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rollout"
HOSTS = ["ok", "changed", "failed", "rescued", "ignored", "down"]


STATS = {"event": "playbook_on_stats", "event_data": {"failures": {"a": 1},
                                                     "processed": {"a": 1}}}


def _collect(events: list[dict], hosts: list[str] = HOSTS) -> dict:
    c = EventCollector(hosts)
    for e in events:
        assert c.handle(e) is False  # ansible-runner then writes no job_events file
    return c.outcomes()


def test_recorded_events_give_per_host_outcomes() -> None:
    events = json.loads((FIX / "runner_events.json").read_text())
    out = _collect(events)
    assert {h: o.status for h, o in out.items()} == {
        "ok": HostStatus.OK,
        "changed": HostStatus.CHANGED,
        "failed": HostStatus.FAILED,
        "rescued": HostStatus.OK,  # a rescued failure is not a failure (stats say so)
        "ignored": HostStatus.OK,  # ignore_errors: not a failure
        "down": HostStatus.UNREACHABLE,
    }
    assert out["failed"].failed_task == "Fail on failed"
    assert out["failed"].message == "nvidia-fs-dkms: DKMS build failed on failed"
    assert out["down"].failed_task == "Probe without change"
    assert "port 9" in (out["down"].message or "")
    assert out["changed"].changed == 1
    assert out["ok"].changed == 0 and out["ok"].ok >= 2 and out["ok"].skipped >= 1


def test_truncated_recorded_stream_counts_no_host_ok_or_changed() -> None:
    """A real stream of 8 hosts x 3 changing tasks, cut before playbook_on_stats (record:
    tests/fixtures/rollout/record_truncated.py): every host saw every task changed, yet none
    has a final result, so none is ok or changed: all are lost (not failed either)."""
    events = json.loads((FIX / "truncated_events.json").read_text())
    assert events and all(e["event"] != "playbook_on_stats" for e in events)
    hosts = [f"h{i}" for i in range(1, 9)]
    out = _collect(events, hosts + ["never"])  # "never": in the limit, no event at all
    assert {h: o.status for h, o in out.items()} == {h: HostStatus.LOST for h in hosts + ["never"]}
    assert not any(o.succeeded for o in out.values())
    assert out["h1"].changed == 2  # what was seen is kept for the reader, decides nothing
    assert "without its closing stats" in (out["h1"].message or "")


def test_a_cut_stream_keeps_the_last_failure_seen_but_decides_nothing() -> None:
    """The tiny.yml recording cut before stats: "rescued" failed a task that a rescue
    then caught, so a failure seen before the cut is not final either: every host lost,
    the failure seen kept in the message."""
    events = json.loads((FIX / "runner_events.json").read_text())
    cut = [e for e in events if e["event"] != "playbook_on_stats"]
    out = _collect(cut, HOSTS)
    assert {o.status for o in out.values()} == {HostStatus.LOST}
    assert out["failed"].failed_task == "Fail on failed"
    assert "DKMS build failed on failed" in (out["failed"].message or "")
    assert "port 9" in (out["down"].message or "")


def test_stats_alone_decide_failed_and_unreachable() -> None:
    stats = {"event": "playbook_on_stats", "event_data": {
        "ok": {"a": 3}, "changed": {"a": 1}, "failures": {"b": 1}, "dark": {"c": 1},
        "processed": {"a": 1, "b": 1, "c": 1}}}
    out = _collect([stats], ["a", "b", "c"])
    assert out["b"].status is HostStatus.FAILED
    assert out["c"].status is HostStatus.UNREACHABLE
    assert out["a"].status is HostStatus.OK


def test_no_log_hides_the_message() -> None:
    ev = {"event": "runner_on_failed", "event_data": {
        "host": "a", "task": "Secret", "res": {"msg": "password=hunter2",
                                               "_ansible_no_log": True}}}
    out = _collect([ev, STATS], ["a"])
    assert out["a"].status is HostStatus.FAILED
    assert "hunter2" not in (out["a"].message or "")


def test_long_messages_are_trimmed_to_their_tail() -> None:
    ev = {"event": "runner_on_failed", "event_data": {
        "host": "a", "task": "Build", "res": {
            "stderr": "\n".join(f"line {i}" for i in range(100))}}}
    msg = _collect([ev, STATS], ["a"])["a"].message or ""
    assert msg.startswith("...") and msg.endswith("line 99") and "line 10\n" not in msg


def test_host_event_callback() -> None:
    seen: list[tuple[str, str, str]] = []
    c = EventCollector(["a"], lambda h, k, t: seen.append((h, k, t)))
    c.handle({"event": "runner_on_ok", "event_data": {"host": "a", "task": "T", "res": {}}})
    c.handle({"event": "playbook_on_task_start", "event_data": {"task": "U"}})
    assert seen == [("a", "runner_on_ok", "T")]


def test_redact() -> None:
    assert redact({"db_password": "x", "gds_route": "nvfs"}) == {
        "db_password": "<redacted>", "gds_route": "nvfs"}


def _local_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts"
    inv.write_text(
        "".join(
            f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
            for h in ("ok", "changed", "failed")
        )
        + "down ansible_host=127.0.0.1 ansible_port=9 ansible_connection=ssh\n"
    )
    return inv


def test_live_run_against_a_local_playbook(tmp_path: Path) -> None:
    inv = _local_inventory(tmp_path)
    events: list[tuple[str, str, str]] = []
    res = run_playbook(
        FIX / "tiny.yml", inv, ["ok", "changed", "failed", "down"], forks=4,
        private_data_dir=tmp_path / "pdd", on_host_event=lambda h, k, t: events.append((h, k, t)),
    )
    assert res.error is None
    assert res.rc != 0  # the exit code alone mixes both; the outcomes do not
    assert res.hosts["ok"].status is HostStatus.OK
    assert res.hosts["changed"].status is HostStatus.CHANGED
    assert res.hosts["failed"].status is HostStatus.FAILED
    assert res.hosts["down"].status is HostStatus.UNREACHABLE
    assert ("failed", "runner_on_failed", "Fail on failed") in events
    assert (tmp_path / "pdd" / "artifacts").is_dir()


def test_limit_restricts_the_run(tmp_path: Path) -> None:
    inv = _local_inventory(tmp_path)
    res = run_playbook(FIX / "tiny.yml", inv, ["ok"], forks=1)
    assert set(res.hosts) == {"ok"}
    assert res.hosts["ok"].status is HostStatus.OK
    assert res.rc == 0


def test_a_broken_playbook_fails_every_host(tmp_path: Path) -> None:
    inv = _local_inventory(tmp_path)
    bad = tmp_path / "bad.yml"
    bad.write_text("- name: Broken\n  hosts: all\n  tasks:\n    - ansible.builtin.nope: {}\n")
    res = run_playbook(bad, inv, ["ok", "changed"], forks=2)
    # Ansible's own error line (issue 47), on every host: the playbook did not start
    assert res.error and res.error.startswith("the playbook did not start: [ERROR]: couldn't "
                                              "resolve module/action 'ansible.builtin.nope'")
    assert {o.status for o in res.hosts.values()} == {HostStatus.NOT_STARTED}
    assert {o.message for o in res.hosts.values()} == {res.error}


def test_missing_playbook(tmp_path: Path) -> None:
    from provisioner.errors import ProvisionerError

    with pytest.raises(ProvisionerError, match="does not exist"):
        run_playbook(tmp_path / "none.yml", _local_inventory(tmp_path), ["ok"])


def test_generic_messages_get_the_lines_that_say_why() -> None:
    ev = {"event": "runner_on_failed", "event_data": {
        "host": "a", "task": "Ensure the DOCA-OFED packages are installed", "res": {
            "msg": "'/usr/bin/apt-get install doca-ofed' failed: E: Unable to correct problems",
            "stdout": "Reading package lists...\nThe following packages have unmet "
                      "dependencies:\n mlnx-nvme-dkms : Depends: dkms but it is not "
                      "installable\n",
            "stderr": "E: Unable to correct problems"}}}
    msg = _collect([ev, STATS], ["a"])["a"].message or ""
    assert msg.startswith("'/usr/bin/apt-get install doca-ofed' failed")
    assert "mlnx-nvme-dkms : Depends: dkms but it is not installable" in msg
    assert msg.count("Unable to correct problems") == 1


def _main_playbook_pid(run_tag: str) -> int | None:
    """The ansible-playbook started by the guard of the run tagged ``run_tag`` (not one of
    its forks: those are children of ansible-playbook, it is the guard's child)."""
    from provisioner.rollout import guard

    needle = f"{guard.TOKEN_ENV}={run_tag}.".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            cmd = (d / "cmdline").read_bytes()
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if needle in env and b"ansible-playbook" in cmd and b"guard.py" in parent:
            return int(d.name)
    return None


def test_kill_9_of_ansible_playbook_mid_task_leaves_every_host_lost(tmp_path: Path) -> None:
    """A real ansible-playbook (4 local hosts) killed with SIGKILL while every host is in
    its second task, after the first task changed all of them: its stream ends without
    stats, so no host is ok or changed (today's code said 4 x changed)."""
    import os
    import signal
    import threading
    import time

    hosts = [f"h{i}" for i in range(1, 5)]
    inv = tmp_path / "hosts"
    inv.write_text("".join(
        f"{h} ansible_host=127.0.0.1 ansible_connection=local "
        f"ansible_python_interpreter={sys.executable}\n" for h in hosts))
    markers = tmp_path / "markers"
    markers.mkdir()
    tag = f"killtest{os.getpid()}"
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 120  # generous: 2 loaded cores
        while time.monotonic() < deadline:
            if len(list(markers.iterdir())) == len(hosts):
                pid = _main_playbook_pid(tag)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.2)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    res = run_playbook(FIX / "sleepy.yml", inv, hosts, forks=4,
                       extravars={"marker_dir": str(markers)}, run_tag=tag,
                       private_data_dir=tmp_path / "pdd", timeout=300)
    t.join(5)
    assert killed, "the test never found ansible-playbook to kill"
    assert res.error is None  # it did run: not "the playbook did not run"
    assert {h: o.status for h, o in res.hosts.items()} == {h: HostStatus.LOST for h in hosts}
    assert all(o.changed == 1 for o in res.hosts.values())  # seen, decides nothing


def test_events_on_disk_are_one_slim_jsonl_and_the_outcomes(tmp_path: Path) -> None:
    """A kept runner folder holds, per run, events.jsonl (one line per event) and hosts.json,
    and no file per event: no job_events/*.json (ansible-runner writes none when the event
    handler returns False), no stdout/stderr copy of the output."""
    inv = _local_inventory(tmp_path)
    hosts = ["ok", "changed", "failed"]
    res = run_playbook(FIX / "tiny.yml", inv, hosts, forks=3, private_data_dir=tmp_path / "pdd")
    assert res.hosts["changed"].status is HostStatus.CHANGED
    (run,) = list((tmp_path / "pdd" / "artifacts").iterdir())
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert files == ["command", "events.jsonl", "hosts.json", "rc", "status"], files
    lines = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines()]
    assert [ln["counter"] for ln in lines] == list(range(1, len(lines) + 1))  # every event
    assert lines[-1]["event"] == "playbook_on_stats"
    allowed = {"event", "counter", "at", "host", "task", "changed", "failed", "ignored",
               "duration", "message"}
    assert all(set(ln) <= allowed for ln in lines)
    fail = [ln for ln in lines if ln["event"] == "runner_on_failed" and ln["host"] == "failed"]
    assert fail and fail[0]["failed"] is True and "DKMS build failed" in fail[0]["message"]
    doc = json.loads((run / "hosts.json").read_text())
    assert doc["final_stats"] is True
    assert {h: o["status"] for h, o in doc["hosts"].items()} == {
        "ok": "ok", "changed": "changed", "failed": "failed"}


def test_event_line_bounds_and_redacts_the_message() -> None:
    from provisioner.rollout.runner import event_line

    ev = {"event": "runner_on_failed", "counter": 7, "created": "2026-01-01T00:00:00+00:00",
          "event_data": {"host": "h" * 5000, "task": "Install", "res": {
              "msg": "x" * 5000 + " db_password=hunter2", "changed": False,
              "invocation": {"module_args": {"password": "hunter2"}}}}}
    line = event_line(ev)
    assert line["failed"] is True and line["changed"] is False and line["counter"] == 7
    assert len(line["host"]) <= 200 and len(line["message"]) <= 500
    assert "hunter2" not in json.dumps(line)
    ok = event_line({"event": "runner_on_ok", "event_data": {
        "host": "a", "task": "T", "res": {"changed": True, "stdout": "secret output"}}})
    assert ok == {"event": "runner_on_ok", "counter": None, "at": None, "host": "a",
                  "task": "T", "changed": True, "failed": False}
