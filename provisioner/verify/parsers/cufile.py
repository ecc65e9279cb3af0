"""``/etc/cufile.json`` (or ``$CUFILE_ENV_PATH_JSON``).

NVIDIA ships the file as JSON with ``//`` and ``/* */`` comments and trailing commas. The
comment stripper walks the text as a tokenizer does, so ``//`` inside a string (a path, a URL)
is kept. Unknown keys are reported with the likely intended key.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PATH = "/etc/cufile.json"

# Known keys (dotted); a trailing ".*" accepts any child (mount tables, device lists).
KNOWN_KEYS: frozenset[str] = frozenset(
    {
        "logging.dir",
        "logging.level",
        "logging.type",
        "logging.max_file_size_kb",
        "profile.nvtx",
        "profile.cufile_stats",
        "profile.io_batchsize",
        "execution.max_io_queue_depth",
        "execution.max_io_threads",
        "execution.parallel_io",
        "execution.min_io_threshold_size_kb",
        "execution.max_request_parallelism",
        "properties.max_direct_io_size_kb",
        "properties.max_device_cache_size_kb",
        "properties.per_buffer_cache_size_kb",
        "properties.max_device_pinned_mem_size_kb",
        "properties.posix_pool_slab_size_kb",
        "properties.posix_pool_slab_count",
        "properties.use_poll_mode",
        "properties.poll_mode_max_size_kb",
        "properties.use_pci_p2pdma",
        "properties.allow_compat_mode",
        "properties.force_compat_mode",
        "properties.gds_rdma_write_support",
        "properties.io_batchsize",
        "properties.io_priority",
        "properties.rdma_dev_addr_list",
        "properties.rdma_load_balancing_policy",
        "properties.rdma_dynamic_routing",
        "properties.rdma_dynamic_routing_order",
        "properties.rdma_peer_affinity_policy",
        "properties.rdma_max_num_sges",
        "properties.max_batch_io_size",
        "properties.max_batch_io_timeout_msecs",
        "properties.force_odirect_mode",
        "properties.prefer_iouring",
        "properties.skip_topology_detection",
        "properties.gpu_bounce_buffer_slab_config.*",
        "fs.generic.posix_unaligned_writes",
        "fs.lustre.*",
        "fs.beegfs.*",
        "fs.scatefs.*",
        "fs.nfs.*",
        "fs.gpfs.*",
        "fs.weka.*",
        "fs.virtiofs.*",
        "block.nvme.use_pci_p2pdma",
        "block.nvmeof.use_pci_p2pdma",
        "block.raid.use_pci_p2pdma",
        "denylist.*",
        "blacklist.*",
        "miscellaneous.*",
        "CUFILE_ENV_PATH_JSON",
    }
)

# Names people write that are not cufile.json keys (see docs/checks.md).
_MISNAMED = {
    "max_batch_io_size_kb": "properties.io_batchsize",
    "max_device_cache_size": "properties.max_device_cache_size_kb",
    "max_pinned_memory_size": "properties.max_device_pinned_mem_size_kb",
    "use_compat_mode": "properties.allow_compat_mode",
}

LEGACY_CACHE_KEYS = (
    "properties.max_device_cache_size_kb",
    "properties.per_buffer_cache_size_kb",
    "properties.max_device_pinned_mem_size_kb",
)


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

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def allow_compat_mode(self) -> bool:
        # default true (NVIDIA's shipped default); older files call it use_compat_mode
        value = self.get("properties.allow_compat_mode")
        if value is None:
            value = self.get("properties.use_compat_mode", True)
        return bool(value)

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


def _flatten(data: Any, prefix: str = "") -> list[str]:
    keys: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            dotted = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                keys.extend(_flatten(v, dotted))
            else:
                keys.append(dotted)
    return keys


def _known(dotted: str) -> bool:
    if dotted in KNOWN_KEYS or dotted + ".*" in KNOWN_KEYS:
        return True
    parts = dotted.split(".")
    return any(".".join(parts[:i]) + ".*" in KNOWN_KEYS for i in range(1, len(parts)))


def check_keys(data: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    unknown: list[str] = []
    suggestions: dict[str, str] = {}
    plain = sorted(k for k in KNOWN_KEYS if not k.endswith("*"))
    for dotted in _flatten(data):
        if dotted == "properties.use_compat_mode":
            continue  # legacy name of allow_compat_mode, still read by libcufile
        if _known(dotted):
            continue
        unknown.append(dotted)
        leaf = dotted.rsplit(".", 1)[-1]
        if leaf in _MISNAMED:
            suggestions[dotted] = _MISNAMED[leaf]
            continue
        close = difflib.get_close_matches(dotted, plain, n=1, cutoff=0.6)
        if close:
            suggestions[dotted] = close[0]
    return unknown, suggestions


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
    unknown, suggestions = check_keys(data)
    return CufileConfig(
        present=True,
        valid=True,
        data=data,
        unknown_keys=unknown,
        suggestions=suggestions,
        had_comments=had_comments,
    )
