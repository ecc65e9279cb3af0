"""known_hosts files, read as OpenSSH reads them: markers, host patterns, hashed names, a
parse cached per file version, and the locked append of a newly accepted key.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from provisioner.errors import HostKeyError
from provisioner.ssh.base import _display_path

_FILE_LOCK = threading.Lock()


def add_known_host(path: str, hostname: str, key: paramiko.PKey) -> None:
    """Append ``hostname key`` to a known_hosts file (locked; safe from parallel workers),
    created 0600 in a folder created 0700."""
    from provisioner.fsutil import (
        UnsafeFolderError,
        is_project_state_dir,
        narrow_owned,
        open_private,
        owned_dir,
        private_dir,
    )

    p = Path(path).expanduser()
    ours = is_project_state_dir(p.parent)
    if ours:  # the project's state folder: the caller's alone, no link followed (issue 45)
        try:
            owned_dir(p.parent)
        except UnsafeFolderError as exc:
            raise HostKeyError(f"not adding the host key of {hostname}: {exc.strerror}"
                               ) from None
    private_dir(p.parent)  # 0700 when created (the project's state folder: always narrowed)
    if ours:
        narrow_owned(p)  # an older version's 0644 file
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    fd = open_private(p, follow=not ours)  # created 0600, appended
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

