"""Fencing an execution node by token, and a lost shard's redispatch (issue 14, part 3).

Execution nodes are this machine reached through real OpenSSH sshd processes on loopback (the
``lab`` of test_exec_nodes, no container). A "dead" execution node is a loopback port where
nothing listens. A worker whose stream is cut is a stand-in ansible-runner
(``_cutting_runner``) that passes the real worker's first lines through and then dies, leaving
the real worker and its playbook behind, as a crashed or killed worker would.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.rollout import guard
from provisioner.rollout.executors.fence import fence, worker_script
from provisioner.rollout.executors.ssh import ExecNode, SshExecutor, SshOptions
from provisioner.store import Ledger
from tests.harness.loopback_sshd import free_port as _free_port
from tests.harness.procs import pids_where
from tests.unit import test_exec_nodes as base
from tests.unit.test_exec_nodes import (
    BIN,
    CANARY,
    CANARY_FILE,
    HOSTS,
    _exec_inventory,
    _outcomes,
    _rollout,
    needs_sshd,
)

lab = base.lab  # the fixtures of test_exec_nodes: two sshd on loopback, no operator's HOME
env = base.env


def _node(lab: dict[str, Any], name: str, port: int, runner: Path | None = None) -> ExecNode:
    root: Path = lab["root"]
    return ExecNode(name=name, host="127.0.0.1", port=port, user="root",
                    key_file=str(root / "client_key"),
                    runner=str(runner or BIN / "ansible-runner"), workdir=str(root / "work"),
                    collections_path=str(root / "collections"))


def _executor(lab: dict[str, Any], nodes: list[ExecNode], tmp_path: Path,
              ledger: Any = None) -> SshExecutor:
    """An executor whose known_hosts also names the dead ports (with the lab's host key)."""
    root: Path = lab["root"]
    pub = (root / "host_key.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(f"[127.0.0.1]:{n.port} {pub[0]} {pub[1]}\n" for n in nodes))
    return SshExecutor(nodes, opts=SshOptions(known_hosts=(str(kh),), ssh_config=None,
                                              connect_timeout=2), ledger=ledger)


def _sleeper(token: str | None) -> subprocess.Popen[bytes]:
    environ = {k: v for k, v in os.environ.items() if k != guard.TOKEN_ENV}
    if token is not None:
        environ[guard.TOKEN_ENV] = token
    return subprocess.Popen(["sleep", "300"], env=environ, start_new_session=True)


# ------------------------------------------------------------------------------- fence
@needs_sshd
def test_fence_kills_the_tagged_processes_and_leaves_the_others(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    token = "run1.123.abcdef"  # noqa: S105 - a tag
    tagged = [_sleeper(token), _sleeper(token)]
    other = _sleeper(token + "0")  # a token that starts with this one's text: not ours
    plain = _sleeper(None)
    ex = _executor(lab, [_node(lab, "e1", lab["ports"][0])], tmp_path)
    try:
        res = fence(ex.nodes["e1"], token, ex.argv, connect_timeout=5)
        assert res.state == "fenced" and res.killed == 2 and res.left == 0, res
        for p in tagged:
            assert p.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None and plain.poll() is None
        again = fence(ex.nodes["e1"], token, ex.argv, connect_timeout=5)
        assert (again.state, again.killed) == ("fenced", 0)
    finally:
        ex.close()
        for p in (*tagged, other, plain):
            with contextlib.suppress(OSError):
                p.kill()
            p.wait()


@needs_sshd
def test_fence_of_a_dead_node_says_unreachable(lab: dict[str, Any], env: None,
                                              tmp_path: Path) -> None:
    ex = _executor(lab, [_node(lab, "gone", _free_port())], tmp_path)
    try:
        res = fence(ex.nodes["gone"], "run1.1.abc", ex.argv, connect_timeout=2)
    finally:
        ex.close()
    assert res.state == "unreachable" and "ssh rc=255" in res.detail


def test_token_must_be_a_plain_word() -> None:
    with pytest.raises(ValueError):
        worker_script('"$R" worker', "x; rm -rf /", 10)


def test_worker_side_sweeps_what_the_worker_left_and_keeps_its_status(tmp_path: Path) -> None:
    """The worker-side wrapper (no ssh): a 'worker' that leaves a tagged sleeper behind in a
    session of its own and exits 3; the wrapper kills the sleeper, removes the job folder and
    exits 3. A second one over its time limit is stopped by timeout (124)."""
    token = "run2.9.feed"  # noqa: S105 - a tag
    job = tmp_path / "job"
    job.mkdir()
    leave = f"setsid sleep 300 & echo $! > {tmp_path}/pid; exit 3"
    script = f"D={job}; " + worker_script(f"sh -c '{leave}'", token, 60)
    rc = subprocess.run(["sh", "-c", script], check=False, timeout=60).returncode
    assert rc == 3
    pid = int((tmp_path / "pid").read_text())
    assert pid not in guard.tagged(token) and not job.exists()
    job.mkdir()
    started = time.monotonic()
    rc = subprocess.run(["sh", "-c", f"D={job}; " + worker_script("sleep 300", token, 1)],
                        check=False, timeout=60).returncode
    assert rc == 124 and time.monotonic() - started < 30 and not job.exists()


def test_worker_side_sweep_stops_the_jobs_ssh_control_masters(tmp_path: Path) -> None:
    """Ansible's ssh ControlPersist masters outlive the play, and OpenSSH writes its title
    ("ssh: <control path> [mux]") over its argv and environment, so the token is gone from
    /proc/PID/environ. A master left from a partitioned job held a dead connection, and the
    next job's ssh to that node through the same control path hung until its deadline (found
    by the execution-node partition test). The job now gets a control folder of its own,
    named by its token, and the sweep also stops what names that folder."""
    from provisioner.rollout.executors.fence import control_dir, sweep_command

    token = "run3.7.c0ffee"  # noqa: S105 - a tag
    job = tmp_path / "job"
    job.mkdir()
    # what the worker is given, and a stand-in master: argv[0] as OpenSSH titles it, no
    # token in its environment (`env -u`), its own session, reparented
    leave = ("echo \"$ANSIBLE_SSH_CONTROL_PATH_DIR\" > " + f"{tmp_path}/cpdir; " +
             "env -u GDSFLEET_PLAYBOOK_TOKEN setsid bash -c 'exec -a \"ssh: "
             "$ANSIBLE_SSH_CONTROL_PATH_DIR/0f9ae259c7 [mux]\" sleep 300' & "
             f"echo $! > {tmp_path}/pid; sleep 0.5; exit 0")
    script = f"D={job}; " + worker_script(f"sh -c '{_sq(leave)}'", token, 60)
    rc = subprocess.run(["bash", "-c", script], check=False, timeout=60).returncode
    cpdir = Path((tmp_path / "cpdir").read_text().strip())
    assert rc == 0 and cpdir == tmp_path / control_dir(token) and not cpdir.exists()
    pid = int((tmp_path / "pid").read_text())
    # before: the master stayed (its environment shows no token), with its dead connection
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid
    assert control_dir(token) in sweep_command(token)


@needs_sshd
def test_a_real_openssh_control_master_hides_the_token_and_the_sweep_still_stops_it(
        lab: dict[str, Any], tmp_path: Path) -> None:
    """The upstream fact the sweep's second test rests on, checked against this machine's real
    OpenSSH: a ControlPersist master titles itself ``setproctitle("%s [mux]",
    options.control_path)`` (openssh/openssh-portable, ssh.c, control_persist_detach; this
    machine's OpenSSH is 9.2p1, Debian 12's), and on Linux that title is written over the argv
    and environment area (openbsd-compat/setproctitle.c, SPT_REUSEARGV), so /proc/PID/environ no
    longer shows the token the master started with. Its command line names its control
    folder, and the job's sweep stops it by that."""
    from provisioner.rollout.executors.fence import control_dir, sweep_command

    token = "run4.2.5eed"  # noqa: S105 - a tag
    root: Path = lab["root"]
    port = lab["ports"][0]
    pub = (root / "host_key.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    short = Path(tempfile.mkdtemp(prefix="gf", dir="/tmp"))  # a socket path has 108 bytes
    cp = short / control_dir(token)
    cp.mkdir(mode=0o700)
    argv = ["ssh", "-F", "none", "-i", str(root / "client_key"), "-p", str(port),
            "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", "ControlPersist=120",
            "-o", f"ControlPath={cp}/m", "root@127.0.0.1", "true"]
    proc = subprocess.run(argv, env={**os.environ, guard.TOKEN_ENV: token}, check=False,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    masters = pids_where(lambda a: a[0].startswith(f"ssh: {cp}/".encode()))
    try:
        assert len(masters) == 1, masters
        # the token it started with is gone from its environment: what made the sweep miss it
        assert masters[0] not in guard.tagged(token)
        out = subprocess.run(["sh", "-c", sweep_command(token, 3)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        assert '"killed": 1' in out and '"left": 0' in out, out
        deadline = time.monotonic() + 10
        while Path(f"/proc/{masters[0]}").exists() and not _zombie(masters[0]):
            assert time.monotonic() < deadline, "the master survived the sweep"
            time.sleep(0.05)
    finally:
        for pid in masters:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(short, ignore_errors=True)


def _sq(text: str) -> str:
    """``text`` inside a single-quoted shell word."""
    return text.replace("'", "'\\''")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_worker_side_removes_job_folders_that_dead_workers_left(tmp_path: Path) -> None:
    """A job folder whose wrapper died with its execution node (killed, rebooted: the fence
    never ran there) holds the job's extra vars; the next dispatch to that node removes it,
    and keeps a folder whose job still runs (tests/fleet/test_exec_nodes_fleet.py found the
    first after a `podman kill` of an execution node)."""
    from provisioner.rollout.executors.ssh import worker_command

    work = tmp_path / "work"
    stale = work / "shard.deadAAAA"
    (stale / "env").mkdir(parents=True)
    (stale / "env" / "extravars").write_text(f'{{"api_token": "{CANARY}"}}')
    # the dead job's ssh control folder (its masters' sockets), named in its lock file
    (work / "shard.deadAAAA.lock").write_text("cp.dead0001\n")
    (work / "cp.dead0001").mkdir()
    (work / "cp.dead0001" / "3c1a2b").write_text("")
    # a lock whose folder is gone (worker --delete) naming a control folder, and one whose
    # name is not ours: nothing outside the workdir's cp.* folders is removed
    (work / "shard.goneCCCC.lock").write_text("cp.gone0002\n")
    (work / "cp.gone0002").mkdir()
    (work / "shard.evilDDDD").mkdir()
    (work / "shard.evilDDDD.lock").write_text("cp./../keep\n")
    (tmp_path / "keep").mkdir()
    live = work / "shard.liveBBBB"
    live.mkdir()
    lock = work / "shard.liveBBBB.lock"
    lock.write_text("cp.live0003\n")
    (work / "cp.live0003").mkdir()
    holder = subprocess.Popen(["flock", str(lock), "sleep", "60"])  # a job that still runs
    try:
        _wait_for(lambda: _locked(lock), 10)
        node = ExecNode(name="e1", host="127.0.0.1", runner="true", workdir=str(work))
        rc = subprocess.run(["sh", "-c", worker_command(node, "run3.1.cafe", 30)],
                            check=False, timeout=60).returncode
        assert rc == 0
        assert not stale.exists()
        assert live.is_dir()
        assert sorted(p.name for p in work.iterdir() if p.name.startswith("shard.")) == [
            live.name, lock.name]
        # the dead jobs' control folders went with them; the live job's and this job's own
        # (removed at its end) are not left behind, and the hostile name removed nothing
        assert sorted(p.name for p in work.iterdir() if p.name.startswith("cp.")) == [
            "cp.live0003"]
        assert (tmp_path / "keep").is_dir()
    finally:
        holder.kill()
        holder.wait()


def _locked(path: Path) -> bool:
    return subprocess.run(["flock", "-n", str(path), "true"], check=False).returncode != 0


def _wait_for(pred: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# ----------------------------------------------------------------------------- recovery
def _cutting_runner(root: Path, lines: int) -> Path:
    """Stand-in ansible-runner: ``worker`` runs the real one and passes its first ``lines``
    lines on, then exits at once (the real worker and its playbook are left running, tagged);
    everything else (``--worker-info``) is the real one."""
    fake = root / "cut-bin" / "ansible-runner"
    if fake.exists():
        return fake
    fake.parent.mkdir()
    real = BIN / "ansible-runner"
    fake.write_text(
        f"#!{sys.executable}\nimport os, subprocess, sys\nreal = {str(real)!r}\n"
        "if sys.argv[1:2] == ['worker'] and '--worker-info' not in sys.argv:\n"
        "    p = subprocess.Popen([real, *sys.argv[1:]], stdout=subprocess.PIPE)\n"
        f"    for i, line in enumerate(p.stdout):\n"
        "        sys.stdout.buffer.write(line)\n"
        "        sys.stdout.buffer.flush()\n"
        f"        if i + 1 >= {lines}:\n"
        "            break\n"
        "    os._exit(1)\n"
        "os.execv(real, [real, *sys.argv[1:]])\n")
    fake.chmod(0o755)
    for tool in BIN.iterdir():
        if tool.name != "ansible-runner" and not (fake.parent / tool.name).exists():
            (fake.parent / tool.name).symlink_to(tool)
    return fake


@needs_sshd
def test_cut_stream_is_fenced_and_redispatched_to_the_other_node(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    root: Path = lab["root"]
    exec_inv = _exec_inventory(root, lab["ports"], name="cut.ini")
    text = exec_inv.read_text().splitlines()
    # e1's worker is cut after its first 12 lines (some events, never the stats)
    text[1] = text[1].replace(f"gdsfleet_exec_runner={BIN / 'ansible-runner'}",
                              f"gdsfleet_exec_runner={_cutting_runner(root, 12)}")
    exec_inv.write_text("\n".join(text) + "\n")
    rc_local = _rollout(lab, tmp_path / "local.sqlite")
    rc = _rollout(lab, tmp_path / "ssh.sqlite", "--executor", "ssh", "--exec-inventory",
                  str(exec_inv))
    _, local = _outcomes(tmp_path / "local.sqlite")
    run_id, remote = _outcomes(tmp_path / "ssh.sqlite")
    assert remote == local and rc == rc_local, (remote, local)
    assert "lost" not in remote.values()
    with Ledger.open(tmp_path / "ssh.sqlite") as led:
        rows = led.dispatches(run_id)
    cut = [r for r in rows if r["exec_node"] == "e1"]
    assert cut and all(r["state"] == "redispatched" for r in cut), rows
    for r in cut:
        hist = r["detail"]["history"]
        assert hist[hist.index("lost"):] == ["lost", "fenced", "redispatched"], hist
        again = next(x for x in rows if x["id"] == r["detail"]["redispatched_to"]["id"])
        assert again["exec_node"] == "e2" and again["state"] == "done"
        assert again["hosts"] == r["hosts"] and again["detail"]["redispatch_of"] == r["id"]
        assert again["token"] != r["token"] and not guard.tagged(r["token"])
    # nothing of a job left on the execution nodes (the workdir's empty lock file stays)
    assert [p.name for p in (root / "work").iterdir()] in ([], [".lock"])


def _extravars(lab: dict[str, Any]) -> dict[str, str]:
    return {"api_token": CANARY, "file_token": CANARY_FILE}


def _run(ex: SshExecutor, lab: dict[str, Any], run_id: str, timeout: int) -> Any:
    return ex.run(str(lab["root"] / "play.yml"), lab["targets"], HOSTS, forks=5,
                  extravars=_extravars(lab), envvars={}, private_data_dir=None,
                  on_host_event=None, timeout=timeout, children_lock=None, run_tag=run_id,
                  wave=1, kind="provision")


def _deadline_for_the_whole_play(lab: dict[str, Any]) -> int:
    """Seconds of shard deadline in which the surviving execution node runs the whole play
    (its worker, ansible-playbook and four tasks on three hosts) here and now: 8 times what a
    syntax check of the play takes (about 5 times is the whole run's share), at least the 12 s
    this test used whatever the load, at most 120. The dead node's hosts are sent again only
    after that deadline and then get the same one: a fixed 12 s on a machine at load 25 cut
    the redispatched run and left its hosts lost."""
    t0 = time.monotonic()
    subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(lab["targets"]),
                    str(lab["root"] / "play.yml")], capture_output=True, text=True, timeout=300,
                   check=True)
    return min(120, max(12, round(8 * (time.monotonic() - t0))))


@needs_sshd
def test_unreachable_node_waits_for_the_deadline_before_the_redispatch(
        lab: dict[str, Any], env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.rollout.executors import fence as fence_mod

    monkeypatch.setattr(fence_mod, "KILL_AFTER_S", 1)
    monkeypatch.setattr(fence_mod, "SWEEP_MARGIN_S", 1)
    nodes = [_node(lab, "dead", _free_port()), _node(lab, "e2", lab["ports"][1])]
    with Ledger.open(tmp_path / "l.sqlite") as led:
        run_id = led.start_run("rollout", "fleet")
        ex = _executor(lab, nodes, tmp_path, ledger=led)
        sent: list[tuple[float, str, list[str]]] = []
        real = ex.dispatch_one

        def spy(index: int, node: str, hosts: list[str], call: Any, detail: Any = None) -> Any:
            sent.append((time.time(), node, list(hosts)))
            return real(index, node, hosts, call, detail)

        monkeypatch.setattr(ex, "dispatch_one", spy)
        try:
            res = _run(ex, lab, run_id, timeout=_deadline_for_the_whole_play(lab))
        finally:
            ex.close()
        rows = led.dispatches(run_id)
    dead = [r for r in rows if r["exec_node"] == "dead"]
    assert len(dead) == 1 and len(sent) == 3, rows
    hist = dead[0]["detail"]["history"]
    assert hist[-4:] == ["unreachable", "awaiting-deadline", "deadline-passed", "redispatched"]
    deadline = calendar.timegm(time.strptime(dead[0]["deadline"], "%Y-%m-%dT%H:%M:%SZ"))
    again = [x for x in sent if x[2] == dead[0]["hosts"] and x[1] == "e2"]
    assert len(again) == 1 and again[0][0] >= deadline  # not sent again before the deadline
    assert all(o.status.value != "lost" for o in res.hosts.values()), res.hosts


@needs_sshd
def test_second_loss_in_a_wave_stops_with_the_hosts_lost(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    nodes = [_node(lab, "d1", _free_port()), _node(lab, "d2", _free_port())]
    with Ledger.open(tmp_path / "l.sqlite") as led:
        run_id = led.start_run("rollout", "fleet")
        ex = _executor(lab, nodes, tmp_path, ledger=led)
        try:
            res = _run(ex, lab, run_id, timeout=600)
        finally:
            ex.close()
        rows = led.dispatches(run_id)
    assert "execution node lost: " in (res.error or "")
    assert {o.status.value for o in res.hosts.values()} == {"lost"}
    for o in res.hosts.values():  # what the rollout shows for each host
        msg = o.message or ""
        assert msg.startswith("execution node lost: ") and "d1" in msg and "d2" in msg, msg
    assert sorted(h for r in rows for h in r["hosts"]) == sorted(HOSTS)  # no redispatch row
    assert [r["state"] for r in rows] == ["abandoned", "abandoned"]
    # the first loss waits for its deadline (it cannot be fenced); the second ends that wait
    assert sorted(r["detail"]["history"][-2] for r in rows) == [
        "awaiting-deadline", "fence-unreachable"], rows


def _worker_ssh(port: int) -> list[int]:
    """PIDs of the coordinator's ssh clients carrying a worker to the execution node on
    ``port`` (not a fence's)."""
    return pids_where(lambda cmd: cmd[0].endswith(b"/ssh") and str(port).encode() in cmd
                      and any(b" worker --private-data-dir" in c for c in cmd))


@needs_sshd
def test_killed_ssh_mid_play_is_fenced_for_real_then_redispatched(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    """e1's ssh killed while both plays sleep: its worker and playbook run on there until the
    fence kills them (the 15 s sleep keeps them running past the cut); its hosts then run
    again on e2."""
    import threading

    root: Path = lab["root"]
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not killed:
            pids = _worker_ssh(lab["ports"][0])
            if pids and len(list(root.glob("work/shard.*/artifacts/*"))) >= 2:
                time.sleep(4)  # both plays are in their 15 s sleep by then
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    ledger = tmp_path / "k.sqlite"
    _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(lab["exec"]),
             "-e", "pause=15")
    t.join()
    assert killed, "e1's ssh was never seen"
    run_id, steps = _outcomes(ledger)
    assert "lost" not in steps.values() and steps["127.0.0.4"] == "failed", steps
    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
    cut = [r for r in rows if r["exec_node"] == "e1" and r["state"] == "redispatched"]
    assert len(cut) == 1, rows
    hist = cut[0]["detail"]["history"]
    assert hist[hist.index("lost"):] == ["lost", "fenced", "redispatched"], hist
    # the worker and its playbook ran on after their ssh was cut: the fence killed them
    assert cut[0]["detail"]["killed"] >= 1 and cut[0]["detail"]["left"] == 0
    assert not guard.tagged(cut[0]["token"])
    again = next(x for x in rows if x["id"] == cut[0]["detail"]["redispatched_to"]["id"])
    assert again["exec_node"] == "e2" and again["state"] == "done"


@needs_sshd
def test_exec_nodes_fence_kills_what_a_runs_unfinished_dispatches_left(
        lab: dict[str, Any], env: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from provisioner.cli import main

    ledger = tmp_path / "l.sqlite"
    with Ledger.open(ledger) as led:
        run_id = led.start_run("rollout", "fleet")
        open_tok, done_tok = f"{run_id}.1.aaaa", f"{run_id}.1.bbbb"
        led.record_dispatch(run_id, 1, 0, "e1", open_tok, None, "running", ["n1"])
        done = led.record_dispatch(run_id, 1, 1, "e2", done_tok, None, "dispatching", ["n2"])
        led.update_dispatch(done, "done")
    left, ended = _sleeper(open_tok), _sleeper(done_tok)
    common = ["exec-nodes", "fence", "--exec-inventory", str(lab["exec"]), "--known-hosts",
              str(lab["root"] / "known_hosts"), "--ssh-config", "none", "--ledger", str(ledger)]
    try:
        rc = main([*common, "--run", run_id, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert rc == 0, doc
        # the coordinator's kill -9 left a "running" row: its processes are killed; a "done"
        # row's worker swept its own, so a process with its token is not the fence's business
        assert [(d["exec_node"], d["was"], d["fence"], d["killed"]) for d in doc["dispatches"]
                ] == [("e1", "running", "fenced", 1)]
        assert left.wait(timeout=10) == -signal.SIGKILL and ended.poll() is None
        assert main(common) == 64
        assert "needs --run" in capsys.readouterr().err
        assert main([*common, "--run", "20990101T000000Z-abcdef"]) == 64
        assert "no such run" in capsys.readouterr().err
    finally:
        for p in (left, ended):
            with contextlib.suppress(OSError):
                p.kill()
            p.wait()


@needs_sshd
def test_a_fault_while_recovering_leaves_the_hosts_lost_and_says_so(
        lab: dict[str, Any], env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.rollout.executors import fence as fence_mod

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("fence blew up")

    monkeypatch.setattr(fence_mod, "fence", broken)
    nodes = [_node(lab, "d1", _free_port())]
    ex = _executor(lab, nodes, tmp_path)
    try:
        res = _run(ex, lab, "", timeout=600)
    finally:
        ex.close()
    assert {o.status.value for o in res.hosts.values()} == {"lost"}
    assert all("recovery failed: RuntimeError: fence blew up" in (o.message or "")
               for o in res.hosts.values()), res.hosts
