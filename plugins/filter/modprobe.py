# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Module options in modprobe.d: how kmod reads them, and the plan that makes ours win.

``modprobe_plan(lines, files, own_file, wanted, merge=("NVreg_RegistryDwords",))``:

- ``lines``: ``grep -H`` output, one ``<path>:options <module> <params>`` line per entry, from
  the modprobe.d directories (/etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d,
  /lib/modprobe.d, /usr/lib/modprobe.d).
- ``files``: every ``*.conf`` path in those directories (a file in /etc/modprobe.d shadows the
  file of the same name in the others, as kmod does, even when it sets nothing we look for).
- ``own_file``: the file the role writes (in /etc/modprobe.d).
- ``wanted``: ``{module: {param: value}}`` the role sets.
- ``merge``: parameters whose value is a ``key=value;...`` list (``NVreg_RegistryDwords``):
  the module takes ONE value, so the keys other files set are kept and ours added (ours win on
  the same key, compared without regard to case), each key once.

kmod reads the files in the order of their names (whatever the directory) and, for one
parameter given several times, the module keeps the last. The plan therefore moves every
parameter we own out of the other files in /etc/modprobe.d (their other parameters stay) and
reports the files outside /etc that would still override ours (``conflicts``), which an
operator must shadow in /etc/modprobe.d. Returns::

    {"options": {module: {param: value}},    # what own_file must set (merged)
     "lines": ["options nvme_core multipath=N", ...],
     "edits": [{"path", "line", "new", "replace"}],  # lines in other /etc files to rewrite
     "merged": {param: ["KEY=value (from <path>)", ...]},  # keys kept from other files
     "conflicts": ["<path>: <line>", ...]}
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MODPROBE_DIRS",
    "effective_files",
    "format_registry",
    "modprobe_plan",
    "parse_options_line",
    "parse_registry",
    "tokenize",
]

# kmod's search order: a file name found in an earlier directory hides the same name later.
MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
)
EDITABLE_DIR = "/etc/modprobe.d"


def _norm(module: str) -> str:
    return module.replace("-", "_")


def tokenize(text: str) -> list[str]:
    """Split on blanks outside double quotes (kmod keeps ``a="x y"`` as one parameter)."""
    out: list[str] = []
    cur: list[str] = []
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


def parse_options_line(line: str) -> tuple[str, list[str]] | None:
    """``options <module> p=v ...`` -> (module as written, [param tokens]); None otherwise."""
    tokens = tokenize(line.strip())
    if len(tokens) < 2 or tokens[0] != "options":
        return None
    return tokens[1], tokens[2:]


def _param(token: str) -> tuple[str, str]:
    name, _sep, value = token.partition("=")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return name, value


def parse_registry(value: str) -> list[tuple[str, str]]:
    """``"A=1;B=2;"`` -> [("A", "1"), ("B", "2")] (empty entries dropped)."""
    out: list[tuple[str, str]] = []
    for part in value.strip().strip('"').split(";"):
        part = part.strip()
        if not part:
            continue
        key, _sep, val = part.partition("=")
        out.append((key.strip(), val.strip()))
    return out


def format_registry(pairs: Iterable[tuple[str, str]]) -> str:
    """[("A", "1"), ("B", "2")] -> ``A=1;B=2;`` (NVIDIA writes the trailing semicolon)."""
    return "".join(f"{k}={v};" for k, v in pairs)


def _merge_pairs(base: list[tuple[str, str]], more: Iterable[tuple[str, str]]
                 ) -> list[tuple[str, str]]:
    out = list(base)
    for key, val in more:
        for i, (have, _old) in enumerate(out):
            if have.lower() == key.lower():
                out[i] = (key, val)
                break
        else:
            out.append((key, val))
    return out


def effective_files(files: Iterable[str]) -> list[str]:
    """The files kmod reads, in its order: one per name (earlier directory wins), by name."""
    by_name: dict[str, tuple[int, str]] = {}
    for path in files:
        directory, name = os.path.split(os.path.normpath(path))
        rank = MODPROBE_DIRS.index(directory) if directory in MODPROBE_DIRS else len(MODPROBE_DIRS)
        if name not in by_name or rank < by_name[name][0]:
            by_name[name] = (rank, path)
    return [by_name[name][1] for name in sorted(by_name)]


def modprobe_plan(
    lines: str | Iterable[str],
    files: Iterable[str],
    own_file: str,
    wanted: Mapping[str, Mapping[str, Any]],
    merge: Iterable[str] = ("NVreg_RegistryDwords",),
) -> dict[str, Any]:
    raw = lines.splitlines() if isinstance(lines, str) else list(lines)
    merge_params = set(merge)
    want = {_norm(m): {str(k): str(v) for k, v in p.items()} for m, p in wanted.items()}
    own_file = os.path.normpath(own_file)
    own_name = os.path.basename(own_file)

    entries: dict[str, list[str]] = {}
    for row in raw:
        path, sep, text = row.partition(":")
        if not sep or not text.strip().startswith("options"):
            continue
        entries.setdefault(os.path.normpath(path), []).append(text.rstrip("\n"))
    order = effective_files(list(files) + list(entries) + [own_file])

    merged_pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    merged_from: dict[str, list[str]] = {}
    edits: list[dict[str, str]] = []
    conflicts: list[str] = []
    for path in order:
        for line in entries.get(path, []):
            parsed = parse_options_line(line)
            if parsed is None:
                continue
            module, tokens = parsed
            mod = _norm(module)
            if mod not in want:
                continue
            ours = [t for t in tokens if _param(t)[0] in want[mod]]
            if not ours:
                continue
            for token in ours:
                name, value = _param(token)
                if name in merge_params:
                    pairs = parse_registry(value)
                    key = (mod, name)
                    merged_pairs[key] = _merge_pairs(merged_pairs.get(key, []), pairs)
                    if path != own_file:
                        merged_from.setdefault(name, []).extend(
                            f"{k}={v} (from {path})" for k, v in pairs)
            if path == own_file:
                continue
            if os.path.dirname(path) == EDITABLE_DIR:
                rest = [t for t in tokens if _param(t)[0] not in want[mod]]
                moved = ", ".join(sorted({_param(t)[0] for t in ours}))
                note = f"# gdsfleet.gds.p2pdma moved {moved} to {own_file}"
                new = (f"{note}\noptions {module} {' '.join(rest)}" if rest
                       else f"{note}: {line.strip()}")
                # "replace": the same text as a re.sub replacement (backslashes doubled)
                edits.append({"path": path, "line": line, "new": new,
                              "replace": new.replace("\\", "\\\\")})
            elif os.path.basename(path) > own_name:
                conflicts.append(f"{path}: {line.strip()}")

    options: dict[str, dict[str, str]] = {}
    out_lines: list[str] = []
    for mod, params in want.items():
        options[mod] = {}
        for name, value in params.items():
            if name in merge_params:
                pairs = _merge_pairs(merged_pairs.get((mod, name), []), parse_registry(value))
                value = format_registry(pairs)
            options[mod][name] = value
        rendered = " ".join(
            f'{k}="{v}"' if k in merge_params else f"{k}={v}" for k, v in options[mod].items())
        out_lines.append(f"options {mod} {rendered}")
    return {"options": options, "lines": out_lines, "edits": edits, "merged": merged_from,
            "conflicts": conflicts}


class FilterModule:
    """gdsfleet.gds.modprobe_plan."""

    def filters(self) -> dict[str, Any]:
        return {"modprobe_plan": modprobe_plan}
