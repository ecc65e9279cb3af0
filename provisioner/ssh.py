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
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import getpass
import hashlib
import hmac
import logging
import os
import re
import secrets
import select
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from provisioner.errors import CommandTimeout, ConnectError, HostKeyError, OutputTooLarge
from provisioner.inventory import Node
from provisioner.sanitize import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, human_bytes, printable
from provisioner.verify.model import CommandResult

T = TypeVar("T")

# paramiko's transport thread logs every handshake failure with a full traceback; with no
# handler configured, Python's last-resort handler would print it on stderr. Our own error
# says what happened, in one line.
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
_PARAMIKO_LOG.propagate = False

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE_LOCK = threading.Lock()


def default_managed_known_hosts() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return str(Path(state) / "gdsfleet" / "known_hosts")


@dataclass(frozen=True)
class SSHSettings:
    """Transport settings shared by every node of a run."""

    connect_timeout: float = 10.0
    banner_timeout: float = 15.0
    auth_timeout: float = 15.0
    channel_timeout: float = 15.0
    keepalive_s: int = 15
    retries: int = 3
    retry_delay_s: float = 0.5
    retry_max_delay_s: float = 8.0
    known_hosts: tuple[str, ...] = ()
    accept_new_host_keys: bool = False
    managed_known_hosts: str = field(default_factory=default_managed_known_hosts)
    ssh_config: str | None = "~/.ssh/config"
    user_known_hosts: str = USER_KNOWN_HOSTS
    system_known_hosts: str = SYSTEM_KNOWN_HOSTS


@dataclass(frozen=True)
class Target:
    """Where and how to connect to one host (a node or a jump host), after config lookup."""

    name: str
    hostname: str
    port: int = 22
    user: str = ""
    key_files: tuple[str, ...] = ()
    known_hosts: tuple[str, ...] = ()
    proxy_command: str | None = None
    jumps: tuple[Target, ...] = ()

    @property
    def host_key_name(self) -> str:
        """The name known_hosts uses: ``host`` on port 22, ``[host]:port`` otherwise."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def describe(self) -> str:
        via = f" via {' -> '.join(j.describe() for j in self.jumps)}" if self.jumps else ""
        proxy = " via ProxyCommand" if self.proxy_command else ""
        return f"{self.user}@{self.hostname}:{self.port}{via}{proxy}"


# --------------------------------------------------------------------------- redaction
# Every pattern here runs over text a node or a port chose (SSH banners, error messages): each
# is anchored by a literal or a word boundary and never backtracks over more than one run, and
# URL credentials are found by provisioner.redact's linear scan. The text is also cut to
# MAX_ERROR_CHARS first: a message is one line for a person, not the node's whole answer.
MAX_ERROR_CHARS = 2000
_KV_SECRET = re.compile(
    r"(?i)\b(password|passwd|passphrase|pass|secret|token|ansible_ssh_pass|ansible_password)"
    r"([ \t]{0,64}[=:][ \t]{0,64})(\"[^\"\n]{0,4096}\"|'[^'\n]{0,4096}'|[^\s,;]+)"
)
_URL_CRED_USER_STOP = re.compile(r"[/\s:@]")
_URL_CRED_PW_STOP = re.compile(r"[@\s/]")


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut]"


def redact(text: str) -> str:
    """Remove private key material, passwords and URL credentials from a message (linear in
    its length, whatever the text)."""
    from provisioner.redact import mask_spans, redact_text, url_password_spans

    text = redact_text(text)  # private keys, registered values, URL userinfo, name=value
    text = _KV_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    return mask_spans(text, url_password_spans(
        text, user_stop=_URL_CRED_USER_STOP, pw_stop=_URL_CRED_PW_STOP, min_user=1))


# --------------------------------------------------------------------------- host keys
def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _keyscan_cmd(target: Target, file: str) -> str:
    port = f"-p {target.port} " if target.port != 22 else ""
    return f"ssh-keyscan {port}{shlex.quote(target.hostname)} >> {shlex.quote(file)}"


def _display_path(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "/" and path.startswith(home + "/") else path


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host key: refuse with the fix, or (opt-in) add it to the managed file."""

    def __init__(self, target: Target, settings: SSHSettings, node_name: str,
                 view: HostKeyView | None = None) -> None:
        self.target = target
        self.settings = settings
        self.node_name = node_name
        self.view = view

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        fp = fingerprint(key)
        revoked = self.view.revoked_entry(key) if self.view is not None else None
        if revoked is not None:  # before accept-new: a revoked key is never added
            raise _revoked_error(self.node_name, hostname, key, revoked)
        if self.settings.accept_new_host_keys:
            add_known_host(self.settings.managed_known_hosts, hostname, key)
            sys.stderr.write(
                f"{self.node_name}: accepted the new host key of {hostname} ({key.get_name()} "
                f"{fp}) into {_display_path(self.settings.managed_known_hosts)}\n"
            )
            return
        fix_file = _display_path(self.target.known_hosts[0]) if self.target.known_hosts else (
            USER_KNOWN_HOSTS
        )
        raise HostKeyError(
            f"{self.node_name}: host key of {hostname} is not known ({key.get_name()} {fp}). "
            f"Check that fingerprint out of band (on the node: ssh-keygen -lf "
            f"/etc/ssh/ssh_host_{_key_file_type(key.get_name())}_key.pub), then run: "
            f"{_keyscan_cmd(self.target, fix_file)}  -- or re-run with --accept-new-host-keys "
            f"to add it to {_display_path(self.settings.managed_known_hosts)}"
        )


