"""``/etc/cufile.json`` (or ``$CUFILE_ENV_PATH_JSON``).

NVIDIA ships the file as JSON with ``//`` and ``/* */`` comments and trailing commas. The
comment stripper walks the text as a tokenizer does, so ``//`` inside a string (a path, a URL)
is kept. Keys and types are checked against the collection's one cufile.json schema
(plugins/module_utils/cufile_schema.json, also read by the filter gdsfleet.gds.cufile_validate):
unknown keys are reported with the key meant, wrong types with what the key takes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

DEFAULT_PATH = "/etc/cufile.json"

_SCHEMA_MODULE = "provisioner._collection_cufile_schema"
# verify evaluates nodes in parallel threads: the module is in sys.modules before its code has
# run (exec_module needs that), so a second thread must wait for the first to finish loading.
_SCHEMA_LOCK = threading.Lock()


def _schema_candidates() -> list[Path]:
    """Where the collection's schema engine is: inside the installed wheel (copied there at
    build time by setup.py), else in this checkout's plugins/module_utils/."""
    package = Path(__file__).resolve().parents[2]  # .../provisioner
    return [
        package / "_collection" / "cufile_schema.py",
        package.parent / "plugins" / "module_utils" / "cufile_schema.py",
    ]


def _load_schema_module() -> ModuleType:
    with _SCHEMA_LOCK:
        return _load_schema_module_locked()


def _load_schema_module_locked() -> ModuleType:
    loaded = sys.modules.get(_SCHEMA_MODULE)
    if loaded is not None:
        return loaded
    for path in _schema_candidates():
        if path.is_file():
            spec = importlib.util.spec_from_file_location(_SCHEMA_MODULE, path)
            if spec is None or spec.loader is None:  # pragma: no cover - broken install
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[_SCHEMA_MODULE] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(_SCHEMA_MODULE, None)  # never leave a half-loaded module
                raise
            return module
    raise ImportError(
        "the cufile.json schema (cufile_schema.py + cufile_schema.json) is missing from "
        f"{' and '.join(str(p.parent) for p in _schema_candidates())}: reinstall gdsfleet "
        "(pip install .) from a checkout that has plugins/module_utils/"
    )


def schema() -> Any:
    """The one cufile.json schema (plugins/module_utils/cufile_schema.json), shared with the
    collection's filter gdsfleet.gds.cufile_validate."""
    return _load_schema_module().load()


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments outside strings, and trailing commas before } or ].

    One pass: a closing } or ] outside a string drops the comma that precedes it (across
    whitespace and removed comments), so strings are scanned once."""
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            # keep line numbers stable for error messages
            chunk = text[i : (n if j < 0 else j + 2)]
            out.append("\n" * chunk.count("\n"))
            i = n if j < 0 else j + 2
            continue
        if c in "}]":
            k = len(out) - 1
            while k >= 0 and (not out[k] or out[k].isspace()):
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
        out.append(c)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class CufileConfig:
    present: bool
    valid: bool
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)
    suggestions: dict[str, str] = field(default_factory=dict)
    had_comments: bool = False
    # values of the wrong type, one message each (same text as the collection's filter)
    type_errors: list[str] = field(default_factory=list)

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def allow_compat_mode(self) -> bool:
        # default true (NVIDIA's shipped default). properties.use_compat_mode is gdscheck's
        # display name, not a file key: cuFile ignores it (it is reported as unknown).
        return bool(self.get("properties.allow_compat_mode", True))

    @property
    def force_compat_mode(self) -> bool:
        return bool(self.get("properties.force_compat_mode", False))

    @property
    def p2pdma(self) -> tuple[bool, bool]:
        """(properties.use_pci_p2pdma, block.nvme.use_pci_p2pdma)"""
        return (
            bool(self.get("properties.use_pci_p2pdma", False)),
            bool(self.get("block.nvme.use_pci_p2pdma", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "present": self.present,
            "valid": self.valid,
            "error": self.error,
            "unknown_keys": list(self.unknown_keys),
            "suggestions": dict(self.suggestions),
            "had_comments": self.had_comments,
            "type_errors": list(self.type_errors),
            "allow_compat_mode": self.allow_compat_mode if self.valid else None,
            "force_compat_mode": self.force_compat_mode if self.valid else None,
            "use_pci_p2pdma": self.p2pdma[0] if self.valid else None,
            "block_nvme_use_pci_p2pdma": self.p2pdma[1] if self.valid else None,
            # as written (None when absent: only an explicit false disables P2PDMA for NVMe)
            "block_nvme_use_pci_p2pdma_raw": self.get("block.nvme.use_pci_p2pdma")
            if self.valid else None,
            "denylist": self.get("denylist") or self.get("blacklist"),
            "logging_level": self.get("logging.level"),
            "cufile_stats": self.get("profile.cufile_stats"),
        }


def check_keys(data: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Unknown keys (dotted, in file order) and, for those with one, the key meant."""
    unknown, suggestions, _ = _check(data)
    return unknown, suggestions


def _check(data: dict[str, Any]) -> tuple[list[str], dict[str, str], list[str]]:
    unknown: list[str] = []
    suggestions: dict[str, str] = {}
    type_errors: list[str] = []
    for finding in schema().check(data):
        if finding.kind == "unknown":
            unknown.append(finding.path)
            if finding.target:
                suggestions[finding.path] = finding.target
        else:
            type_errors.append(finding.message)
    return unknown, suggestions, type_errors


def parse(text: str | None) -> CufileConfig:
    if text is None:
        return CufileConfig(present=False, valid=False, error="file not found")
    stripped = strip_comments(text)
    had_comments = stripped != text
    try:
        data = json.loads(stripped)
    except ValueError as exc:
        return CufileConfig(present=True, valid=False, error=f"not valid JSON: {exc}",
                            had_comments=had_comments)
    if not isinstance(data, dict):
        return CufileConfig(present=True, valid=False, error="top level is not an object",
                            had_comments=had_comments)
    unknown, suggestions, type_errors = _check(data)
    return CufileConfig(
        present=True,
        valid=True,
        data=data,
        unknown_keys=unknown,
        suggestions=suggestions,
        type_errors=type_errors,
        had_comments=had_comments,
    )
