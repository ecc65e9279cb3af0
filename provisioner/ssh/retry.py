"""Connect errors: which are transient (retried with jittered backoff), and the one readable,
redacted line each becomes.
"""

from __future__ import annotations

import errno
import secrets
import socket
from collections.abc import Callable
from typing import TypeVar

import paramiko

from provisioner import interrupts
from provisioner.errors import ConnectError, HostKeyError
from provisioner.sanitize import printable
from provisioner.ssh.base import MAX_ERROR_CHARS, Target, clip, redact
from provisioner.ssh.hostkeys import _changed_key_error

T = TypeVar("T")

# --------------------------------------------------------------------------- errors, retries
_TRANSIENT_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.ECONNABORTED}


def classify(exc: BaseException) -> bool:
    """True when a connect error is transient (worth a retry with backoff)."""
    if isinstance(exc, HostKeyError | paramiko.BadHostKeyException):
        return False
    if isinstance(exc, paramiko.AuthenticationException):
        return False
    if isinstance(exc, ConnectError):
        return exc.transient
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return all(
            getattr(e, "errno", None) in _TRANSIENT_ERRNOS for e in exc.errors.values()
        )
    if isinstance(exc, socket.gaierror):
        return False
    if isinstance(exc, TimeoutError | socket.timeout | EOFError):
        return True
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError | ConnectionAbortedError):
        return True
    if isinstance(exc, paramiko.SSHException):
        msg = str(exc)
        return "Error reading SSH protocol banner" in msg or "Connection reset" in msg
    if isinstance(exc, OSError):
        return exc.errno in _TRANSIENT_ERRNOS
    return False


def describe_error(node_name: str, target: Target, exc: BaseException) -> ConnectError:
    """Turn a low-level error into one readable, redacted :class:`ConnectError`."""
    if isinstance(exc, ConnectError):
        return exc
    where = f"{node_name} ({target.describe()})"
    transient = classify(exc)
    if isinstance(exc, paramiko.BadHostKeyException):
        return _changed_key_error(node_name, target, exc)
    if isinstance(exc, paramiko.PasswordRequiredException):
        msg = (
            f"{where}: the private key is encrypted and no passphrase can be asked for: load it "
            f"into ssh-agent (ssh-add) first"
        )
    elif isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(target.key_files) or "ssh-agent and the default keys"
        msg = (
            f"{where}: authentication as {target.user!r} failed (tried {keys}); check "
            f"ansible_user / ansible_ssh_private_key_file and the node's authorized_keys"
        )
    elif isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        msg = f"{where}: connection refused (is sshd running and listening on {target.port}?)"
    elif isinstance(exc, socket.gaierror):
        msg = f"{where}: cannot resolve host name {target.hostname!r}: {exc.strerror}"
    elif isinstance(exc, TimeoutError | socket.timeout):
        msg = f"{where}: timed out connecting"
    elif isinstance(exc, OSError) and exc.strerror:
        msg = f"{where}: {exc.strerror}"
    else:
        # the text may be the server's (paramiko quotes a bad banner line whole): one
        # bounded, printable line
        msg = f"{where}: {type(exc).__name__}: {clip(str(exc))}"
    return ConnectError(printable(redact(clip(msg, 2 * MAX_ERROR_CHARS))), transient=transient)


def _sleep_until_stopped(seconds: float) -> None:
    """Sleep, but wake at once when SIGINT/SIGTERM asks for a stop (provisioner.interrupts)."""
    interrupts.event().wait(max(0.0, seconds))


def with_retries(
    fn: Callable[[], T],
    *,
    retries: int,
    base_delay: float,
    max_delay: float,
    is_transient: Callable[[BaseException], bool] = classify,
    sleep: Callable[[float], None] = _sleep_until_stopped,
    stopped: Callable[[], bool] = interrupts.requested,
) -> T:
    """Call ``fn``; on a transient error retry up to ``retries`` times with jittered backoff.

    A stop (SIGINT/SIGTERM, :func:`provisioner.interrupts.requested`) ends the backoff at once
    and no attempt starts after it: :class:`ConnectError` ``stopped (interrupted)``. Before,
    ``time.sleep`` held each worker for its whole backoff and the next attempt opened new
    connections after the closer had run (18 to 50 s to stop; issue 27 item 4)."""
    rng = secrets.SystemRandom()
    attempt = 0
    while True:
        if stopped():
            raise ConnectError("stopped (interrupted) before connecting")
        try:
            return fn()
        except Exception as exc:
            if stopped():
                raise ConnectError("stopped (interrupted) while connecting") from exc
            if attempt >= retries or not is_transient(exc):
                raise
            delay = min(max_delay, base_delay * (2**attempt)) * rng.uniform(0.5, 1.5)
            attempt += 1
            sleep(delay)



def _is_handshake_timeout(exc: BaseException) -> bool:
    return isinstance(exc, paramiko.SSHException) and str(exc) == "No existing session"


def _is_banner_error(exc: BaseException) -> bool:
    return isinstance(exc, paramiko.SSHException) and (
        "Error reading SSH protocol banner" in str(exc)
    )


