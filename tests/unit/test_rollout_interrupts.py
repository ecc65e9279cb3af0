"""Interrupts without a fleet (issue 8): the engine's 'interrupted' state and resume (fakes),
the signal handling of provisioner.interrupts (real signals to this process), the guard's
process sweep and the children lock (real processes). The lab cases are in
tests/faults/test_interrupts.py."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from provisioner import interrupts
from provisioner.errors import LockHeld
from provisioner.exitcodes import Exit
from provisioner.rollout import guard
from provisioner.rollout.lock import FileLock
from provisioner.rollout.runner import HostOutcome
from provisioner.store import Ledger
from tests.unit.test_rollout_engine import NODES, FakeFleet, engine, steps


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.open(tmp_path / "ledger.sqlite")
    yield led
    led.close()


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    interrupts.reset()
    yield
    interrupts.reset()


class InterruptedFleet(FakeFleet):
    """The playbook of wave ``at`` is canceled by ``signum`` (what run_playbook raises)."""

    def __init__(self, at: int, signum: int) -> None:
        super().__init__()
        self.at = at
        self.signum = signum

    def provision(self, hosts: Sequence[str], *, wave: int,
                  on_host_event: Callable[[str, str, str], None]) -> Mapping[str, HostOutcome]:
        if wave == self.at and self.signum:
            self.provision_calls.append(list(hosts))
            signum, self.signum = self.signum, 0
            raise interrupts.Interrupted(signum)
        return super().provision(hosts, wave=wave, on_host_event=on_host_event)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, Exit.INTERRUPTED),
                                              (signal.SIGTERM, Exit.TERMINATED)])
def test_signal_mid_playbook_marks_interrupted_spends_no_budget_and_resumes(
        ledger: Ledger, signum: int, code: Exit) -> None:
    f = InterruptedFleet(at=1, signum=signum)
    res = engine(ledger, f).run()
    assert res.status == "interrupted" and res.exit_code is code and int(code) == 128 + signum
    st = steps(ledger, res.run_id)
    assert [n for n, s in st.items() if s == "interrupted"] == ["n2", "n3", "n4"]
    assert st["n1"] == "compliant" and {st[n] for n in NODES[4:]} == {"pending"}
    detail = ledger.node_steps(res.run_id)["n2"]["detail"]
    assert detail["failure"] is None and detail["during"] == "provisioning"
    assert all(n.failure is None for n in res.nodes.values())
    assert ledger.get_run(res.run_id)["finished_at"] is None  # open: resumable
    assert ledger.last_unfinished_run("rollout", "fleet-x") == res.run_id

    again = engine(ledger, f).run()
    assert again.run_id == res.run_id and again.exit_code is Exit.OK
    # the interrupted nodes first, in a batch of their own; n1 never again
    assert f.provision_calls[-2:] == [["n2", "n3", "n4"], NODES[4:]]
    assert steps(ledger, res.run_id) == dict.fromkeys(NODES, "compliant")


def test_an_interrupt_during_the_pause_stops_before_the_next_wave(ledger: Ledger) -> None:
    f = FakeFleet()

    def pause(_s: float) -> None:
        raise interrupts.Interrupted(signal.SIGTERM)

    eng = engine(ledger, f, pause_between_waves=30.0)
    eng.sleep = pause
    res = eng.run()
    assert res.exit_code is Exit.TERMINATED and res.status == "interrupted"
    assert f.provision_calls == [["n1"]]  # the canary only: the next wave never started
    assert {s for n, s in steps(ledger, res.run_id).items() if n != "n1"} == {"pending"}
    assert ledger.get_run(res.run_id)["finished_at"] is None


def test_interrupts_sleep_and_handler_with_real_signals() -> None:
    with interrupts.handling():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        t0 = time.monotonic()
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        with pytest.raises(interrupts.Interrupted) as exc:
            interrupts.sleep(30)  # --pause-between-waves
        timer.join()
        assert time.monotonic() - t0 < 5
        assert exc.value.exit_code == 143
    # the handlers in place before are back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_only_records_and_closers_run() -> None:
    closed: list[str] = []
    with interrupts.handling():
        with interrupts.closing(lambda: closed.append("ssh")), interrupts.deferred():
            # what ansible-runner installs when given no cancel callback: replaced in the block
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 5
            while not closed and time.monotonic() < deadline:
                time.sleep(0.01)
            assert interrupts.requested()  # recorded, not raised: the runner polls it
        with pytest.raises(interrupts.Interrupted):
            interrupts.check()
    assert closed == ["ssh"]


def test_a_second_signal_exits_at_once() -> None:
    code = ("import os, signal, time\n"
            "from provisioner import interrupts\n"
            "with interrupts.handling(), interrupts.deferred():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(30)\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 130 and time.monotonic() - t0 < 20
    assert "SIGINT again: stopping now" in proc.stderr


def test_guard_sweep_finds_processes_by_token_even_after_setsid() -> None:
    token = f"test.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **{guard.TOKEN_ENV: token})
    # a daemonizing child (like an ssh control master): its own session, reparented
    subprocess.run(["setsid", "-f", "sleep", "300"], env=env, check=True)
    deadline = time.monotonic() + 5
    while not guard.tagged(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    found = guard.tagged(token)
    assert len(found) == 1
    assert guard.sweep(token, grace=1.0) == found
    assert guard.tagged(token) == []


def test_guard_leaves_a_container_on_this_machine_alone() -> None:
    """A process in another PID namespace (a container: in the lab, a node whose play carries
    the token through site.yml's environment) is not the guard's to kill, token or not; one
    of ours with the same token is."""
    token = f"test.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **{guard.TOKEN_ENV: token})
    boxed = subprocess.Popen(["unshare", "--user", "--pid", "--fork", "--kill-child",
                              "sleep", "300"], env=env)
    ours = subprocess.Popen(["sleep", "300"], env=env)
    try:
        def sleeps() -> list[int]:
            return [p for p in guard._pids() if _comm(p) == "sleep" and p != ours.pid
                    and _ppid(p) == boxed.pid]

        deadline = time.monotonic() + 10
        while not sleeps() and time.monotonic() < deadline:
            time.sleep(0.05)
        (inner,) = sleeps()
        found = guard.tagged(token)
        # before: both, and a lab node's module processes died with the controller's guard
        assert ours.pid in found and inner not in found and boxed.pid in found, found
    finally:
        for p in (boxed, ours):
            p.kill()
            p.wait()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def test_resume_waits_for_the_children_lock_then_names_the_pids(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "ledger.sqlite.rollout.lock", "f", children_wait=0.5)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('held', flush=True)\ntime.sleep(60)\n",
         str(lock.children_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as exc:
            lock.acquire()
        assert f"pid {holder.pid}" in str(exc.value)
        assert "still running" in str(exc.value)
        # the fleet lock itself was given back: a later rollout is not blocked by this one
        fd = os.open(lock.path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        holder.kill()
        holder.wait()
    with lock:  # the holder is gone: taken at once
        pass


SLOW_IO = Path(__file__).resolve().parents[1] / "faults" / "standin_slow_io"


@pytest.mark.parametrize("how", ["reader-gone", "sigterm", "sighup"])
def test_node_io_test_stops_and_removes_its_file_when_the_orchestrator_goes(
        tmp_path: Path, how: str) -> None:
    """The node side of Ctrl-C in verify: the real I/O test script, run here as sshd runs it
    (script on stdin, output on a pipe), with the TEST STAND-IN cupy whose I/O never ends.
    Closing our end of its stdout (sshd closes the session's pipes when the channel closes, and
    sends no signal) or a signal makes it kill its attempt, remove the test file and exit."""
    from provisioner.remote import load_script

    gds = tmp_path / "gds"
    gds.mkdir()
    opts = json.dumps({"path": str(gds), "size_bytes": 4 << 20, "timeout_s": 600,
                       "cufile_log": False, "enable_rw_stats": False, "try_compat": False})
    proc = subprocess.Popen([sys.executable, "-", opts], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(SLOW_IO)))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(load_script("iotest.py"))
    proc.stdin.close()
    try:
        deadline = time.monotonic() + 30
        while not list(gds.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.name[:17] for p in gds.iterdir()] == [".gdsfleet-iotest-"]
        t0 = time.monotonic()
        if how == "reader-gone":
            proc.stdout.close()
        else:
            proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGHUP)
        proc.wait(timeout=10)
        assert time.monotonic() - t0 < 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(gds.iterdir()) == []  # the test file is gone
    left = [d for d in os.listdir("/proc") if d.isdigit()
            and str(gds).encode() in _cmdline(int(d))]
    assert left == []  # and so is the forked attempt


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _local_play(tmp_path: Path, pause_s: int) -> tuple[Path, Path]:
    pb = tmp_path / "pb.yml"
    pb.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                  f"    - ansible.builtin.command: sleep {pause_s}\n      changed_when: false\n")
    inv = tmp_path / "hosts"
    inv.write_text(f"node1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return pb, inv


def test_after_a_playbook_sigint_and_sigterm_are_still_ours(tmp_path: Path) -> None:
    """Before: ansible-runner replaced both handlers on its first run and left them so."""
    from provisioner.rollout.runner import run_playbook

    pb, inv = _local_play(tmp_path, 0)
    with interrupts.handling():
        ours = signal.getsignal(signal.SIGINT)
        res = run_playbook(pb, inv, ["node1"], private_data_dir=tmp_path / "runner")
        assert res.hosts["node1"].succeeded, res
        assert signal.getsignal(signal.SIGINT) is ours
        assert signal.getsignal(signal.SIGTERM) is ours


def test_sigint_cancels_a_real_playbook_and_leaves_no_process(tmp_path: Path) -> None:
    from provisioner.rollout.runner import run_playbook

    pb, inv = _local_play(tmp_path, 120)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    with interrupts.handling():
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(interrupts.Interrupted) as exc:
            run_playbook(pb, inv, ["node1"], private_data_dir=tmp_path / "runner",
                         run_tag="unit")
        timer.join()
    assert exc.value.exit_code == 130
    assert time.monotonic() - t0 < 30  # not the 120 s of its task
    assert _mine("unit") == []  # ansible-playbook, its fork and the task's sleep: all gone


def _mine(tag: str) -> list[tuple[int, str]]:
    """This process's playbook processes of run ``tag`` (their token), with their commands."""
    needle = f"{guard.TOKEN_ENV}={tag}.{os.getpid()}.".encode()
    return [(int(p), _cmdline(int(p)).replace(b"\0", b" ").decode(errors="replace"))
            for p in os.listdir("/proc") if p.isdigit() and needle in _environ(int(p))]


@pytest.fixture
def left_at_the_rollouts_sweep(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, str]]]:
    """What was still running when run_playbook's own sweep began, the sweep that a second
    Ctrl-C or a kill of the rollout cuts short: the guard must have ended everything by then."""
    seen: list[list[tuple[int, str]]] = []
    real = guard.sweep

    def recording(token: str, **kw: float) -> list[int]:
        seen.append(_mine(token.split(".")[0]))
        return real(token, **kw)

    monkeypatch.setattr(guard, "sweep", recording)
    return seen


