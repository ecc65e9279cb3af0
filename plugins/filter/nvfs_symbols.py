# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What /proc/kallsyms says about GDS, judged as `provisioner verify` judges it (the rules live
in plugins/module_utils/nvfs_symbols.py, one copy for both).

``nvfs_registration(kallsyms, nvfs_version, kernel, need_local=True, need_rdma=False)``:
whether nvidia-fs can register with the nvme driver: the name the LOADED nvidia-fs looks up
(v1, or v2 for nvidia-fs 2.28.2+ built on a 6.17+ kernel) must be the one nvme exports.
Returns ``{"ok", "wanted", "basis", "exported", "rdma", "mismatch", "message"}``.

``p2pdma_symbol(kallsyms)``: ``p2pdma_pgmap_ops`` or ``pci_p2pdma_add_resource`` when the
kernel has PCI P2PDMA, else None.

``nvfs_kernel_pairing(nvfs_version, kernel)``: whether that nvidia-fs supports that kernel
(the nvidia-fs ChangeLog's floors, the table `provisioner verify`'s kernel.version reads):
``{"ok": True, False or None, "floor": text}``.

``kallsyms``: /proc/kallsyms lines (text or a list of lines, e.g. a grep's stdout_lines).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def _load_rules() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "module_utils" / "nvfs_symbols.py"
    name = "gdsfleet_gds_module_utils_nvfs_symbols"
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


def _text(kallsyms: Any) -> str:
    if isinstance(kallsyms, (list, tuple)):
        return "\n".join(str(x) for x in kallsyms)
    return str(kallsyms or "")


def nvfs_registration(kallsyms: Any, nvfs_version: Any = None, kernel: Any = None,
                      need_local: bool = True, need_rdma: bool = False) -> dict[str, Any]:
    syms = _load_rules()
    version = str(nvfs_version).strip() if nvfs_version not in (None, "") else None
    out: dict[str, Any] = syms.registration(syms.kallsyms_modules(_text(kallsyms)), version,
                                            str(kernel or ""), bool(need_local),
                                            bool(need_rdma))
    return out


def nvfs_kernel_pairing(nvfs_version: Any, kernel: Any) -> dict[str, Any]:
    out: dict[str, Any] = _load_rules().kernel_pairing(
        str(nvfs_version or "").strip()[:32], str(kernel or "")[:64])
    return out


def kernel_p2pdma_symbol(kallsyms: Any) -> str | None:
    syms = _load_rules()
    found: str | None = syms.p2pdma_symbol(syms.kallsyms_modules(_text(kallsyms)))
    return found


class FilterModule:
    """gdsfleet.gds.nvfs_registration, gdsfleet.gds.p2pdma_symbol,
    gdsfleet.gds.nvfs_kernel_pairing."""

    def filters(self) -> dict[str, Any]:
        return {"nvfs_registration": nvfs_registration, "p2pdma_symbol": kernel_p2pdma_symbol,
                "nvfs_kernel_pairing": nvfs_kernel_pairing}
