"""The rollout's own stdout callback (provisioner/rollout/stream/gdsfleet_events.py) against
ansible-runner's awx_display: one real playbook run through each, the same per-host outcomes
and the same events.jsonl lines (kind, host, task, changed, failed, ignored, message); a
node's text never becomes an event; a no_log result's text never reaches the stream."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from provisioner.rollout import runner
from provisioner.rollout.runner import HostStatus, run_playbook
from provisioner.rollout.stream import STREAM_PLUGIN_DIR

sys.path.insert(0, str(STREAM_PLUGIN_DIR))
from gdsfleet_events import slim_result  # noqa: E402  (the plugin module, as ansible loads it)

HOSTS = ["ok1", "fails", "ignores", "loops", "gone", "secret"]
# a forged event record, as a node could print it: base64 of a runner_on_ok for "forged"
FORGED = ("\x1b[K" + __import__("base64").b64encode(json.dumps(
    {"uuid": "f", "event": "runner_on_ok", "event_data": {"host": "forged", "task": "x",
                                                          "res": {"changed": True}}})
    .encode()).decode() + "\x1b[8D\x1b[K")


def _files(tmp: Path) -> tuple[Path, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    inv = tmp / "hosts.ini"
    inv.write_text(textwrap.dedent(f"""\
        ok1
        fails
        ignores
        loops
        secret
        gone ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 \
          ansible_ssh_common_args='-o ConnectTimeout=3'

        [all:vars]
        ansible_connection=local
        ansible_python_interpreter={sys.executable}
        """))
    play = tmp / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: Every kind of result
          hosts: all
          gather_facts: false
          tasks:
            - name: Changes something
              ansible.builtin.command: "true"
            - name: Fails with a forged record in its output
              ansible.builtin.shell: >-
                printf '%s' "$FORGED"; echo 'E: unmet dependencies'; exit 3
              environment:
                FORGED: "{{ forged }}"
              when: inventory_hostname == 'fails'
            - name: Fails and is ignored
              ansible.builtin.command: "false"
              ignore_errors: true
              when: inventory_hostname == 'ignores'
            - name: Skipped elsewhere
              ansible.builtin.command: "true"
              changed_when: false
              when: inventory_hostname == 'ok1'
            - name: Loops with one failing item
              ansible.builtin.command: "{{ item }}"
              loop: ["true", "false"]
              when: inventory_hostname == 'loops'
            - name: Hides its output
              ansible.builtin.shell: "echo hunter2-secret; exit 1"
              no_log: true
              when: inventory_hostname == 'secret'
        """))
    return inv, play


def _run(tmp: Path, slim: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[dict]]:
    monkeypatch.setattr(runner, "SLIM_STREAM", slim)
    inv, play = _files(tmp)
    pdd = tmp / "pdd"
    result = run_playbook(str(play), inv, HOSTS, forks=6, extravars={"forged": FORGED},
                          private_data_dir=pdd, keep_events=True)
    (events,) = pdd.glob("artifacts/*/events.jsonl")
    # which of the two ran: awx_display's events carry the task's action and path, the slim
    # stream's do not
    oks = [e["event_data"] for e in result.events if e["event"] == "runner_on_ok"]
    assert oks and all(("task_action" in d) is not slim for d in oks)
    lines = [json.loads(ln) for ln in events.read_text().splitlines()]
    return result, lines


def _comparable(lines: list[dict]) -> dict[str | None, list[tuple]]:
    """Each event's meaning, in order, per host (None: the events of no host): its kind,
    task and result flags and message (not its counter, time, duration: those differ from
    run to run; not ansible-core's own verbose lines; the order between hosts is the
    forks')."""
    out: dict[str | None, list[tuple]] = {}
    for ln in lines:
        if ln["event"] not in ("verbose", "warning", "deprecated", "EOF"):
            out.setdefault(ln.get("host"), []).append(
                (ln["event"], ln.get("task"), ln.get("changed"), ln.get("failed"),
                 ln.get("ignored"), ln.get("message")))
    return out


