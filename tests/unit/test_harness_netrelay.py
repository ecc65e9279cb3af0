"""The harness's network-namespace relay (tests/harness/netrelay.py), which the execution-node
partition test rests on: a process in a namespace of its own (``unshare --net``) reaches a
server on this machine's loopback only through the relay, this machine reaches a server in
the namespace through it, and a cut (a DROP rule in the namespace) stalls both ways without
refusing anything, until it is healed."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.harness import netrelay
from tests.harness.run import release_ports, reserve_ports

pytestmark = pytest.mark.skipif(netrelay.unavailable() is not None,
                                reason=str(netrelay.unavailable()))

# an echo server on 127.0.0.1:PORT, run inside the namespace (python3, stdlib only)
# A client's reset (the test's probes while it starts) must not end it.
ECHO = ("import socket,sys\n"
        "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "s.bind(('127.0.0.1',int(sys.argv[1])));s.listen(8)\n"
        "while True:\n"
        "    c,_=s.accept()\n"
        "    try:\n"
        "        d=c.recv(100);c.sendall(b'inner:'+d)\n"
        "    except OSError:\n"
        "        pass\n"
        "    c.close()\n")
# a client inside the namespace: connect, send, print the answer or the error
CLIENT = ("import socket,sys\n"
          "c=socket.socket();c.settimeout(float(sys.argv[2]))\n"
          "try:\n"
          "    c.connect(('127.0.0.1',int(sys.argv[1])));c.sendall(b'ping');"
          "print(c.recv(100).decode())\n"
          "except OSError as e:\n"
          "    print(type(e).__name__)\n")


@pytest.fixture
def box() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a network namespace of its own (nothing but its lo, up, as podman's
    ``--network none`` leaves it)."""
    proc = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && sleep 300"])
    deadline = time.monotonic() + 10
    while "UP" not in subprocess.run(
            ["nsenter", f"--net=/proc/{proc.pid}/ns/net", "ip", "-o", "link", "show", "lo"],
            capture_output=True, text=True, check=False).stdout.split("<", 1)[-1].split(">")[0]:
        assert time.monotonic() < deadline, "lo did not come up in the namespace"
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def _serve_outer(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(8)

    def loop() -> None:
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            with contextlib.suppress(OSError):  # one client's reset must not end the server
                c.sendall(b"outer:" + c.recv(100))
            c.close()

    threading.Thread(target=loop, daemon=True).start()
    return s


def _echo_answers(port: int, wait: float) -> bytes:
    """What the echo server in the namespace answers through the relay, once it listens.
    Until then the relay accepts and drops each connection: an empty answer, or a reset when
    the probe's bytes arrived before the drop (on a loaded machine the server starts late:
    issue 27 saw this test fail with "connection reset")."""
    deadline = time.monotonic() + wait
    got = b""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(b"pong")
                got = c.recv(100)
        except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
            got = b""
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _inside(box: subprocess.Popen[bytes], port: int, timeout: float) -> str:
    return subprocess.run(["nsenter", f"--net=/proc/{box.pid}/ns/net", sys.executable, "-c",
                           CLIENT, str(port), str(timeout)], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()


def test_relay_crosses_both_ways_and_a_cut_stalls_without_refusing(
        box: subprocess.Popen[bytes]) -> None:
    inner_port = reserve_ports(2, start=23000, end=29000)
    outer_port = inner_port + 1
    outer = _serve_outer(outer_port)
    echo = subprocess.Popen(["nsenter", f"--net=/proc/{box.pid}/ns/net", sys.executable, "-c",
                             ECHO, str(inner_port)])
    relay = netrelay.Relay(box.pid)
    try:
        # without the relay the namespace reaches nothing of this machine
        assert _inside(box, outer_port, 2) == "ConnectionRefusedError"
        relay.inward(outer_port)
        relay.outward(inner_port)
        assert _inside(box, outer_port, 5) == "outer:ping"
        assert _echo_answers(inner_port, 30) == b"inner:pong"
        with relay.partition():
            # the namespace's side stalls: a timeout, not a refusal
            assert _inside(box, outer_port, 2) == "TimeoutError"
            with socket.create_connection(("127.0.0.1", inner_port), timeout=5) as c:
                c.settimeout(2)
                c.sendall(b"pong")
                with pytest.raises(TimeoutError):
                    c.recv(100)  # accepted by the relay here; nothing comes back
        assert _inside(box, outer_port, 5) == "outer:ping"  # healed
    finally:
        relay.close()
        echo.kill()
        echo.wait()
        outer.close()
        release_ports(inner_port, 2)
