# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Module options in modprobe.d: how kmod reads them, and the plan that makes ours win.

``modprobe_plan(lines, files, own_file, wanted, merge=("NVreg_RegistryDwords",),
kmod_version=None)``:

- ``lines``: the files' text, read in full so that lines ending in a backslash are joined as
  kmod joins them: ``{path: text}``, or the results of ``ansible.builtin.slurp`` over the files
  (``[{"source", "content" (base64)}]``); or (older form, no continuation lines) ``grep -H``
  output, one ``<path>:options <module> <params>`` line per entry.
- ``files``: every ``*.conf`` path in the modprobe.d directories (/etc, /run, /usr/local/lib,
  /usr/lib, /lib; a file in /etc/modprobe.d shadows the file of the same name in the others, as
  kmod does, even when it sets nothing we look for).
- ``kmod_version``: the node's ``modprobe --version`` (or its major number): which directories
  kmod reads and in which order (before v32 not /usr/lib/modprobe.d; from v32 /usr/lib before
  /lib). Unknown: the newest order, which reads every directory.
- ``own_file``: the file the role writes (in /etc/modprobe.d).
- ``wanted``: ``{module: {param: value}}`` the role sets.
- ``merge``: parameters whose value is a ``key=value;...`` list (``NVreg_RegistryDwords``):
  the module takes ONE value, so the keys other files set are kept and ours added (ours win on
  the same key, compared without regard to case), each key once.

