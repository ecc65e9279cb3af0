"""A coordinator that died with dispatches out, and the one that takes its run over (issue 14,
part 3): the resumed run fences the recorded dispatches by token before anything is sent again,
and ``--wait-lock`` blocks a standby coordinator on the fleet lock until the holder dies.

Execution nodes are this machine through real sshd processes on loopback (test_exec_nodes'
``lab``); a worker the dead coordinator left behind is a process tagged with its dispatch's
token, as the worker wrapper tags everything it starts.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.errors import LockHeld
from provisioner.rollout.lock import PgAdvisoryLock, acquire_waiting, fleet_lock
from provisioner.store import Ledger, fleet_id
from tests.unit import test_exec_nodes as base
from tests.unit.test_exec_nodes import HOSTS, _outcomes, _rollout, needs_sshd
from tests.unit.test_exec_nodes_fence import _sleeper
from tests.unit.test_store import pg_url  # noqa: F401 - the PostgreSQL fixture

lab = base.lab
env = base.env


def _dead_coordinators_run(lab: dict[str, Any], ledger: Path) -> tuple[str, str]:
    """The ledger as a coordinator killed mid-wave leaves it: the run unfinished, one dispatch
    still ``running`` on e1. Returns (run id, that dispatch's token)."""
    from provisioner.rollout.planner import plan_waves
    from provisioner.rollout.state import seed_pending

    plan = plan_waves(list(HOSTS), "all", latest={})
    with Ledger.open(ledger) as led:
        run_id = led.start_run("rollout", fleet_id(str(lab["targets"])),
                               {"plan": plan.to_dict()})
        seed_pending(led, run_id, plan)
        token = f"{run_id}.4242.0123456789ab"
        led.record_dispatch(run_id, 0, 0, "e1", token, None, "running", list(HOSTS))
    return run_id, token


@needs_sshd
def test_resume_fences_the_dead_coordinators_dispatch_before_sending_anything(
        lab: dict[str, Any], env: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.sqlite"
    run_id, token = _dead_coordinators_run(lab, ledger)
    left = _sleeper(token)  # what the dead coordinator's worker still runs on e1
    bystander = _sleeper(token[:-1] + "c")  # another dispatch's: not this run's to kill
    try:
        rc = _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(lab["exec"]))
        err = capsys.readouterr().err
        # the lab's play fails 127.0.0.4 on purpose (test_exec_nodes): one wave of all (no
        # canary) within its --max-failures 100%, exit 1, exactly as a first run of the same
        # command ends
        assert rc == 1, err
        assert f"resuming {run_id}: fencing 1 earlier dispatch(es) on e1" in err
        assert left.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None
        resumed, steps = _outcomes(ledger)
        assert resumed == run_id and steps["127.0.0.4"] == "failed", steps
        with Ledger.open(ledger) as led:
            rows = led.dispatches(run_id)
        old = rows[0]
        assert old["token"] == token and old["state"] == "fenced", old
        assert old["detail"]["history"][:2] == ["running", "fenced"], old
        assert old["detail"]["resumed_by_coordinator"] is True
        # the fence came first: every dispatch of the resumed run was made after it
        assert all(r["created_at"] >= old["updated_at"] for r in rows[1:]), rows
        assert len(rows) >= 2 and all(r["state"] == "done" for r in rows[1:]), rows
    finally:
        for p in (left, bystander):
            with contextlib.suppress(OSError):
                p.kill()
            p.wait()


@needs_sshd
def test_resume_without_the_execution_nodes_is_refused_and_touches_nothing(
        lab: dict[str, Any], env: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.sqlite"
    run_id, token = _dead_coordinators_run(lab, ledger)
    left = _sleeper(token)
    try:
        assert _rollout(lab, ledger) == 64
        err = capsys.readouterr().err
        assert f"the unfinished run {run_id} has 1 dispatch(es) on execution nodes (e1)" in err
        assert "--executor ssh --exec-inventory FILE" in err
        assert left.poll() is None  # nothing was fenced or sent
        with Ledger.open(ledger) as led:
            assert [r["state"] for r in led.dispatches(run_id)] == ["running"]
            assert {s["step"] for s in led.node_steps(run_id).values()} == {"pending"}
    finally:
        left.kill()
        left.wait()


def test_wait_lock_takes_the_lock_when_the_holder_lets_go(tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite")
    held = fleet_lock(ledger, "fleet-w").acquire()
    said: list[str] = []
    threading.Timer(1.0, held.release).start()
    t0 = time.monotonic()
    with fleet_lock(ledger, "fleet-w", wait_s=30, say=said.append):
        took = time.monotonic() - t0
    assert 0.5 < took < 25, took
    assert len(said) == 1 and said[0].startswith("waiting up to 30s for the fleet lock")


def test_wait_lock_gives_up_after_its_time_naming_the_holder(tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite")
    with fleet_lock(ledger, "fleet-w"):
        with pytest.raises(LockHeld, match=r"another rollout holds the lock .*waited 1s"):
            acquire_waiting(fleet_lock(ledger, "fleet-w"), 1.0, poll_s=0.2)
        with pytest.raises(LockHeld) as refused:  # without --wait-lock: at once, as before
            acquire_waiting(fleet_lock(ledger, "fleet-w"), 0.0)
        assert "waited" not in str(refused.value)


def test_wait_lock_must_be_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.cli import main

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    n1:\n      ansible_connection: local\n")
    assert main(["rollout", "-i", str(inv), "--ledger", str(tmp_path / "l.sqlite"),
                 "--no-verify", "--wait-lock", "-5", "--allow-local-connection"]) == 64
    assert "--wait-lock -5.0: must be 0 or more seconds" in capsys.readouterr().err
    assert not (tmp_path / "l.sqlite").exists()


def test_standby_coordinator_takes_the_pg_lock_when_the_first_dies(
        pg_url: str) -> None:  # noqa: F811
    """The issue's takeover on PostgreSQL: the first coordinator holds the advisory lock; a
    second one waits with --wait-lock; kill -9 of the first ends its session, and the second
    gets the lock within moments (then, as the command, resumes the unfinished run)."""
    code = ("import sys, time; from provisioner.rollout.lock import PgAdvisoryLock; "
            "PgAdvisoryLock(sys.argv[1], 'fleet-t').acquire(); print('held', flush=True); "
            "time.sleep(120)")
    first = subprocess.Popen([sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        said: list[str] = []

        def waiting(message: str) -> None:
            # the first dies once the standby waits for it, not after a fixed second (on a
            # loaded machine the standby's first try came after the kill, and nobody waited)
            said.append(message)
            first.kill()

        standby = fleet_lock(pg_url, "fleet-t", wait_s=60, say=waiting)
        assert isinstance(standby, PgAdvisoryLock)
        t0 = time.monotonic()
        with standby:
            took = time.monotonic() - t0
        assert first.wait(timeout=10) == -signal.SIGKILL
        assert took < 50, took
        assert said and f"pid={first.pid}" in said[0]
    finally:
        with contextlib.suppress(OSError):
            first.kill()
        first.wait()