def test_a_canceled_playbook_is_ended_by_its_guard_not_left_to_the_rollout(
        tmp_path: Path, left_at_the_rollouts_sweep: list[list[tuple[int, str]]]) -> None:
    """Before: the runner SIGKILLed the guard's process group, which ansible-core's forks had
    left (setsid): the fork, its module and the task's sleep ran on until the rollout's sweep,
    and ran on under PID 1 for the task's length when a second Ctrl-C cut that sweep short
    (tests/faults/test_interrupts.py, the double Ctrl-C case, failed so on a loaded run)."""
    from provisioner.rollout.runner import run_playbook

    pb, inv = _local_play(tmp_path, 120)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    with interrupts.handling():
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(interrupts.Interrupted):
            run_playbook(pb, inv, ["node1"], private_data_dir=tmp_path / "runner",
                         run_tag="guarded")
        timer.join()
    assert time.monotonic() - t0 < 30
    assert left_at_the_rollouts_sweep == [[]]
    assert _mine("guarded") == []


def test_a_timed_out_playbook_is_ended_by_its_guard(
        tmp_path: Path, left_at_the_rollouts_sweep: list[list[tuple[int, str]]]) -> None:
    from provisioner.rollout.runner import run_playbook

    pb, inv = _local_play(tmp_path, 120)
    t0 = time.monotonic()
    res = run_playbook(pb, inv, ["node1"], private_data_dir=tmp_path / "runner",
                       run_tag="slowplay", timeout=3)
    assert time.monotonic() - t0 < 30
    assert (res.status, res.rc) == ("timeout", 254)
    assert not res.hosts["node1"].succeeded
    assert left_at_the_rollouts_sweep == [[]]


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""
