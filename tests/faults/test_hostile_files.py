"""Fault injection: hostile or unlucky files (issue 17, items 6, 9, 11, 12, 13).

known_hosts files with marker lines, report paths that are symlinks or devices, modes under a
wide umask, a full disk, corrupt ledger rows. Each test names what happened before the fix.
Cases that mount a filesystem need root and skip without it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from provisioner.errors import HostKeyError
from provisioner.inventory import Node
from provisioner.ssh import SSHRunner, SSHSettings, fingerprint


# ============================================================ 11: known_hosts marker lines
class _Server(paramiko.ServerInterface):
    """A stand-in node: any public key authenticates, ``exec`` answers ``ok``."""

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        def answer() -> None:
            time.sleep(0.2)  # after paramiko has sent the exec request's success reply
            channel.sendall(b"ok\n")
            channel.send_exit_status(0)
            channel.close()

        threading.Thread(target=answer, daemon=True).start()
        return True


class ParamikoNode:
    """A real SSH server (paramiko) on a loopback port with one ECDSA host key."""

    def __init__(self) -> None:
        self.host_key = paramiko.ECDSAKey.generate()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.transports: list[paramiko.Transport] = []
        self._stop = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Server())
            except (paramiko.SSHException, EOFError, OSError):
                continue

    @property
    def name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def line(self, key: paramiko.PKey | None = None, host: str | None = None) -> str:
        k = key or self.host_key
        return f"{host or self.name} {k.get_name()} {k.get_base64()}"

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for t in self.transports:
            t.close()


@pytest.fixture(scope="module")
def pnode() -> Iterator[ParamikoNode]:
    server = ParamikoNode()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("client") / "id_ecdsa"
    paramiko.ECDSAKey.generate().write_private_key_file(str(path))
    return path


def _run(pnode: ParamikoNode, client_key: Path, known: Path, tmp_path: Path,
         **kw: Any) -> str:
    settings = SSHSettings(
        managed_known_hosts=str(tmp_path / "managed_known_hosts"),
        user_known_hosts=str(tmp_path / "no_user_known_hosts"),
        system_known_hosts=str(tmp_path / "no_system_known_hosts"),
        ssh_config=None, connect_timeout=3.0, retry_delay_s=0.01, **kw)
    node = Node(name="n1", address="127.0.0.1", port=pnode.port, user="root",
                key_file=str(client_key), ssh_options=(("UserKnownHostsFile", str(known)),))
    with SSHRunner(node, settings) as r:
        return r.run("true", timeout=10).stdout


OTHER_KEY = paramiko.ECDSAKey.generate()
CA_LINE = f"@cert-authority * {OTHER_KEY.get_name()} {OTHER_KEY.get_base64()}"


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_cert_authority_line_keeps_plain_entries_working(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"# fleet CA\n{CA_LINE}\n{pnode.line()}\n")
    # before: HostKeyError "known_hosts file ... cannot be read: Invalid key ...
    # (Incorrect padding)": every node unreachable
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"


def test_cert_authority_line_does_not_let_an_unknown_key_in(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{CA_LINE}\n{pnode.line(OTHER_KEY)}\n")
    with pytest.raises(HostKeyError, match="CHANGED"):
        _run(pnode, client_key, known, tmp_path)
    known.write_text(f"{CA_LINE}\n")  # a CA, and a host that offers no certificate
    with pytest.raises(HostKeyError, match="offered no certificate"):
        _run(pnode, client_key, known, tmp_path)


def test_revoked_key_is_refused_even_if_listed_plainly(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"{pnode.line()}\n@revoked * {k.get_name()} {k.get_base64()}\n")
    with pytest.raises(HostKeyError) as ei:
        _run(pnode, client_key, known, tmp_path)
    # before: "cannot be read: ... Incorrect padding" (and, had paramiko read the line, the
    # plain entry would have let the revoked key in)
    assert "REVOKED" in str(ei.value) and fingerprint(k) in str(ei.value)
    assert "line 2" in str(ei.value)


def test_revoked_key_with_another_key_of_its_type_listed(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"@revoked {pnode.name} {k.get_name()} {k.get_base64()}\n"
                     f"{pnode.line(OTHER_KEY)}\n")
    with pytest.raises(HostKeyError, match="REVOKED"):
        _run(pnode, client_key, known, tmp_path)


def test_revoked_key_is_never_accepted_as_new(pnode: ParamikoNode, client_key: Path,
                                              tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"@revoked * {k.get_name()} {k.get_base64()}\n")
    with pytest.raises(HostKeyError, match="REVOKED"):
        _run(pnode, client_key, known, tmp_path, accept_new_host_keys=True)
    assert not (tmp_path / "managed_known_hosts").exists()


@pytest.mark.parametrize("form", ["hashed", "wildcard", "list", "negated"])
def test_hashed_and_pattern_host_names_keep_working(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path, form: str) -> None:
    known = tmp_path / "known_hosts"
    host = {"hashed": _hashed(pnode.name), "wildcard": "[127.0.0.?]:*",
            "list": f"gpu-01,{pnode.name}", "negated": f"{pnode.name},!gpu-01"}[form]
    known.write_text(f"{CA_LINE}\n{pnode.line(host=host)}\n")
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"


def test_negated_pattern_excludes_the_host(pnode: ParamikoNode, client_key: Path,
                                           tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{pnode.line(host=f'[127.0.0.*]:*,!{pnode.name}')}\n")
    with pytest.raises(HostKeyError, match="is not known"):
        _run(pnode, client_key, known, tmp_path)


def test_malformed_lines_are_skipped(pnode: ParamikoNode, client_key: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"garbage\n{pnode.name} ssh-ed25519 not-base64!!\n@bogus x y z\n"
                     f"{pnode.line()}\n")
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"
    assert "line 2" in capsys.readouterr().err


# ============================================================ 6: report paths that are links
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def plan_inv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nn1 ansible_host=127.0.0.1 ansible_port=2201\n")
    return inv


def _plan_json(inv: Path, out: str) -> list[str]:
    return ["plan", "-i", str(inv), "--ledger", str(inv.parent / "none.sqlite"),
            "--json", out]


def test_symlinked_report_path_is_written_through(plan_inv: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.cli import main

    real_dir = tmp_path / "reports"
    real_dir.mkdir()
    real = real_dir / "plan.json"
    real.write_text("old\n")
    link = tmp_path / "latest.json"
    link.symlink_to(Path("reports") / "plan.json")  # relative, as ln -s makes them
    assert main(_plan_json(plan_inv, str(link))) == 0, capsys.readouterr().err
    # before: the link was replaced by a regular file and reports/plan.json kept "old"
    assert link.is_symlink()
    assert json.loads(real.read_text())["ledger"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real_dir.iterdir()) == ["plan.json"]  # no temp file left


def test_dangling_symlink_creates_its_target(plan_inv: Path, tmp_path: Path) -> None:
    from provisioner.cli import main

    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "new.json")
    assert main(_plan_json(plan_inv, str(link))) == 0
    assert link.is_symlink() and json.loads((tmp_path / "new.json").read_text())


def test_fd_name_link_writes_the_stream_and_keeps_the_link(plan_inv: Path,
                                                           tmp_path: Path) -> None:
    """What ``/dev/stderr`` is: a link to /proc/self/fd/2. Here a link of our own to it, so
    that the unfixed code replaces a test file and not the machine's /dev/stderr."""
    link = tmp_path / "stderr"
    link.symlink_to("/proc/self/fd/2")
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:
        fh.write("earlier line\n")
        fh.flush()
        p = subprocess.run([sys.executable, "-m", "provisioner", *_plan_json(plan_inv,
                                                                           str(link))],
                           stdout=subprocess.DEVNULL, stderr=fh, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    text = log.read_text()
    assert p.returncode == 0, text
    # before: the link became a regular file holding the plan, log.txt never saw it
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/2"
    assert text.startswith("earlier line\n") and '"waves"' in text


def test_dev_stdout_is_written_directly(plan_inv: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "provisioner",
                        *_plan_json(plan_inv, "/dev/stdout")], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    # before: exit 64, "/dev/stdout: is not a regular file" (stdout a pipe)
    assert p.returncode == 0, p.stderr
    assert '"waves"' in p.stdout
    assert os.path.islink("/dev/stdout")


def test_fifo_is_written_directly(plan_inv: Path, tmp_path: Path) -> None:
    from provisioner.cli import main

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader_ready = threading.Event()

    def read() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        reader_ready.set()
        chunks = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.02)
                continue
            if not chunk:
                if chunks:  # the writer is done
                    break
                time.sleep(0.02)  # no writer yet
                continue
            chunks.append(chunk)
        os.close(fd)
        got.append(b"".join(chunks))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    reader_ready.wait(10)
    assert main(_plan_json(plan_inv, str(fifo))) == 0
    t.join(60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["waves"]


def test_fifo_without_reader_is_refused_not_hung(plan_inv: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.cli import main

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(_plan_json(plan_inv, str(fifo))) == 64
    err = capsys.readouterr().err
    assert "no reader" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the link another owner")
def test_foreign_link_in_a_sticky_folder_is_refused(plan_inv: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.cli import main

    public = tmp_path / "public"
    public.mkdir()
    os.chmod(public, 0o1777)  # noqa: S103 - a /tmp-like folder is the point
    os.chown(public, 54321, 54321)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = public / "report.json"
    link.symlink_to(victim)
    os.lchown(link, 12345, 12345)
    code = main(_plan_json(plan_inv, str(link)))
    err = capsys.readouterr().err
    assert code == 64, err
    assert "protected_symlinks" in err
    assert victim.read_text() == "precious\n"


def test_write_atomic_refuses_special_files_unless_asked(tmp_path: Path) -> None:
    from provisioner.fsutil import SpecialFileError, write_atomic

    with pytest.raises(SpecialFileError):
        write_atomic("/dev/null", "x")
    write_atomic("/dev/null", "x", special_ok=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(SpecialFileError, match="directory"):
        write_atomic(tmp_path, "x", special_ok=True)
    target = tmp_path / "t"
    target.write_text("a")
    (tmp_path / "l1").symlink_to("t")
    (tmp_path / "l2").symlink_to("l1")
    write_atomic(tmp_path / "l2", "b")
    assert (tmp_path / "l2").is_symlink() and (tmp_path / "l1").is_symlink()
    assert target.read_text() == "b"


# ============================================================ 9: modes under umask 022
@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_new_state_folder_and_managed_known_hosts_are_private(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, umask_022: None) -> None:
    from provisioner.ssh import default_managed_known_hosts

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    managed = Path(default_managed_known_hosts())
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    settings = SSHSettings(managed_known_hosts=str(managed),
                           user_known_hosts=str(tmp_path / "none"),
                           system_known_hosts=str(tmp_path / "none2"), ssh_config=None,
                           connect_timeout=3.0, accept_new_host_keys=True)
    node = Node(name="n1", address="127.0.0.1", port=pnode.port, user="root",
                key_file=str(client_key), ssh_options=(("UserKnownHostsFile", str(empty)),))
    with SSHRunner(node, settings) as r:
        assert r.run("true", timeout=10).stdout == "ok\n"
    # before: 0755 and 0644 (a plain mkdir and open(..., "a"))
    assert _mode(managed.parent) == 0o700
    assert _mode(managed) == 0o600
    assert pnode.name in managed.read_text()


def test_existing_project_state_folder_and_ledger_are_narrowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None) -> None:
    from provisioner.store import Ledger, default_ledger

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    state = tmp_path / "state" / "gdsfleet"
    state.mkdir(parents=True, mode=0o755)
    os.chmod(state, 0o755)  # noqa: S103 - the wide mode is the case
    db = Path(default_ledger())
    with Ledger.open(db):
        pass
    os.chmod(db, 0o644)  # what an older version left
    os.chmod(state, 0o755)  # noqa: S103 - the wide mode is the case
    with Ledger.open(db):
        pass
    # before: the folder stayed 0755 and the ledger 0644
    assert _mode(state) == 0o700
    assert _mode(db) == 0o600


def test_a_folder_the_operator_named_is_never_chmoded(tmp_path: Path,
                                                      umask_022: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.store import Ledger

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)  # noqa: S103 - the wide mode is the case
    with Ledger.open(home / "ledger.sqlite"):
        pass
    with Ledger.open(home / "new" / "ledger.sqlite"):
        pass
    assert _mode(home) == 0o755  # theirs: left as it is
    assert _mode(home / "new") == 0o700  # ours: created private
    assert _mode(home / "ledger.sqlite") == 0o600


# ============================================================ 12, 13: full disk, corrupt rows
def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from provisioner.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    return tmp_path


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (65536, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    assert os.statvfs(mnt).f_bavail == 0
    return filler


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Any]:
    """``full_fs(size)``: a small tmpfs (root only), filled up by ``_fill``; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mounted: list[Path] = []

    def make(size: str = "4m", name: str = "full") -> Path:
        d = tmp_path / name
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                            str(d)], capture_output=True, text=True, check=False)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(d)
        return d

    try:
        yield make
    finally:
        for d in reversed(mounted):
            subprocess.run(["umount", "-l", str(d)], check=False)


def _make_ledger(path: Path, nodes: tuple[str, ...] = ("n1",)) -> str:
    from provisioner.store import Ledger

    with Ledger.open(path) as ledger:
        run = ledger.start_run("verify", "f")
        for n in nodes:
            ledger.record_verification(run, {"name": n, "reachable": True, "compliant": True,
                                             "route": "nvfs", "checks": []}, step="verified")
        ledger.finish_run(run, "compliant")
    return run


def _fake_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    import provisioner.ssh
    from provisioner.commands import verify

    def fake_verify_one(_runner: Any, name: str, _policy: Any, _io: Any) -> dict[str, Any]:
        return {"name": name, "reachable": True, "compliant": True, "route": "nvfs",
                "checks": [{"id": "x", "status": "pass", "message": "y" * 5000}],
                "io_test": {"path_taken": "direct"}}

    monkeypatch.setattr(verify, "verify_one", fake_verify_one)
    monkeypatch.setattr(provisioner.ssh, "runner_factory", lambda _s: (lambda n: n))


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_full_disk_writing_a_verify_report_is_74_and_the_nodes_are_kept(
        state: Path, full_fs: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], option: str) -> None:
    from provisioner.store import Ledger

    _fake_verify(monkeypatch)
    mnt = full_fs("1m")
    inv = state / "hosts.ini"
    inv.write_text("[gpu_nodes]\nn1 ansible_host=127.0.0.1\nn2 ansible_host=127.0.0.2\n")
    db = state / "ledger.sqlite"
    _fill(mnt)
    code, _, err = _cli(capsys, "verify", "-q", "-i", str(inv), "--ledger", str(db),
                        option, str(mnt / "report"))
    # before: exit 70, "internal error (a bug ...)": OSError No space left on device
    assert code == 74, err
    line = _one_line(err)
    assert "No space left" in line and "free space" in line and "internal error" not in line
    with Ledger.open(db, read_only=True) as ledger:
        assert [r["node"] for r in ledger.latest()] == ["n1", "n2"]


def test_full_disk_writing_report_junit_is_74(state: Path, full_fs: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = state / "ledger.sqlite"
    run = _make_ledger(db)
    mnt = full_fs("1m")
    _fill(mnt)
    code, _, err = _cli(capsys, "report", run, "--ledger", str(db), "--junit",
                        str(mnt / "r.xml"))
    assert code == 74, err  # before: 70
    assert "No space left" in _one_line(err)


def _corrupt(db: Path, node: str = "n1", report: str = '{"name": "n1", "reach') -> None:
    import sqlite3

    with sqlite3.connect(db) as c:
        run = c.execute("SELECT run_id FROM verifications LIMIT 1").fetchone()[0]
        c.execute("INSERT INTO verifications (run_id, node, at, reachable, compliant, route, "
                  "path_taken, report_json, raw_json) VALUES (?, ?, ?, 1, 1, 'nvfs', 'direct', "
                  "?, '{}')", (run, node, "2099-01-01T00:00:00.000000Z", report))
    c.close()


@pytest.mark.parametrize("report", ['{"name": "n1", "reach', "[1, 2]"])
@pytest.mark.parametrize("argv", [["status"], ["history", "n1"], ["report", "RUN", "--json", "-"],
                                  ["export", "env", "--node", "n1"],
                                  ["export", "deepspeed", "--node", "n1"]],
                         ids=["status", "history", "report", "export-env", "export-deepspeed"])
def test_one_corrupt_row_is_a_ledger_error(state: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], report: str) -> None:
    db = state / "ledger.sqlite"
    run = _make_ledger(db)
    _corrupt(db, report=report)
    argv = [run if a == "RUN" else a for a in argv]
    code, _, err = _cli(capsys, *argv, "--ledger", str(db))
    # before: 70, "internal error (a bug ...): JSONDecodeError" / AttributeError
    assert code == 74, err
    line = _one_line(err)
    assert "corrupt row" in line and "report_json" in line and "backup" in line


@pytest.mark.parametrize(("argv", "word"), [
    (["history", "n1", "-n", "99999999999999999999"], "--limit"),
    (["export", "env", "--node", "n1", "--max-age", "99999999999d"], "--max-age"),
    (["export", "env", "--node", "n1", "--max-age", "9" * 400], "--max-age"),
])
def test_huge_numbers_are_usage_errors(state: Path, capsys: pytest.CaptureFixture[str],
                                       argv: list[str], word: str) -> None:
    db = state / "ledger.sqlite"
    _make_ledger(db)
    code, _, err = _cli(capsys, *argv, "--ledger", str(db))
    assert code == 64, err  # before: 70 (OverflowError)
    assert word in _one_line(err)


def _killed_writer(db: Path, node: str) -> None:
    """A writer that commits a row and dies before its checkpoint (kill -9): the row is only
    in the -wal, beside a -shm."""
    code = ("import os, sys\nfrom provisioner.store import Ledger\n"
            "led = Ledger.open(sys.argv[1])\nrun = led.start_run('verify', 'f')\n"
            "led.record_verification(run, {'name': sys.argv[2], 'reachable': True, "
            "'compliant': True, 'route': 'nvfs', 'checks': []}, step='verified')\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(db), node], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert Path(f"{db}-wal").stat().st_size > 0


@pytest.mark.parametrize("leftover", ["clean", "wal-and-shm", "wal-only"])
def test_status_and_history_read_a_ledger_on_a_full_disk(
        state: Path, full_fs: Any, capsys: pytest.CaptureFixture[str], leftover: str) -> None:
    mnt = full_fs("4m")
    db = mnt / "ledger.sqlite"
    _make_ledger(db)
    nodes = ["n1"]
    if leftover != "clean":
        _killed_writer(db, "n2")
        nodes.append("n2")
        if leftover == "wal-only":
            Path(f"{db}-shm").unlink()
    before = sorted(p.name for p in mnt.iterdir())
    filler = _fill(mnt)
    for argv in (["status"], *(["history", n] for n in nodes)):
        code, out, err = _cli(capsys, *argv, "--ledger", str(db))
        # before: 74 "disk I/O error" (the read-only open creates and grows -shm)
        assert code == 0, (argv, err)
        for n in (nodes if argv == ["status"] else argv[1:]):
            assert n in out
    filler.unlink()
    assert sorted(p.name for p in mnt.iterdir()) == before  # nothing created there


# ============================================================ also seen: runner leftovers
CANARY = "s3cr3t-canary-17"


def _leftover(ledger_dir: Path) -> Path:
    """What ``kill -9`` of a rollout leaves: ansible-runner's command artifact holding the
    operator's environment, secrets included, with the umask's modes."""
    d = ledger_dir / "runner" / "artifacts" / "killed-run"
    d.mkdir(parents=True)
    cmd = d / "command"
    cmd.write_text(json.dumps({"command": ["ansible-playbook", "site.yml"], "cwd": "/",
                               "env": {"DB_PASSWORD": CANARY, "PATH": "/usr/bin",
                                       "LEDGER_URL": f"postgresql://u:{CANARY}@db/x"}}))
    os.chmod(cmd, 0o644)  # noqa: S103 - what the umask gave it
    os.chmod(d, 0o755)  # noqa: S103 - what the umask gave it
    return cmd


def test_verify_scrubs_a_killed_runs_artifacts(state: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _fake_verify(monkeypatch)
    inv = state / "hosts.ini"
    inv.write_text("[gpu_nodes]\nn1 ansible_host=127.0.0.1\n")
    cmd = _leftover(state)
    code, _, err = _cli(capsys, "verify", "-q", "-i", str(inv), "--ledger",
                        str(state / "ledger.sqlite"))
    assert code == 0, err
    # before: the canary stayed in the file until the next rollout's end
    text = cmd.read_text()
    assert CANARY not in text and "PATH" in text
    assert _mode(cmd) == 0o600 and _mode(cmd.parent) == 0o700


SCRUB_CHECK_PLAYBOOK = """\
- name: Stand-in site playbook that looks at the killed run's artifact
  hosts: all
  gather_facts: false
  tasks:
    - name: The artifact holds no secret by the time the playbook runs
      ansible.builtin.command: "grep -q {{ canary }} {{ leftover }}"
      register: found
      failed_when: found.rc == 0
      changed_when: false
"""


def test_rollout_scrubs_a_killed_runs_artifacts_before_the_playbook(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = state / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nnode01 ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    pb = state / "site.yml"
    pb.write_text(SCRUB_CHECK_PLAYBOOK)
    cmd = _leftover(state)
    code, out, err = _cli(capsys, "rollout", "-i", str(inv), "--ledger",
                          str(state / "ledger.sqlite"), "--playbook", str(pb), "--no-verify",
                          "--plain", "-e", f"leftover={cmd}", "-e", f"canary={CANARY}",
                          "--allow-local-connection")
    # before: the playbook found the canary (the scrub came only in the run's finally): exit 3
    assert code == 0, out + err
    assert CANARY not in cmd.read_text()


@pytest.mark.parametrize(("errno_", "code"), [(28, 74), (30, 74), (5, 74), (2, 70)])
def test_storage_errors_reaching_the_top_are_74_others_stay_bugs(
        state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        errno_: int, code: int) -> None:
    from provisioner.commands import status

    def boom(_args: Any) -> int:
        raise OSError(errno_, os.strerror(errno_), str(state / "some.file"))

    monkeypatch.setattr(status, "run", boom)
    got, _, err = _cli(capsys, "status")
    assert got == code, err  # before: 70 for every OSError, a full disk included
    line = _one_line(err)
    if code == 74:
        assert "some.file" in line and os.strerror(errno_) in line and "free space" in line


# ============================================================ 11: host certificates (OpenSSH)
SSHD = "/usr/sbin/sshd"


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)],
                   check=True)


def _sign(root: Path, ca: str, name: str, *opts: str) -> Path:
    """A host certificate of the host key, signed by ``ca`` (ssh-keygen -s ... -h)."""
    pub = root / f"{name}.pub"
    pub.write_text((root / "host_key.pub").read_text())
    subprocess.run(["ssh-keygen", "-q", "-s", str(root / ca), "-h", "-I", name, *opts,
                    str(pub)], check=True)
    return root / f"{name}-cert.pub"


@pytest.fixture(scope="module")
def certlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """OpenSSH's sshd on loopback with a host key and a swappable HostCertificate."""
    if not os.path.exists(SSHD) or os.geteuid() != 0:
        pytest.skip("needs OpenSSH's sshd (scripts/setup.sh installs it) and root")
    root = tmp_path_factory.mktemp("certlab")
    for k in ("host_key", "ca", "other_ca", "client_key"):
        _keygen(root / k)
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []

    def serve(cert: Path) -> int:
        for p in procs:
            p.terminate()
            p.wait(10)
        procs.clear()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        cfg = root / "sshd_config"
        cfg.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root}/host_key\n"
                       f"HostCertificate {cert}\nPidFile {root}/sshd.pid\n"
                       f"AuthorizedKeysFile {root}/authorized_keys\nStrictModes no\n"
                       "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                       "PermitRootLogin prohibit-password\nLogLevel ERROR\n")
        procs.append(subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)],
                                      stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return port
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start")

    try:
        yield {"root": root, "serve": serve}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def _cert_run(certlab: dict[str, Any], tmp_path: Path, cert: Path, known_lines: str) -> str:
    root: Path = certlab["root"]
    port = certlab["serve"](cert)
    known = tmp_path / "known_hosts"
    known.write_text(known_lines.replace("PORT", str(port)))
    settings = SSHSettings(managed_known_hosts=str(tmp_path / "managed"),
                           user_known_hosts=str(tmp_path / "none"),
                           system_known_hosts=str(tmp_path / "none2"), ssh_config=None,
                           connect_timeout=5.0, retry_delay_s=0.01)
    node = Node(name="n1", address="127.0.0.1", port=port, user="root",
                key_file=str(root / "client_key"),
                ssh_options=(("UserKnownHostsFile", str(known)),))
    with SSHRunner(node, settings) as r:
        return r.run("echo certified", timeout=10).stdout


def _ca_line(root: Path, ca: str = "ca", pattern: str = "[127.0.0.1]:*") -> str:
    return f"@cert-authority {pattern} {(root / f'{ca}.pub').read_text().strip()}\n"


def test_host_certificate_from_a_listed_ca_is_accepted(certlab: dict[str, Any],
                                                       tmp_path: Path) -> None:
    root = certlab["root"]
    cert = _sign(root, "ca", "good", "-n", "127.0.0.1", "-V", "-5m:+1h")
    # the host key itself is listed nowhere: only the CA vouches for it
    assert _cert_run(certlab, tmp_path, cert, _ca_line(root)) == "certified\n"


@pytest.mark.parametrize(("ca", "opts", "lines", "why"), [
    ("other_ca", ["-n", "127.0.0.1"], "ca", "CA no @cert-authority line lists"),
    ("ca", ["-n", "gpu-99.example"], "ca", "not 127.0.0.1"),
    ("ca", ["-n", "127.0.0.1", "-V", "-2h:-1h"], "ca", "expired"),
    ("ca", ["-n", "127.0.0.1", "-V", "+1h:+2h"], "ca", "not yet valid"),
    ("ca", ["-n", "127.0.0.1", "-O", "force-command=/bin/true"], "ca", "critical options"),
    ("ca", ["-n", "127.0.0.1"], "ca-revoked", "is not known"),
    ("ca", ["-n", "127.0.0.1"], "ca-other-hosts", "is not known"),
    ("ca", ["-n", "127.0.0.1"], "host-revoked", "REVOKED"),
])
def test_host_certificate_rules(certlab: dict[str, Any], tmp_path: Path, ca: str,
                                opts: list[str], lines: str, why: str) -> None:
    root = certlab["root"]
    cert = _sign(root, ca, f"c{abs(hash((ca, *opts, lines)))}", *opts)
    known = {
        "ca": _ca_line(root),
        "ca-revoked": _ca_line(root) + f"@revoked * {(root / 'ca.pub').read_text().strip()}\n",
        "ca-other-hosts": _ca_line(root, pattern="*.example.org"),
        "host-revoked": _ca_line(root)
        + f"@revoked * {(root / 'host_key.pub').read_text().strip()}\n",
    }[lines]
    with pytest.raises(HostKeyError, match=why):
        _cert_run(certlab, tmp_path, cert, known)
