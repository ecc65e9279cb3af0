"""``--executor ssh`` and ``provisioner exec-nodes check`` against real execution nodes.

The execution nodes are this machine reached through two real OpenSSH sshd processes on
loopback ports (started here, no container), with the ansible-runner of this virtual
environment as ``gdsfleet_exec_runner``; the targets are ``ansible_connection: local`` hosts
named 127.0.0.x. ansible-runner's streaming protocol (transmit / worker / process) is the one of
ansible-runner 2.4.3 (ansible/ansible-runner, src/ansible_runner/streaming.py, tag 2.4.3), as
installed in the virtual environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.rollout.executors.shard import ShardBy, shard_hosts
from provisioner.store import Ledger
from tests.harness.loopback_sshd import (
    BIN,
    SSHD,
    LoopbackExecNodes,
    exec_inventory,
    stand_in_collection,
)
from tests.harness.procs import pids_where, sample_cmdlines

needs_sshd = pytest.mark.skipif(
    not os.path.exists(SSHD) or os.geteuid() != 0 or shutil.which("ssh") is None,
    reason="needs OpenSSH's sshd and ssh (openssh-server/-client, scripts/setup.sh) and root",
)
CANARY = "gdsfleet-canary-7f3a9c"  # a secret that must never show in a cmdline or on a node
CANARY_FILE = "gdsfleet-filecanary-52be1d"

PLAYBOOK = """\
- name: Small play
  hosts: all
  gather_facts: false
  tasks:
    - name: Changes something
      ansible.builtin.command: "true"
      changed_when: true
    - name: Fails on one host
      ansible.builtin.fail:
        msg: "planned failure"
      when: inventory_hostname == '127.0.0.4'
    - name: Sees the secret without printing it
      ansible.builtin.assert:
        that:
          - api_token | length > 0
          - file_token | length > 0
        quiet: true
      no_log: true
    - name: Waits when asked
      ansible.builtin.command: "sleep {{ pause | default(0) }}"
      changed_when: false
