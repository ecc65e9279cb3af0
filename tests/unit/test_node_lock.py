"""gdsfleet.gds.node_lock: one gdsfleet play at a time on a node (issue 14, part 3's defence in
depth). The module runs for real, through ansible-playbook on this machine
(``ansible_connection: local``) with a lock file in a temporary folder: one playbook walks the
cases one after the other (a second run refused naming the holder, the same run taking over,
release, a hand-run play, the ttl), and the tests read each task's result from the JSON
callback. ``site.yml`` holds the node as its first task and lets it go in an ``always``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

CASES = """
- name: node_lock cases
  hosts: localhost
  gather_facts: false
  module_defaults:
    gdsfleet.gds.node_lock:
      path: "{{ dir }}/site.lock"
      log: "{{ dir }}/site-lock.log"
      ttl: 120
  tasks:
    - {name: a holds, gdsfleet.gds.node_lock: {token: runA.1.aaaa}, register: a}
    - name: holder of a
      ansible.builtin.command: cat /proc/{{ a.holder.pid }}/environ
      register: a_env
      changed_when: false
    - {name: b refused, gdsfleet.gds.node_lock: {token: runB.1.bbbb}, ignore_errors: true}
    - {name: a again, gdsfleet.gds.node_lock: {token: runA.1.aaaa}}
    - {name: a2 takes over, gdsfleet.gds.node_lock: {token: runA.2.cccc}, register: a2}
    - {name: wrong release, gdsfleet.gds.node_lock: {state: released, token: runB.1.bbbb}}
    - {name: b still refused, gdsfleet.gds.node_lock: {token: runB.1.bbbb}, ignore_errors: true}
    - {name: a2 releases, gdsfleet.gds.node_lock: {state: released, token: runA.2.cccc}}
    - {name: b holds, gdsfleet.gds.node_lock: {token: runB.1.bbbb}, register: b}
    - {name: b releases, gdsfleet.gds.node_lock: {state: released, token: runB.1.bbbb}}
    - {name: by hand, gdsfleet.gds.node_lock: {token: ""}, register: manual}
    - {name: by hand again, gdsfleet.gds.node_lock: {token: ""}, ignore_errors: true}
    - name: by hand lets go
      gdsfleet.gds.node_lock: {state: released, token: "{{ manual.token }}"}
    - {name: short ttl, gdsfleet.gds.node_lock: {token: runC.1.dddd, ttl: 1}}
    - {name: after the ttl, ansible.builtin.command: sleep 3, changed_when: false}
    - {name: d after the ttl, gdsfleet.gds.node_lock: {token: runD.1.eeee}, register: d}
    - {name: d releases, gdsfleet.gds.node_lock: {state: released, token: runD.1.eeee}}
    - {name: bad token, gdsfleet.gds.node_lock: {token: "x;rm -rf /"}, ignore_errors: true}
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie of ours is gone for the lock
        return fh.read().split(") ", 1)[1][0] != "Z"


def _play(play: str, collections: Path, tmp: Path) -> dict[str, Any]:
    """Run ``play`` (its lock files under ``tmp``) on this machine: each task's result by task
    name, the lock's log, the folder and the exit code."""
    (tmp / "play.yml").write_text(play)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(tmp / "play.yml"), "-e", f"dir={tmp}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=tmp, env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections),
                      "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1"},
        capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(proc.stdout)
    results = {t["task"]["name"]: t["hosts"]["localhost"]
               for play in doc["plays"] for t in play["tasks"]}
    log = [json.loads(x) for x in (tmp / "site-lock.log").read_text().splitlines()]
    return {"r": results, "log": log, "dir": tmp, "rc": proc.returncode}


@pytest.fixture(scope="module")
def cases(private_collections: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, Any]:
    return _play(CASES, private_collections, tmp_path_factory.mktemp("nodelock"))


def test_a_second_run_is_refused_naming_the_holder(cases: dict[str, Any]) -> None:
    r = cases["r"]
    a = r["a holds"]
    assert a["changed"] is False and a["holder"]["run"] == "runA"
    assert "GDSFLEET_PLAYBOOK_TOKEN=runA.1.aaaa" in r["holder of a"]["stdout"].split("\0")
    refused = r["b refused"]
    assert refused["failed"] is True
    assert "another gdsfleet play holds this node: token runA.1.aaaa (run runA), pid " \
        f"{a['holder']['pid']}" in refused["msg"]
    assert r["a again"]["holder"]["token"] == "runA.1.aaaa"  # noqa: S105 - the same play: still its own


