"""Fault injection: errors and exit codes, read-only commands, SSH and inputs (issue 8).

Each test reproduces one fault an operator met and asserts the outcome. They run in-process
through ``provisioner.cli.main`` (what the console script calls) unless a real process or a
filesystem is the point. Cases that need root (tmpfs, read-only mounts) skip without it.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.errors import ConnectError, InventoryError, LedgerError
from provisioner.exitcodes import Exit
from provisioner.remote import load_script
from provisioner.store import Ledger

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- helpers
def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()  # nothing listens there any more: connections are refused
    return port


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str) -> None:
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)


def inventory(tmp_path: Path, text: str | None = None) -> Path:
    inv = tmp_path / "hosts.yml"
    inv.write_text(text or (
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        n1: {ansible_host: 127.0.0.1, ansible_port: 2991}\n"
        "        n2: {ansible_host: 127.0.0.1, ansible_port: 2992}\n"))
    return inv


def make_ledger(path: Path) -> None:
    with Ledger.open(path) as ledger:
        run = ledger.start_run("verify", "f")
        ledger.record_verification(run, {"name": "n1", "reachable": True, "compliant": True,
                                         "route": "nvfs", "checks": []}, step="verified")
        ledger.finish_run(run, "compliant")


def root_mounts() -> bool:
    return os.geteuid() == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """``tmpfs(size)`` mounts a small tmpfs (root only) and unmounts it afterwards."""
    if not root_mounts():
        pytest.skip("needs root to mount a tmpfs")
    mounted: list[Path] = []

    def make(size: str, name: str = "mnt") -> Path:
        d = tmp_path / name
        d.mkdir()
        # mode=0700: a tmpfs is 1777 by default, a ledger folder the provisioner refuses
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                            str(d)],
                           capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield make
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], check=False)


# ============================================================ errors and exit codes
def test_unreachable_postgresql_status_exits_ledger_code_with_masked_password(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://ops:hunter2@127.0.0.1:{closed_port()}/gds"
    code, out, err = cli(capsys, "status", "--ledger", url)
    # before: exit 1 ("not compliant")
    assert code == Exit.LEDGER == 74
    assert_one_line(err)
    assert "hunter2" not in err + out and "ops:***@" in err and "refused" in err.lower()


def test_unreachable_postgresql_during_rollout(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    url = f"postgresql+psycopg://ops:hunter2@127.0.0.1:{closed_port()}/gds"
    code, _, err = cli(capsys, "rollout", "-i", str(inventory(tmp_path)), "--ledger", url)
    # before: a psycopg OperationalError traceback from the fleet lock, exit 1
    assert code == Exit.LEDGER
    assert_one_line(err)
    assert "fleet lock" in err and "hunter2" not in err


@pytest.mark.parametrize("command", [["status"], ["history", "n1"]])
def test_unknown_schema_version_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           command: list[str]) -> None:
    db = tmp_path / "ledger.sqlite"
    make_ledger(db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE ledger_meta SET value='one' WHERE key='schema_version'")
    code, _, err = cli(capsys, *command, "--ledger", str(db))
    # before: ValueError traceback (int('one')), exit 1
    assert code == Exit.LEDGER
    assert_one_line(err)
    assert "unknown schema version 'one'" in err
    with pytest.raises(LedgerError, match="unknown schema version"):
        Ledger.open(db)  # the writers (verify, rollout) refuse it too


def test_foreign_sqlite_file_is_refused_and_left_untouched(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    db = tmp_path / "other-app.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE invoices (id INTEGER)")
    before = db.read_bytes()
    code, _, err = cli(capsys, "status", "--ledger", str(db))
    assert code == Exit.LEDGER and "not a gdsfleet ledger" in err
    assert_one_line(err)
    with pytest.raises(LedgerError, match="not a gdsfleet ledger"):
        Ledger.open(db)  # before: our tables were created inside the other database
    with sqlite3.connect(db) as c:
        names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert names == {"invoices"}
    assert db.read_bytes() == before


def test_corrupt_sqlite_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    db.write_bytes(b"this is not a database\n" * 300)
    code, _, err = cli(capsys, "status", "--ledger", str(db))
    assert code == Exit.LEDGER and "not a database" in err
    assert_one_line(err)


def test_unexpected_error_exits_70_and_the_traceback_goes_to_a_private_log(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.commands import status

    def boom(_args: Any) -> int:
        raise RuntimeError("simulated bug deep inside")

    monkeypatch.setattr(status, "run", boom)
    code, _, err = cli(capsys, "status", "--ledger", str(tmp_path / "x.sqlite"))
    assert code == Exit.INTERNAL == 70
    assert_one_line(err)
    log = tmp_path / "state" / "gdsfleet" / "debug.log"
    assert str(log) in err and "simulated bug deep inside" in err
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "def boom" not in err
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


def test_no_traceback_from_a_real_process(tmp_path: Path) -> None:
    """The console script, end to end: an unwritable --json path and a broken ledger."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    exe = [sys.executable, "-m", "provisioner.cli"]
    bad = tmp_path / "ledger.sqlite"
    bad.write_bytes(b"garbage" * 100)
    for argv, want in (
        (["status", "--ledger", str(bad)], Exit.LEDGER),
        (["verify", "--local", "--no-io-test", "--ledger", str(tmp_path / "l.sqlite"),
          "--json", str(bad / "r.json")], Exit.USAGE),
    ):
        r = subprocess.run(exe + argv, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == want, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ============================================================ report paths checked first
@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_report_path_checked_before_any_work(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, option: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.commands import verify

    touched: list[str] = []
    monkeypatch.setattr(verify, "verify_one", lambda *a, **k: touched.append("node") or {})
    ledger = tmp_path / "ledger.sqlite"
    (tmp_path / "a-file").write_text("x")
    for target in (tmp_path / "a-file" / "r.out", tmp_path):
        code, _, err = cli(capsys, "verify", "-i", str(inventory(tmp_path)), "--ledger",
                           str(ledger), option, str(target))
        # before: every node verified and recorded, then a traceback on the report path
        assert code == Exit.USAGE, err
        assert option in err
        assert_one_line(err)
    assert touched == [] and not ledger.exists()


def test_plan_and_rollout_check_report_paths(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    # a missing directory is fine (the writers create it); a path below a file is not
    for cmd in (["plan"], ["rollout"]):
        code, _, err = cli(capsys, *cmd, "-i", inv, "--ledger", str(tmp_path / "l.sqlite"),
                           "--json", str(tmp_path / "hosts.yml" / "plan.json"))
        assert code == Exit.USAGE and "is not a directory" in err
    assert not (tmp_path / "l.sqlite").exists()


# ============================================================ read-only commands
@pytest.mark.parametrize("command", [["status"], ["status", "--fail-on-drift"],
                                     ["history", "n1"]])
def test_mistyped_ledger_path_fails_and_creates_nothing(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path,
                                                        command: list[str]) -> None:
    typo = tmp_path / "ledgre" / "ledger.sqlite"
    code, _, err = cli(capsys, *command, "--ledger", str(typo))
    # before: created the directory and an empty ledger, exit 0
    assert code == Exit.LEDGER
    assert "does not exist" in err
    assert not typo.exists() and not typo.parent.exists()


def test_plan_with_no_ledger_yet_creates_nothing(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    ledger = tmp_path / "new" / "ledger.sqlite"
    code, _, _ = cli(capsys, "plan", "-i", str(inventory(tmp_path)), "--ledger", str(ledger))
    assert code == Exit.OK
    assert not ledger.parent.exists()


def test_read_only_commands_never_write_an_existing_ledger(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    make_ledger(db)
    # The ledger file must stay byte for byte the same (no schema, no row, no header change).
    # SQLite's own WAL index (-shm, -wal, empty) may appear beside a WAL database in a writable
    # directory, as for any sqlite3 reader; on a read-only filesystem it does not (next test).
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for argv in (["status"], ["history", "n1"], ["status", "--json"]):
        code, out, _ = cli(capsys, *argv, "--ledger", str(db))
        assert code == Exit.OK and "n1" in out
    code, _, _ = cli(capsys, "plan", "-i", str(inventory(tmp_path)), "--ledger", str(db))
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()
             and p.name != "hosts.yml" and not p.name.endswith(("-shm", "-wal"))}
    wal = tmp_path / "ledger.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    before.pop("hosts.yml", None)
    assert after == before


def test_read_only_commands_on_a_read_only_filesystem(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path, tmpfs: Any) -> None:
    mnt = tmpfs("4m")
    db = mnt / "ledger.sqlite"
    make_ledger(db)
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    assert os.statvfs(mnt).f_flag & os.ST_RDONLY
    for argv in (["status"], ["history", "n1"]):
        code, out, err = cli(capsys, *argv, "--ledger", str(db))
        # before: "attempt to write a readonly database" / unable to open, exit 1
        assert code == Exit.OK, err
        assert "n1" in out
    code, _, err = cli(capsys, "plan", "-i", str(inventory(tmp_path)), "--ledger", str(db))
    assert code == Exit.OK, err
    assert sorted(p.name for p in mnt.iterdir()) == ["ledger.sqlite"]


def test_full_disk_during_verify_is_loud_and_the_run_stays_open(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tmpfs: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import provisioner.ssh
    from provisioner.commands import verify

    mnt = tmpfs("8m")
    db = mnt / "ledger.sqlite"
    filler = mnt / "filler"
    names: list[str] = []

    def fake_verify_one(_runner: Any, name: str, _policy: Any, _io: Any) -> dict[str, Any]:
        names.append(name)
        if len(names) == 2:  # the disk fills up while the run is under way, once n1 is in
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                    if c.execute("SELECT count(*) FROM verifications").fetchone()[0]:
                        break
                time.sleep(0.05)
            with open(filler, "wb") as fh, pytest.raises(OSError):
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
        return {"name": name, "reachable": True, "compliant": True, "route": "nvfs",
                "checks": [{"id": "x", "status": "pass", "message": "y" * 20_000}],
                "io_test": {"path_taken": "direct"}}

    monkeypatch.setattr(verify, "verify_one", fake_verify_one)
    monkeypatch.setattr(provisioner.ssh, "runner_factory", lambda _s: (lambda n: n))
    report = tmp_path / "report.json"
    inv = inventory(tmp_path)
    code, out, err = cli(capsys, "verify", "-q", "-i", str(inv), "--ledger", str(db),
                         "--parallel", "1", "--json", str(report))
    assert code == Exit.LEDGER, err
    assert_one_line(err)
    # before: a LedgerError traceback (exit 1) out of the progress callback, the other nodes'
    # results and the report lost
    assert "disk is full" in err and "1 of 2 node(s) were NOT recorded: n2" in err
    assert "left open" in err
    assert {n["name"] for n in json.loads(report.read_text())["nodes"]} == {"n1", "n2"}
    filler.unlink()
    with Ledger.open(db) as ledger:  # consistent, and the run can be told apart
        from provisioner.store import fleet_id

        run_id = ledger.last_unfinished_run("verify", fleet_id(inv))
        assert run_id is not None and run_id in err
        assert [r["node"] for r in ledger.latest()] == ["n1"]


# ============================================================ SSH
class SilentServer:
    """Accepts TCP connections and never says a word (a wrong port, a stuck proxy)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.accepted:
            c.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    srv = SilentServer()
    yield srv
    srv.close()


def test_silent_ssh_server_is_no_banner_with_retry_and_no_traceback(
        silent_server: SilentServer, capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from provisioner.inventory import Node
    from provisioner.ssh import SSHRunner, SSHSettings

    settings = SSHSettings(connect_timeout=0.5, banner_timeout=1.0, auth_timeout=1.0,
                           channel_timeout=1.0, retries=1, retry_delay_s=0.05,
                           managed_known_hosts=str(tmp_path / "kh"), ssh_config=None)
    runner = SSHRunner(Node("n1", "127.0.0.1", silent_server.port, user="root"), settings)
    t0 = time.monotonic()
    with pytest.raises(ConnectError) as info:
        runner.connect()
    took = time.monotonic() - t0
    # before: "SSHException: No existing session" after connect_timeout, no retry, and
    # paramiko's "Error reading SSH protocol banner" traceback on stderr later
    assert "no SSH banner within 1s" in str(info.value)
    assert "No existing session" not in str(info.value)
    assert runner.connect_attempts == 2 and len(silent_server.accepted) == 2
    assert 2.0 <= took < 6.0
    time.sleep(0.3)  # paramiko's transport threads log after the failure
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "paramiko" not in err.lower() and err == ""


def test_silent_server_is_no_banner_when_the_handshake_wait_runs_out_first(
        silent_server: SilentServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded controller paramiko's handshake wait (in our thread) can run out before its
    banner timeout fires (in the transport thread): the server still sent nothing, so it is
    still 'no SSH banner', retried. Forced here by a banner clock that never fires first."""
    from provisioner.inventory import Node
    from provisioner.ssh import SSHRunner, SSHSettings, connection

    class SlowBannerClock(connection._Transport):
        @property
        def banner_timeout(self) -> float:
            return 30.0

        @banner_timeout.setter
        def banner_timeout(self, _value: float) -> None:
            pass  # paramiko sets the client's banner_timeout; this clock keeps its own

    monkeypatch.setattr(connection, "_Transport", SlowBannerClock)
    settings = SSHSettings(connect_timeout=0.3, banner_timeout=0.3, retries=1,
                           retry_delay_s=0.05, managed_known_hosts=str(tmp_path / "kh"),
                           ssh_config=None)
    runner = SSHRunner(Node("n1", "127.0.0.1", silent_server.port, user="root"), settings)
    with pytest.raises(ConnectError) as info:
        runner.connect()
    # before: "no SSH handshake within 0.6s: the port answers but does not speak SSH", not
    # retried (the verdict of a port that sends bytes), which failed CI once under load
    assert "no SSH banner within 0.3s after 2 attempt(s)" in str(info.value), info.value
    assert runner.connect_attempts == 2 and len(silent_server.accepted) == 2


def test_silent_ssh_server_through_verify(silent_server: SilentServer, tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    """The same fault through the command: the node is UNREACHABLE with 'no SSH banner', the
    run ends with exit 2, and stderr holds progress and no paramiko traceback."""
    inv = inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                              f"        n1: {{ansible_host: 127.0.0.1, ansible_port: "
                              f"{silent_server.port}, ansible_user: root}}\n")
    report = tmp_path / "r.json"
    code = main(["verify", "-i", str(inv), "--no-ledger", "--ssh-config", "none",
                 "--connect-timeout", "0.4", "--retries", "1", "--json", str(report)])
    time.sleep(0.3)
    _out, err = capfd.readouterr()
    assert code == Exit.UNREACHABLE
    node = json.loads(report.read_text())["nodes"][0]
    assert node["reachable"] is False and "no SSH banner within 0.6s after 2" in node["error"]
    assert "Traceback" not in err and "Error reading SSH protocol banner" not in err


def test_missing_inventory_key_is_an_error_for_that_node(silent_server: SilentServer,
                                                         tmp_path: Path) -> None:
    from provisioner.inventory import Node
    from provisioner.ssh import SSHRunner, SSHSettings

    node = Node("n1", "127.0.0.1", silent_server.port, user="root",
                key_file=str(tmp_path / "id_missing"))
    runner = SSHRunner(node, SSHSettings(ssh_config=None, retries=0,
                                         managed_known_hosts=str(tmp_path / "kh")))
    with pytest.raises(ConnectError, match="ansible_ssh_private_key_file .*id_missing does not"):
        runner.connect()
    # before: connected with whatever key ~/.ssh or the agent offered
    assert silent_server.accepted == [] and runner.connect_attempts == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize("command", ["verify", "rollout"])
def test_bad_connect_timeout_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        value: str, command: str) -> None:
    t0 = time.monotonic()
    code, _, err = cli(capsys, command, "-i", str(inventory(tmp_path)), "--ledger",
                       str(tmp_path / "l.sqlite"), f"--connect-timeout={value}")
    # before: nan hung verify (no deadline ever passes); rollout took every value
    assert code == Exit.USAGE and "--connect-timeout" in err
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "l.sqlite").exists()


# ============================================================ inputs
@pytest.mark.parametrize("size,why", [("0", "at least"), ("1T", "at most"), ("10000", "at least"),
                                      ("2000000", "multiple"), ("-1G", "not a size"),
                                      ("12Q", "not a size")])
@pytest.mark.parametrize("command", ["verify", "rollout"])
def test_bad_io_size_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, size: str,
                                why: str, command: str) -> None:
    code, _, err = cli(capsys, command, "-i", str(inventory(tmp_path)), "--ledger",
                       str(tmp_path / "l.sqlite"), f"--io-size={size}")
    # before: 0 became 4 KiB silently, 1T went to the node
    assert code == Exit.USAGE and why in err, err


def test_explicit_io_size_wins_over_the_policy() -> None:
    from provisioner.verify import IoTestOptions, Policy, verify_node
    from provisioner.verify.model import GIB
    from tests.unit import nodefacts as nf
    from tests.unit.test_checks_report_schema import ScriptedRunner

    runner = ScriptedRunner(nf.gather_doc(), nf.direct_nvfs_io())
    verify_node(runner, "n", Policy(io_test_size=64 << 20),
                IoTestOptions(size_bytes=GIB, size_explicit=True))
    # before: --io-size 1G with a 64M policy sent 64M
    assert f'"size_bytes": {GIB}' in runner.calls[1][0]


def test_inventory_sets_the_io_size_and_the_flag_still_wins(tmp_path: Path) -> None:
    from provisioner.inventory import load_inventory
    from provisioner.verify.model import IoTestOptions

    lab = load_inventory(REPO / "inventories" / "lab", "gdsfleet-lab-01")
    assert lab.nodes[0].verify_io_size == 64 << 20  # fits the lab's 512 MiB disks
    io = IoTestOptions()
    assert io.for_node(64 << 20).size_bytes == 64 << 20
    assert IoTestOptions(size_bytes=8 << 20, size_explicit=True).for_node(64 << 20).size_bytes \
        == 8 << 20
    inv = inventory(tmp_path, "all:\n  hosts:\n    n1: {gds_verify_io_size: 0}\n")
    with pytest.raises(InventoryError, match="n1.*gds_verify_io_size"):
        load_inventory(inv)


def test_node_checks_free_space_before_writing(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    size = (free // 4096 + 1024) * 4096
    opts = json.dumps({"path": str(tmp_path), "size_bytes": size})
    r = subprocess.run([sys.executable, "-", opts],
                       input=load_script("iotest.py").decode(), capture_output=True, text=True,
                       timeout=60)
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["status"] == "skipped" and doc["reason"].startswith("needs ")
    assert f"free at {tmp_path}" in doc["reason"]
    assert list(tmp_path.iterdir()) == []  # nothing was written
    from provisioner.verify.iotest import evaluate

    result = evaluate(doc)
    assert result.path_taken == "skipped" and "free at" in result.reason


@pytest.mark.parametrize("value", ["-5", "-1"])
def test_negative_playbook_timeout_is_refused(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, value: str) -> None:
    code, _, err = cli(capsys, "rollout", "-i", str(inventory(tmp_path)), "--ledger",
                       str(tmp_path / "l.sqlite"), f"--playbook-timeout={value}")
    assert code == Exit.USAGE and "--playbook-timeout" in err


def test_playbook_timeout_has_a_default_deadline() -> None:
    from provisioner.cli import build_parser
    from provisioner.validate import DEFAULT_PLAYBOOK_TIMEOUT_S

    args = build_parser().parse_args(["rollout", "-i", "x"])
    assert args.playbook_timeout == DEFAULT_PLAYBOOK_TIMEOUT_S == 4 * 3600


DUPES = """all:
  hosts:
    stray: {ansible_host: 127.0.0.1, ansible_port: 2993}
  children:
    gpu_nodes:
      hosts:
        a: {ansible_host: 127.0.0.1, ansible_port: 2994}
        b: {ansible_host: 127.0.0.1, ansible_port: 2994}
"""


def test_plan_reports_and_rollout_refuses_duplicates_and_untargeted_nodes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    inv = str(inventory(tmp_path, DUPES))
    ledger = str(tmp_path / "l.sqlite")
    code, out, err = cli(capsys, "plan", "-i", inv, "--ledger", ledger, "--json", "-")
    # before: exit 0, stray planned as "provision + verify", a and b as two machines
    assert code == Exit.USAGE
    problems = json.loads(out)["problems"]
    assert any("'a' and 'b'" in p for p in problems)
    assert any(p.startswith("stray not in 'gpu_nodes'") for p in problems)
    code, _, err = cli(capsys, "rollout", "-i", inv, "--ledger", ledger)
    assert code == Exit.USAGE and "refused before anything ran" in err
    assert not Path(ledger).exists()
    from provisioner.inventory import load_inventory, selection_problems

    assert selection_problems(load_inventory(inv, "a")) == []  # a clean selection passes


def test_plan_json_never_shows_a_ledger_password(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    url = f"postgresql+psycopg://ops:hunter2@127.0.0.1:{closed_port()}/gds"
    code, out, err = cli(capsys, "plan", "-i", str(inventory(tmp_path)), "--ledger", url,
                         "--json", "-")
    assert "hunter2" not in out + err
    assert code == Exit.LEDGER


# ============================================================ on a simulated node (container)
def test_free_space_on_a_simulated_node_and_the_inventory_size(
        sim_node: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lab's ENOSPC: a 1 GiB default test on a small GDS filesystem. The node now says
    what does not fit before writing; the inventory's gds_verify_io_size makes it fit."""
    node = sim_node("nvfs", ssh=True)
    node.exec("mkdir -p /mnt/gds && mount -t tmpfs -o size=16m tmpfs /mnt/gds")

    last_json: list[dict[str, Any]] = []
    orig_cli = cli

    def capture(*argv: str) -> None:
        code, out, err = orig_cli(capsys, *argv)
        assert "Traceback" not in err
        last_json[:] = [json.loads(out)["nodes"][0]]

    def run(io_size: str | None, *extra: str) -> dict[str, Any]:
        inv = tmp_path / "hosts.yml"
        var = f", gds_verify_io_size: {io_size}" if io_size else ""
        inv.write_text(
            "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
            f"        {node.name}: {{ansible_host: 127.0.0.1, ansible_port: {node.ssh_port}, "
            f"ansible_user: root, ansible_ssh_private_key_file: {node.key_file}{var}}}\n")
        capture("verify", "-i", str(inv), "--known-hosts", str(node.known_hosts),
                "--ssh-config", "none", "--no-ledger", "--io-path", "/mnt/gds", "--json", "-",
                *extra)
        return last_json[0]

    doc = run(None)  # the policy's 1 GiB: before, ENOSPC half-way through the write
    io = doc["io_test"]
    assert io["path_taken"] == "skipped"
    assert io["reason"].startswith("needs 1 GiB, 16 MiB free at /mnt/gds"), io["reason"]
    check = next(c for c in doc["checks"] if c["id"] == "io.direct_path")
    assert check["status"] == "fail" and "needs 1 GiB" in check["message"]
    assert node.exec("ls -A /mnt/gds").stdout.strip() == ""  # nothing was written

    doc = run("4M")  # the inventory's size fits: the test runs
    assert "free at" not in (doc["io_test"]["reason"] or "")
    assert doc["io_test"]["bytes"] == 4 << 20

    doc = run("4M", "--io-size", "64M")  # the flag wins over the inventory
    assert doc["io_test"]["reason"].startswith("needs 64 MiB, 16 MiB free")


def test_full_disk_during_rollout_leaves_it_resumable_and_loses_nothing(
        tmp_path: Path, tmpfs: Any) -> None:
    """The ledger's filesystem fills up in the middle of a wave (fake playbook and
    verification, real SQLite ledger on a small tmpfs). The rollout stops with LedgerError
    (exit 74 at the command line); the run stays open; after space is freed, the same
    rollout resumes it: every node ends compliant, with its verification in the ledger."""
    from provisioner.rollout.state import latest_states
    from tests.unit.test_rollout_engine import NODES, FakeFleet, engine

    mnt = tmpfs("8m")
    filler = mnt / "filler"

    class FillingFleet(FakeFleet):
        def verify(self, hosts: Any, *, cheap: bool, on_report: Any) -> Any:
            if len(self.verify_calls) == 1 and not filler.exists():  # second verification
                with open(filler, "wb") as fh, pytest.raises(OSError):
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
            return super().verify(hosts, cheap=cheap, on_report=on_report)

    fleet = FillingFleet()
    with Ledger.open(mnt / "ledger.sqlite") as led:
        eng = engine(led, fleet)
        with pytest.raises(LedgerError, match="disk is full"):
            eng.run()
        run_id = eng.run_id
    filler.unlink()
    with Ledger.open(mnt / "ledger.sqlite") as led:
        assert led.last_unfinished_run("rollout", "fleet-x") == run_id  # marked: still open
        again = engine(led, FakeFleet(compliant=set(fleet.compliant)))
        result = again.run()
        assert again.run_id == run_id  # resumed, not a new run
        assert result.exit_code == Exit.OK
        states = latest_states(led)
        assert sorted(states) == sorted(NODES)
        assert all(s["compliant"] for s in states.values())
        assert led.last_unfinished_run("rollout", "fleet-x") is None


def test_report_path_on_a_read_only_filesystem_is_refused_first(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tmpfs: Any) -> None:
    mnt = tmpfs("1m")
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    ledger = tmp_path / "l.sqlite"
    code, _, err = cli(capsys, "verify", "-i", str(inventory(tmp_path)), "--ledger", str(ledger),
                       "--json", str(mnt / "reports" / "r.json"))
    assert code == Exit.USAGE and "does not take new files" in err  # root ignores modes
    assert not ledger.exists()


def test_missing_report_directory_is_created_not_refused(tmp_path: Path) -> None:
    from provisioner.outputs import check_output_path

    check_output_path("--json", str(tmp_path / "new" / "dir" / "r.json"))
    assert not (tmp_path / "new").exists()  # the check itself creates nothing
