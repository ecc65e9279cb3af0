# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How kmod reads modprobe.d: the one copy, shared by the collection and the provisioner.

The filter ``gdsfleet.gds.modprobe_plan`` (plugins/filter/modprobe.py) plans the options the
p2pdma role writes; ``provisioner verify`` (provisioner/verify/parsers/modprobe.py) reads back
what a node configures. Both need the same reading of the files, so it lives here; the
provisioner's wheel carries a build-time copy (setup.py), as for cufile_schema.py.

- ``MODPROBE_DIRS``: kmod's directories, in search order.
- ``effective_files(paths)``: the files kmod reads, in its order: one per file name (a name in
  an earlier directory hides the same name later), sorted by name whatever the directory.
- ``tokenize(text)``: split on blanks outside double quotes (``a="x y"`` stays one token).
- ``unquote(value)``: strip one pair of surrounding double quotes.
- ``parse_options_line(line)``: ``options <module> p=v ...`` -> (module, [tokens]) or None.
- ``param(token)``: ``name=value`` -> (name, unquoted value).
- ``parse_registry(value)``: ``"A=1;B=0x2;"`` (NVreg_RegistryDwords) -> [("A", "1"), ...].

Pure Python, standard library only.
"""

from __future__ import annotations

import os

__all__ = [
    "MODPROBE_DIRS",
    "effective_files",
    "param",
    "parse_options_line",
    "parse_registry",
    "tokenize",
    "unquote",
]

# kmod's search order: a file name found in an earlier directory hides the same name later.
MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
)


def unquote(value):
    """``"x y"`` -> ``x y``; anything else unchanged (surrounding blanks dropped)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def tokenize(text):
    """Split on blanks outside double quotes (kmod keeps ``a="x y"`` as one parameter)."""
    out = []
    cur = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch.isspace() and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse_options_line(line):
    """``options <module> p=v ...`` -> (module as written, [param tokens]); None otherwise."""
    tokens = tokenize(line.strip())
    if len(tokens) < 2 or tokens[0] != "options":
        return None
    return tokens[1], tokens[2:]


def param(token):
    """``name=value`` or ``name="a b"`` -> (name, value without the quotes)."""
    name, _sep, value = token.partition("=")
    return name, unquote(value)


def parse_registry(value):
    """``"A=1;B=2;"`` -> [("A", "1"), ("B", "2")] in order (empty entries dropped)."""
    out = []
    for part in unquote(value or "").split(";"):
        key, _sep, val = part.partition("=")
        if key.strip():
            out.append((key.strip(), val.strip()))
    return out


def effective_files(files):
    """The files kmod reads, in its order: one per name (earlier directory wins), by name."""
    by_name = {}
    for path in files:
        directory, name = os.path.split(os.path.normpath(path))
        rank = MODPROBE_DIRS.index(directory) if directory in MODPROBE_DIRS else len(MODPROBE_DIRS)
        if name not in by_name or rank < by_name[name][0]:
            by_name[name] = (rank, path)
    return [by_name[name][1] for name in sorted(by_name)]
