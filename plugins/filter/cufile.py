# Copyright: gdsfleet developers
# Apache License 2.0 (see galaxy.yml)
"""cufile.json schema, validation and rendering for the gdsfleet.gds collection.

One module, three filters, and plain functions that tests and the operator-facing testinfra
checks import directly from the checkout (no Ansible needed):

- ``cufile_validate(config, route=None, extra_keys=())`` -> list of error strings (empty when
  the structure is valid). Unknown keys and wrong types are reported with the key the operator
  most likely meant (``max_pinned_memory_size`` -> ``properties.max_device_pinned_mem_size_kb``).
- ``cufile_warnings(config)`` -> list of warnings (legacy ``blacklist`` alias, compat mode on).
- ``cufile_document(config, route, base=None)`` -> the complete document: NVIDIA's defaults,
  then ``base`` (the role's own defaults), then the operator's ``config``, merged recursively,
  with the route keys (``properties.use_pci_p2pdma``, ``block.nvme.use_pci_p2pdma``) set from
  ``route``.

The keys and defaults follow NVIDIA's GDS configuration guide (cufile.json "JSON schema") and
the collection's docs/gds-reference.md section 6. Every size key ends in ``_kb``.
"""

from __future__ import annotations

import copy
import difflib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CUFILE_DEFAULTS",
    "ROUTES",
    "SCHEMA",
    "cufile_document",
    "cufile_validate",
    "cufile_warnings",
    "merge",
    "normalize",
    "route_errors",
    "strip_json_comments",
]

ROUTES = ("nvfs", "p2pdma")


# --- value types ---------------------------------------------------------------------------


class _Type:
    """A leaf value's type; ``check`` returns None when fine, else what was expected."""

    expected = "a value"

    def check(self, value: Any) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError


class _Bool(_Type):
    expected = "a boolean (true or false, unquoted)"

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else self.expected


class _Int(_Type):
    def __init__(self, minimum: int = 0, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum
        if maximum is None:
            self.expected = f"an integer >= {minimum}"
        else:
            self.expected = f"an integer from {minimum} to {maximum}"

    def check(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return self.expected
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            return self.expected
        return None


class _Str(_Type):
    expected = "a string"

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, str) else self.expected


class _Enum(_Type):
    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.expected = "one of " + ", ".join(choices)

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, str) and value in self.choices else self.expected


class _List(_Type):
    def __init__(self, item: _Type, what: str) -> None:
        self.item = item
        self.expected = f"a list of {what}"

    def check(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return self.expected
        for item in value:
            if self.item.check(item) is not None:
                return f"{self.expected} ({item!r} is not)"
        return None


class _IPv4(_Type):
    expected = "an IPv4 address"

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return self.expected
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            return self.expected
        return None


class _FreeDict(_Type):
    """A mapping whose content cuFile defines per site (``mount_table``)."""

    expected = "a mapping"

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, Mapping) else self.expected


BOOL = _Bool()
SIZE = _Int(0)
COUNT = _Int(1)
STR = _Str()
LIST_INT = _List(_Int(1), "positive integers")
LIST_STR = _List(_Str(), "strings")
LIST_IPV4 = _List(_IPv4(), "IPv4 addresses")

_NAS = {"rdma_dev_addr_list": LIST_IPV4, "mount_table": _FreeDict()}

