"""What every part of the SSH transport shares: the run's :class:`SSHSettings`, the resolved
:class:`Target`, the default known_hosts paths, and the helpers that make a message safe to
show (:func:`redact`, :func:`clip`) or name a key or a file (:func:`fingerprint`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"


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