def _key_file_type(key_name: str) -> str:
    if "ed25519" in key_name:
        return "ed25519"
    if "ecdsa" in key_name:
        return "ecdsa"
    return "rsa"


def add_known_host(path: str, hostname: str, key: paramiko.PKey) -> None:
    """Append ``hostname key`` to a known_hosts file (locked; safe from parallel workers),
    created 0600 in a folder created 0700."""
    from provisioner.fsutil import is_project_state_dir, narrow_owned, open_private, private_dir

    p = Path(path).expanduser()
    private_dir(p.parent)  # 0700 when created (the project's state folder: always narrowed)
    if is_project_state_dir(p.parent):
        narrow_owned(p)  # an older version's 0644 file
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    fd = open_private(p)  # created 0600, appended
    with _FILE_LOCK, open(fd, "a", encoding="ascii") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# known_hosts, read as OpenSSH reads it (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"): an optional
# marker (@revoked, @cert-authority), comma-separated host patterns (wildcards * and ?, a
# leading ! negates, |1|salt|hash hashed names, [host]:port), key type, base64 key, comment.
# paramiko's own HostKeys fails on a marker line ("Incorrect padding") and so made every node
# unreachable; a line this parser cannot use is skipped (as OpenSSH does), never fatal.
_KNOWN_HOSTS_MAX_LINE = 65536
_WARNED: set[tuple[str, int]] = set()


@dataclass
class KnownHostEntry:
    file: str
    line: int
    marker: str  # "", "@revoked" or "@cert-authority"
    patterns: str
    key: paramiko.PKey


