"""~/.ssh/config and the inventory, combined into a connection :class:`Target`: HostName, Port,
User, IdentityFile, UserKnownHostsFile, ProxyCommand and ProxyJump chains.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from pathlib import Path
from typing import Any

import paramiko

from provisioner.errors import ConnectError
from provisioner.inventory import Node
from provisioner.ssh.base import SSHSettings, Target, redact


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


