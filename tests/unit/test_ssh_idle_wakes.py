"""What a connection costs the controller while it waits on a slow node (issue 14: verification
stays on the coordinator, so its CPU per node bounds the fleet).

Against a real OpenSSH sshd on a loopback port: while a command runs on the node and sends
nothing, neither paramiko's reader thread nor ``SSHRunner.run`` may poll (they wake on data, EOF
and a close), and a close from another thread (SIGINT's path) still ends the wait at once.
The wakes are counted, not timed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from provisioner.errors import ConnectError
from provisioner.inventory import Node
from provisioner.ssh import SSHRunner, SSHSettings
from provisioner.ssh import connection as ssh_connection
from tests.harness.loopback_sshd import SSHD, keyed_sshd

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD) or os.geteuid() != 0,
    reason="needs OpenSSH's sshd (openssh-server, installed by scripts/setup.sh) and root",
)

SLEEP_S = 3


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sshd-idle")
    server, known = keyed_sshd(root)
    try:
        yield {"root": root, "port": server.port, "known": known}
    finally:
        server.stop()


def _runner(lab: dict[str, Any]) -> SSHRunner:
    root: Path = lab["root"]
    node = Node(name="n1", address="127.0.0.1", port=lab["port"], user="root",
                key_file=str(root / "client_key"),
                ssh_options=(("UserKnownHostsFile", str(lab["known"])),))
    settings = SSHSettings(managed_known_hosts=str(root / "managed_known_hosts"),
                           user_known_hosts=str(root / "none"),
                           system_known_hosts=str(root / "none"), ssh_config=None,
                           connect_timeout=5.0, retry_delay_s=0.01)
    return SSHRunner(node, settings)


def test_waiting_on_a_silent_command_does_not_poll(sshd: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reader_wakes = [0]
    run_wakes = [0]
    real_check = paramiko.packet.Packetizer._check_keepalive
    real_select = ssh_connection.select.select

    def counted_check(self: Any) -> None:  # called on every idle wake of the reader thread
        reader_wakes[0] += 1
        real_check(self)

    class CountingSelect:
        @staticmethod
        def select(*args: Any) -> Any:
            ready = real_select(*args)
            run_wakes[0] += not ready[0]  # woken by its slice's end, not by the channel
            return ready

    with _runner(sshd) as r:
        r.connect()
        monkeypatch.setattr(paramiko.packet.Packetizer, "_check_keepalive", counted_check)
        monkeypatch.setattr(ssh_connection, "select", CountingSelect)
        res = r.run(f"sleep {SLEEP_S}; echo done", timeout=60)
    assert res.exit_status == 0 and res.stdout == "done\n"
    # paramiko's own 0.1 s wake: ~30 in 3 s, the 1 s check before this: 3-4; the run loop at
    # 0.5 s: ~6, at 2 s: 1-2. Authenticated, the reader wakes only for keepalives (15 s).
    assert reader_wakes[0] == 0, reader_wakes[0]
    assert run_wakes[0] == 0, run_wakes[0]


def test_a_close_from_another_thread_ends_the_wait_at_once(sshd: dict[str, Any]) -> None:
    """SIGINT closes the node's connection from the main thread (provisioner.interrupts): the
    waiting command must end then, not at its deadline nor at the next wake."""
    r = _runner(sshd)
    r.connect()
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(r.run("sleep 50", timeout=60))
        except ConnectError as exc:
            outcome.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    r.close()
    t.join(10)  # generous (a loaded CI machine); the command itself would run 50 s
    assert not t.is_alive()
    assert outcome and getattr(outcome[0], "exit_status", None) != 0, outcome


def test_a_closed_transport_lets_its_reader_thread_end(sshd: dict[str, Any]) -> None:
    r = _runner(sshd)
    r.connect()
    assert r._client is not None
    transport = r._client.get_transport()
    assert transport is not None and transport.is_alive()
    assert transport.sock.gettimeout() == ssh_connection.IDLE_CHECK_S  # authenticated: idle
    r.close()
    transport.join(5)  # the socket's shutdown wakes it: not its next idle wake, 15 s away
    assert not transport.is_alive()


class _SlowRelay:
    """A TCP relay in front of the sshd that holds each chunk the server sends for
    ``delay_s``: a node too loaded to answer its handshake quickly."""

    def __init__(self, port: int, delay_s: float) -> None:
        self.port_to, self.delay_s = port, delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self.listener.accept()
            server = socket.create_connection(("127.0.0.1", self.port_to))
            threading.Thread(target=self._pipe, args=(client, server, 0.0), daemon=True).start()
            self._pipe(server, client, self.delay_s)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                time.sleep(delay_s)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


def test_a_slow_handshake_is_waited_for_without_polling(sshd: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """paramiko waits for the handshake, the authentication and a channel's opening by waking
    every 0.1 s; the first two (most of a loaded node's connect) wake once a second here."""
    relay = _SlowRelay(sshd["port"], 0.3)
    short_waits = [0]
    real_wait = threading.Event.wait

    def counted_wait(self: threading.Event, timeout: float | None = None) -> bool:
        if timeout is not None and timeout <= 0.1 and not self.is_set():
            short_waits[0] += 1
        return real_wait(self, timeout)

    known = Path(sshd["root"]) / "known_hosts_relay"
    known.write_text(Path(sshd["known"]).read_text().replace(
        f"[127.0.0.1]:{sshd['port']} ", f"[127.0.0.1]:{relay.port} "))
    lab = dict(sshd, port=relay.port, known=known)
    try:
        r = _runner(lab)
        monkeypatch.setattr(threading.Event, "wait", counted_wait)
        t0 = time.monotonic()
        r.connect()
        took = time.monotonic() - t0
        monkeypatch.undo()
        assert r.run("echo ok", timeout=30).stdout == "ok\n"
        r.close()
    finally:
        relay.close()
    # the server's 4-5 replies each held 0.3 s: paramiko's own waits would poll ~15 times
    assert took > 0.9, took
    assert short_waits[0] <= 1, short_waits[0]
