# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
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

The keys, their types, NVIDIA's defaults and the "did you mean" aliases are data: the one
schema ``plugins/module_utils/cufile_schema.json``, read through
``plugins/module_utils/cufile_schema.py``, which ``provisioner verify`` reads too (its wheel
carries a build-time copy). This file adds what only the role needs: cross-field rules, the
route keys, the legacy ``blacklist`` alias and rendering. Every size key ends in ``_kb``.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
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


def _load_module_utils(stem: str) -> ModuleType:
    """plugins/module_utils/<stem>.py, by path: it works the same in an installed collection,
    in this checkout (unit tests, testinfra) and whatever Ansible names this file."""
    path = Path(__file__).resolve().parent.parent / "module_utils" / f"{stem}.py"
    name = f"gdsfleet_gds_module_utils_{stem}"
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


def _load_schema_module() -> ModuleType:
    """plugins/module_utils/cufile_schema.py (the one cufile.json schema)."""
    return _load_module_utils("cufile_schema")


_schema_module = _load_schema_module()
# cufile.json's comment stripping: one copy (plugins/module_utils/cufile_json.py), shared with
# provisioner verify and the node-side I/O test; it also drops trailing commas.
strip_json_comments = _load_module_utils("cufile_json").strip_comments
# The one schema (plugins/module_utils/cufile_schema.json), shared with provisioner verify.
SCHEMA: Any = _schema_module.load()

_LEGACY_CACHE_KEYS = tuple(k.split(".", 1)[1] for k in SCHEMA.legacy_cache_keys())

# NVIDIA's defaults for the keys the role renders ("render": true in the schema). The legacy
# uniform bounce-buffer keys are rendered rather than gpu_bounce_buffer_slab_config, because
# every libcufile release understands them; an operator who sets gpu_bounce_buffer_slab_config
# gets the legacy keys removed from the rendered file.
CUFILE_DEFAULTS: dict[str, Any] = SCHEMA.defaults(rendered_only=True)


# --- helpers ---------------------------------------------------------------------------------


_typename = _schema_module.typename


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
    errors.extend(f.message for f in SCHEMA.check(data, extra_keys))
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