"""

HOSTS = [f"127.0.0.{i}" for i in range(2, 8)]
# two racks that the stable hash places on different execution nodes (e1, e2)
RACKS = {h: ("rack-a", "rack-b")[i % 2] for i, h in enumerate(HOSTS)}


def _targets(root: Path) -> Path:
    inv = root / "targets.ini"
    lines = ["[gpu]"] + [f"{h} rack={RACKS[h]}" for h in HOSTS]
    lines += ["", "[all:vars]", "ansible_connection=local",
              f"ansible_python_interpreter={sys.executable}"]
    inv.write_text("\n".join(lines) + "\n")
    return inv


_collection = stand_in_collection  # names the tests of this family import
_exec_inventory = exec_inventory


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("execnodes")
    with LoopbackExecNodes(root, count=2, version="0.2.0") as nodes:
        (root / "play.yml").write_text(PLAYBOOK)
        (root / "secrets.yml").write_text(f"file_token: {CANARY_FILE}\n")
        yield {"root": root, "ports": nodes.ports,
               "targets": _targets(root), "exec": _exec_inventory(root, nodes.ports)}


@pytest.fixture
def env(lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller sees the same (empty) collections folder as the execution nodes
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(lab["root"] / "collections"))
    monkeypatch.setenv("HOME", str(lab["root"]))  # no operator's ~/.ssh/known_hosts
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)


def _rollout(lab: dict[str, Any], ledger: Path, *extra: str) -> int:
    return main(["rollout", "-i", str(lab["targets"]), "--playbook", str(lab["root"] /
                 "play.yml"), "--no-verify", "--waves", "all", "--max-failures", "100%",
                 "--ledger", str(ledger), "--known-hosts", str(lab["root"] / "known_hosts"),
                 "--ssh-config", "none", "-q", "-e", f"api_token={CANARY}",
                 "-e", f"@{lab['root'] / 'secrets.yml'}", "--allow-local-connection", *extra])


def _outcomes(ledger: Path) -> tuple[str, dict[str, str]]:
    with Ledger.open(ledger) as led:
        run = led.runs(kind="rollout", limit=1)[0]
        steps = led.node_steps(run["id"])
    return run["id"], {n: s["step"] for n, s in steps.items()}


# --------------------------------------------------------------------------- pure parts
def test_stable_hash_shards_and_var_keeps_a_rack_together() -> None:
    hosts = [f"n{i}" for i in range(40)]
    a = shard_hosts(hosts, ["e1", "e2"])
    assert a == shard_hosts(list(reversed(hosts))[::-1], ["e1", "e2"])
    assert sorted(h for s in a.values() for h in s) == sorted(hosts)
    assert set(a) == {"e1", "e2"}  # 40 hosts: both get some
    racks = {h: f"r{int(h[1:]) % 3}" for h in hosts}
    c = shard_hosts(hosts, ["e1", "e2"], ShardBy.parse("var:rack"), lambda h, v: racks[h])
    for shard in c.values():
        for h in shard:
            assert all(racks[o] != racks[h] for s in c.values() if s is not shard for o in s)
    with pytest.raises(UsageError, match="var:NAME"):
        ShardBy.parse("rack")


def test_shards_are_even_and_stay_put() -> None:
    """A wave lasts as long as its largest shard: plain rendezvous hashing put 53, 46, 47 and
    54 of these 200 hosts on four execution nodes (the K=4 fork-bound bench then took 0.353 of
    K=1 where 0.25 is the ideal); bounded loads give 50 each, whatever order the hosts and the
    execution nodes are listed in."""
    hosts = [f"bench-{i:04d}" for i in range(200)]
    nodes = ["exec-0", "exec-1", "exec-2", "exec-3"]
    a = shard_hosts(hosts, nodes)
    assert [len(s) for s in a.values()] == [50, 50, 50, 50]
    assert a == {n: sorted(s) for n, s in shard_hosts(hosts[::-1], nodes[::-1]).items()}
    assert all(len(s) in (66, 67) for s in shard_hosts(hosts, nodes[:3]).values())
    # dropping an execution node moves its own hosts and only a few others (3 of 150 here)
    b = shard_hosts(hosts, nodes[:3])
    moved = sum(1 for n in nodes[:3] for h in a[n] if h not in b[n])
    assert moved <= 10
    assert set(a["exec-3"]) <= {h for s in b.values() for h in s}
    # racks stay whole, and whole racks are spread as evenly as they allow
    racks = {h: f"r{i % 8}" for i, h in enumerate(hosts)}
    c = shard_hosts(hosts, nodes, ShardBy.parse("var:rack"), lambda h, v: racks[h])
    assert sorted(len(s) for s in c.values()) == [50, 50, 50, 50]
    assert all(len({racks[h] for h in s}) == 2 for s in c.values())
    # a rack bigger than an even share still goes whole, to the least loaded node
    racks = {h: ("big" if i < 120 else f"r{i % 4}") for i, h in enumerate(hosts)}
    d = shard_hosts(hosts, nodes, ShardBy.parse("var:rack"), lambda h, v: racks[h])
    assert max(len(s) for s in d.values()) == 120
    assert sorted(len(s) for s in d.values()) == [20, 20, 40, 120]
    # one host listed twice is placed once
    assert shard_hosts(["x", "y", "x"], ["e1"]) == {"e1": ["x", "y", "x"]}


def test_worker_info_parsed_and_bounded() -> None:
    from provisioner.rollout.executors.check import parse_worker_info

    info = parse_worker_info("{cpu_count: 2, errors: [], mem_in_bytes: 1024, "
                             "runner_version: 2.4.3, uuid: abc}\n")
    assert info["runner_version"] == "2.4.3" and info["cpu_count"] == 2
    with pytest.raises(ValueError):
        parse_worker_info("!!python/object:os.system {}")
    with pytest.raises(ValueError):
        parse_worker_info("[1, 2]")
    assert parse_worker_info("{runner_version: \"\\e[31mx\", cpu_count: -1}")["cpu_count"] is None
    # aliases nest without bound when printed: only scalars are taken
    bomb = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abc", "bcd", strict=True)) + "runner_version: *d\nerrors: [*d]\n"
    info = parse_worker_info(bomb)
    assert info["runner_version"] is None and info["errors"] == [None]


def test_shard_by_var_reads_group_and_host_vars(tmp_path: Path) -> None:
    from provisioner.inventory import load_inventory
    from provisioner.rollout.executors.shard import inventory_values

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    rack1:\n      vars: {rack: r1}\n      hosts:\n"
                   "        n1: {ansible_host: 127.0.0.2}\n        n2: {rack: r9}\n")
    value_of = inventory_values(load_inventory(inv).manager)
    assert value_of("n1", "rack") == "r1" and value_of("n2", "rack") == "r9"
    assert value_of("n1", "site") is None


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", ["missing", "empty", "unreadable", "nogroup"])
def test_bad_exec_inventory_is_refused_with_the_fix(tmp_path: Path, case: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.rollout.executors.ssh import load_exec_inventory

    path = tmp_path / "exec.ini"
    if case == "empty":
        path.write_text("")
    elif case == "unreadable":
        path.write_text("[gdsfleet_exec]\ne1 ansible_host=127.0.0.1\n")
        path.chmod(0)
        if os.geteuid() == 0:  # root reads any file: answer as an ordinary user's kernel would
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == path
                                else real(p, mode, **kw))
    elif case == "nogroup":
        path.write_text("[other]\ne1 ansible_host=127.0.0.1\n")
    with pytest.raises(UsageError) as err:
        load_exec_inventory(path)
    msg = str(err.value)
    assert "\n" not in msg and "--exec-inventory" in msg
    assert ("gdsfleet_exec" in msg) or ("permissions" in msg)


@needs_sshd
def test_unknown_host_key_refused_before_anything(lab: dict[str, Any], env: None,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.sqlite"
    rc = main(["rollout", "-i", str(lab["targets"]), "--playbook", str(lab["root"] / "play.yml"),
               "--no-verify", "--ledger", str(ledger), "--ssh-config", "none", "-q",
               "--executor", "ssh", "--exec-inventory", str(lab["exec"])])
    err = capsys.readouterr().err
    assert rc == 64
    assert "no known host key" in err and "--known-hosts" in err
    assert not ledger.exists()


@needs_sshd
def test_executor_options_need_each_other(lab: dict[str, Any], env: None, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _rollout(lab, tmp_path / "a.sqlite", "--executor", "ssh") == 64
    assert "needs --exec-inventory" in capsys.readouterr().err
    assert _rollout(lab, tmp_path / "b.sqlite", "--exec-inventory", str(lab["exec"])) == 64
    assert "only apply to --executor ssh" in capsys.readouterr().err
    assert not (tmp_path / "a.sqlite").exists() and not (tmp_path / "b.sqlite").exists()


# ---------------------------------------------------------------- exec-nodes check
@needs_sshd
def test_check_reports_each_node(lab: dict[str, Any], env: None,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["exec-nodes", "check", "--exec-inventory", str(lab["exec"]), "--known-hosts",
               str(lab["root"] / "known_hosts"), "--ssh-config", "none", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0, doc
    import ansible_runner.__main__ as arm
    from ansible.release import __version__ as core

    assert [n["name"] for n in doc["exec_nodes"]] == ["e1", "e2"]
    for n in doc["exec_nodes"]:
        assert n["reachable"] and not n["problems"]
        assert n["runner_version"] == arm.VERSION and n["ansible_core"] == core
        assert n["cpu_count"] >= 1 and n["mem_in_bytes"] > 0
        assert n["collection"] == "0.2.0" and len(n["collection_sha256"]) == 64


def _fake_runner(root: Path, version: str) -> Path:
    """A stand-in ansible-runner that reports another version (and cannot run jobs)."""
    fake = root / f"fake-bin-{version}" / "ansible-runner"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"print('{{cpu_count: 1, errors: [], mem_in_bytes: 1, "
                    f"runner_version: {version}, uuid: x}}')\n")
    fake.chmod(0o755)
    for tool in ("ansible-galaxy",):
        (fake.parent / tool).symlink_to(BIN / tool)
    return fake


@needs_sshd
def test_mismatched_or_missing_runner_refuses_the_rollout(
        lab: dict[str, Any], env: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    root: Path = lab["root"]
    bad = _exec_inventory(root, lab["ports"], str(_fake_runner(root, "1.0.0")), "bad.ini")
    rc = main(["exec-nodes", "check", "--exec-inventory", str(bad), "--known-hosts",
               str(root / "known_hosts"), "--ssh-config", "none"])
    out = capsys.readouterr().out
    assert rc == 1 and "e1: MISMATCH" in out and "ansible-runner 1.0.0" in out
    ledger = tmp_path / "l.sqlite"
    assert _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(bad)) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ansible-runner 1.0.0" in err[0] and "exec_node.yml" in err[0]
    assert not ledger.exists()
    other = _exec_inventory(root, lab["ports"], name="other.ini",
                            colls=_collection(tmp_path / "colls", "0.1.0"))
    assert _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(other)) == 64
    err = capsys.readouterr().err
    assert "gdsfleet.gds version 0.1.0 (controller: 0.2.0)" in err and "sha256" in err
    assert not ledger.exists()
    gone = _exec_inventory(root, lab["ports"], "/nonexistent/ansible-runner", "gone.ini")
    assert _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(gone)) == 64
    err = capsys.readouterr().err
    assert "did not run there" in err and "not found on the execution node" in err
    assert not ledger.exists()


# ------------------------------------------------------------------ rollouts through ssh
@needs_sshd
def test_ssh_executor_gives_the_local_outcomes_and_records_dispatches(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    seen: list[str] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_cmdlines, args=(seen, stop), daemon=True)
    sampler.start()
    try:
        rc_local = _rollout(lab, tmp_path / "local.sqlite")
        rc_ssh = _rollout(lab, tmp_path / "ssh.sqlite", "--executor", "ssh", "--exec-inventory",
                          str(lab["exec"]), "--forks-per-exec-node", "3",
                          "--shard-by", "var:rack")
    finally:
        stop.set()
        sampler.join()
    _, local = _outcomes(tmp_path / "local.sqlite")
    run_id, remote = _outcomes(tmp_path / "ssh.sqlite")
    # one wave of all (no canary), --max-failures 100%: a failure within the budget, exit 1
    assert local == remote and rc_local == rc_ssh == 1
    assert remote["127.0.0.4"] == "failed" and remote["127.0.0.2"] == "skipped"
    with Ledger.open(tmp_path / "ssh.sqlite") as led:
        rows = led.dispatches(run_id)
    assert {r["exec_node"] for r in rows} == {"e1", "e2"}
    assert all(r["state"] == "done" and r["token"].startswith(run_id) for r in rows)
    assert sorted(h for r in rows for h in r["hosts"]) == sorted(HOSTS)
    assert sorted(tuple(sorted({RACKS[h] for h in r["hosts"]})) for r in rows) == [
        ("rack-a",), ("rack-b",)]  # --shard-by var:rack: one rack per execution node
    # the secrets never showed in a command line, and nothing is left on the nodes
    assert seen, "the sampler saw no process"
    assert not [c for c in seen if CANARY in c or CANARY_FILE in c]
    # nothing of a job left on the execution nodes (the workdir's empty lock file stays)
    assert [p.name for p in (lab["root"] / "work").iterdir()] in ([], [".lock"])
    for f in tmp_path.rglob("*"):  # nor in the ledger or the runner folders here
        assert not f.is_file() or CANARY.encode() not in f.read_bytes(), f
    arts = list((tmp_path / "runner" / "artifacts").glob("*-s[01]"))
    assert len(arts) == 2 and all(oct(a.stat().st_mode & 0o777) == "0o700" for a in arts)
    for art in arts:  # the stream ended as the protocol says (the archive skipped, eof read)
        doc = json.loads((art / "hosts.json").read_text())
        assert doc["final_stats"] is True and doc["status"] in ("successful", "failed"), doc
        assert not (art / "command").exists()  # the worker's artifacts were not unpacked


def _worker_pids(workdir: Path) -> list[int]:
    return pids_where(lambda cmd: any(b"ansible-runner" in c for c in cmd[:2])
                      and b"worker" in cmd and str(workdir).encode() in b" ".join(cmd))


@needs_sshd
def test_killed_worker_leaves_its_hosts_lost(lab: dict[str, Any], env: None,
                                             tmp_path: Path) -> None:
    root: Path = lab["root"]
    one = _exec_inventory(root, lab["ports"][:1], name="one.ini")
    ledger = tmp_path / "k.sqlite"
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            pids = _worker_pids(root / "work")
            # the playbook is in its sleep task once the hosts' first results came
            if pids and list(root.glob("work/shard.*/artifacts/*")):
                time.sleep(4)  # the play is in its 20 s sleep by then
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    rc = _rollout(lab, ledger, "--executor", "ssh", "--exec-inventory", str(one),
                  "-e", "pause=20")
    t.join()
    assert killed, "the worker was never seen"
    run_id, steps = _outcomes(ledger)
    assert set(steps.values()) == {"lost"}, steps
    assert rc != 0
    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
    # one execution node: fenced (the killed worker's orphaned playbook with it), nowhere to
    # send the hosts again; they stay lost and the wave says why
    assert [r["state"] for r in rows] == ["abandoned"]
    assert rows[0]["detail"]["history"][-3:] == ["lost", "fenced", "abandoned"]
    from provisioner.rollout import guard

    assert not guard.tagged(rows[0]["token"])


@needs_sshd
def test_sigint_cuts_the_shards_at_once(lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    import subprocess

    root: Path = lab["root"]
    ledger = tmp_path / "i.sqlite"
    full = dict(os.environ)
    full["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    err = (tmp_path / "stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "rollout", "-i", str(lab["targets"]),
         "--playbook", str(root / "play.yml"), "--no-verify", "--waves", "all",
         "--ledger", str(ledger), "--known-hosts", str(root / "known_hosts"),
         "--ssh-config", "none", "-q", "-e", f"api_token={CANARY}",
         "-e", f"@{root / 'secrets.yml'}", "-e", "pause=30", "--executor", "ssh",
         "--exec-inventory", str(lab["exec"]), "--allow-local-connection"],
        env=full, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(root.glob("work/shard.*"))) < 2:
            time.sleep(0.1)
        time.sleep(3)  # both plays in their 30 s sleep
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        rc = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    assert rc == 130, (tmp_path / "stderr").read_text()
    assert took < 20  # generous: the plays still had over 20 s to sleep
    run_id, steps = _outcomes(ledger)
    assert set(steps.values()) == {"interrupted"}, steps
    from provisioner.rollout import guard

    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
    # every shard's ssh was cut and its dispatch closed, none left behind by the coordinator
    assert sorted(r["state"] for r in rows) == ["lost", "lost"]
    ours = str(lab["exec"]).encode()
    left = _our_ssh(root)
    assert not left, ours
    for row in rows:  # no fencing yet: stop what the workers left
        guard.sweep(row["token"])
    for pid in _worker_pids(root / "work"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _our_ssh(root: Path) -> list[int]:
    return pids_where(lambda cmd: cmd[0].endswith(b"/ssh")
                      and str(root / "work").encode() in b" ".join(cmd))


def test_dispatches_table_added_to_an_older_ledger_and_optional_read_only(
        tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("rollout", "fleet")
    con = sqlite3.connect(path)
    con.execute("DROP TABLE dispatches")  # a ledger written before the table existed
    con.commit()
    con.close()
    with Ledger.open(path, read_only=True) as led:  # status, history, report: still open
        assert led.dispatches(run) == []
    with Ledger.open(path) as led:  # the next write open adds it
        did = led.record_dispatch(run, 0, 1, "e1", "tok", None, "dispatching", ["n1"])
        led.update_dispatch(did, "done", {"ssh_rc": 0})
        rows = led.dispatches(run)
    assert [(r["exec_node"], r["state"], r["hosts"], r["detail"]) for r in rows] == [
        ("e1", "done", ["n1"], {"ssh_rc": 0})]


def hostile_archive(outside: Path) -> bytes:
    """A zip holding a symbolic link ``link -> outside`` and a file ``link/pwned`` written
    through it (the archive layout of ansible-runner 2.4.3's stream_dir,
    src/ansible_runner/utils/streaming.py, tag 2.4.3)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        link = zipfile.ZipInfo("link")
        link.create_system = 3
        link.external_attr = (0o777 | 0xA000) << 16
        zf.writestr(link, str(outside))
        zf.writestr("link/pwned", "written through the link")
    return buf.getvalue()


