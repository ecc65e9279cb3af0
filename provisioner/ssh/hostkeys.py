"""Host-key policy: what paramiko's host-key table holds for a host (plain keys, or a check that
accepts a host certificate a listed CA signed), what happens to an unknown key, and the error
that names the fix for a changed or revoked one.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

import paramiko

from provisioner.errors import HostKeyError
from provisioner.ssh.base import (
    USER_KNOWN_HOSTS,
    SSHSettings,
    Target,
    _display_path,
    _keyscan_cmd,
    fingerprint,
)
from provisioner.ssh.known_hosts import HostKeyView, KnownHostEntry, add_known_host, known_host_keys


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

