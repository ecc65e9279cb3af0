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

from provisioner import collection_utils

# How kmod reads modprobe.d: one copy, in the collection (plugins/module_utils/modprobe_conf.py),
# shared with the filter gdsfleet.gds.modprobe_plan that plans what the p2pdma role writes.
_conf = collection_utils.load("modprobe_conf.py")
MODPROBE_DIRS: tuple[str, ...] = _conf.MODPROBE_DIRS
tokenize = _conf.tokenize
effective_files = _conf.effective_files
_unquote = _conf.unquote


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
    return dict(_conf.parse_registry(value or ""))


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
            parsed = _conf.parse_options_line(line)
            if parsed is None:
                continue
            module = parsed[0].replace("-", "_")
            for token in parsed[1]:
                name, value = _conf.param(token)
                out.setdefault(module, {})[name] = {"value": value, "file": path}
    return out


__all__ = [
    "configured_options",
    "effective_files",
    "parse_nvidia_params",
    "parse_registry_dwords",
    "registry_has",
    "tokenize",
]
