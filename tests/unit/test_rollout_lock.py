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


# PostgreSQL ledger: pg_try_advisory_lock keyed on the fleet (a throw-away cluster, see
# tests/unit/test_store.py; skipped when the server binaries are missing).
from tests.unit.test_store import pg_url  # noqa: E402,F401  (the module-scoped fixture)


def test_pg_advisory_lock_contention(pg_url: str) -> None:  # noqa: F811
    first = fleet_lock(pg_url, "/inv/fleet-a")
    assert isinstance(first, PgAdvisoryLock)
    with first:
        with pytest.raises(LockHeld) as exc:
            fleet_lock(pg_url, "/inv/fleet-a").acquire()
        assert f"pid={os.getpid()}" in str(exc.value) and "gdsfleet-rollout" in str(exc.value)
        with fleet_lock(pg_url, "/inv/fleet-b"):  # another fleet: its own lock
            pass
    with fleet_lock(pg_url, "/inv/fleet-a"):  # released with its connection
        pass


def test_pg_lock_of_a_killed_holder_is_released(pg_url: str) -> None:  # noqa: F811
    code = ("import sys, time; from provisioner.rollout.lock import PgAdvisoryLock; "
            "PgAdvisoryLock(sys.argv[1], 'fleet-k').acquire(); print('held', flush=True); "
            "time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match=f"pid={p.pid}"):
            PgAdvisoryLock(pg_url, "fleet-k").acquire()
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 10
    while True:  # the server ends the dead client's session, and its advisory locks
        try:
            PgAdvisoryLock(pg_url, "fleet-k").acquire().release()
            break
        except LockHeld:
            assert time.monotonic() < deadline
            time.sleep(0.1)
