""":class:`SSHRunner`: one paramiko connection per node (through ProxyJump hops or a
ProxyCommand), connected with bounded timeouts and retries, and commands run on it with a
wall-clock deadline, stdout and stderr drained while they run and capped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import paramiko

from provisioner import interrupts
from provisioner.errors import CommandTimeout, ConnectError, HostKeyError
from provisioner.inventory import Node
from provisioner.sanitize import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, BoundedOutput, printable
from provisioner.ssh.base import SSHSettings, Target, clip, redact
from provisioner.ssh.config import load_ssh_config, resolve_target
from provisioner.ssh.hostkeys import _fill_host_keys, _HostKeyPolicy
from provisioner.ssh.known_hosts import known_host_keys
from provisioner.ssh.retry import (
    _is_banner_error,
    _is_handshake_timeout,
    describe_error,
    with_retries,
)
from provisioner.verify.model import CommandResult

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The longest a waiting command sleeps between checks. Data, EOF and a close (the node's, or
# ours from another thread: paramiko sets the channel's pipe) wake it at once, and the wait
# never runs past the command's deadline, so this only bounds how often an idle wait wakes.
WAIT_SLICE_S = 15.0
# How often paramiko's reader thread, and a thread waiting on the handshake or the
# authentication, wake with nothing to do until the connection is authenticated: to see
# whether the transport was closed or the handshake ran past its timeout (paramiko: 0.1 s).
TRANSPORT_CHECK_S = 1.0
# Once authenticated, the reader thread wakes only for keepalives (the settings' interval,
# at most this): data, the node's EOF and a local close (the socket shut down) wake it.
IDLE_CHECK_S = 15.0


# AES-GCM (RFC 5647; OpenSSH's aes128-gcm@openssh.com, in its default list since 6.2 and in
# RHEL's FIPS policy) before paramiko's aes-ctr + hmac-sha2: one AEAD pass per packet, where
# aes-ctr adds an HMAC that paramiko compares byte by byte in Python. Only the order changes:
# the client offers the same ciphers as paramiko's default, and the server picks the first of
# them it supports (RFC 4253 7.1), so a server without GCM gets aes-ctr as before. Measured
# (connect, the gather's script and output, the I/O test's script; serial, lab nodes, four
# interleaved runs): 0.6-1.8 ms less coordinator CPU per node (docs/performance.md).
_GCM = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
_PARAMIKO_CIPHERS: tuple[str, ...] = tuple(
    paramiko.Transport._preferred_ciphers)  # type: ignore[attr-defined]
PREFERRED_CIPHERS = (tuple(c for c in _GCM if c in _PARAMIKO_CIPHERS)
                     + tuple(c for c in _PARAMIKO_CIPHERS if c not in _GCM))


class _Transport(paramiko.Transport):
    """paramiko's Transport without its ten wakes a second. Waiting on a slow node cost the
    controller about 0.39 ms of CPU per connection-second with paramiko's 0.1 s and a 0.5 s
    slice, 0.12 ms with 1 s (64 connections each running `sleep`, 2-core lab machine); a
    thread's idle wake costs about 45 us there. Counted in a 64-host verify of 8 loaded lab
    nodes, before this class's handshake and idle parts: 805 reader wakes, 589 handshake and
    auth polls and 339 run-loop slices, about 1.2 ms of CPU per node (docs/performance.md).

    * The reader thread wakes once per TRANSPORT_CHECK_S while connecting (the handshake
      timeout), then once per keepalive interval (:meth:`idle`); data and the node's EOF wake
      it at once, and :meth:`close` shuts the socket down, which wakes it too.
    * The handshake and the authentication are waited for in TRANSPORT_CHECK_S slices, not
      paramiko's 0.1 s: their completion (or the transport's death) sets the event at once,
      and the deadlines are kept to the slice's end as paramiko keeps them.

    Source of what this rests on: paramiko/paramiko, paramiko/transport.py (``start_client``
    and ``open_channel`` poll their event every 0.1 s; ``run`` sets the completion, auth and
    channel events when the transport dies) and paramiko/auth_handler.py
    (``wait_for_response``), the installed 5.1.0; tests/unit/test_ssh_idle_wakes.py counts
    the wakes against a real OpenSSH sshd."""

    _active_check_timeout = TRANSPORT_CHECK_S
    _preferred_ciphers = PREFERRED_CIPHERS

    def _wait_for(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait until ``event`` is set or the transport is no longer active (True), or until
        ``timeout`` seconds have passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not event.is_set() and self.is_active():
            left = TRANSPORT_CHECK_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            event.wait(min(TRANSPORT_CHECK_S, left))
        return True

    def start_client(self, event: threading.Event | None = None,
                     timeout: float | None = None) -> None:
        if event is not None:  # the caller waits (paramiko's asynchronous form)
            return super().start_client(event=event, timeout=timeout)  # type: ignore[no-any-return]
        done = threading.Event()
        super().start_client(event=done, timeout=timeout)  # starts the thread, returns at once
        self._wait_for(done, timeout)
        if not self.is_active():  # as paramiko's own wait: the handshake's error, or a generic one
            raise self.get_exception() or paramiko.SSHException("Negotiation failed.")
        # past the timeout with the handshake unfinished, paramiko returns too: the caller's
        # next step fails with "No existing session" (retry._is_handshake_timeout)
        return None

    def auth_publickey(self, username: str, key: paramiko.PKey,
                       event: threading.Event | None = None) -> list[str]:
        if event is not None:
            return super().auth_publickey(username, key, event)  # type: ignore[no-any-return]
        done = threading.Event()
        super().auth_publickey(username, key, done)  # sends the request, returns at once
        if not self._wait_for(done, self.auth_timeout):
            raise paramiko.AuthenticationException("Authentication timeout.")
        # set (or the transport gone): paramiko's own wait returns at once and judges it
        return self.auth_handler.wait_for_response(done)  # type: ignore[no-any-return,union-attr]

    def idle(self, keepalive_s: float) -> None:
        """Authenticated: the reader thread wakes only for keepalives (at most IDLE_CHECK_S
        apart). A ProxyCommand's or a jump host's channel keeps paramiko's wake."""
        if isinstance(self.sock, socket.socket):
            self.sock.settimeout(min(keepalive_s or IDLE_CHECK_S, IDLE_CHECK_S))

    def close(self) -> None:
        # shut the socket down first: that wakes the reader thread out of its wait at once
        # (a plain close() of the descriptor would leave it asleep until its next wake)
        if isinstance(self.sock, socket.socket):
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        super().close()


