"""Fault injection: one hostile node in a fleet must cost only its own result (issue 27).

The fleet is two inventory hosts whose commands run on this machine through a stand-in
runner (:class:`StandinNodeRunner`: the real local runner with a per-node fake ``python3``
first on ``PATH``, standing in for each node's interpreter), so ``verify`` runs its real
gather parsing, checks, ledger writes and reports. The ledger is SQLite and a real PostgreSQL
(``tests/harness/pg.py``; skipped where the server binaries are missing).

Each test names the issue's numbered case; each failed on the code before the fix.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from provisioner import redact
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.local import LocalRunner
from tests.harness import pg as pgmod

REPO = Path(__file__).resolve().parents[2]
GOOD = "good1"
BAD = "bad1"


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    try:
        with pgmod.cluster() as url:
            yield url
    except pgmod.NoPostgres as exc:
        pytest.skip(str(exc))


def _fresh_pg(url: str) -> str:
    """The cluster's database emptied (each test starts from a new ledger)."""
    from provisioner.store import Ledger, metadata

    led = Ledger.open(url)
    try:
        with led._write() as conn:
            for t in ("verifications", "check_results", "step_events"):
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}")
            metadata.drop_all(conn)
    finally:
        led.close()
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return _fresh_pg(request.getfixturevalue("pg_url"))


# ----------------------------------------------------------------------------- stand-ins
def gather_doc(**items: Any) -> str:
    """A gather document (the line verify parses); a str value is the item's stdout, a dict
    is the whole item."""
    return json.dumps({"gdsfleet_gather": 1, "items": {
        k: (v if isinstance(v, dict) else {"rc": 0, "out": v, "err": ""})
        for k, v in items.items()}}) + "\n"


def standin_interpreter(folder: Path, stdout: str) -> Path:
    """A folder holding a stand-in ``python3`` that reads its script and answers ``stdout``
    (a gather document: every node command verify sends is ``python3 -``)."""
    folder.mkdir(parents=True, exist_ok=True)
    answer = folder / "answer.out"
    answer.write_text(stdout, encoding="utf-8", errors="surrogatepass")
    exe = folder / "python3"
    exe.write_text(f"#!/bin/sh\ncat >/dev/null\ncat '{answer}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


class StandinNodeRunner(LocalRunner):
    """The local runner with the node's stand-in interpreter first on PATH."""

    def __init__(self, name: str, bin_dir: Path) -> None:
        super().__init__(name)
        self.bin_dir = bin_dir

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> Any:
        env = dict(env or {}, PATH=f"{self.bin_dir}:{os.environ['PATH']}")
        return super().run(command, timeout=timeout, stdin=stdin, env=env)


def standin_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  answers: dict[str, str]) -> Path:
    """An inventory of ``answers``' hosts whose runners are stand-ins answering each its
    document; returns the inventory."""
    bins = {name: standin_interpreter(tmp_path / "nodes" / name, doc)
            for name, doc in answers.items()}

    def runner_factory(_settings: Any) -> Any:
        return lambda node: StandinNodeRunner(node.name, bins[node.name])

    import provisioner.ssh

    monkeypatch.setattr(provisioner.ssh, "runner_factory", runner_factory)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + "".join(
        f"        {n}: {{ansible_host: 127.0.0.1, ansible_user: root}}\n" for n in answers))
    return inv


