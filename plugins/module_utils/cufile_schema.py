# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The cufile.json schema, read from ``cufile_schema.json`` beside this file.

One schema for the whole project: the collection's filter (``plugins/filter/cufile.py``) and
``provisioner verify`` (``provisioner/verify/parsers/cufile.py``) both load this module by
path, so a key, its type and the key suggested for a wrong name are decided in one place. The
provisioner wheel carries a build-time copy of this file and the JSON (``setup.py``); git holds
one. Standard library only: the collection must not import the provisioner, and the
provisioner must not need Ansible.

``Schema.check(config)`` walks a (partial or complete) cufile.json document and returns
``Finding``s: unknown keys with the key meant, wrong types with what was expected, sections that
are not mappings. The messages are the same for both consumers.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

SCHEMA_FILE = Path(__file__).with_name("cufile_schema.json")

_UNITS = " (size keys end in _kb; the value is in KiB)"


class Finding(NamedTuple):
    """One problem: ``kind`` is ``unknown``, ``type`` or ``section``; ``target`` is the key
    meant for an unknown key (None when nothing fits)."""

    path: str
    kind: str
    message: str
    target: str | None = None


def typename(value: Any) -> str:
    """A plain type name (Ansible hands over tagged subclasses of str, dict, ...)."""
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"),
                       (Mapping, "dict"), (list, "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def plain(value: Any) -> Any:
    """The value as plain Python (for messages: no tagged-type reprs)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_ipv4(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


class Schema:
    """The loaded schema: keys, sections, aliases, and the checks built on them."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.keys: dict[str, dict[str, Any]] = dict(data["keys"])
        self.aliases: dict[str, dict[str, Any]] = dict(data.get("aliases", {}))
        self.section_aliases: dict[str, dict[str, Any]] = dict(data.get("section_aliases", {}))
        self.sources: dict[str, str] = dict(data.get("sources", {}))
        self.sections: set[str] = set()
        for key in self.keys:
            parts = key.split(".")
            for i in range(1, len(parts)):
                self.sections.add(".".join(parts[:i]))
        self._leaves: dict[str, list[str]] = {}
        for path in sorted(self.keys) + sorted(self.sections):
            self._leaves.setdefault(path.rsplit(".", 1)[-1], []).append(path)

    # -- lookups ---------------------------------------------------------------------------

    def is_key(self, path: str) -> bool:
        return path in self.keys

    def is_section(self, path: str) -> bool:
        return path in self.sections

    def children(self, section: str) -> list[str]:
        """Direct child names of a section ('' for the top level)."""
        prefix = f"{section}." if section else ""
        names = {p[len(prefix):].split(".", 1)[0]
                 for p in list(self.keys) + sorted(self.sections) if p.startswith(prefix)}
        return sorted(names)

    def legacy_cache_keys(self) -> list[str]:
        return [k for k, e in self.keys.items() if e.get("legacy_cache_key")]

    def defaults(self, rendered_only: bool = True) -> dict[str, Any]:
        """NVIDIA's defaults as a nested document (by default: only the keys the role renders)."""
        out: dict[str, Any] = {}
        for path, entry in self.keys.items():
            if rendered_only and not entry.get("render"):
                continue
            if entry.get("default") is None:
                continue
            node = out
            *parents, leaf = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = json.loads(json.dumps(entry["default"]))
        return out

    # -- types -------------------------------------------------------------------------------

    def expected(self, path: str) -> str:
        """What the key takes, as a phrase."""
        e = self.keys[path]
        kind = e["type"]
        if kind == "bool":
            return "a boolean (true or false, unquoted)"
        if kind == "int":
            lo, hi = e.get("minimum"), e.get("maximum")
            text = "an integer"
            if lo is not None and hi is not None:
                text = f"an integer from {lo} to {hi}"
            elif lo is not None:
                text = f"an integer >= {lo}"
            if e.get("forbidden"):
                text += " other than " + ", ".join(str(v) for v in e["forbidden"])
            return text
        if kind == "string":
            return "a string" + (f" matching {e['pattern']}" if e.get("pattern") else "")
        if kind == "enum":
            return "one of " + ", ".join(e["values"])
        if kind == "int_list":
            return f"a list of integers >= {e.get('minimum', 0)}"
        if kind == "string_list":
            return "a list of strings"
        if kind == "ipv4_list":
            return "a list of IPv4 addresses"
        if kind == "enum_list":
            return f"a list of {', '.join(e['values'])}"
        if kind == "mount_table":
            return "a mapping of mount point -> {rdma_dev_addr_list: [IPv4 addresses]}"
        raise ValueError(f"cufile_schema.json: {path} has unknown type {kind!r}")

    def type_problem(self, path: str, value: Any) -> str | None:
        """None when ``value`` fits the key, else the expected phrase (with the bad item)."""
        e = self.keys[path]
        kind = e["type"]
        want = self.expected(path)
        if kind == "bool":
            return None if isinstance(value, bool) else want
        if kind == "int":
            if not _is_int(value):
                return want
            if e.get("minimum") is not None and value < e["minimum"]:
                return want
            if e.get("maximum") is not None and value > e["maximum"]:
                return want
            return want if value in e.get("forbidden", []) else None
        if kind == "string":
            if not isinstance(value, str):
                return want
            return want if e.get("pattern") and not re.match(e["pattern"], value) else None
        if kind == "enum":
            return None if isinstance(value, str) and value in e["values"] else want
        if kind == "mount_table":
            if not isinstance(value, Mapping):
                return want
            for mount, conf in value.items():
                if not isinstance(conf, Mapping) or set(conf) - {"rdma_dev_addr_list"}:
                    return f"{want} ({plain(mount)!r} is not)"
                addrs = conf.get("rdma_dev_addr_list", [])
                if not isinstance(addrs, list) or not all(_is_ipv4(a) for a in addrs):
                    return f"{want} ({plain(mount)!r} is not)"
            return None
        if not isinstance(value, list):
            return want
        for item in value:
            if kind == "int_list":
                ok = _is_int(item) and item >= e.get("minimum", 0)
            elif kind == "string_list":
                ok = isinstance(item, str)
            elif kind == "ipv4_list":
                ok = _is_ipv4(item)
            else:  # enum_list
                ok = isinstance(item, str) and item in e["values"]
            if not ok:
                return f"{want} ({plain(item)!r} is not)"
        return None

    # -- suggestions ---------------------------------------------------------------------------

    def suggest(self, path: str) -> tuple[str | None, str]:
        """For an unknown dotted ``path``: (the key meant or None, a phrase saying why)."""
        section, _dot, key = path.rpartition(".")
        alias = self.aliases.get(path) or self.aliases.get(key)
        if alias is not None:
            target = alias.get("key")
            note = alias.get("note")
            if target is None:
                return None, f"not a cufile.json setting: {note}"
            units = _UNITS if target.endswith("_kb") and not key.endswith("_kb") else ""
            return target, f"did you mean {target}?{units}" + (f" ({note})" if note else "")
        if key in self.section_aliases and section:
            target = self.section_aliases[key]["key"]
            return target, f"{key}/{target} is a top-level section"
        prefix = f"{section}." if section else ""
        places = [p for p in self._leaves.get(key, []) if not (prefix and p.startswith(prefix))]
        if places:
            places.sort(key=lambda p: (not p.startswith("properties."), p))
            return places[0], f"{key} belongs under {' or '.join(places)}"
        if f"{prefix}{key}_kb" in self.keys:
            target = f"{prefix}{key}_kb"
            return target, (f"did you mean {target}? (every size key ends in _kb; "
                            "the value is in KiB)")
        for candidate in sorted(self.keys):
            if candidate.endswith(f".{key}_kb"):
                return candidate, (f"did you mean {candidate}? (every size key ends in _kb; "
                                   "the value is in KiB)")
        siblings = self.children(section)
        close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
        if close:
            target = f"{prefix}{close[0]}"
            return target, f"did you mean {target}?"
        leaves = difflib.get_close_matches(key, sorted(self._leaves), n=1, cutoff=0.7)
        if leaves:
            target = self._leaves[leaves[0]][0]
            return target, f"did you mean {' or '.join(self._leaves[leaves[0]])}?"
        if siblings:
            return None, f"known keys here: {', '.join(siblings)}"
        return None, ""

    # -- the walk ------------------------------------------------------------------------------

    def check(self, config: Mapping[str, Any], extra_keys: Iterable[str] = ()) -> list[Finding]:
        """Every unknown key, wrong type and non-mapping section in ``config``. A legacy
        section alias (``blacklist``) is checked as the section it names."""
        out: list[Finding] = []
        self._walk(config, "", frozenset(extra_keys), out)
        return out

    def _walk(self, config: Mapping[str, Any], section: str, extra: frozenset[str],
              out: list[Finding]) -> None:
        for key, value in config.items():
            if not isinstance(key, str):
                out.append(Finding(f"{section}.{key!r}" if section else repr(key), "type",
                                   f"{section + '.' if section else ''}{key!r}: keys must be "
                                   "strings"))
                continue
            real = key
            if not section and key in self.section_aliases:
                real = self.section_aliases[key]["key"]
            path = f"{section}.{real}" if section else real
            shown = f"{section}.{key}" if section else key
            if shown in extra or path in extra:
                continue
            if path in self.keys:
                problem = self.type_problem(path, value)
                if problem is not None:
                    out.append(Finding(path, "type", self._type_message(path, value, problem)))
                continue
            if path in self.sections:
                if not isinstance(value, Mapping):
                    out.append(Finding(path, "section",
                                       f"{path}: expected a mapping (section with keys "
                                       f"{', '.join(self.children(path))}), got "
                                       f"{typename(value)} {plain(value)!r}"))
                    continue
                self._walk(value, path, extra, out)
                continue
            target, hint = self.suggest(shown)
            out.append(Finding(shown, "unknown",
                               f"{shown}: unknown cufile.json key" + (f"; {hint}" if hint else ""),
                               target))

    def _type_message(self, path: str, value: Any, problem: str) -> str:
        kind = self.keys[path]["type"]
        hint = ""
        if kind == "bool" and isinstance(value, str):
            hint = " (a quoted string is not a boolean)"
        elif kind == "int" and isinstance(value, str) and value.lstrip("-").isdigit():
            hint = f" (write {value} without quotes)"
        return f"{path}: expected {problem}, got {typename(value)} {plain(value)!r}{hint}"


_CACHE: dict[str, Schema] = {}


def load(path: str | Path | None = None) -> Schema:
    """The schema in ``path`` (default: ``cufile_schema.json`` beside this module), cached."""
    file = Path(path) if path is not None else SCHEMA_FILE
    key = str(file.resolve())
    if key not in _CACHE:
        _CACHE[key] = Schema(json.loads(file.read_text(encoding="utf-8")))
    return _CACHE[key]
