"""Fault injection: interrupts and crashes (issue 8).

Real signals against real processes: ``provisioner rollout`` on a two-node lab fleet (sshd in
containers) with a playbook that keeps each node busy (tests/faults/playbooks/slow.yml, a
TEST STAND-IN for the site playbook: the point is the process tree, not what it installs), and
``provisioner verify`` against a simulated node whose I/O test never ends (the TEST STAND-IN
cupy in tests/faults/standin_slow_io, put first on the node's Python path).

Each case: SIGINT or SIGTERM mid-playbook and mid-pause (exit 130/143, nodes in flight
'interrupted' without spending the failure budget, the run left open, the same command resumes
it), a second Ctrl-C, ``kill -9`` then an immediate resume (no playbook process of the killed
rollout alive, none overlapping the resumed one), and Ctrl-C in ``verify`` (returns within 2 s,
the remote command stopped, its test file removed).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provisioner.exitcodes import Exit
from provisioner.store import Ledger

REPO = Path(__file__).resolve().parents[2]
SLOW = REPO / "tests" / "faults" / "playbooks" / "slow.yml"
SLOW_IO = REPO / "tests" / "faults" / "standin_slow_io"
TOKEN = b"GDSFLEET_PLAYBOOK_TOKEN="


# ----------------------------------------------------------------------------- helpers
def playbook_processes(controller: int | None) -> list[tuple[int, str]]:
    """``(pid, command)`` of the processes started for a playbook of the rollout ``controller``
    (ansible-playbook, its forks, ssh), found by the token the runner puts in their
    environment (``<run>.<controller pid>.<random>``), wherever they were reparented; every
    rollout's for None (the controller's pid is then the first word of the command)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(TOKEN):
                parts = item[len(TOKEN):].decode().split(".")
                if len(parts) == 3 and controller is None:
                    out.append((int(parts[1]), cmd.strip()))
                elif len(parts) == 3 and parts[1] == str(controller):
                    out.append((int(d), cmd.strip()))
    return out


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        val = pred()
        if val:
            return val
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Rollout:
    """``python -m provisioner rollout`` on the fleet, with its own ledger."""

    def __init__(self, fleet: Any, tmp: Path) -> None:
        self.fleet = fleet
        self.ledger = tmp / "ledger.sqlite"
        self.events = tmp / "events.jsonl"

    def argv(self, pause_s: int, *extra: str) -> list[str]:
        # one wave of both nodes (one playbook run per rollout) unless a test asks for more
        waves = [] if "--waves" in extra else ["--waves", "all"]
        return [sys.executable, "-m", "provisioner.cli", "rollout", "-i",
                str(self.fleet.inventory), "--ledger", str(self.ledger), "--playbook", str(SLOW),
                "--no-verify", "--plain", "--events-log", str(self.events), "-e",
                f"pause_s={pause_s}", *waves, *extra]

    def start(self, pause_s: int, *extra: str) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return subprocess.Popen(self.argv(pause_s, *extra), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)

    def run(self, pause_s: int, *extra: str) -> tuple[int, str]:
        proc = self.start(pause_s, *extra)
        out = proc.communicate(timeout=300)[0]
        return proc.returncode, out

    def runs(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        with Ledger.open(self.ledger) as led:
            return led.runs(kind="rollout", limit=10)

    def steps(self) -> dict[str, dict[str, Any]]:
        runs = self.runs()
        if not runs:
            return {}
        with Ledger.open(self.ledger) as led:
            return led.node_steps(runs[0]["id"])

    def history(self, node: str) -> list[str]:
        with Ledger.open(self.ledger) as led:
            return [e["step"] for e in led.step_events(self.runs()[0]["id"], node)]

    def busy_node(self) -> str | None:
        """The node whose playbook task is running now (its `sleep` is up)."""
        for name in self.fleet.names:
            if self.fleet.exec(name, "pgrep -x sleep", check=False).returncode == 0:
                return str(name)
        return None

    def stop_node_sleeps(self) -> None:
        for name in self.fleet.names:
            self.fleet.exec(name, "pkill -x sleep || true", check=False)


def signal_and_time(proc: subprocess.Popen[str], *sigs: signal.Signals) -> tuple[str, float]:
    t0 = time.monotonic()
    for s in sigs:
        proc.send_signal(s)
        time.sleep(0.1)
    try:
        out = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        killed(proc)
        raise AssertionError("still running 60 s after the signal") from None
    return out, time.monotonic() - t0


def killed(proc: subprocess.Popen[str]) -> None:
    """Stop a rollout a test gave up on; show what it printed."""
    proc.kill()
    sys.stderr.write(proc.communicate()[0][-4000:])


@pytest.fixture(scope="module")
def fleet(lab_fleet: Any) -> Any:
    return lab_fleet(2)


@pytest.fixture
def rollout(fleet: Any, tmp_path: Path) -> Any:
    r = Rollout(fleet, tmp_path)
    yield r
    r.stop_node_sleeps()


# ============================================================== rollout (lab fleet, 2 nodes)
def test_sigint_mid_playbook_interrupts_without_failure_and_resumes(rollout: Rollout) -> None:
    """Before: the node was marked failed, the run closed 'aborted' (not resumable), exit 3."""
    proc = rollout.start(60)
    try:
        wait_for(rollout.busy_node, 60, "the playbook's task running")
        assert playbook_processes(proc.pid)  # the playbook runs, under the guard
    except BaseException:
        killed(proc)
        raise
    out, took = signal_and_time(proc, signal.SIGINT)
    assert proc.returncode == Exit.INTERRUPTED == 130, out
    assert took < 10, (took, out)  # canceled, not left to finish its 60 s task
    assert "interrupted by SIGINT" in out and "Traceback" not in out
    (run,) = rollout.runs()
    assert run["finished_at"] is None  # open: resumable
    steps = rollout.steps()
    assert {s["step"] for s in steps.values()} == {"interrupted"}, steps
    for s in steps.values():
        assert s["detail"]["failure"] is None  # no budget spent
        assert s["detail"]["during"] == "provisioning"
    assert playbook_processes(proc.pid) == []  # nothing of it runs on

    code, out = rollout.run(0)
    assert code == Exit.OK, out
    assert "resuming" in out
    (again,) = rollout.runs()
    assert again["id"] == run["id"] and again["status"] == "succeeded"
    for node in steps:
        assert rollout.history(node)[-3:] == ["interrupted", "provisioning", "skipped"]


def test_sigterm_during_the_pause_stops_before_the_next_wave(rollout: Rollout) -> None:
    """Before: after the first playbook ansible-runner owned SIGTERM/SIGINT: the signal was
    swallowed and the next wave ran."""
    proc = rollout.start(0, "--waves", "1,100%", "--pause-between-waves", "120")
    try:
        def paused() -> bool:
            st = [s["step"] for s in rollout.steps().values()]
            return st.count("skipped") == 1 and st.count("pending") == 1

        wait_for(paused, 120, "the canary done and the pause begun")
        time.sleep(0.5)
    except BaseException:
        killed(proc)
        raise
    out, took = signal_and_time(proc, signal.SIGTERM)
    assert proc.returncode == Exit.TERMINATED == 143, out
    assert took < 2, (took, out)
    assert "pausing" in out and "interrupted by SIGTERM" in out
    (run,) = rollout.runs()
    assert run["finished_at"] is None
    steps = rollout.steps()
    (waiting,) = [n for n, s in steps.items() if s["step"] == "pending"]
    assert not [ln for ln in rollout.events.read_text().splitlines() if waiting in ln]

    code, out = rollout.run(0, "--waves", "1,100%")
    assert code == Exit.OK, out
    assert {s["step"] for s in rollout.steps().values()} == {"skipped"}


def test_second_ctrl_c_stops_at_once_and_leaves_no_playbook(rollout: Rollout) -> None:
    proc = rollout.start(60)
    try:
        wait_for(rollout.busy_node, 60, "the playbook's task running")
    except BaseException:
        killed(proc)
        raise
    out, took = signal_and_time(proc, signal.SIGINT, signal.SIGINT)
    assert proc.returncode == 130, out
    assert took < 3, (took, out)
    # the guard SIGKILLs every process tagged with the run's token and exits only once none is
    # left. The failures of the fresh-clone and CI runs of 2026-11-24 were not slowness: the
    # runner had SIGKILLed the guard on the first Ctrl-C, ansible-core's forks (setsid) and
    # their ssh outlived it, and the second Ctrl-C cut the rollout's own sweep short (guard.Stop
    # and tests/unit/test_rollout_interrupts.py). 20 s stays a generous bound on dying
    try:
        wait_for(lambda: not playbook_processes(proc.pid), 20, "the playbook processes gone")
    except AssertionError:
        alive = playbook_processes(proc.pid)
        raise AssertionError(f"still alive 20 s after: {alive}\n{out}") from None
    (run,) = rollout.runs()
    assert run["finished_at"] is None  # still resumable


def test_kill_9_then_immediate_resume_never_overlaps(rollout: Rollout) -> None:
    """Before: ansible-playbook and ssh of the killed rollout ran on under PID 1 while the
    resumed rollout ran its own playbook on the same node."""
    proc = rollout.start(60)
    try:
        busy = wait_for(rollout.busy_node, 60, "the playbook's task running")
        before = playbook_processes(proc.pid)
        assert any("ansible-playbook" in c for _, c in before), before
    except BaseException:
        killed(proc)
        raise
    samples: list[tuple[float, set[int]]] = []
    stop = threading.Event()
    resumed_pid: list[int] = []

    def sample() -> None:  # which rollouts have playbook processes alive, every ~30 ms
        while not stop.is_set():
            alive = {pid for pid, _ in playbook_processes(None)} & {proc.pid, *resumed_pid}
            samples.append((time.monotonic(), alive))
            time.sleep(0.03)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.kill()
    proc.wait()
    killed_at = time.monotonic()
    again = rollout.start(0)  # at once, while the killed one's playbook may still be dying
    resumed_pid.append(again.pid)
    out = again.communicate(timeout=300)[0]
    stop.set()
    sampler.join()
    assert again.returncode == Exit.OK, out
    overlap = [t - killed_at for t, alive in samples if alive == {proc.pid, again.pid}]
    assert overlap == [], overlap
    gone = [t - killed_at for t, alive in samples if proc.pid not in alive and t > killed_at]
    assert gone and gone[0] < 5  # the guard killed them within moments
    assert playbook_processes(proc.pid) == []
    for pid, cmd in before:  # none of them survived, under PID 1 or anywhere
        assert not Path(f"/proc/{pid}").exists() or "ansible" not in Path(
            f"/proc/{pid}/cmdline").read_text(errors="replace"), (pid, cmd)
    assert rollout.history(busy)[-2:] == ["provisioning", "skipped"]
    assert rollout.runs()[0]["status"] == "succeeded"


# ============================================================ verify (simulated node, SSH)
def test_ctrl_c_in_verify_returns_in_2s_and_stops_the_remote_test(
        sim_node: Any, tmp_path: Path) -> None:
    """Before: Ctrl-C waited for the I/O test (its deadline can reach 20 minutes), and the
    remote command ran on, with its test file, after the channel closed."""
    node = sim_node("nvfs", ssh=True)
    site = node.exec("python3 -c 'import site; print(site.getsitepackages()[0])'").stdout.strip()
    node.exec("mkdir -p /opt/slow-io /var/tmp/gds-int")
    subprocess.run(["podman", "cp", str(SLOW_IO / "cupy"), f"{node.name}:/opt/slow-io/"],
                   check=True, capture_output=True)
    node.exec(f"echo 'import sys; sys.path.insert(0, \"/opt/slow-io\")' > "
              f"{shlex.quote(site)}/00-gdsfleet-slow-io.pth")
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        f"        {node.name}: {{ansible_host: 127.0.0.1, ansible_port: {node.ssh_port}, "
        f"ansible_user: root, ansible_ssh_private_key_file: {node.key_file}}}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner.cli", "verify", "-i", str(inv), "--known-hosts",
         str(node.known_hosts), "--ssh-config", "none", "--no-ledger", "--io-path",
         "/var/tmp/gds-int", "--io-size", "4M", "--io-timeout", "1200"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_for(lambda: node.exec("ls -A /var/tmp/gds-int", check=False).stdout.strip(), 120,
                 "the I/O test's file on the node")
        running = node.exec("pgrep -f 'size_[b]ytes'", check=False).stdout.split()
        assert running, "the remote I/O test is not running"
    except BaseException:
        killed(proc)
        raise
    out, took = signal_and_time(proc, signal.SIGINT)
    assert proc.returncode == 130, out
    assert took < 2, (took, out)
    wait_for(lambda: node.exec("pgrep -f 'size_[b]ytes'", check=False).returncode != 0, 5,
             "the remote I/O test gone")
    assert node.exec("ls -A /var/tmp/gds-int").stdout.strip() == ""  # test file removed
