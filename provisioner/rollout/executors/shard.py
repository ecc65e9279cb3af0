"""Split a wave's hosts into shards, one per execution node.

A stable hash by default: a host lands on the same execution node in every run while the list
of execution nodes stays the same (rendezvous hashing: removing one execution node moves only
its own hosts). ``var:NAME`` hashes the host's inventory variable ``NAME`` instead of its name,
so every host with one value (a site, a rack) goes to one execution node; a host without the
variable is placed by its own name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.errors import UsageError

_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class ShardBy:
    var: str | None = None  # None: the host name

    @classmethod
    def parse(cls, spec: str | None) -> ShardBy:
        if not spec or spec == "hash":
            return cls()
        kind, sep, name = spec.partition(":")
        if kind != "var" or not sep or not _VAR.match(name):
            raise UsageError(f"--shard-by {spec[:80]!r}: give 'hash' or 'var:NAME' with an "
                             f"inventory variable name (e.g. var:rack)")
        return cls(var=name)


def _weight(key: str, node: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{node}\0{key}".encode()).digest()[:8], "big")


def _key(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def shard_hosts(
    hosts: Sequence[str],
    exec_nodes: Sequence[str],
    by: ShardBy = ShardBy(),
    value_of: Callable[[str, str], Any] | None = None,
) -> dict[str, list[str]]:
    """``{execution node: [hosts]}`` in the hosts' order; execution nodes with no host left
    out. ``value_of(host, var)`` returns the host's variable (None when it has none)."""
    if not exec_nodes:
        raise ValueError("no execution node to shard on")
    out: dict[str, list[str]] = {}
    for host in hosts:
        key = "host:" + host
        if by.var is not None and value_of is not None:
            value = value_of(host, by.var)
            if value is not None:
                key = "var:" + _key(value)
        node = max(exec_nodes, key=lambda n: (_weight(key, n), n))
        out.setdefault(node, []).append(host)
    return {n: out[n] for n in exec_nodes if n in out}


def inventory_values(manager: Any) -> Callable[[str, str], Any]:
    """``value_of`` for :func:`shard_hosts` from a loaded inventory (host and group vars,
    as Ansible merges them; the value as written, not templated)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    variables = VariableManager(loader=DataLoader(), inventory=manager)
    cache: dict[str, Mapping[str, Any]] = {}

    def value_of(host: str, var: str) -> Any:
        if host not in cache:
            h = manager.get_host(host)
            cache[host] = variables.get_vars(host=h, include_hostvars=False) if h else {}
        return cache[host].get(var)

    return value_of