def _pattern_match(pattern: str, name: str) -> bool:
    """OpenSSH's match_pattern: ``*`` and ``?`` wildcards, case-insensitive, nothing else
    special (``[host]:port`` is literal)."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.IGNORECASE | re.DOTALL) is not None


def host_patterns_match(patterns: str, name: str) -> bool:
    """Whether a known_hosts line's host field names ``name`` (OpenSSH's match_hostname: a
    matching negated pattern wins over any positive one; a hashed entry is one name)."""
    if patterns.startswith("|1|"):
        try:
            _, _, salt_b64, digest_b64 = patterns.split("|", 3)
            salt = base64.b64decode(salt_b64, validate=True)
            digest = base64.b64decode(digest_b64, validate=True)
        except (ValueError, binascii.Error):
            return False
        mine = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
        return hmac.compare_digest(mine, digest)
    matched = False
    for pat in patterns.split(","):
        negated = pat.startswith("!")
        if negated:
            pat = pat[1:]
        if pat and _pattern_match(pat, name):
            if negated:
                return False
            matched = True
    return matched


def _warn_once(path: str, line: int, message: str) -> None:
    with _FILE_LOCK:
        if (path, line) in _WARNED:
            return
        _WARNED.add((path, line))
    sys.stderr.write(f"warning: {_display_path(path)} line {line}: {message}\n")


def read_known_hosts(path: str) -> list[KnownHostEntry]:
    """Every usable line of one known_hosts file. Comments, blank and malformed lines and key
    types paramiko cannot load are skipped (a malformed line once with a warning); an
    unreadable file raises OSError."""
    entries: list[KnownHostEntry] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if len(raw) > _KNOWN_HOSTS_MAX_LINE:
                _warn_once(path, lineno, "line too long; skipped")
                continue
            text = raw.decode("utf-8", "replace").strip()
            if not text or text.startswith("#"):
                continue
            fields = text.split()
            marker = ""
            if fields[0].startswith("@"):
                marker = fields.pop(0).lower()
                if marker not in ("@revoked", "@cert-authority"):
                    _warn_once(path, lineno, f"unknown marker {marker[:40]!r}; line skipped")
                    continue
            if len(fields) < 3:
                _warn_once(path, lineno, "not 'hosts keytype key'; line skipped")
                continue
            patterns, keytype, blob = fields[:3]
            try:
                key = paramiko.PKey.from_type_string(keytype, base64.b64decode(blob,
                                                                                validate=True))
            except (ValueError, binascii.Error, paramiko.SSHException, TypeError):
                if marker or keytype.startswith(("ssh-", "ecdsa-", "rsa-")):
                    _warn_once(path, lineno, f"{keytype[:60]} key cannot be read; line skipped")
                continue  # e.g. sk-* security-key types paramiko does not load
            entries.append(KnownHostEntry(path, lineno, marker, patterns, key))
    return entries


@dataclass
class HostKeyView:
    """What the known_hosts files say about one host name."""

    keys: list[KnownHostEntry] = field(default_factory=list)  # plain, not revoked, in order
    revoked: list[KnownHostEntry] = field(default_factory=list)  # every @revoked line
    cas: list[KnownHostEntry] = field(default_factory=list)  # @cert-authority, not revoked

    def revoked_entry(self, key: paramiko.PKey) -> KnownHostEntry | None:
        blob = key.asbytes()
        return next((e for e in self.revoked if e.key.asbytes() == blob), None)


@dataclass
class _ParsedKnownHosts:
    """One known_hosts file, parsed once per version of it (a fleet of 10,000 nodes checks
    every node against the same files): plain names indexed, the other lines in order."""

    stamp: tuple[int, int, int, int]
    exact: dict[str, list[KnownHostEntry]]  # lower-cased literal host names
    scanned: list[KnownHostEntry]  # hashed, wildcard and negated patterns, @cert-authority
    revoked: list[KnownHostEntry]


_PARSED: dict[str, _ParsedKnownHosts] = {}


def _parsed_known_hosts(path: str) -> _ParsedKnownHosts:
    st = os.stat(path)
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    with _FILE_LOCK:
        cached = _PARSED.get(path)
    if cached is not None and cached.stamp == stamp:
        return cached
    parsed = _ParsedKnownHosts(stamp, {}, [], [])
    for e in read_known_hosts(path):
        if e.marker == "@revoked":
            parsed.revoked.append(e)
        elif e.marker or e.patterns.startswith("|") or any(c in e.patterns for c in "*?!"):
            parsed.scanned.append(e)
        else:
            for name in e.patterns.split(","):
                if name:
                    parsed.exact.setdefault(name.lower(), []).append(e)
    with _FILE_LOCK:
        if len(_PARSED) > 64:
            _PARSED.clear()
        _PARSED[path] = parsed
    return parsed


def known_host_keys(files: Sequence[str], host_key_name: str) -> HostKeyView:
    """The plain keys listed for ``host_key_name`` (files in order, the most specific first;
    lines in file order) and the revoked keys. A key on an ``@revoked`` line is refused for
    every host, whatever its host patterns say (stricter than OpenSSH, which applies the
    patterns), and is taken out of the plain keys even where a file lists it plainly.
    The CAs of the ``@cert-authority`` lines whose patterns match the host (a revoked CA left
    out) go to ``cas``: :func:`check_host_certificate` judges a certificate by them."""
    view = HostKeyView()
    for f in files:
        if not os.path.isfile(f):
            continue
        try:
            parsed = _parsed_known_hosts(f)
        except OSError as exc:
            raise HostKeyError(f"known_hosts file {f} cannot be read: {exc}") from exc
        view.revoked.extend(parsed.revoked)
        found = list(parsed.exact.get(host_key_name.lower(), []))
        for e in parsed.scanned:
            if not host_patterns_match(e.patterns, host_key_name):
                continue
            if e.marker == "@cert-authority":
                view.cas.append(e)
            else:
                found.append(e)
        view.keys.extend(sorted(found, key=lambda e: e.line))
    view.keys = [e for e in view.keys if view.revoked_entry(e.key) is None]
    view.cas = [e for e in view.cas if view.revoked_entry(e.key) is None]
    return view


# ----------------------------------------------------------------- host certificates
# OpenSSH's PROTOCOL.certkeys: a host certificate is accepted when it is of type host (2), its
# signature key is a CA listed on an @cert-authority line whose patterns match the host (and
# that no @revoked line names), the signature verifies, now is within its validity, its
# principals (when it lists any) name the host, and it carries no critical option
# (sshconnect.c check_host_cert). paramiko negotiates a certificate only for the first key
# type of its host-key table: ssh-ed25519-cert-v01@openssh.com, OpenSSH's default host key.
CERT_HOST = 2
_PREFERRED_CERT = "ssh-ed25519-cert-v01@openssh.com"
_PLAIN_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                "ecdsa-sha2-nistp521", "ssh-rsa")


def check_host_certificate(cert_blob: bytes, hostname: str, cas: Sequence[KnownHostEntry],
                           revoked: HostKeyView, now: float | None = None) -> str | None:
    """Why the host certificate ``cert_blob`` is not acceptable for ``hostname`` (no port),
    or None when it is (rules above)."""
    try:
        m = paramiko.Message(cert_blob)
        ctype = m.get_text()
        m.get_string()  # nonce
        if ctype.startswith("ssh-ed25519-cert-"):
            m.get_string()
        elif ctype.startswith("ecdsa-sha2-"):
            m.get_text()
            m.get_string()
        elif ctype.startswith("ssh-rsa-cert-"):
            m.get_mpint()
            m.get_mpint()
        else:
            return f"certificate type {ctype[:60]!r} is not supported"
        m.get_int64()  # serial
        cert_type = m.get_int()
        key_id = m.get_text()[:80]
        principals_blob = m.get_string()
        valid_after, valid_before = m.get_int64(), m.get_int64()
        critical = m.get_string()
        m.get_string()  # extensions
        m.get_string()  # reserved
        ca_blob = m.get_string()
        signed = cert_blob[:m.packet.tell()]
        signature = m.get_string()
        principals = []
        pm = paramiko.Message(principals_blob)
        while pm.get_remainder():
            principals.append(pm.get_text())
    except Exception:  # noqa: BLE001 - any malformed blob is a refusal, never a crash
        return "the certificate cannot be parsed"
    if cert_type != CERT_HOST:
        return f"certificate {key_id!r} is not a host certificate"
    ca = next((e for e in cas if e.key.asbytes() == ca_blob), None)
    if ca is None:
        return f"certificate {key_id!r} is signed by a CA no @cert-authority line lists for it"
    if revoked.revoked_entry(ca.key) is not None:
        return f"certificate {key_id!r} is signed by a revoked CA"
    try:
        sig_alg = paramiko.Message(signature).get_text()
        ok = sig_alg != "ssh-rsa" and ca.key.verify_ssh_sig(signed, paramiko.Message(signature))
    except Exception:  # noqa: BLE001 - a malformed signature is a bad signature
        ok = False
    if not ok:
        return f"certificate {key_id!r}: bad signature (or a SHA-1 RSA signature)"
    t = time.time() if now is None else now
    if t < valid_after:
        return f"certificate {key_id!r} is not yet valid"
    if t >= valid_before:
        return f"certificate {key_id!r} has expired"
    if principals and hostname not in principals:
        return (f"certificate {key_id!r} is for {', '.join(p[:80] for p in principals[:5])}, "
                f"not {hostname}")
    if critical:
        return f"certificate {key_id!r} carries critical options (not allowed for a host)"
    return None


class _HostKeyCheck:
    """Every acceptable key of one type, as one entry of paramiko's host-key table: paramiko
    compares the key the host offers with it (``!=``), and it answers by the known_hosts rules:
    a plainly listed key, or a host certificate a listed CA signed, never a revoked key."""

    def __init__(self, name: str, plain: Sequence[paramiko.PKey], view: HostKeyView,
                 hostname: str) -> None:
        self.name = name
        self.plain = list(plain)
        self.view = view
        self.hostname = hostname
        self.reason = ""

    def _shown(self) -> paramiko.PKey:
        return self.plain[0] if self.plain else self.view.cas[0].key

    def get_name(self) -> str:
        return self.name

    def asbytes(self) -> bytes:
        return bytes(self._shown().asbytes())

    def get_base64(self) -> str:
        return str(self._shown().get_base64())

    def accepts(self, key: Any) -> bool:
        if self.view.revoked_entry(key) is not None:
            self.reason = "the host key is revoked"
            return False
        if any(key.asbytes() == p.asbytes() for p in self.plain):
            return True
        blob = getattr(key, "public_blob", None)
        if blob is None or not str(blob.key_type).endswith("-cert-v01@openssh.com"):
            self.reason = "the host offered no certificate"
            return False
        why = check_host_certificate(bytes(blob.key_blob), self.hostname, self.view.cas,
                                     self.view)
        self.reason = why or ""
        return why is None

    def __eq__(self, other: object) -> bool:
        return self.accepts(other)

    def __ne__(self, other: object) -> bool:
        return not self.accepts(other)

    __hash__ = None  # type: ignore[assignment]


def _fill_host_keys(client: paramiko.SSHClient, target: Target, view: HostKeyView) -> None:
    """Put what ``view`` accepts into ``client``'s host-key table. Without a CA for the host:
    the first plain key of each type (most specific file first; paramiko keeps one per type).
    With one: a :class:`_HostKeyCheck` per type, the ed25519 certificate type first so that
    paramiko asks the host for its certificate."""
    host_keys = client.get_host_keys()
    if not view.cas:
        types: set[str] = set()
        for e in view.keys:
            if e.key.get_name() not in types:
                types.add(e.key.get_name())
                host_keys.add(target.host_key_name, e.key.get_name(), e.key)
        return
    hostname = target.hostname.lower()
    names = [_PREFERRED_CERT, *_PLAIN_TYPES]
    for e in view.keys:
        if e.key.get_name() not in names:
            names.append(e.key.get_name())
    for name in names:
        plain = [e.key for e in view.keys if e.key.get_name() == name]
        host_keys.add(target.host_key_name, name,
                      _HostKeyCheck(name, plain, view, hostname))  # type: ignore[arg-type]


def _files_with_key(files: Sequence[str], hostname: str) -> list[tuple[str, paramiko.PKey]]:
    try:
        return [(e.file, e.key) for e in known_host_keys(files, hostname).keys]
    except HostKeyError:
        return []


def _revoked_error(node_name: str, hostname: str, key: paramiko.PKey,
                   entry: KnownHostEntry) -> HostKeyError:
    return HostKeyError(
        f"{node_name}: host key of {hostname} is REVOKED ({key.get_name()} {fingerprint(key)}, "
        f"@revoked in {_display_path(entry.file)} line {entry.line}); the provisioner never "
        f"connects with a revoked key. Give the node a new host key and list that one."
    )


def _changed_key_error(
    node_name: str, target: Target, exc: paramiko.BadHostKeyException
) -> HostKeyError:
    with contextlib.suppress(HostKeyError):
        revoked = known_host_keys(target.known_hosts, target.host_key_name).revoked_entry(
            exc.key)
        if revoked is not None:
            return _revoked_error(node_name, target.host_key_name, exc.key, revoked)
    if isinstance(exc.expected_key, _HostKeyCheck) and not exc.expected_key.plain:
        return HostKeyError(
            f"{node_name}: host key of {target.host_key_name} ({exc.key.get_name()} "
            f"{fingerprint(exc.key)}) is not accepted: an @cert-authority line covers the host "
            f"but {exc.expected_key.reason or 'no valid certificate was offered'}. Give the host "
            f"a certificate from that CA (ssh-keygen -s CA -h -n {target.hostname} ...), or "
            f"check the fingerprint out of band and list the key plainly"
        )
    holders = _files_with_key(target.known_hosts, target.host_key_name) or [
        (target.known_hosts[0] if target.known_hosts else USER_KNOWN_HOSTS, exc.expected_key)
    ]
    files = sorted({f for f, _ in holders})
    fixes = "; ".join(
        f"ssh-keygen -R {shlex.quote(target.host_key_name)} -f {shlex.quote(_display_path(f))}"
        for f in files
    )
    return HostKeyError(
        f"{node_name}: host key of {target.host_key_name} CHANGED: known_hosts has "
        f"{exc.expected_key.get_name()} {fingerprint(exc.expected_key)}, the host offers "
        f"{exc.key.get_name()} {fingerprint(exc.key)}. This can be a man-in-the-middle attack; "
        f"it is also what a reinstalled node looks like. Only if you know the node was "
        f"reinstalled, remove the old key with: {fixes}  -- then check the new fingerprint and "
        f"add it ({_keyscan_cmd(target, _display_path(files[0]))}). The provisioner never "
        f"accepts a changed key by itself, not even with --accept-new-host-keys."
    )


# --------------------------------------------------------------------------- config
def load_ssh_config(path: str | None) -> paramiko.SSHConfig | None:
    if not path:
        return None
    p = Path(path).expanduser()
    if not p.is_file():
        return None
    try:
        return paramiko.SSHConfig.from_path(str(p))
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise ConnectError(f"cannot read ssh config {p}: {redact(str(exc))}") from exc


def _split_files(value: str | None) -> list[str]:
    if not value:
        return []
    return [os.path.expanduser(v) for v in shlex.split(value) if v.lower() != "none"]


def parse_jump(spec: str) -> list[tuple[str | None, str, int | None]]:
    """``[user@]host[:port][,...]`` (ProxyJump) into (user, host, port) hops, first hop first."""
    hops: list[tuple[str | None, str, int | None]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("ssh://"):
            part = part[len("ssh://") :]
        user, _, hostport = part.rpartition("@")
        port: int | None = None
        host = hostport
        m = re.match(r"^\[([^\]]+)\](?::(\d+))?$", hostport)
        if m:
            host, port = m.group(1), int(m.group(2)) if m.group(2) else None
        elif hostport.count(":") == 1:
            host, p = hostport.split(":")
            port = int(p)
        if not host or (port is not None and not 0 < port < 65536):
            raise ConnectError(f"ProxyJump {spec!r}: cannot parse hop {part!r}")
        hops.append((user or None, host, port))
    return hops


def resolve_target(
    node: Node,
    settings: SSHSettings,
    config: paramiko.SSHConfig | None = None,
) -> Target:
    """Combine inventory values, ~/.ssh/config and settings into a connection :class:`Target`.

    Precedence as for ``ansible-playbook`` over OpenSSH: ``ansible_host`` is the host the
    config is looked up for (``HostName`` there can rename it); ``ansible_port`` (when not 22),
    ``ansible_user``, ``ansible_ssh_private_key_file`` and ``-o`` options from the inventory win
    over the config.
    """
    cfg: dict[str, Any] = dict(config.lookup(node.address)) if config else {}
    hostname = str(cfg.get("hostname") or node.address)
    port = node.port if node.port != 22 else int(cfg.get("port") or 22)
    if node.ssh_option("Port"):
        port = int(str(node.ssh_option("Port")))
    user = node.user or node.ssh_option("User") or cfg.get("user") or getpass.getuser()
    keys: list[str] = []
    if node.key_file:
        keys.append(os.path.expanduser(node.key_file))
    if node.ssh_option("IdentityFile"):
        keys.append(os.path.expanduser(str(node.ssh_option("IdentityFile"))))
    keys += [os.path.expanduser(k) for k in cfg.get("identityfile") or []]
    known = _known_hosts_files(
        settings, node.ssh_option("UserKnownHostsFile") or cfg.get("userknownhostsfile")
    )
    proxy_command = node.ssh_option("ProxyCommand") or _raw_option(
        config, node.address, "proxycommand"
    )
    if proxy_command and proxy_command.lower() == "none":
        proxy_command = None
    jump_spec = node.ssh_option("ProxyJump") or cfg.get("proxyjump")
    jumps: list[Target] = []
    if jump_spec and jump_spec.lower() != "none":
        for juser, jhost, jport in parse_jump(jump_spec):
            jcfg: dict[str, Any] = dict(config.lookup(jhost)) if config else {}
            jknown = _known_hosts_files(settings, jcfg.get("userknownhostsfile")) + [
                k for k in known if k not in _known_hosts_files(settings, None)
            ]
            jumps.append(
                Target(
                    name=jhost,
                    hostname=str(jcfg.get("hostname") or jhost),
                    port=jport or int(jcfg.get("port") or 22),
                    user=juser or str(jcfg.get("user") or getpass.getuser()),
                    key_files=tuple(os.path.expanduser(k) for k in jcfg.get("identityfile") or [])
                    or tuple(keys),
                    known_hosts=tuple(dict.fromkeys(jknown)),
                )
            )
        proxy_command = None  # OpenSSH: ProxyJump and ProxyCommand exclude each other
    if proxy_command:
        # Expanded here, with the effective values (the inventory may override the config's).
        tokens = {"%h": hostname, "%p": str(port), "%r": str(user), "%n": node.address, "%%": "%"}
        proxy_command = re.sub(
            r"%[hprn%]", lambda m: tokens[m.group(0)], os.path.expanduser(proxy_command)
        )
    return Target(
        name=node.name,
        hostname=hostname,
        port=port,
        user=str(user),
        key_files=tuple(dict.fromkeys(keys)),
        known_hosts=tuple(known),
        proxy_command=proxy_command,
        jumps=tuple(jumps),
    )


def _raw_option(config: paramiko.SSHConfig | None, host: str, key: str) -> str | None:
    """A config value before paramiko expands its %-tokens (with the config's own port/user)."""
    if config is None:
        return None
    try:
        value = config._lookup(hostname=host).get(key)  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # private API moved: fall back to the expanded value
        value = config.lookup(host).get(key)
    return str(value) if value else None


def _known_hosts_files(settings: SSHSettings, user_known: str | None) -> list[str]:
    files = [os.path.expanduser(f) for f in settings.known_hosts]
    files += _split_files(user_known)
    files += [
        os.path.expanduser(settings.managed_known_hosts),
        os.path.expanduser(settings.user_known_hosts),
        settings.system_known_hosts,
    ]
    return list(dict.fromkeys(files))


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


def with_retries(
    fn: Callable[[], T],
    *,
    retries: int,
    base_delay: float,
    max_delay: float,
    is_transient: Callable[[BaseException], bool] = classify,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; on a transient error retry up to ``retries`` times with jittered backoff."""
    rng = secrets.SystemRandom()
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if attempt >= retries or not is_transient(exc):
                raise
            delay = min(max_delay, base_delay * (2**attempt)) * rng.uniform(0.5, 1.5)
            attempt += 1
            sleep(delay)


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
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            key_filename=key_files or None,  # type: ignore[arg-type]  # str or list
            timeout=self.settings.banner_timeout + self.settings.connect_timeout,
            banner_timeout=self.settings.banner_timeout,
            auth_timeout=self.settings.auth_timeout,
            channel_timeout=self.settings.channel_timeout,
            allow_agent=True,
            look_for_keys=not key_files,
            sock=sock,
        )

    def run(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
        """Run one command; stdout/stderr drained concurrently; deadline ``timeout`` seconds."""
        self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(f"{self.node.name}: connection lost", transient=True)
        full = _with_env(command, env)
        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            chan = transport.open_session(timeout=self.settings.channel_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(
                printable(redact(clip(f"{self.node.name}: cannot open a session: {exc}"))),
                transient=True,
            ) from exc
        out: list[bytes] = []
        err: list[bytes] = []
        sizes = {"stdout": 0, "stderr": 0}

        def take(what: str, chunk: bytes, into: list[bytes], limit: int) -> None:
            into.append(chunk)
            sizes[what] += len(chunk)
            if sizes[what] > limit:  # the channel is closed below: the command gets SIGHUP
                raise OutputTooLarge(
                    f"{self.node.name}: output too large: the command wrote more than "
                    f"{human_bytes(limit)} to {what} (the limit of what the controller reads "
                    f"from a node); it was stopped: {_short_cmd(command)}")

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
                    sent = chan.send(view[:32768])
                    view = view[sent:]
            chan.shutdown_write()
            chan.setblocking(False)
            # Read both streams to EOF, not merely until the exit status: sshd may send
            # exit-status while a background child still writes to the channel.
            while True:
                got = False
                while chan.recv_ready():
                    take("stdout", chan.recv(65536), out, MAX_STDOUT_BYTES)
                    got = True
                while chan.recv_stderr_ready():
                    take("stderr", chan.recv_stderr(65536), err, MAX_STDERR_BYTES)
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
                select.select([chan], [], [], min(0.05, remaining))
            # exit-status usually comes right after EOF; the channel's close without one
            # (a killed session) gives -1.
            while not chan.exit_status_ready() and not chan.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(
                        f"{self.node.name}: no exit status within the {timeout:g}s deadline: "
                        f"{_short_cmd(command)}"
                    )
                chan.status_event.wait(min(0.05, remaining))
            status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(
                printable(redact(clip(
                    f"{self.node.name}: connection lost while running a command: {exc}"))),
                transient=False,
            ) from exc
        finally:
            chan.close()
        return CommandResult(
            exit_status=status,
            stdout=b"".join(out).decode("utf-8", "replace"),
            stderr=b"".join(err).decode("utf-8", "replace"),
            duration_s=time.monotonic() - t0,
        )


def _is_handshake_timeout(exc: BaseException) -> bool:
    return isinstance(exc, paramiko.SSHException) and str(exc) == "No existing session"


def _is_banner_error(exc: BaseException) -> bool:
    return isinstance(exc, paramiko.SSHException) and (
        "Error reading SSH protocol banner" in str(exc)
    )


def open_socket(hostname: str, port: int, timeout: float) -> socket.socket:
    """TCP connect to the first address that answers, as paramiko does, bounded by ``timeout``.

    Refused or unreachable on every address raises paramiko's ``NoValidConnectionsError`` (a
    transient error); any other socket error (a timeout, a resolution failure) propagates.
    """
    errors: dict[tuple[Any, ...], OSError] = {}
    infos = socket.getaddrinfo(hostname, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    for family, socktype, proto, _name, addr in infos:
        sock = socket.socket(family, socktype, proto)
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


__all__ = [
    "SSHRunner",
    "SSHSettings",
    "Target",
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
