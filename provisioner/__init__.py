"""gdsfleet orchestrator: roll out and verify GPUDirect Storage across bare-metal fleets."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__version__ = "0.2.0"


def lazy_attribute(namespace: dict[str, Any], table: Mapping[str, str], name: str) -> Any:
    """A package's PEP 562 ``__getattr__``: ``name`` from the submodule ``table`` maps it to,
    imported when first used and kept in ``namespace`` (the package's ``globals()``);
    AttributeError for a name the table lacks. Lets a package name heavy submodules' symbols
    without importing them (``provisioner.store``, ``provisioner.verify``)."""
    package = namespace["__name__"]
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{package}.{module}"), name)
    namespace[name] = value
    return value