# Section -> key -> type (a dict means a nested section).
SCHEMA: dict[str, Any] = {
    "logging": {
        "dir": STR,
        "level": _Enum("NOTICE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"),
        "max_file_size_mb": _Int(-1),
    },
    "profile": {"nvtx": BOOL, "cufile_stats": _Int(0, 3)},
    "execution": {
        "max_io_queue_depth": COUNT,
        "max_io_threads": SIZE,
        "parallel_io": BOOL,
        "min_io_threshold_size_kb": SIZE,
        "max_request_parallelism": SIZE,
    },
    "properties": {
        "max_direct_io_size_kb": COUNT,
        "max_device_cache_size_kb": SIZE,
        "per_buffer_cache_size_kb": COUNT,
        "max_device_pinned_mem_size_kb": SIZE,
        "gpu_bounce_buffer_slab_config": {"slab_size_kb": LIST_INT, "slab_count": LIST_INT},
        "posix_pool_slab_size_kb": LIST_INT,
        "posix_pool_slab_count": LIST_INT,
        "use_poll_mode": BOOL,
        "poll_mode_max_size_kb": SIZE,
        "use_pci_p2pdma": BOOL,
        "allow_compat_mode": BOOL,
        "force_compat_mode": BOOL,
        "gds_rdma_write_support": BOOL,
        "io_batchsize": COUNT,
        "io_priority": _Enum("default", "low", "med", "high"),
        "rdma_dev_addr_list": LIST_IPV4,
        "rdma_load_balancing_policy": STR,
        "rdma_dc_key": STR,
        "rdma_access_mask": STR,
        "rdma_dynamic_routing": BOOL,
        "rdma_dynamic_routing_order": _List(
            _Enum("GPU_MEM_NVLINKS", "GPU_MEM", "SYS_MEM", "P2P"),
            "routing policies (GPU_MEM_NVLINKS, GPU_MEM, SYS_MEM, P2P)",
        ),
    },
    "fs": {
        "generic": {"posix_unaligned_writes": BOOL},
        "lustre": {"posix_gds_min_kb": SIZE, **_NAS},
        "beegfs": {"posix_gds_min_kb": SIZE, **_NAS},
        "nfs": {"use_pci_p2pdma": BOOL, **_NAS},
        "gpfs": {"gds_write_support": BOOL, "gds_async_support": BOOL, **_NAS},
        "weka": {"rdma_write_support": BOOL},
    },
    "block": {
        "nvme": {"use_pci_p2pdma": BOOL},
        "nvmeof": {"use_pci_p2pdma": BOOL},
        "raid": {"use_pci_p2pdma": BOOL},
    },
    "denylist": {
        "drivers": LIST_STR,
        "devices": LIST_STR,
        "mounts": LIST_STR,
        "filesystems": LIST_STR,
    },
    "miscellaneous": {
        "api_check_aggressive": BOOL,
        "enable_static_routing": BOOL,
        "static_routing_filepath": STR,
    },
}

# Names seen in blog posts, C structs and kvikio, mapped to the cufile.json key meant.
_MISNAMED = {
    "max_pinned_memory_size": "properties.max_device_pinned_mem_size_kb",
    "max_pinned_memory_size_kb": "properties.max_device_pinned_mem_size_kb",
    "max_device_pinned_mem_size": "properties.max_device_pinned_mem_size_kb",
    "max_pinned_mem_size_kb": "properties.max_device_pinned_mem_size_kb",
    "max_device_cache_size": "properties.max_device_cache_size_kb",
    "max_batch_io_size": "properties.io_batchsize",
    "batch_io_size": "properties.io_batchsize",
    "max_direct_io_size": "properties.max_direct_io_size_kb",
    "per_buffer_cache_size": "properties.per_buffer_cache_size_kb",
    "poll_mode_max_size": "properties.poll_mode_max_size_kb",
    "compat_mode": "properties.allow_compat_mode",
    "use_p2pdma": "properties.use_pci_p2pdma (and block.nvme.use_pci_p2pdma)",
    "p2pdma": "properties.use_pci_p2pdma (and block.nvme.use_pci_p2pdma)",
    "allowlist": "denylist (cuFile has no allowlist; list what to exclude under denylist)",
    "whitelist": "denylist (cuFile has no allowlist; list what to exclude under denylist)",
}

_LEGACY_CACHE_KEYS = (
    "max_direct_io_size_kb",
    "max_device_cache_size_kb",
    "per_buffer_cache_size_kb",
)