def test_the_same_run_takes_over_and_the_old_holder_is_gone(cases: dict[str, Any]) -> None:
    r = cases["r"]
    a2 = r["a2 takes over"]
    assert a2["took_over"]["token"] == "runA.1.aaaa"  # noqa: S105
    assert a2["holder"]["token"] == "runA.2.cccc"  # noqa: S105
    assert not _alive(r["a holds"]["holder"]["pid"])
    assert r["b still refused"]["failed"] is True  # a release with another token did nothing
    assert "runA.2.cccc" in r["b still refused"]["msg"]


def test_release_lets_the_next_play_in_and_a_hand_run_gets_a_token(cases: dict[str, Any]
                                                                  ) -> None:
    r = cases["r"]
    assert r["b holds"]["holder"]["token"] == "runB.1.bbbb"  # noqa: S105
    assert not _alive(r["b holds"]["holder"]["pid"])  # released at the end of the play
    manual = r["by hand"]["token"]
    assert manual.startswith("manual.") and r["by hand again"]["failed"] is True
    assert f"token {manual} (run none)" in r["by hand again"]["msg"]


def test_a_holder_lets_go_by_itself_after_its_ttl(cases: dict[str, Any]) -> None:
    assert cases["r"]["d after the ttl"]["holder"]["token"] == "runD.1.eeee"  # noqa: S105
    assert "took_over" not in cases["r"]["d after the ttl"]


def test_a_token_that_is_not_a_plain_word_is_refused(cases: dict[str, Any]) -> None:
    bad = cases["r"]["bad token"]
    assert bad["failed"] is True and "give the rollout's token or none" in bad["msg"]


def test_the_log_shows_no_two_plays_holding_the_node_at_once(cases: dict[str, Any]) -> None:
    """Each token's interval runs from its acquire to its release, to the takeover that ended
    it, or to its ttl; no two intervals overlap."""
    spans: list[tuple[float, float, str]] = []
    start: dict[str, float] = {}
    ttl_of = {"runC.1.dddd": 1.0}
    for e in cases["log"]:
        if e["event"] == "acquire":
            start[e["token"]] = e["at"]
        elif e["event"] == "release":
            spans.append((start.pop(e["token"]), e["at"], e["token"]))
        elif e["event"] == "takeover":
            old = e["old"]["token"]
            spans.append((start.pop(old), e["at"], old))
    for token, t0 in start.items():  # ended by its ttl
        spans.append((t0, t0 + ttl_of[token], token))
    spans.sort()
    assert len(spans) == 6, spans
    for (_a0, a1, ta), (b0, _b1, tb) in zip(spans, spans[1:], strict=False):
        assert a1 <= b0, (ta, tb)
    refused = [e["token"] for e in cases["log"] if e["event"] == "refused"]
    assert refused.count("runB.1.bbbb") == 2 and len(refused) == 3


def test_site_yml_holds_the_node_first_and_lets_it_go_in_always() -> None:
    (play,) = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    first, block = play["tasks"]
    assert "gdsfleet.gds.node_lock" in first and first["check_mode"] is False
    assert "GDSFLEET_PLAYBOOK_TOKEN" in first["gdsfleet.gds.node_lock"]["token"]
    assert "GDSFLEET_PLAYBOOK_TOKEN" in play["environment"]["GDSFLEET_PLAYBOOK_TOKEN"]
    assert "takeover_wait" in first["gdsfleet.gds.node_lock"]
    roles = [t["ansible.builtin.import_role"]["name"] for t in block["block"]]
    # every role of the site playbook runs inside the held block, preflight first
    assert roles[0] == "gdsfleet.gds.preflight"
    assert {"gdsfleet.gds.nvidia_fs", "gdsfleet.gds.netfs", "gdsfleet.gds.nvme"} <= set(roles)
    (release,) = block["always"]
    assert release["gdsfleet.gds.node_lock"]["state"] == "released"