def recorded(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every verification in the ledger by node, oldest first: its report (the JSON column,
    decoded) and its checks' rows (the text columns, as stored)."""
    from provisioner.store import Ledger, check_results, verifications

    led = Ledger.open(url)
    try:
        with led._read() as conn:
            rows = conn.execute(select(verifications.c.id, verifications.c.node,
                                       verifications.c.report_json)
                                .order_by(verifications.c.id)).all()
            checks = conn.execute(select(check_results)).mappings().all()
    finally:
        led.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for vid, node, report in rows:
        texts = [dict(c) for c in checks if c["verification_id"] == vid]
        out.setdefault(node, []).append({"report": json.loads(report), "checks": texts})
    return out


def verify_fleet(inv: Path, url: str, tmp_path: Path) -> int:
    return main(["verify", "-i", str(inv), "--no-io-test", "--ledger", url,
                 "--json", str(tmp_path / "r.json"), "--parallel", "2"])


# ============================================================ 3. lone surrogates
SURROGATE = "\ud800"


@pytest.mark.parametrize("where", ["kernel_release", "gdscheck", "cufile_path"])
def test_3_a_lone_surrogate_costs_no_result(where: str, ledger_url: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Case 3: a node whose kernel_release, gdscheck output or cufile.json path holds a lone
    surrogate: both nodes of the fleet are recorded (SQLite and PostgreSQL), the surrogate
    escaped (``\\ud800``), and verify exits with a verdict. Before: exit 70 from the ledger
    write (UTF-8 cannot encode a lone surrogate), 0 verifications, run ``interrupted``."""
    hostile: dict[str, dict[str, Any]] = {
        "kernel_release": {"kernel_release": f"6.8.0-{SURROGATE}-generic"},
        "gdscheck": {"gdscheck": {"rc": 0, "err": "", "argv": [f"/opt/gds{SURROGATE}/gdscheck"],
                                  "out": f"GDS release version: 1.14.0.30{SURROGATE}\n"
                                         f"nvidia_fs version:  2.25{SURROGATE} libcufile "
                                         f"version: 2.12\nNVMe               : Supported\n"}},
        "cufile_path": {"cufile_json": {"rc": 0, "out": "{}", "err": "",
                                        "path": f"/etc/cufile{SURROGATE}.json"}},
    }
    inv = standin_fleet(tmp_path, monkeypatch, {
        GOOD: gather_doc(kernel_release="6.8.0-1-generic"), BAD: gather_doc(**hostile[where])})
    code = verify_fleet(inv, ledger_url, tmp_path)
    err = capsys.readouterr().err
    assert code == Exit.NOT_COMPLIANT, err
    rows = recorded(ledger_url)
    assert sorted(rows) == [BAD, GOOD], err
    # the text columns hold it escaped; the JSON column keeps what the node said
    texts = json.dumps(rows[BAD][0]["checks"], ensure_ascii=False)
    assert SURROGATE not in texts
    if where != "cufile_path":  # the path reaches no check's text
        assert "\\ud800" in texts.replace("\\\\", "\\")
    assert SURROGATE in json.dumps(rows[BAD][0]["report"], ensure_ascii=False)


# ============================================================ 7. NUL
def test_7_a_nul_from_a_node_is_escaped_and_recorded(ledger_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """Case 7: a NUL in a node's text (kernel_release reaches a check's observed text) is
    recorded escaped (``\\x00``), on PostgreSQL too, and that result becomes the node's latest
    (the older record no longer stands for it in ``status``/``export``). Before: PostgreSQL
    refused the row (exit 74, "NOT recorded"), the node's older record stayed latest."""
    good = gather_doc(kernel_release="6.8.0-1-generic")
    inv = standin_fleet(tmp_path, monkeypatch, {GOOD: good, BAD: good})
    assert verify_fleet(inv, ledger_url, tmp_path) == Exit.NOT_COMPLIANT
    inv = standin_fleet(tmp_path, monkeypatch, {
        GOOD: good, BAD: gather_doc(kernel_release="6.8.0\x00-generic")})
    code = verify_fleet(inv, ledger_url, tmp_path)
    err = capsys.readouterr().err
    assert code == Exit.NOT_COMPLIANT, err
    rows = recorded(ledger_url)
    assert len(rows[BAD]) == 2 and len(rows[GOOD]) == 2, err
    texts = json.dumps(rows[BAD][1]["checks"], ensure_ascii=False)
    assert "\x00" not in texts and "\\x00" in texts.replace("\\\\", "\\")
    from provisioner.store import Ledger

    with Ledger.open(ledger_url) as led:
        latest = led.latest_for(BAD)
        runs = led.runs(kind="verify", limit=1)
    assert latest is not None and latest["run_id"] == runs[0]["id"]


# ============================================================ 4. a stop during connect retries
class SilentServer:
    """A TCP server on loopback that accepts every connection and never says a word (the
    'silent port' of the issue: paramiko waits for a banner, then retries). Counts the
    connections and when each came."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[float] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()

    def inventory(self, tmp_path: Path, hosts: int) -> Path:
        inv = tmp_path / "silent.yml"
        inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + "".join(
            f"        s{i}: {{ansible_host: 127.0.0.1, ansible_port: {self.port}, "
            f"ansible_user: root}}\n" for i in range(hosts)))
        return inv


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_4_a_stop_during_connect_retries_acts_at_once(signo: int, tmp_path: Path) -> None:
    """Case 4: SIGTERM or Ctrl-C while verify retries 4 hosts on a silent port (banner
    timeouts, then backoff): verify exits 143/130 within the promised 2 s (bound 5 s, CI is
    two loaded cores) and opens no connection after the signal. Before: 18 to 50 s
    (``with_retries`` slept with ``time.sleep``), and the next attempts connected again."""
    srv = SilentServer()
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("GDSFLEET_LEDGER", None)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "provisioner.cli", "verify", "-i",
             str(srv.inventory(tmp_path, 4)), "--ssh-config", "none", "--no-ledger",
             "--retries", "5", "--connect-timeout", "0.5", "--parallel", "4"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
        try:
            deadline = time.monotonic() + 60
            # past the first banner timeouts: the workers are in their backoff or retrying
            while len(srv.accepted) < 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(srv.accepted) >= 6, "verify never retried"
            proc.send_signal(signo)
            t0 = time.monotonic()
            try:
                _, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # too slow: every thread's stack, to say why
                proc.send_signal(signal.SIGABRT)  # -X faulthandler dumps them
                _, err = proc.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        time.sleep(0.2)
    finally:
        srv.close()
    assert took < 5, (took, err.decode(errors="replace")[-6000:])
    assert proc.returncode == 128 + signo, (proc.returncode, err[-2000:])
    late = [t for t in srv.accepted if t > t0 + 0.05]  # a connect in flight may land
    assert not late, f"{len(late)} connection(s) after the signal"