# NVIDIA's defaults (GDS configuration guide, docs/gds-reference.md section 6). The legacy
# uniform bounce-buffer keys are used rather than gpu_bounce_buffer_slab_config, because every
# libcufile release understands them; an operator who sets gpu_bounce_buffer_slab_config gets
# the legacy keys removed from the rendered file.
CUFILE_DEFAULTS: dict[str, Any] = {
    "logging": {"level": "ERROR"},
    "profile": {"nvtx": False, "cufile_stats": 0},
    "execution": {
        "max_io_queue_depth": 128,
        "max_io_threads": 4,
        "parallel_io": True,
        "min_io_threshold_size_kb": 8192,
        "max_request_parallelism": 4,
    },
    "properties": {
        "max_direct_io_size_kb": 16384,
        "max_device_cache_size_kb": 131072,
        "per_buffer_cache_size_kb": 1024,
        "max_device_pinned_mem_size_kb": 33554432,
        "posix_pool_slab_size_kb": [4, 1024, 16384],
        "posix_pool_slab_count": [128, 64, 64],
        "use_poll_mode": False,
        "poll_mode_max_size_kb": 4,
        "use_pci_p2pdma": False,
        "allow_compat_mode": True,
        "force_compat_mode": False,
        "gds_rdma_write_support": True,
        "io_batchsize": 128,
        "io_priority": "default",
        "rdma_dev_addr_list": [],
        "rdma_load_balancing_policy": "RoundRobin",
        "rdma_dynamic_routing": False,
        "rdma_dynamic_routing_order": ["GPU_MEM_NVLINKS", "GPU_MEM", "SYS_MEM", "P2P"],
    },
    "fs": {
        "generic": {"posix_unaligned_writes": False},
        "lustre": {"posix_gds_min_kb": 0},
        "beegfs": {"posix_gds_min_kb": 0},
        "gpfs": {"gds_write_support": False, "gds_async_support": True},
        "weka": {"rdma_write_support": False},
    },
    "block": {
        "nvme": {"use_pci_p2pdma": False},
        "nvmeof": {"use_pci_p2pdma": False},
        "raid": {"use_pci_p2pdma": False},
    },
    "denylist": {"drivers": [], "devices": [], "mounts": [], "filesystems": []},
    "miscellaneous": {"api_check_aggressive": False},
}


# --- helpers ---------------------------------------------------------------------------------


