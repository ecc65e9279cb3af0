"""The collection's module_utils that the provisioner shares (one copy in git).

Some knowledge lives once, in the collection's plugins/module_utils/, because the roles and
``provisioner verify`` must agree on it: the cufile.json schema (cufile_schema.py + .json),
how cufile.json's comments are stripped (cufile_json.py) and how kmod reads modprobe.d
(modprobe_conf.py), which GRUB entry boots next (kernel_boot.py, which kernel_gate.py loads
from beside it with kernel_elf.py), and what GDS needs per network filesystem (netfs_caps.json,
read through netfs_rules.py). The node-side attest (attest*.py) lives there too: the role
``attest`` installs it on nodes, ``provisioner attest`` and ``verify`` (its record) run the same
files. The wheel carries
build-time copies in provisioner/_collection/ (setup.py); a checkout reads
plugins/module_utils/ directly.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

# what setup.py copies into the wheel's provisioner/_collection/
SHARED_FILES: tuple[str, ...] = ("cufile_schema.py", "cufile_schema.json", "modprobe_conf.py",
                                 "cufile_json.py", "kernel_gate.py", "kernel_elf.py",
                                 "kernel_boot.py")
# the network filesystems' capability table and its rules (netfs_rules.py reads the JSON)
SHARED_FILES += ("netfs_rules.py", "netfs_caps.json")
# the node-side attest (the role gdsfleet.gds.attest installs the same files on nodes)
SHARED_FILES += ("attest.py", "attest_state.py", "attest_compare.py", "attest_counters.py")

# verify evaluates nodes in parallel threads: a module is in sys.modules before its code has run
# (exec_module needs that), so a second thread must wait for the first to finish loading it.
_LOAD_LOCK = threading.Lock()


def candidates(filename: str) -> list[Path]:
    """Where a shared file is: inside the installed wheel, else in this checkout."""
    package = Path(__file__).resolve().parent  # .../provisioner
    return [package / "_collection" / filename,
            package.parent / "plugins" / "module_utils" / filename]


def load(filename: str) -> ModuleType:
    """Import plugins/module_utils/<filename> (a .py) under provisioner._collection_<stem>."""
    with _LOAD_LOCK:
        return _load_locked(filename, f"provisioner._collection_{Path(filename).stem}")


def load_path(path: Path, name: str) -> ModuleType:
    """Import the module file ``path`` under ``name`` once (thread-safe, as load())."""
    with _LOAD_LOCK:
        loaded = sys.modules.get(name)
        if loaded is not None:
            return loaded
        module = _exec_path(path, name)
        if module is None:  # pragma: no cover - broken install
            raise ImportError(f"cannot import {path}")
        return module


def _exec_path(path: Path, name: str) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - broken install
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)  # never leave a half-loaded module
        raise
    return module


def _load_locked(filename: str, name: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    for path in candidates(filename):
        if path.is_file():
            module = _exec_path(path, name)
            if module is None:  # pragma: no cover - broken install
                continue
            return module
    raise ImportError(
        f"the collection's {filename} is missing from "
        f"{' and '.join(str(p.parent) for p in candidates(filename))}: reinstall gdsfleet "
        "(pip install .) from a checkout that has plugins/module_utils/"
    )
