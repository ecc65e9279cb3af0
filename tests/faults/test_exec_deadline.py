"""Issue 45, item 2: the coordinator's own wall-clock deadline on an execution node's stream.

The shard's deadline used to be enforced only on the execution node (``timeout`` around the
worker, then a sweep by the dispatch's token). A node that does not play along kept the
coordinator reading: a worker that detaches and sends ``{"event": "keepalive"}`` forever
(ansible-runner's Processor skips those lines: src/ansible_runner/streaming.py, tag 2.4.3, as
installed), or a ``{"zipfile": N}`` header followed by endless base64 (skipped, never unpacked,
by ``_BoundedReader``), held the rollout with no bound at all.

The stand-in ansible-runner below (``_detaching_runner``) does exactly that: for ``worker`` it
starts a writer in a session of its own with an empty environment (no token: the sweep cannot
find it; no process group: ``timeout`` cannot kill it), which holds the ssh channel's stdout
and writes for up to ``WRITER_S`` seconds, then the stand-in exits. Everything else
(``--worker-info``) is the real ansible-runner. The execution node is this machine behind a
real OpenSSH sshd on loopback (tests/harness/loopback_sshd.py), as in test_exec_nodes.py.

With ``--playbook-timeout 2 --connect-timeout 1`` the dispatch's deadline is 13 s after it is
recorded (timeout + connect timeout + ``timeout --kill-after`` 5 s + the sweep's 5 s margin,
executors.fence.wait_margin_s); the coordinator must kill its ssh then and mark the hosts lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.rollout.executors.fence import wait_margin_s
from provisioner.store import Ledger
from tests.unit import test_exec_nodes as base
from tests.unit.test_exec_nodes import BIN, _exec_inventory, _outcomes, _rollout, needs_sshd

lab = base.lab  # two real sshd on loopback, the targets are ansible_connection: local hosts
env = base.env

WRITER_S = 75  # the stand-in's writer gives up by itself (so a run of the old code ends)
TIMEOUT_S, CONNECT_S = 2, 1
DEADLINE_S = TIMEOUT_S + wait_margin_s(CONNECT_S)
SLACK_S = 25  # the fence ssh, ansible-runner's own start and end, a loaded 2-core machine

WRITER = r"""
import os, sys, time
mode, pidfile, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(pidfile, "w") as fh:
    fh.write(str(os.getpid()))
out = sys.stdout.buffer
end = time.monotonic() + limit
try:
    out.write(b'{"status": "starting", "runner_ident": "x", "command": [], "env": {}, '
              b'"cwd": "/"}\n')
    if mode == "archive":
        out.write(b'{"zipfile": 1000000000000}\n')
    while time.monotonic() < end:
        out.write(b"QUFB" * 4096 if mode == "archive" else b'{"event": "keepalive"}\n')
        out.flush()
        time.sleep(0.05 if mode == "archive" else 0.5)
except OSError:
    pass
"""


def _detaching_runner(root: Path, mode: str) -> tuple[Path, Path]:
    """Stand-in ansible-runner (see the module's docstring); returns it and its pid file."""
    folder = root / f"detach-{mode}"
    folder.mkdir()
    fake, pidfile, writer = folder / "ansible-runner", folder / "writer.pid", folder / "w.py"
    writer.write_text(WRITER)
    real = BIN / "ansible-runner"
    fake.write_text(
        f"#!{sys.executable}\nimport os, subprocess, sys\nreal = {str(real)!r}\n"
        "if sys.argv[1:2] == ['worker'] and '--worker-info' not in sys.argv:\n"
        f"    subprocess.Popen([sys.executable, {str(writer)!r}, {mode!r}, {str(pidfile)!r},\n"
        f"                      '{WRITER_S}'], env={{}}, start_new_session=True,\n"
        "                     stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "    sys.exit(0)\n"
        "os.execv(real, [real, *sys.argv[1:]])\n")
    fake.chmod(0o755)
    for tool in BIN.iterdir():
        if tool.name != "ansible-runner":
            (folder / tool.name).symlink_to(tool)
    return fake, pidfile


def _stop_writer(pidfile: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


@needs_sshd
@pytest.mark.parametrize("mode", ["keepalive", "archive"])
def test_an_endless_worker_stream_is_cut_at_the_shard_deadline(
        lab: dict[str, Any], env: None, tmp_path: Path, mode: str) -> None:
    """Before the fix the rollout was still reading when the writer gave up by itself
    (``WRITER_S`` s, far past the 13 s deadline)."""
    fake, pidfile = _detaching_runner(tmp_path, mode)
    inv = _exec_inventory(lab["root"], lab["ports"][:1], str(fake), name=f"detach-{mode}.ini")
    ledger = tmp_path / "d.sqlite"
    result: list[int] = []
    started = time.monotonic()
    t = threading.Thread(target=lambda: result.append(_rollout(
        lab, ledger, "--executor", "ssh", "--exec-inventory", str(inv),
        "--playbook-timeout", str(TIMEOUT_S), "--connect-timeout", str(CONNECT_S))),
        daemon=True)
    t.start()
    try:
        t.join(DEADLINE_S + SLACK_S)
        took = time.monotonic() - started
        assert not t.is_alive(), (
            f"the rollout was still reading the execution node's {mode} stream {took:.0f} s "
            f"after it began (the shard's deadline: {DEADLINE_S:.0f} s)")
    finally:
        _stop_writer(pidfile)
        t.join(WRITER_S)
    assert result and result[0] != 0
    run_id, steps = _outcomes(ledger)
    assert set(steps.values()) == {"lost"}, steps
    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
        node_rows = {n: s for n, s in led.node_steps(run_id).items()}
    assert len(rows) == 1 and "lost" in rows[0]["detail"]["history"]
    assert "deadline" in rows[0]["detail"].get("reason", ""), rows[0]["detail"]
    message = next(iter(node_rows.values()))["detail"]["outcome"]["message"]
    assert "deadline" in message and "e1" in message, message
