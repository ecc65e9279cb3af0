"""Kernel module options: what the running modules use and what modprobe.d configures (pure).

- ``parse_nvidia_params(text)``: ``/proc/driver/nvidia/params`` of the NVIDIA driver, one
  ``Key: value`` per line, string values in double quotes (driver 580 on an H100 prints
  ``RegistryDwords: ""`` when no NVreg_RegistryDwords was given;
  tests/fixtures/nvidia_params/ holds the capture).
- ``parse_registry_dwords(value)``: ``"RMForceStaticBar1=1;RmForceDisableIomapWC=1;"`` ->
  ordered ``{key: value}``.
- ``configured_options(doc)``: the options the gather script found in the modprobe.d
  directories (``{"files": [...], "options": ["<path>:options <module> ...", ...]}``), resolved
  the way kmod does: files read in the order of their names whatever the directory, a file in
  /etc/modprobe.d hiding the file of the same name elsewhere, and the last value of a parameter
  winning. Returns ``{module: {param: {"value", "file"}}}``.
"""

from __future__ import annotations

import json
import os
from typing import Any

# kmod's search order: a file name found in an earlier directory hides the same name later.
MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_nvidia_params(text: str) -> dict[str, str]:
    """``Key: value`` lines -> {Key: value} with string values unquoted."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = _unquote(value)
    return out


def parse_registry_dwords(value: str | None) -> dict[str, str]:
    """``A=1;B=0x2;`` -> {"A": "1", "B": "0x2"} (empty entries dropped, later keys win)."""
    out: dict[str, str] = {}
    for part in _unquote(value or "").split(";"):
        key, _, val = part.partition("=")
        if key.strip():
            out[key.strip()] = val.strip()
    return out


def registry_has(registry: dict[str, str], key: str, value: str) -> bool:
    """Whether ``key`` (compared without regard to case, as the driver's registry does) is set
    to ``value``; ``1`` and ``0x1`` are the same number."""
    for have, val in registry.items():
        if have.lower() == key.lower():
            return _same_number(val, value)
    return False


def _same_number(a: str, b: str) -> bool:
    try:
        return int(a, 0) == int(b, 0)
    except ValueError:
        return a.strip() == b.strip()


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


def effective_files(files: list[str]) -> list[str]:
    """The files kmod reads, in its order: one per name (earlier directory wins), by name."""
    by_name: dict[str, tuple[int, str]] = {}
    for path in files:
        directory, name = os.path.split(os.path.normpath(path))
        rank = MODPROBE_DIRS.index(directory) if directory in MODPROBE_DIRS else len(
            MODPROBE_DIRS)
        if name not in by_name or rank < by_name[name][0]:
            by_name[name] = (rank, path)
    return [by_name[name][1] for name in sorted(by_name)]


def configured_options(doc: dict[str, Any] | str | None) -> dict[str, dict[str, dict[str, str]]]:
    """{module: {param: {"value": v, "file": path}}} as kmod would apply them."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc) if doc.strip() else {}
        except ValueError:
            doc = {}
    if not isinstance(doc, dict):
        return {}
    files = [str(f) for f in doc.get("files") or []]
    by_file: dict[str, list[str]] = {}
    for row in doc.get("options") or []:
        path, sep, line = str(row).partition(":")
        if sep:
            by_file.setdefault(os.path.normpath(path), []).append(line)
    out: dict[str, dict[str, dict[str, str]]] = {}
    for path in effective_files(files + list(by_file)):
        for line in by_file.get(path, []):
            tokens = tokenize(line.strip())
            if len(tokens) < 3 or tokens[0] != "options":
                continue
            module = tokens[1].replace("-", "_")
            for token in tokens[2:]:
                name, _, value = token.partition("=")
                out.setdefault(module, {})[name] = {"value": _unquote(value), "file": path}
    return out


__all__ = [
    "configured_options",
    "effective_files",
    "parse_nvidia_params",
    "parse_registry_dwords",
    "registry_has",
    "tokenize",
]