def _hostile_stream(outside: Path) -> bytes:
    """A worker stream whose artifacts archive is :func:`hostile_archive`."""
    import base64

    raw = hostile_archive(outside)
    return (json.dumps({"status": "successful"}).encode() + b"\n"
            + json.dumps({"zipfile": len(raw)}).encode() + b"\n" + base64.b64encode(raw)
            + json.dumps({"eof": True}).encode() + b"\n")


@pytest.mark.parametrize("guarded", [True, False])
def test_worker_archive_is_never_unpacked(tmp_path: Path, guarded: bool) -> None:
    import io

    import ansible_runner

    from provisioner.rollout.executors.ssh import _BoundedReader

    outside = tmp_path / "outside"
    outside.mkdir()
    stream: Any = io.BytesIO(_hostile_stream(outside))
    statuses: list[str] = []
    ansible_runner.run(streamer="process", _input=_BoundedReader(stream) if guarded else stream,
                       private_data_dir=str(tmp_path / "pdd"), ident="x", quiet=True,
                       status_handler=lambda d, runner_config=None: statuses.append(d["status"]),
                       # without one, ansible-runner leaves its own SIGINT/SIGTERM handlers
                       # installed for the rest of this worker's tests
                       cancel_callback=lambda: False)
    if guarded:
        assert not (outside / "pwned").exists()
        assert statuses == ["successful"]  # the eof after the archive was read
    else:  # what ansible-runner does with it unguarded: the reason for the guard
        assert (outside / "pwned").exists()
