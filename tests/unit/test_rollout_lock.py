"""Fleet lock: two processes contend, the holder is named, a killed holder releases it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.errors import LockHeld, UsageError
from provisioner.rollout.lock import (
    FileLock,
    PgAdvisoryLock,
    advisory_key,
    fleet_lock,
    lock_path_for,
)

HOLDER = """
import sys, time
from provisioner.rollout.lock import FileLock
lock = FileLock(sys.argv[1], "fleet-a").acquire()
print("held", flush=True)
time.sleep(60)
"""


def _start_holder(path: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite.rollout.lock"
    holder = _start_holder(path)
    try:
        info = json.loads(path.read_text())
        assert info["pid"] == holder.pid and info["fleet"] == "fleet-a"
        with pytest.raises(LockHeld) as exc:
            FileLock(path, "fleet-a").acquire()
        msg = str(exc.value)
        assert f"pid {holder.pid}" in msg and info["host"] in msg and info["user"] in msg
        assert exc.value.exit_code == 75
    finally:
        holder.kill()
        holder.wait()


def test_kill_9_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = _start_holder(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    deadline = time.monotonic() + 5
    while True:  # the kernel drops the flock with the process
        try:
            lock = FileLock(path, "fleet-a").acquire()
            break
        except LockHeld:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()
    assert path.read_text() == ""


def test_context_manager_and_reacquire(tmp_path: Path) -> None:
    path = tmp_path / "y.lock"
    # even within one process: a second open file description conflicts
    with FileLock(path, "f"), pytest.raises(LockHeld):
        FileLock(path, "f").acquire()
    with FileLock(path, "f"):
        pass


def test_lock_path_and_kind() -> None:
    assert lock_path_for("/var/x/ledger.sqlite") == Path("/var/x/ledger.sqlite.rollout.lock")
    assert lock_path_for("sqlite:////var/x/l.db") == Path("/var/x/l.db.rollout.lock")
    assert lock_path_for("postgresql://u@h/db") is None
    assert isinstance(fleet_lock("postgresql://u@h/db", "f"), PgAdvisoryLock)
    with pytest.raises(UsageError):
        fleet_lock("mysql://u@h/db", "f")


def test_advisory_key_is_stable_and_signed_64bit() -> None:
    k = advisory_key("/inv/lab")
    assert k == advisory_key("/inv/lab") != advisory_key("/inv/other")
    assert -(2**63) <= k < 2**63
