"""SSH transport for the verification round trip (paramiko), implementing ``CommandRunner``.

One connection per node, reused for every command of the verification. What it promises:

* **Host keys** are checked against, in this order: ``--known-hosts`` files, the node's
  ``UserKnownHostsFile`` (inventory ``-o`` options, then ``~/.ssh/config``), the project-managed
  file (``~/.local/state/gdsfleet/known_hosts``), ``~/.ssh/known_hosts`` and
  ``/etc/ssh/ssh_known_hosts``. An unknown key is refused (the error carries the command that
  fixes it) unless ``accept_new_host_keys`` is set, which appends it to the project-managed file.
  A *changed* key is always refused, with the ``ssh-keygen -R`` command for the file holding
  the old key. ``StrictHostKeyChecking`` in the inventory or ssh config is not honoured: only
  the explicit opt-in changes the policy.
* **~/.ssh/config** through ``paramiko.SSHConfig.lookup``: HostName, Port, User, IdentityFile,
  UserKnownHostsFile, ProxyCommand and ProxyJump (a chain of paramiko transports, each hop a
  ``direct-tcpip`` channel through the previous one). Inventory values win over the config, as
  ``-o`` options win over it for OpenSSH.
* **Bounded**: ``timeout`` (TCP connect), ``banner_timeout``, ``auth_timeout``,
  ``channel_timeout``, and a wall-clock deadline per command. stdout and stderr are drained
  while the command runs, so a chatty command cannot fill the window and hang
  ``recv_exit_status``.
* **Retries** with exponential backoff and jitter, only for transient connect errors ("Error
  reading SSH protocol banner" under sshd's MaxStartups, refused/reset connections, connect
  timeouts). Authentication and host key failures are never retried; commands are never
  retried.
* **No secrets** in messages: private key material, passwords and URL credentials are redacted
  from every error this module raises.

The package, by concern: :mod:`~provisioner.ssh.base` (settings, target, redaction),
:mod:`~provisioner.ssh.known_hosts` (the known_hosts parser), :mod:`~provisioner.ssh.hostkeys`
(the host-key policy and host certificates), :mod:`~provisioner.ssh.config` (ssh_config and
ProxyJump), :mod:`~provisioner.ssh.retry` (transient errors, retries, messages) and
:mod:`~provisioner.ssh.connection` (:class:`SSHRunner`: deadlines, output caps, draining).
The names callers use are importable from ``provisioner.ssh`` itself.
"""

from __future__ import annotations

import logging

from provisioner.errors import HostKeyError  # callers catch it from here, as before
from provisioner.ssh.base import (
    MAX_ERROR_CHARS,
    SYSTEM_KNOWN_HOSTS,
    USER_KNOWN_HOSTS,
    SSHSettings,
    Target,
    clip,
    default_managed_known_hosts,
    fingerprint,
    redact,
)
from provisioner.ssh.config import (
    _known_hosts_files,
    load_ssh_config,
    parse_jump,
    resolve_target,
)
from provisioner.ssh.connection import SSHRunner, open_socket, runner_factory
from provisioner.ssh.hostkeys import (
    _changed_key_error,
    _HostKeyPolicy,
    check_host_certificate,
)
from provisioner.ssh.known_hosts import (
    HostKeyView,
    KnownHostEntry,
    add_known_host,
    host_patterns_match,
    known_host_keys,
    read_known_hosts,
)
from provisioner.ssh.retry import classify, describe_error, with_retries

# paramiko's transport thread logs every handshake failure with a full traceback; with no
# handler configured, Python's last-resort handler would print it on stderr. Our own error
# says what happened, in one line.
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
_PARAMIKO_LOG.propagate = False

__all__ = [
    "MAX_ERROR_CHARS",
    "SSHRunner",
    "SSHSettings",
    "SYSTEM_KNOWN_HOSTS",
    "Target",
    "USER_KNOWN_HOSTS",
    "HostKeyView",
    "KnownHostEntry",
    "HostKeyError",
    "_HostKeyPolicy",
    "_known_hosts_files",
    "_changed_key_error",
    "check_host_certificate",
    "clip",
    "default_managed_known_hosts",
    "host_patterns_match",
    "known_host_keys",
    "load_ssh_config",
    "open_socket",
    "read_known_hosts",
    "add_known_host",
    "classify",
    "describe_error",
    "fingerprint",
    "parse_jump",
    "redact",
    "resolve_target",
    "runner_factory",
    "with_retries",
]
