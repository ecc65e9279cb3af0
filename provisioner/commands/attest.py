"""``provisioner attest``: on a node, is it still in the state its last verify proved?

The command is the collection's node-side attest (plugins/module_utils/attest.py with its
siblings; the wheel's copies in provisioner/_collection/), run in this process: the same
options, output and exit codes as ``/usr/local/sbin/gdsfleet-attest`` that the role
``gdsfleet.gds.attest`` installs on nodes (docs/operations.md). It reads local files only and
imports nothing of the ledger, SSH or Ansible.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from provisioner import collection_utils

HELP = "on a node: is it still in the state its last verify proved? (no SSH, no I/O test)"
MODULES = ("attest", "attest_state", "attest_compare", "attest_counters", "cufile_json")


def modules() -> dict[str, ModuleType]:
    """The node-side attest and its siblings, loaded from the collection's module_utils."""
    return {name: collection_utils.load(f"{name}.py") for name in MODULES}


def add_arguments(p: argparse.ArgumentParser) -> None:
    collection_utils.load("attest.py").add_arguments(p)


def run(args: argparse.Namespace) -> int:
    mods: dict[str, Any] = modules()
    return int(mods["attest"].attest(args, mods))