def _all_paths(schema: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every dotted key path in the schema -> its type (sections included as dicts)."""
    out: dict[str, Any] = {}
    for key, sub in schema.items():
        path = f"{prefix}{key}"
        out[path] = sub
        if isinstance(sub, dict):
            out.update(_all_paths(sub, path + "."))
    return out


_PATHS = _all_paths(SCHEMA)
_LEAF_NAMES: dict[str, list[str]] = {}
for _path in _PATHS:
    _LEAF_NAMES.setdefault(_path.rsplit(".", 1)[-1], []).append(_path)


def _suggest(section: str, key: str) -> str:
    """The key the operator most likely meant, as a phrase ('' when nothing is close)."""
    if key in _MISNAMED:
        target = _MISNAMED[key]
        units = " (size keys end in _kb; the value is in KiB)" if target.endswith("_kb") else ""
        return f"did you mean {target}?{units}"
    prefix = f"{section}." if section else ""
    if key == "blacklist" and section:
        return "blacklist/denylist is a top-level section"
    # Right name, wrong place (e.g. allow_compat_mode at the top level).
    if key in _LEAF_NAMES:
        places = [p for p in _LEAF_NAMES[key] if not p.startswith(prefix) or not prefix]
        if places:
            return f"{key} belongs under {' or '.join(sorted(places))}"
    # Size keys end in _kb.
    if f"{prefix}{key}_kb" in _PATHS:
        return f"did you mean {prefix}{key}_kb? (every size key ends in _kb; the value is in KiB)"
    for path in _PATHS:
        if path.endswith(f".{key}_kb"):
            return f"did you mean {path}? (every size key ends in _kb; the value is in KiB)"
    siblings = [p[len(prefix):] for p in _PATHS if p.startswith(prefix)]
    siblings = [s for s in siblings if "." not in s]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    leaves = difflib.get_close_matches(key, list(_LEAF_NAMES), n=1, cutoff=0.7)
    if leaves:
        return f"did you mean {' or '.join(_LEAF_NAMES[leaves[0]])}?"
    if siblings:
        return f"known keys here: {', '.join(sorted(siblings))}"
    return ""


def _typename(value: Any) -> str:
    """A plain type name (Ansible hands over tagged subclasses of str, dict, ...)."""
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"),
                       (Mapping, "dict"), (list, "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _plain(value: Any) -> Any:
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
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _walk(
    config: Mapping[str, Any],
    schema: Mapping[str, Any],
    prefix: str,
    extra: frozenset[str],
    errors: list[str],
) -> None:
    for key, value in config.items():
        if not isinstance(key, str):
            errors.append(f"{prefix}{key!r}: keys must be strings")
            continue
        path = f"{prefix}{key}"
        if path in extra:
            continue
        if key not in schema:
            hint = _suggest(prefix[:-1], key)
            errors.append(f"{path}: unknown cufile.json key" + (f"; {hint}" if hint else ""))
            continue
        expected = schema[key]
        if isinstance(expected, dict):
            if not isinstance(value, Mapping):
                errors.append(
                    f"{path}: expected a mapping (section with keys "
                    f"{', '.join(sorted(expected))}), got {_typename(value)} {_plain(value)!r}"
                )
                continue
            _walk(value, expected, path + ".", extra, errors)
            continue
        problem = expected.check(value)
        if problem is not None:
            hint = ""
            if isinstance(expected, _Bool) and isinstance(value, str):
                hint = " (a quoted string is not a boolean)"
            elif isinstance(expected, _Int) and isinstance(value, str) and value.isdigit():
                hint = f" (write {value} without quotes)"
            errors.append(
                f"{path}: expected {problem}, got {_typename(value)} {_plain(value)!r}{hint}"
            )


def _get(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _has(config: Mapping[str, Any], path: str) -> bool:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def strip_json_comments(text: str) -> str:
    """Remove // and /* */ comments (NVIDIA ships cufile.json with them), keeping strings."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def normalize(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A deep copy with the legacy ``blacklist`` section renamed to ``denylist``."""
    data = copy.deepcopy(dict(config or {}))
    if "blacklist" in data and "denylist" not in data:
        data["denylist"] = data.pop("blacklist")
    return data


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; lists and scalars in ``override`` replace those in ``base``."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def route_errors(config: Mapping[str, Any], route: str | None) -> list[str]:
    """Conflicts between the operator's explicit keys and the collection's ``gds_route``."""
    if route is None:
        return []
    if route not in ROUTES:
        return [f"gds_route: expected one of {', '.join(ROUTES)}, got {route!r}"]
    errors: list[str] = []
    props = _get(config, "properties.use_pci_p2pdma")
    nvme = _get(config, "block.nvme.use_pci_p2pdma")
    if route == "p2pdma":
        pairs = (("properties.use_pci_p2pdma", props), ("block.nvme.use_pci_p2pdma", nvme))
        for path, value in pairs:
            if value is False:
                errors.append(
                    f"{path}: set to false, but gds_route is p2pdma, which needs both "
                    "properties.use_pci_p2pdma and block.nvme.use_pci_p2pdma true (cuFile "
                    "would otherwise never take the P2PDMA path); remove the key (the role "
                    "sets it from gds_route) or set gds_route: nvfs"
                )
    else:
        for path in ("properties.use_pci_p2pdma", "block.nvme.use_pci_p2pdma",
                     "block.nvmeof.use_pci_p2pdma", "block.raid.use_pci_p2pdma"):
            if _get(config, path) is True:
                errors.append(
                    f"{path}: set to true, but gds_route is nvfs (nvidia-fs with the "
                    "GDS-patched NVMe driver); a block use_pci_p2pdma key without working "
                    "P2PDMA makes I/O fail instead of falling back: remove the key (the role "
                    "sets it from gds_route) or set gds_route: p2pdma"
                )
    return errors


# --- the filters ---------------------------------------------------------------------------


def cufile_validate(
    config: Mapping[str, Any] | None,
    route: str | None = None,
    extra_keys: Iterable[str] = (),
) -> list[str]:
    """Every problem in ``config`` (an operator's partial or a complete cufile.json)."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        return [f"cufile_config: expected a mapping of cufile.json sections, got "
                f"{_typename(config)}"]
    errors: list[str] = []
    if "blacklist" in config and "denylist" in config:
        errors.append(
            "blacklist: set together with denylist; blacklist is the legacy name of "
            "denylist: move its entries under denylist"
        )
    data = normalize(config)
    data.pop("blacklist", None)
    _walk(data, SCHEMA, "", frozenset(extra_keys), errors)
    slab = _get(data, "properties.gpu_bounce_buffer_slab_config")
    if isinstance(slab, Mapping):
        legacy = [k for k in _LEGACY_CACHE_KEYS if _has(data, f"properties.{k}")]
        if legacy:
            errors.append(
                "properties.gpu_bounce_buffer_slab_config: must not be set together with the "
                "legacy cache keys " + ", ".join(f"properties.{k}" for k in legacy)
                + "; keep one or the other (the slab config replaces them)"
            )
        sizes, counts = slab.get("slab_size_kb"), slab.get("slab_count")
        if isinstance(sizes, list) and isinstance(counts, list) and len(sizes) != len(counts):
            errors.append(
                "properties.gpu_bounce_buffer_slab_config: slab_size_kb and slab_count "
                f"need the same length ({len(sizes)} != {len(counts)})"
            )
    sizes = _get(data, "properties.posix_pool_slab_size_kb")
    counts = _get(data, "properties.posix_pool_slab_count")
    if isinstance(sizes, list) and isinstance(counts, list) and len(sizes) != len(counts):
        errors.append(
            "properties.posix_pool_slab_size_kb and properties.posix_pool_slab_count need the "
            f"same length ({len(sizes)} != {len(counts)})"
        )
    if (_get(data, "properties.force_compat_mode") is True
            and _get(data, "properties.allow_compat_mode") is False):
        errors.append(
            "properties.force_compat_mode: true forces every I/O through POSIX, which "
            "contradicts properties.allow_compat_mode: false; a GDS node wants "
            "force_compat_mode false"
        )
    errors.extend(route_errors(data, route))
    return errors


def cufile_warnings(config: Mapping[str, Any] | None) -> list[str]:
    """Accepted but worth saying."""
    if not isinstance(config, Mapping):
        return []
    warnings: list[str] = []
    if "blacklist" in config:
        warnings.append(
            "cufile_config.blacklist is the legacy name of denylist; it is rendered as "
            "denylist: rename it in your variables"
        )
    if _get(config, "properties.allow_compat_mode") is True:
        warnings.append(
            "properties.allow_compat_mode is true: a misconfigured node will silently run "
            "GDS I/O through the CPU instead of failing"
        )
    return warnings


def cufile_document(
    config: Mapping[str, Any] | None,
    route: str = "nvfs",
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """NVIDIA's defaults <- ``base`` <- ``config``, with the route keys set from ``route``."""
    if route not in ROUTES:
        raise ValueError(f"gds_route must be one of {', '.join(ROUTES)}, got {route!r}")
    override = normalize(config)
    layered = normalize(base)
    defaults = copy.deepcopy(CUFILE_DEFAULTS)
    if _has(override, "properties.gpu_bounce_buffer_slab_config") or _has(
        layered, "properties.gpu_bounce_buffer_slab_config"
    ):
        for key in _LEGACY_CACHE_KEYS:
            defaults["properties"].pop(key, None)
    doc = merge(merge(defaults, layered), override)
    p2pdma = route == "p2pdma"
    if not _has(override, "properties.use_pci_p2pdma"):
        doc["properties"]["use_pci_p2pdma"] = p2pdma
    if not _has(override, "block.nvme.use_pci_p2pdma"):
        doc.setdefault("block", {}).setdefault("nvme", {})["use_pci_p2pdma"] = p2pdma
    return doc


class FilterModule:
    """gdsfleet.gds.cufile_validate, cufile_warnings, cufile_document."""

    def filters(self) -> dict[str, Any]:
        return {
            "cufile_validate": cufile_validate,
            "cufile_warnings": cufile_warnings,
            "cufile_document": cufile_document,
        }
