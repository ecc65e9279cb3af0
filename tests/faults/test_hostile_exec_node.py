"""Fault injection: a hostile execution node's worker stream (issue 27 item 6).

The execution node is a real sshd on loopback (tests/harness/loopback_sshd.py) whose
``gdsfleet_exec_runner`` is a stand-in (:func:`standin_runner`): it answers the version check as
the real ansible-runner does (``worker --worker-info``) and, as the worker, reads the job and
then sends the stream the case needs. The rollout runs through the CLI.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner import redact
from provisioner.cli import main
from provisioner.rollout.events import MAX_EVENTS_BASE, MAX_EVENTS_PER_HOST
from provisioner.store import Ledger
from tests.harness.loopback_sshd import SSHD, LoopbackExecNodes, exec_inventory

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD) or os.geteuid() != 0 or shutil.which("ssh") is None,
    reason="needs OpenSSH's sshd and ssh (openssh-server/-client, scripts/setup.sh) and root",
)

HOST = "127.0.0.2"

# The stand-in worker: argv as the real one gets it. ``stream.py`` beside it writes the stream.
RUNNER = """#!{python}
import os, sys
if "--worker-info" in sys.argv:
    from ansible_runner.__main__ import main
    sys.exit(main())
sys.stdin.buffer.read()  # the job, as a worker reads it
here = os.path.dirname(os.path.abspath(__file__))
exec(open(os.path.join(here, "stream.py")).read())
"""


def standin_runner(folder: Path, stream_py: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    runner = folder / "ansible-runner"
    runner.write_text(RUNNER.format(python=sys.executable))
    runner.chmod(0o755)
    (folder / "stream.py").write_text(stream_py)
    return runner


# the stream's head and tail as a worker sends them
HEAD = """import json
out = sys.stdout.buffer
def w(o):
    out.write(json.dumps(o).encode() + b"\\n")
w({"status": "starting", "runner_ident": "x", "command": [], "env": {}, "cwd": "/"})
w({"status": "running", "runner_ident": "x"})
"""
TAIL = f"""w({{"event": "playbook_on_stats", "uuid": "s", "counter": 999999999,
   "event_data": {{"ok": {{"{HOST}": 1}}, "processed": {{"{HOST}": 1}}}}}})
w({{"status": "successful", "runner_ident": "x"}})
w({{"eof": True}})
out.flush()
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("hostile-exec")
    with LoopbackExecNodes(root, count=1, version="0.2.0") as lab:
        (root / "play.yml").write_text(
            "- hosts: all\n  gather_facts: false\n  tasks:\n"
            "    - ansible.builtin.command: 'true'\n")
        (root / "targets.ini").write_text(
            f"[gpu]\n{HOST}\n\n[all:vars]\nansible_connection=local\n"
            f"ansible_python_interpreter={sys.executable}\n")
        yield {"root": root, "ports": lab.ports}


@pytest.fixture(autouse=True)
def _env(nodes: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[None]:
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(nodes["root"] / "collections"))
    monkeypatch.setenv("HOME", str(nodes["root"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


def rollout(nodes: dict[str, Any], tmp_path: Path, stream_py: str) -> tuple[int, Path]:
    root: Path = nodes["root"]
    runner = standin_runner(tmp_path / "runner-bin", stream_py)
    inv = exec_inventory(root, nodes["ports"], runner=str(runner), name=f"{tmp_path.name}.ini")
    ledger = tmp_path / "ledger.sqlite"
    code = main(["rollout", "-i", str(root / "targets.ini"), "--playbook",
                 str(root / "play.yml"), "--no-verify", "--ledger", str(ledger),
                 "--known-hosts", str(root / "known_hosts"), "--ssh-config", "none", "-q",
                 "--executor", "ssh", "--exec-inventory", str(inv), "--allow-local-connection"])
    return code, ledger


def dispatch_rows(ledger: Path) -> list[dict[str, Any]]:
    with Ledger.open(ledger) as led:
        run = led.runs(kind="rollout", limit=1)[0]
        return led.dispatches(run["id"])


def written_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_6_huge_event_fields_are_bounded(nodes: dict[str, Any], tmp_path: Path) -> None:
    """Case 6: 40 events whose ``counter`` and ``created`` are 512 KiB each (40 MiB sent):
    events.jsonl keeps a bounded line of each (well under 1 MiB in all) and the shard's
    result still counts. Before: both fields were copied whole, 40 MiB on the coordinator's
    disk (the issue measured 629 MB from 300 events of 2 MiB)."""
    stream = HEAD + f"""big = "7" * (512 << 10)
for i in range(40):
    w({{"event": "runner_on_ok", "uuid": "u%d" % i, "counter": big, "created": big,
       "event_data": {{"host": "{HOST}", "task": "t", "res": {{"changed": False}}}}}})
""" + TAIL
    code, ledger = rollout(nodes, tmp_path, stream)
    events = list(tmp_path.rglob("events.jsonl"))
    assert events, "no events.jsonl was written"
    assert written_bytes(tmp_path) < (1 << 20), written_bytes(tmp_path)
    assert sum(1 for _ in events[0].open()) >= 40
    assert code == 0
    assert dispatch_rows(ledger)[0]["state"] == "done"


def test_6_too_many_events_lose_the_shard_with_the_reason(nodes: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """Case 6: a worker that sends more events than a shard of one host may (its stats line
    after them): the stream is cut there, the shard is lost and its dispatch says why;
    events.jsonl holds no line past the bound. Before: every event was written, unbounded."""
    limit = MAX_EVENTS_BASE + MAX_EVENTS_PER_HOST
    stream = HEAD + f"""for i in range({limit + 2000}):
    w({{"event": "runner_on_ok", "uuid": "u%d" % i, "counter": i + 1,
       "event_data": {{"host": "{HOST}", "task": "t"}}}})
""" + TAIL
    code, ledger = rollout(nodes, tmp_path, stream)
    assert code != 0
    rows = dispatch_rows(ledger)
    assert rows and all("lost" in r["detail"]["history"] for r in rows), rows
    assert f"more than {limit:,} events" in str(rows[0]["detail"].get("reason")), rows
    with Ledger.open(ledger) as led:
        steps = led.node_steps(led.runs(kind="rollout", limit=1)[0]["id"])
    assert steps[HOST]["step"] == "lost", steps
    # per run of the shard (a lost shard may be sent again)
    lines = [sum(1 for _ in p.open()) for p in tmp_path.rglob("events.jsonl")
             if "artifacts" in p.parts]
    assert lines and max(lines) <= limit, lines