def test_the_module_reads_the_run_from_the_rollouts_tokens_as_the_rollout_means_it() -> None:
    """node_lock runs on the node and cannot import the rollout's code, so the token format
    is a contract in two places: the run a rollout's token names (provisioner.rollout.guard)
    is the run the module lets take over, and the token passes the module's own check."""
    import importlib.util

    from provisioner.rollout import guard

    spec = importlib.util.spec_from_file_location(
        "gdsfleet_node_lock_under_test", ROOT / "plugins" / "modules" / "node_lock.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for run in ("20261124T160000Z-0a1b2c3d4e5f", "r1", None):
        token = guard.new_token(run)
        assert mod.TOKEN_RE.match(token), token
        assert mod._run_of(token) == guard.run_of(token) == (run or "")
    assert mod._run_of("manual.abc") == guard.run_of("manual.abc") == ""


# A takeover when the fenced play's work is still running on the node: W1's short work (ends
# in 2 s) is waited for; W2's long work (would run 300 s) is stopped after takeover_wait 1 s.
# The work is started here as a detached process carrying the old token, as a module of the
# fenced play does through site.yml's environment.
TAKEOVER = """
- name: node_lock takeover cases
  hosts: localhost
  gather_facts: false
  module_defaults:
    gdsfleet.gds.node_lock:
      path: "{{ dir }}/site.lock"
      log: "{{ dir }}/site-lock.log"
      ttl: 120
  tasks:
    - {name: w1 holds, gdsfleet.gds.node_lock: {token: runW.1.aaaa}}
    - name: w1 work in flight
      ansible.builtin.shell: >-
        GDSFLEET_PLAYBOOK_TOKEN=runW.1.aaaa setsid sh -c 'sleep 6; date +%s.%N > {{ dir }}/w1.end'
        </dev/null >/dev/null 2>&1 & echo $!
      register: w1_work
      changed_when: false
    - {name: w2 takes over, gdsfleet.gds.node_lock: {token: runW.2.bbbb, takeover_wait: 30},
       register: w2}
    - name: w2 work in flight
      ansible.builtin.shell: >-
        GDSFLEET_PLAYBOOK_TOKEN=runW.2.bbbb setsid sleep 300 </dev/null >/dev/null 2>&1 &
        echo $!
      register: w2_work
      changed_when: false
    - {name: w3 takes over, gdsfleet.gds.node_lock: {token: runW.3.cccc, takeover_wait: 1},
       register: w3}
    - {name: w3 releases, gdsfleet.gds.node_lock: {state: released, token: runW.3.cccc}}
    - {name: bad wait, gdsfleet.gds.node_lock: {token: runW.4.dddd, takeover_wait: -1},
       ignore_errors: true}
"""


@pytest.fixture(scope="module")
def takeover(private_collections: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    return _play(TAKEOVER, private_collections, tmp_path_factory.mktemp("takeover"))


def test_a_takeover_waits_for_the_fenced_plays_work_to_end(takeover: dict[str, Any]) -> None:
    r, log = takeover["r"], takeover["log"]
    w1_pid = int(r["w1 work in flight"]["stdout"])
    took = r["w2 takes over"]["took_over"]
    # the work's shell and its sleep, both carrying the token
    assert took["token"] == "runW.1.aaaa" and w1_pid in took["waited_for"], took  # noqa: S105
    assert len(took["waited_for"]) == 2, took
    assert took["stopped"] == [] and took["waited_s"] >= 1.0, took
    # the old work really ended (it wrote its end) before the new play had the node
    ended = float((takeover["dir"] / "w1.end").read_text())
    acquired = [e["at"] for e in log if e["event"] == "acquire" and e["token"] == "runW.2.bbbb"]  # noqa: S105
    # before: the takeover came at once and the two plays' work overlapped by about 2 s
    assert acquired and ended <= acquired[0], (ended, acquired)


def test_a_takeover_stops_work_that_outlasts_the_wait(takeover: dict[str, Any]) -> None:
    r, log = takeover["r"], takeover["log"]
    w2_pid = int(r["w2 work in flight"]["stdout"])
    took = r["w3 takes over"]["took_over"]
    assert took["token"] == "runW.2.bbbb" and took["stopped"] == [w2_pid], took  # noqa: S105
    assert took["waited_for"] == [] and not _alive(w2_pid)
    (event,) = [e for e in log if e["event"] == "takeover" and e["token"] == "runW.3.cccc"]  # noqa: S105
    assert event["stopped"] == [w2_pid] and event["old"]["token"] == "runW.2.bbbb"  # noqa: S105
    bad = r["bad wait"]
    assert bad["failed"] is True and "takeover_wait -1: give seconds, 0 or more" in bad["msg"]