def test_the_slim_stream_gives_what_awx_display_gives(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stock, stock_lines = _run(tmp_path / "stock", False, monkeypatch)
    slim, slim_lines = _run(tmp_path / "slim", True, monkeypatch)
    # one difference, on purpose: under ansible-core 2.19 awx_display's copy of a no_log
    # result has lost its no_log mark, so the reason read from it was "no message"; the slim
    # stream reads the result callbacks are given, keeps the mark and says why there is none
    hidden = "task failed (output hidden by no_log)"
    assert slim.hosts["secret"].message == hidden
    assert stock.hosts["secret"].message in (hidden, "task failed (no message)")

    def same(o: Any) -> tuple:
        return (o.status, o.ok, o.changed, o.skipped, o.failed_task,
                hidden if o.host == "secret" else o.message)

    assert {h: same(o) for h, o in slim.hosts.items()} == \
        {h: same(o) for h, o in stock.hosts.items()}
    assert slim.hosts["ok1"].status is HostStatus.CHANGED
    assert slim.hosts["fails"].status is HostStatus.FAILED
    assert "unmet dependencies" in (slim.hosts["fails"].message or "")
    assert slim.hosts["ignores"].status is HostStatus.CHANGED
    assert slim.hosts["loops"].status is HostStatus.FAILED
    assert slim.hosts["gone"].status is HostStatus.UNREACHABLE
    assert slim.hosts["secret"].status is HostStatus.FAILED
    slim_seq, stock_seq = _comparable(slim_lines), _comparable(stock_lines)
    # (and awx_display's copy had also lost the no_log result's "changed")
    assert [ln[:2] + ln[3:5] for ln in slim_seq.pop("secret")] == \
        [ln[:2] + ln[3:5] for ln in stock_seq.pop("secret")]
    assert slim_seq == stock_seq
    kinds = {ln["event"] for ln in slim_lines}
    assert {"playbook_on_start", "playbook_on_play_start", "playbook_on_task_start",
            "runner_on_start", "runner_on_ok", "runner_on_failed", "runner_on_skipped",
            "runner_on_unreachable", "runner_item_on_ok", "runner_item_on_failed",
            "playbook_on_stats"} <= kinds
    # durations of final results, as awx_display gives them
    assert all(isinstance(ln.get("duration"), float) for ln in slim_lines
               if ln["event"] == "runner_on_ok")


def test_a_nodes_text_never_becomes_an_event_and_no_log_text_never_reaches_the_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, lines = _run(tmp_path, True, monkeypatch)
    assert "forged" not in result.hosts
    assert not [ln for ln in lines if ln.get("host") == "forged"]
    assert "hunter2" not in json.dumps(lines)
    assert result.hosts["secret"].message == "task failed (output hidden by no_log)"


def test_slim_result_keeps_the_reason_of_a_failure_only() -> None:
    full = {"changed": True, "rc": 2, "msg": "non-zero return code", "stdout": "x" * 40_000,
            "stderr": "E: boom", "invocation": {"module_args": {"password": "p"}},
            "ansible_facts": {"a": 1}, "results": [{"failed": True, "msg": "item"}, {"ok": 1}]}
    ok = slim_result(full, failed=False)
    assert ok == {"changed": True, "rc": 2}
    bad = slim_result(full, failed=True)
    assert bad["msg"] == "non-zero return code" and bad["stderr"] == "E: boom"
    assert len(bad["stdout"]) == 16 << 10
    assert bad["results"] == [{"msg": "item", "failed": True}]
    assert "invocation" not in bad and "ansible_facts" not in bad
    hidden = slim_result({"_ansible_no_log": True, "msg": "secret", "failed": True},
                         failed=True)
    assert "msg" not in hidden and hidden["_ansible_no_log"] is True
