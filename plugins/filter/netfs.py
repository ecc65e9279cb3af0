# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What GDS needs per network filesystem, as `provisioner verify` judges it (the table is
plugins/module_utils/netfs_caps.json, the rules plugins/module_utils/netfs_rules.py: one copy
for both verify paths and the roles).

``netfs_prerequisites(gdscheck, fstype, options="", nvfs_loaded=False, node=None)``: what is
missing for GDS on a mount of ``fstype`` (a list of reasons, empty when nothing is).
``gdscheck``: ``gdscheck -p`` output (text or lines; empty or None when the node has none);
``options``: the mount's options (text or a list); ``node``: what the node shows itself (see
netfs_rules.prerequisites: ``operator``, ``client_modules``, ``symbols``, ``rdma_readable``,
``rdma_ports``, ``rdma_active``, ``rdma_dev_addr_list``, ``fs_rdma_dev_addr_list``,
``peermem_loaded``, ``rdma_peer_type``, ``cufile_keys``). Two raw forms are read too:
``cufile`` (the parsed cufile.json, for the addresses, rdma_peer_type and the keys) and
``rdma_port_lines`` (``grep -H . /sys/class/infiniband/*/ports/*/state`` lines).

``netfs_capability(fstype)``: the table's entry for a mount type or a table name (``nfs4``,
``wekafs``), ``{}`` for one it does not know.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any


def _netfs_rules() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "module_utils" / "netfs_rules.py"
    name = "gdsfleet_gds_module_utils_netfs_rules"
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


def netfs_prerequisites(gdscheck: Any, fstype: Any, options: Any = "",
                        nvfs_loaded: Any = False, node: Any = None) -> list[str]:
    rules = _netfs_rules()
    opts = options if isinstance(options, (list, tuple)) else str(options or "").split(",")
    plain: dict[str, Any] = dict(node) if isinstance(node, Mapping) else {}
    if "cufile" in plain:
        plain = {**rules.cufile_evidence(plain.pop("cufile")), **plain}
    if "rdma_port_lines" in plain:
        lines = plain.pop("rdma_port_lines")
        plain = {**rules.ports_from_sysfs(lines if isinstance(lines, (list, tuple)) else []),
                 **plain}
    if gdscheck is None or gdscheck == "":
        driver = None
    else:
        driver = rules.driver_config(gdscheck if isinstance(gdscheck, str)
                                     else [str(x) for x in gdscheck])
    out: list[str] = rules.prerequisites(str(fstype), [str(o) for o in opts], driver,
                                         bool(nvfs_loaded), plain)
    return out


def netfs_capability(fstype: Any) -> dict[str, Any]:
    rules = _netfs_rules()
    found = rules.entry(str(fstype)) or rules.filesystems().get(str(fstype))
    return dict(found) if found else {}


class FilterModule:
    """gdsfleet.gds.netfs_prerequisites, gdsfleet.gds.netfs_capability."""

    def filters(self) -> dict[str, Any]:
        return {"netfs_prerequisites": netfs_prerequisites, "netfs_capability": netfs_capability}
