"""A container in a network namespace of its own, joined to this machine's loopback only
through a relay the test owns, so that a partition is a DROP rule inside that namespace.

TEST HARNESS ONLY. The lab nodes' sshd listen on 127.0.0.1 (docs/testing.md: only loopback
targets), so a container that must reach them shares the host's network namespace, where a
partition could only be a rule in the machine's own firewall. Here the container runs with
``--network none`` (a namespace with nothing but its own ``lo``), and :class:`Relay` makes
the two crossings it needs:

* outward: a listener on this machine's 127.0.0.1:PORT, each connection sent on to the
  container's 127.0.0.1:PORT (its sshd);
* inward: a listener on the container's 127.0.0.1:PORT for each lab node port, each
  connection sent on to this machine's 127.0.0.1:PORT (the node's sshd).

The relay's sockets for the container's side are made by a thread that has joined the
container's namespace (``setns``; a socket stays in the namespace it was made in), so the
relay itself never leaves this machine's. Every byte the container sends or receives crosses
the container's own ``lo``; :meth:`Relay.cut` drops every packet there (``iptables -I INPUT
-i lo -j DROP`` in that namespace, through ``nsenter``), which stalls every connection of the
container, in and out, as a partition does: nothing is refused, TCP retries until keepalives
or deadlines end it. :meth:`Relay.heal` removes the rule.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator

CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
_CUT = ["INPUT", "-i", "lo", "-j", "DROP", "-m", "comment", "--comment",
        "gdsfleet-test-partition"]


def _in_namespace(path: str, fn: Callable[[], socket.socket]) -> socket.socket:
    """``fn()`` run in a short-lived thread that joined the network namespace at ``path``."""
    out: list[socket.socket] = []
    err: list[BaseException] = []

    def run() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if _LIBC.setns(fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            out.append(fn())
        except BaseException as exc:  # handed to the caller
            err.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]


def _listener(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    return s


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


class Relay:
    """The crossings of one container's network namespace (``/proc/PID/ns/net``)."""

    def __init__(self, pid: int) -> None:
        self.netns = f"/proc/{pid}/ns/net"
        self.pid = pid
        self._listeners: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.closed = False

    # -- the two kinds of crossing
    def outward(self, port: int) -> None:
        """This machine's 127.0.0.1:``port`` -> the container's 127.0.0.1:``port``."""
        lsock = _listener(port)

        def connect() -> socket.socket:
            return _in_namespace(self.netns, lambda: socket.socket())

        self._serve(lsock, connect, port)

    def inward(self, port: int) -> None:
        """The container's 127.0.0.1:``port`` -> this machine's 127.0.0.1:``port``."""
        lsock = _in_namespace(self.netns, lambda: _listener(port))
        self._serve(lsock, socket.socket, port)

    def _serve(self, lsock: socket.socket, make: Callable[[], socket.socket],
               port: int) -> None:
        with self._lock:
            self._listeners.append(lsock)

        def accept_loop() -> None:
            while not self.closed:
                try:
                    conn, _ = lsock.accept()
                except OSError:
                    return
                try:
                    other = make()
                    other.settimeout(10)
                    other.connect(("127.0.0.1", port))
                    other.settimeout(None)
                except OSError:
                    conn.close()
                    continue
                with self._lock:
                    self._conns += [conn, other]
                threading.Thread(target=_pump, args=(conn, other), daemon=True).start()
                threading.Thread(target=_pump, args=(other, conn), daemon=True).start()

        threading.Thread(target=accept_loop, daemon=True).start()

    # -- the partition
    def _iptables(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", f"--net={self.netns}", "iptables", "-w", "5", *args],
                              capture_output=True, text=True, timeout=30, check=False)

    def cut(self) -> None:
        proc = self._iptables("-I", *_CUT)
        if proc.returncode != 0:
            raise RuntimeError(f"iptables in {self.netns}: {proc.stderr.strip()[:300]}")

    def heal(self) -> None:
        while self._iptables("-D", *_CUT).returncode == 0:
            pass

    @contextlib.contextmanager
    def partition(self) -> Iterator[None]:
        self.cut()
        try:
            yield
        finally:
            self.heal()

    def close(self) -> None:
        self.closed = True
        with self._lock:
            for s in self._listeners + self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            self._listeners.clear()
            self._conns.clear()


def unavailable() -> str | None:
    """Why a relay and a cut cannot work here, or None (root, nsenter and iptables)."""
    import shutil

    if os.geteuid() != 0:
        return "a partition in a network namespace needs root (setns, iptables there)"
    for tool in ("nsenter", "iptables"):
        if shutil.which(tool) is None:
            return f"a partition in a network namespace needs {tool}"
    return None