# A private key file parsed once per run instead of once per connection: for each key file
# paramiko tries RSA, then ECDSA, then Ed25519 (SSHClient._auth), 0.28 ms of coordinator CPU
# per connection for the lab's ed25519 key (0.2-0.5 ms per node measured end to end). Keyed
# by the file's identity and version (device, inode, size, mtime, ctime): a key file replaced
# or rewritten during the run is read again.
# Only our own files are cached, nothing a node sent. A key that needs a passphrase, or has a
# certificate beside it, is left to paramiko as before (None here).
_KEY_LOCK = threading.Lock()
_KEYS: dict[tuple[Any, ...], paramiko.PKey | None] = {}
_KEY_CLASSES: tuple[type[paramiko.PKey], ...] = (
    paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)


def _private_key(path: str) -> paramiko.PKey | None:
    """The unencrypted private key in ``path``, parsed once per version of the file; None when
    paramiko's own key_filename path should read it (a passphrase, a certificate, unreadable)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if os.path.exists(path + "-cert.pub"):
        return None  # paramiko loads the certificate beside the key: its own path
    version = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _KEY_LOCK:
        if version in _KEYS:
            return _KEYS[version]
    key: paramiko.PKey | None = None
    for klass in _KEY_CLASSES:  # paramiko's order (SSHClient._auth)
        try:
            key = klass.from_private_key_file(path)
            break
        except (paramiko.SSHException, OSError, ValueError):
            continue
    with _KEY_LOCK:
        _KEYS[version] = key
    return key


def _transport(sock: Any, /, **kwargs: Any) -> paramiko.Transport:
    """SSHClient.connect's transport_factory: what paramiko passes on (its keywords differ
    between paramiko versions), to :class:`_Transport`."""
    return _Transport(sock, **kwargs)


# --------------------------------------------------------------------------- the runner
class SSHRunner:
    """A ``CommandRunner`` over one SSH connection to one node (connects on first use)."""

    def __init__(
        self,
        node: Node,
        settings: SSHSettings | None = None,
        *,
        config: paramiko.SSHConfig | None = None,
        target: Target | None = None,
    ) -> None:
        self.node = node
        self.settings = settings or SSHSettings()
        if target is None:
            if config is None:
                config = load_ssh_config(self.settings.ssh_config)
            target = resolve_target(node, self.settings, config)
        self.target = target
        self._client: paramiko.SSHClient | None = None
        self._hops: list[paramiko.SSHClient] = []
        self.connect_attempts = 0

    # context manager
    def __enter__(self) -> SSHRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in [self._client, *reversed(self._hops)]:
            if c is not None:
                with contextlib.suppress(Exception):  # a dead connection may fail to close
                    c.close()
        self._client = None
        self._hops = []

    def connect(self) -> None:
        """Connect (with retries on transient errors); raises ConnectError / HostKeyError."""
        if self._client is not None and self._transport_active():
            return
        self.close()
        missing_key = self._missing_inventory_key()
        if missing_key:
            # Never fall back to whatever ~/.ssh or the agent offers: the inventory named a key.
            raise ConnectError(
                f"{self.node.name}: ansible_ssh_private_key_file {missing_key} does not exist; "
                f"fix the path in the inventory (host_vars/ or group_vars/) or create the key"
            )

        def attempt() -> None:
            self.connect_attempts += 1
            try:
                self._connect_once()
            except Exception:
                self.close()
                raise

        try:
            with_retries(
                attempt,
                retries=self.settings.retries,
                base_delay=self.settings.retry_delay_s,
                max_delay=self.settings.retry_max_delay_s,
            )
        except Exception as exc:
            if interrupts.requested():  # a stop: no retry ran after it (with_retries)
                raise ConnectError(f"{self.node.name}: stopped (interrupted)") from None
            err = describe_error(self.node.name, self.target, exc)
            if _is_banner_error(exc):
                err = ConnectError(
                    f"{self.node.name} ({self.target.describe()}): no SSH banner within "
                    f"{self.settings.banner_timeout:g}s after {self.connect_attempts} attempt(s): "
                    f"the port accepts TCP but nothing there speaks SSH (a wrong ansible_port, "
                    f"a proxy or firewall holding the connection, or an overloaded sshd)",
                    transient=True,
                )
            elif _is_handshake_timeout(exc):
                # paramiko gave up waiting for the key exchange: the server sent something,
                # not SSH (a banner that never ends, another protocol); not retried
                err = ConnectError(
                    f"{self.node.name} ({self.target.describe()}): no SSH handshake within "
                    f"{self.settings.banner_timeout + self.settings.connect_timeout:g}s: the "
                    f"port answers but does not speak SSH (a wrong ansible_port, another "
                    f"service, or a server that never ends its banner)")
            raise err from None

    def _missing_inventory_key(self) -> str | None:
        key = self.node.key_file
        if key and not os.path.isfile(os.path.expanduser(key)):
            return os.path.expanduser(key)
        return None

    def _transport_active(self) -> bool:
        t = self._client.get_transport() if self._client else None
        return bool(t and t.is_active())

    def _connect_once(self) -> None:
        sock: Any = None
        chain = [*self.target.jumps, self.target]
        for i, hop in enumerate(self.target.jumps):
            client = self._client_for(hop)
            try:
                self._connect_client(client, hop, sock)
            except Exception as exc:
                raise describe_error(f"{self.node.name} (jump host {hop.name})", hop, exc) from exc
            self._hops.append(client)
            transport = client.get_transport()
            assert transport is not None
            nxt = chain[i + 1]
            sock = transport.open_channel(
                "direct-tcpip",
                (nxt.hostname, nxt.port),
                ("127.0.0.1", 0),
                timeout=self.settings.channel_timeout,
            )
        if sock is None and self.target.proxy_command:
            sock = paramiko.ProxyCommand(self.target.proxy_command)
        client = self._client_for(self.target)
        self._client = client
        self._connect_client(client, self.target, sock)
        transport = client.get_transport()
        if transport is not None and self.settings.keepalive_s:
            transport.set_keepalive(self.settings.keepalive_s)
        if isinstance(transport, _Transport):
            transport.idle(self.settings.keepalive_s)

    def _client_for(self, target: Target) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        try:
            view = known_host_keys(target.known_hosts, target.host_key_name)
        except HostKeyError as exc:
            raise HostKeyError(f"{self.node.name}: {exc}") from None
        _fill_host_keys(client, target, view)  # revoked keys are not among them
        client.set_missing_host_key_policy(
            _HostKeyPolicy(target, self.settings, self.node.name, view))
        return client

    def _connect_client(self, client: paramiko.SSHClient, target: Target, sock: Any) -> None:
        key_files = [k for k in target.key_files if os.path.isfile(k)]
        if sock is None:
            # The TCP connect is ours, bounded by connect_timeout; paramiko's ``timeout`` then
            # bounds only the SSH handshake. Given the TCP timeout, paramiko would stop waiting
            # for the handshake after connect_timeout, before its own banner timeout, and fail
            # with "No existing session" on a host that accepts TCP but never speaks SSH.
            sock = open_socket(target.hostname, target.port, self.settings.connect_timeout)
        try:
            self._client_connect(client, target, sock, key_files)
        except paramiko.SSHException as exc:
            if _is_handshake_timeout(exc) and getattr(sock, "received", None) == 0:
                raise paramiko.SSHException(
                    "Error reading SSH protocol banner: nothing received") from exc
            raise

    def _client_connect(self, client: paramiko.SSHClient, target: Target, sock: Any,
                        key_files: list[str]) -> None:
        # the first key file parsed once per run (_private_key), the others as before:
        # paramiko tries pkey, then key_filename in order, then the agent - the same order
        pkey = _private_key(key_files[0]) if key_files else None
        rest = key_files[1:] if pkey is not None else key_files
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            pkey=pkey,
            key_filename=rest or None,  # type: ignore[arg-type]  # str or list
            timeout=self.settings.banner_timeout + self.settings.connect_timeout,
            banner_timeout=self.settings.banner_timeout,
            auth_timeout=self.settings.auth_timeout,
            channel_timeout=self.settings.channel_timeout,
            allow_agent=True,
            look_for_keys=not key_files,
            sock=sock,
            transport_factory=_transport,
        )

    def _open_session(self) -> paramiko.Channel:
        """A new session channel. A connection found dead here (the server dropped it after a
        command was stopped, a loaded node's sshd cut it) is reconnected once: no command ran
        on it yet, so nothing is run twice. A stop (SIGINT/SIGTERM) opens no new connection
        (provisioner.ssh.retry.with_retries)."""
        for last in (False, True):
            self.connect()
            assert self._client is not None  # noqa: S101
            transport = self._client.get_transport()
            if transport is None or not transport.is_active():
                if not last:
                    self.close()
                    continue
                raise ConnectError(f"{self.node.name}: connection lost", transient=True)
            try:
                return transport.open_session(timeout=self.settings.channel_timeout)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                if not last:  # dead under us (EOF, Broken pipe) or refused: a fresh one
                    self.close()
                    continue
                raise ConnectError(
                    printable(redact(clip(f"{self.node.name}: cannot open a session: {exc}"))),
                    transient=True,
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def run(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
        """Run one command; stdout/stderr drained concurrently; deadline ``timeout`` seconds."""
        full = _with_env(command, env)
        t0 = time.monotonic()
        deadline = t0 + timeout
        chan = self._open_session()
        # past a limit, the channel is closed below: the command gets SIGHUP
        output = BoundedOutput(self.node.name, _short_cmd(command), max_stdout=MAX_STDOUT_BYTES,
                               max_stderr=MAX_STDERR_BYTES)

        try:
            chan.settimeout(self.settings.channel_timeout)
            chan.exec_command(full)
            if stdin:
                view = bytes(stdin)
                while view:
                    if time.monotonic() > deadline:
                        raise CommandTimeout(
                            f"{self.node.name}: command ran past {timeout:.0f}s while sending "
                            f"its input: {_short_cmd(command)}"
                        )
                    try:
                        sent = chan.send(view[:32768])
                    except OSError:
                        if not chan.closed:
                            raise
                        break  # the command ended without reading it all: its output and
                        # status below say why (an interpreter missing, a refusal)
                    if sent == 0 and chan.closed:
                        break  # the same, noticed by paramiko's send window
                    view = view[sent:]
            if not chan.closed:
                chan.shutdown_write()
            chan.setblocking(False)
            # Read both streams to EOF, not merely until the exit status: sshd may send
            # exit-status while a background child still writes to the channel.
            while True:
                got = False
                while chan.recv_ready():
                    output.take("stdout", chan.recv(65536))
                    got = True
                while chan.recv_stderr_ready():
                    output.take("stderr", chan.recv_stderr(65536))
                    got = True
                if got:
                    continue
                if chan.eof_received or chan.closed:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(
                        f"{self.node.name}: command ran past its {timeout:g}s deadline: "
                        f"{_short_cmd(command)}"
                    )
                # paramiko makes the channel's pipe readable the moment data, EOF or a close
                # arrives, so this wakes at once for any of them; the timeout only bounds how
                # often an idle wait wakes. (A 0.05 s poll cost the controller ~1 ms of CPU per
                # second of waiting per node: most of its CPU while many nodes run an I/O test.)
                select.select([chan], [], [], min(WAIT_SLICE_S, remaining))
            # exit-status usually comes right after EOF; the channel's close without one
            # (a killed session) gives -1.
            while not chan.exit_status_ready() and not chan.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(
                        f"{self.node.name}: no exit status within the {timeout:g}s deadline: "
                        f"{_short_cmd(command)}"
                    )
                chan.status_event.wait(min(WAIT_SLICE_S, remaining))  # set() wakes it at once
            status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(
                printable(redact(clip(
                    f"{self.node.name}: connection lost while running a command: {exc}"))),
                transient=False,
            ) from exc
        finally:
            # a transport that died meanwhile makes close() raise (EOFError from paramiko's
            # send): that must not replace what happened (the cap's OutputTooLarge, a
            # timeout, the result); the next command finds the transport dead and reconnects
            with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
                chan.close()
        return CommandResult(
            exit_status=status,
            stdout=output.bytes_of("stdout").decode("utf-8", "replace"),
            stderr=output.bytes_of("stderr").decode("utf-8", "replace"),
            duration_s=time.monotonic() - t0,
        )



class _CountingSocket(socket.socket):
    """A TCP socket that counts the bytes it received: after a handshake timeout, zero bytes
    means the server never spoke (no banner), whichever of paramiko's two clocks ran out
    first (its banner timeout in the transport thread, or the handshake wait in ours, which a
    loaded controller can reach first)."""

    received = 0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        self.received += len(data)
        return data


def open_socket(hostname: str, port: int, timeout: float) -> socket.socket:
    """TCP connect to the first address that answers, as paramiko does, bounded by ``timeout``.

    Refused or unreachable on every address raises paramiko's ``NoValidConnectionsError`` (a
    transient error); any other socket error (a timeout, a resolution failure) propagates.
    """
    errors: dict[tuple[Any, ...], OSError] = {}
    infos = socket.getaddrinfo(hostname, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    for family, socktype, proto, _name, addr in infos:
        sock = _CountingSocket(family, socktype, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.ECONNREFUSED, errno.EHOSTUNREACH):
                raise
            errors[tuple(addr)] = exc
    raise paramiko.ssh_exception.NoValidConnectionsError(errors)


def _with_env(command: str, env: dict[str, str] | None) -> str:
    """Prefix exports (sshd's AcceptEnv usually drops SSH env requests)."""
    if not env:
        return command
    parts = []
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            raise ValueError(f"invalid environment variable name {k!r}")
        parts.append(f"{k}={shlex.quote(v)}; export {k};")
    return " ".join(parts) + " " + command


def _short_cmd(command: str) -> str:
    first = command.strip().splitlines()[0] if command.strip() else ""
    return redact(first[:120] + ("..." if len(first) > 120 or "\n" in command.strip() else ""))


def runner_factory(
    settings: SSHSettings,
) -> Callable[[Node], SSHRunner]:
    """One ssh config parse for the whole run; a runner per node."""
    config = load_ssh_config(settings.ssh_config)

    def make(node: Node) -> SSHRunner:
        return SSHRunner(node, settings, config=config)

    return make

