"""Kernel module options: what the running modules use and what modprobe.d configures (pure).

- ``parse_nvidia_params(text)``: ``/proc/driver/nvidia/params`` of the NVIDIA driver, one
  ``Key: value`` per line, string values in double quotes (driver 580 on an H100 prints
  ``RegistryDwords: ""`` when no NVreg_RegistryDwords was given;
  tests/fixtures/nvidia_params/ holds the capture).
- ``parse_registry_dwords(value)``: ``"RMForceStaticBar1=1;RmForceDisableIomapWC=1;"`` ->
  ordered ``{key: value}``.
- ``configured_options(doc, cmdline=None)``: the options the gather script found in the
  modprobe.d directories (``{"files": [...], "texts": {path: text}, "kmod_version": "..."}``;
  records from before carry ``"options": ["<path>:options <module> ...", ...]`` instead of the
  texts), resolved the way the node's kmod does: only the directories its version reads,
  files in the order of their names whatever the directory, a file in an earlier directory
  hiding the file of the same name later, lines ending in a backslash joined with the next,
  then the ``module.param=`` entries of the kernel command line (``cmdline``, reported with
  the file ``KERNEL_CMDLINE``) after every file, the last value of a parameter winning.
  Returns ``{module: {param: {"value", "file"}}}``.
- ``boot_params(cmdline, builtin, grub, grub_d, grubby)``: what overrides modprobe.d for the
  p2pdma options: ``{"builtin": [modules] or None, "cmdline": {"multipath", "registry_dwords"}
  (/proc/cmdline), "bootloader": {"source", "args", "multipath", "registry_dwords"}}`` (the
  next boot's arguments: ``grubby --info=DEFAULT`` on RHEL, else /etc/default/grub and
  grub.d; source None when neither was read).
- ``kmod_dirs_for(doc)``: (kmod major version or None, the directories it reads in order).
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
KERNEL_CMDLINE = "kernel command line"
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


def _load_doc(doc: dict[str, Any] | str | None) -> dict[str, Any]:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc) if doc.strip() else {}
        except ValueError:
            doc = {}
    return doc if isinstance(doc, dict) else {}


def kmod_dirs_for(doc: dict[str, Any] | str | None) -> tuple[int | None, tuple[str, ...]]:
    """(kmod major version, its modprobe.d directories in order); unknown: None, the newest."""
    version = _conf.kmod_version(str(_load_doc(doc).get("kmod_version") or ""))
    return version, tuple(_conf.kmod_dirs(version))


def configured_options(doc: dict[str, Any] | str | None, cmdline: str | None = None
                       ) -> dict[str, dict[str, dict[str, str]]]:
    """{module: {param: {"value": v, "file": path}}} as the node's kmod would apply them."""
    doc = _load_doc(doc)
    files = [str(f) for f in doc.get("files") or []]
    by_file: dict[str, list[str]] = {}
    texts = doc.get("texts")
    if isinstance(texts, dict):
        for path, rows in _conf.options_entries(texts).items():
            by_file[path] = [line for _raw, line in rows]
    else:
        for row in doc.get("options") or []:
            path, sep, line = str(row).partition(":")
            if sep:
                by_file.setdefault(os.path.normpath(path), []).append(line)
    out: dict[str, dict[str, dict[str, str]]] = {}
    _version, dirs = kmod_dirs_for(doc)
    for path in effective_files(files + list(by_file), dirs):
        for line in by_file.get(path, []):
            parsed = _conf.parse_options_line(line)
            if parsed is None:
                continue
            module = parsed[0].replace("-", "_")
            for token in parsed[1]:
                name, value = _conf.param(token)
                out.setdefault(module, {})[name] = {"value": value, "file": path}
    if cmdline:
        for module, token in _conf.cmdline_options(cmdline):
            name, value = _conf.param(token)
            out.setdefault(module, {})[name] = {"value": value, "file": KERNEL_CMDLINE}
    return out


def _p2pdma_params(cmdline: str | None) -> dict[str, str | None]:
    return {"multipath": _conf.kernel_param(cmdline or "", "nvme_core", "multipath"),
            "registry_dwords": _conf.kernel_param(cmdline or "", "nvidia",
                                                  "NVreg_RegistryDwords")}


def boot_params(cmdline: str | None, builtin: str | None, grub: str | None,
                grub_d: str | None, grubby: str | None) -> dict[str, Any]:
    """Built-in modules and the nvme_core / nvidia parameters of the kernel command line, now
    and for the next boot (see the module docstring)."""
    source = args = None
    if grubby is not None and _conf.grubby_args(grubby) is not None:
        source, args = "grubby --info=DEFAULT", _conf.grubby_args(grubby)
    elif grub is not None or grub_d:
        texts = [grub or ""]
        try:
            extra = json.loads(grub_d) if grub_d else {}
        except ValueError:
            extra = {}
        if isinstance(extra, dict):
            texts += [str(extra[k]) for k in sorted(extra)]
        source, args = "/etc/default/grub", _conf.grub_cmdline(texts) or ""
    return {
        "builtin": _conf.builtin_modules(builtin) if builtin is not None else None,
        "cmdline": _p2pdma_params(cmdline),
        "bootloader": {"source": source, "args": args,
                       **_p2pdma_params(args if source else None)},
    }


__all__ = [
    "KERNEL_CMDLINE",
    "boot_params",
    "configured_options",
    "kmod_dirs_for",
    "effective_files",
    "parse_nvidia_params",
    "parse_registry_dwords",
    "registry_has",
    "tokenize",
]