``kernel_args_plan(cmdline, builtin, grub=None, grubby=None, multipath="N")``: whether the
kernel command line must carry ``nvme_core.multipath=N`` because modprobe.d cannot set it (a
built-in nvme_core reads only the command line; kmod applies the command line's
``nvme_core.multipath=`` after every modprobe.d file). ``cmdline``: /proc/cmdline; ``builtin``:
modules.builtin of the running kernel; ``grub``: /etc/default/grub then grub.d/*.cfg (texts or
slurp results); ``grubby``: ``grubby --info=DEFAULT`` output (RHEL; wins over grub). Returns
``{"needed", "reasons", "arg", "builtin", "running", "next", "source", "bootloader_ok",
"remove" (grubby arguments to drop), "registry_on_cmdline"}``.

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

import base64
import binascii
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "MODPROBE_DIRS",
    "effective_files",
    "format_registry",
    "kernel_args_plan",
    "modprobe_plan",
    "parse_options_line",
    "parse_registry",
    "tokenize",
]


def _load_conf_module() -> ModuleType:
    """plugins/module_utils/modprobe_conf.py (how kmod reads modprobe.d, shared with
    provisioner verify), by path: it works the same in an installed collection, in this
    checkout (unit tests) and whatever Ansible names this file."""
    path = Path(__file__).resolve().parent.parent / "module_utils" / "modprobe_conf.py"
    name = "gdsfleet_gds_module_utils_modprobe_conf"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - broken install
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_conf = _load_conf_module()
MODPROBE_DIRS: tuple[str, ...] = _conf.MODPROBE_DIRS
tokenize = _conf.tokenize
effective_files = _conf.effective_files
parse_options_line = _conf.parse_options_line
parse_registry = _conf.parse_registry
_param = _conf.param
kmod_dirs = _conf.kmod_dirs
EDITABLE_DIR = "/etc/modprobe.d"


def _norm(module: str) -> str:
    return module.replace("-", "_")


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


_MAX_FILE = 1024 * 1024


def _texts(lines: Any) -> dict[str, str] | None:
    """{path: text} from a mapping or slurp results; None for the older grep rows."""
    if isinstance(lines, Mapping):
        return {str(k): str(v or "")[:_MAX_FILE] for k, v in lines.items()}
    if isinstance(lines, str):
        return None
    rows = list(lines)
    if not rows or not all(isinstance(r, Mapping) for r in rows):
        return None
    out: dict[str, str] = {}
    for row in rows:
        if row.get("failed") or not row.get("source") or row.get("content") is None:
            continue  # unreadable (dangling link, directory): kmod skips it too
        try:
            data = base64.b64decode(str(row["content"])[: 2 * _MAX_FILE], validate=False)
        except (binascii.Error, ValueError):
            continue
        out[str(row["source"])] = data.decode("utf-8", "replace")
    return out


def _entries(lines: Any) -> dict[str, list[tuple[str, str]]]:
    """{path: [(raw text as in the file, line as kmod reads it)]} for the options lines."""
    texts = _texts(lines)
    if texts is not None:
        return _conf.options_entries(texts)
    raw = lines.splitlines() if isinstance(lines, str) else [str(r) for r in lines]
    entries: dict[str, list[tuple[str, str]]] = {}
    for row in raw:
        path, sep, text = row.partition(":")
        if not sep or not text.strip().startswith("options"):
            continue
        text = text.rstrip("\n")
        entries.setdefault(os.path.normpath(path), []).append((text, text))
    return entries


def modprobe_plan(
    lines: Any,
    files: Iterable[str],
    own_file: str,
    wanted: Mapping[str, Mapping[str, Any]],
    merge: Iterable[str] = ("NVreg_RegistryDwords",),
    kmod_version: Any = None,
) -> dict[str, Any]:
    merge_params = set(merge)
    want = {_norm(m): {str(k): str(v) for k, v in p.items()} for m, p in wanted.items()}
    own_file = os.path.normpath(own_file)
    own_name = os.path.basename(own_file)

    entries = _entries(lines)
    dirs = kmod_dirs(kmod_version)
    order = effective_files(list(files) + list(entries) + [own_file], dirs)

    merged_pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    merged_from: dict[str, list[str]] = {}
    edits: list[dict[str, str]] = []
    conflicts: list[str] = []
    for path in order:
        for raw_line, line in entries.get(path, []):
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
                # "line": the text as it stands in the file (a line continued with a
                # backslash spans several), so that ansible.builtin.replace finds it
                edits.append({"path": path, "line": raw_line, "new": new,
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


def _slurped(value: Any) -> str:
    """A slurp result (base64 ``content``; failed or skipped: empty) or plain text."""
    if isinstance(value, Mapping):
        if value.get("failed") or value.get("content") is None:
            return ""
        try:
            data = base64.b64decode(str(value["content"])[: 2 * _MAX_FILE])
        except (binascii.Error, ValueError):
            return ""
        return data.decode("utf-8", "replace")
    return str(value or "")[:_MAX_FILE]


def kernel_args_plan(
    cmdline: Any,
    builtin: Any,
    grub: Iterable[Any] | None = None,
    grubby: str | None = None,
    multipath: str = "N",
) -> dict[str, Any]:
    """Whether nvme_core's multipath must be set on the kernel command line, and what stands
    in the way (see the module docstring of kernel_args_plan.yml)."""
    now_text = _slurped(cmdline)
    builtin_mods = _conf.builtin_modules(_slurped(builtin))
    if grubby is not None and _conf.grubby_args(grubby) is not None:
        source, next_text = "grubby --info=DEFAULT", _conf.grubby_args(grubby)
    elif grub is not None:
        texts = [_slurped(t) for t in grub]
        source, next_text = "/etc/default/grub", _conf.grub_cmdline(texts) or ""
    else:
        source, next_text = None, None
    is_builtin = "nvme_core" in builtin_mods
    now = _conf.kernel_param(now_text, "nvme_core", "multipath")
    nxt = _conf.kernel_param(next_text, "nvme_core", "multipath") if source else None
    reasons = []
    if is_builtin:
        reasons.append("nvme_core is built into the kernel (modules.builtin): it never reads "
                       "modprobe.d, only the kernel command line")
    if now is not None and now != multipath:
        reasons.append(f"/proc/cmdline sets nvme_core.multipath={now}, which kmod applies "
                       "after every modprobe.d file")
    if nxt is not None and nxt != multipath and nxt != now:
        reasons.append(f"{source} sets nvme_core.multipath={nxt} for the next boot")
    remove = []
    if source == "grubby --info=DEFAULT":
        for word in str(next_text).split():
            name, _sep, value = word.partition("=")
            if name.replace("-", "_") == "nvme_core.multipath" and value != multipath:
                remove.append(word)
    registry = [f"nvidia.NVreg_RegistryDwords={v} ({where})" for v, where in (
        (_conf.kernel_param(now_text, "nvidia", "NVreg_RegistryDwords"), "/proc/cmdline"),
        (_conf.kernel_param(next_text or "", "nvidia", "NVreg_RegistryDwords"), source),
    ) if v is not None]
    return {
        "needed": bool(reasons),
        "reasons": reasons,
        "arg": f"nvme_core.multipath={multipath}",
        "builtin": is_builtin,
        "running": now,
        "next": nxt,
        "source": source,
        "bootloader_ok": nxt == multipath,
        "remove": remove,
        "registry_on_cmdline": registry,
    }


class FilterModule:
    """gdsfleet.gds.modprobe_plan, gdsfleet.gds.kernel_args_plan."""

    def filters(self) -> dict[str, Any]:
        return {"modprobe_plan": modprobe_plan, "kernel_args_plan": kernel_args_plan}
