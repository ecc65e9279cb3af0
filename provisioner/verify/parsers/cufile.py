"""``/etc/cufile.json`` (or ``$CUFILE_ENV_PATH_JSON``).

NVIDIA ships the file as JSON with ``//`` and ``/* */`` comments and trailing commas. The
comment stripper (the collection's plugins/module_utils/cufile_json.py, one copy shared with
the filters and the node-side I/O test) walks the text as a tokenizer does, so ``//`` inside a
string (a path, a URL) is kept. Keys and types are checked against the collection's one
cufile.json schema (plugins/module_utils/cufile_schema.json, also read by the filter
gdsfleet.gds.cufile_validate): unknown keys are reported with the key meant, wrong types with
what the key takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from provisioner import collection_utils

DEFAULT_PATH = "/etc/cufile.json"


def _load_schema_module() -> ModuleType:
    """plugins/module_utils/cufile_schema.py (the wheel's copy, or this checkout's)."""
    return collection_utils.load("cufile_schema.py")


def schema() -> Any:
    """The one cufile.json schema (plugins/module_utils/cufile_schema.json), shared with the
    collection's filter gdsfleet.gds.cufile_validate."""
    return _load_schema_module().load()


# The network filesystems' table (plugins/module_utils/netfs_caps.json through netfs_rules.py):
# which cufile.json sections and keys their rules read.
_netfs = collection_utils.load("netfs_rules.py")

# The one comment stripper (plugins/module_utils/cufile_json.py), shared with the collection's
# filters and the node-side I/O test.
strip_comments = collection_utils.load("cufile_json.py").strip_comments


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
        netfs = _netfs.cufile_evidence(self.data if self.valid else None)
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
            # the client NICs cuFile loads its RDMA library for (network filesystems); only
            # strings count, at most 64 (the document is the node's, not ours)
            "rdma_dev_addr_list": self._addrs("properties.rdma_dev_addr_list"),
            # a filesystem's own list (fs.nfs, fs.lustre, fs.gpfs, fs.weka, fs.beegfs, ...) with
            # its mount_table's addresses, properties.rdma_peer_type and the keys the network
            # filesystems' rules read (plugins/module_utils/netfs_rules.py cufile_evidence)
            "fs_rdma_dev_addr_list": netfs["fs_rdma_dev_addr_list"],
            "netfs_keys": netfs["cufile_keys"],
        }

    def _addrs(self, key: str) -> list[str] | None:
        """A list of addresses as written: strings only, at most 64 of 64 characters (the
        document is the node's); None when absent or not a list."""
        value = self.get(key) if self.valid else None
        if not isinstance(value, list):
            return None
        return [a[:64] for a in value[:64] if isinstance(a, str)]


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
