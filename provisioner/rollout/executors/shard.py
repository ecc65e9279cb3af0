"""Split a wave's hosts into shards, one per execution node.

A stable hash by default: a host lands on the same execution node in every run while the hosts
and the execution nodes stay the same, whatever order they are listed in. ``var:NAME`` hashes
the host's inventory variable ``NAME`` instead of its name, so every host with one value (a
site, a rack) goes to one execution node; a host without the variable is placed by its own name.

Rendezvous hashing with bounded loads: each execution node takes at most ``ceil(hosts / K)``
hosts, and a host (or a rack) goes to the first execution node of its own hash order that has
room; a rack larger than that has an execution node to itself. A wave lasts as long as its
largest shard, so shards are as even as the hosts allow (plain rendezvous hashing gave 53, 46,
47 and 54 of 200 hosts on four execution nodes: the wave took 27% of the K=1 time instead of
25%). Removing an execution node still moves mostly its own hosts; a few others move to make
room.
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
    groups: dict[str, list[str]] = {}
    for host in dict.fromkeys(hosts):
        key = "host:" + host
        if by.var is not None and value_of is not None:
            value = value_of(host, by.var)
            if value is not None:
                key = "var:" + _key(value)
        groups.setdefault(key, []).append(host)
    nodes = sorted(set(exec_nodes))
    pool = sum(len(g) for g in groups.values())  # hosts that the open nodes share
    open_nodes = list(nodes)
    load = dict.fromkeys(nodes, 0)
    place: dict[str, str] = {}
    # Larger groups first (they are the hard ones to fit), then an order that is the hosts'
    # own hash, not the order they were listed in.
    for key in sorted(groups, key=lambda k: (-len(groups[k]), _weight(k, ""), k)):
        size = len(groups[key])
        ranked = sorted(open_nodes, key=lambda n: (_weight(key, n), n), reverse=True)
        cap = -(-pool // len(open_nodes))
        if size > cap and len(open_nodes) > 1:
            # A rack larger than an even share has a node to itself (the larger ones came
            # first, so its first choice is still empty); the rest share the others evenly.
            node = ranked[0]
            open_nodes.remove(node)
            pool -= size
        else:
            fits = [n for n in ranked if load[n] + size <= cap]
            node = fits[0] if fits else min(ranked, key=lambda n: load[n])
        load[node] += size
        for host in groups[key]:
            place[host] = node
    out: dict[str, list[str]] = {}
    for host in hosts:
        out.setdefault(place[host], []).append(host)
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
