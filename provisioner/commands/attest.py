"""``provisioner attest``: on a node, is it still in the state its last verify proved?

The command is the collection's node-side attest (plugins/module_utils/attest.py with its
siblings; the wheel's copies in provisioner/_collection/), run in this process: the same
options, output and exit codes as ``/usr/local/sbin/gdsfleet-attest`` that the role
``gdsfleet.gds.attest`` installs on nodes (docs/operations.md). It reads local files only and
imports nothing of the ledger, SSH or Ansible.

:func:`pull_fleet` is the other side, for ``provisioner status --attest``: every node of an
inventory asked over SSH (the same code, bundled: provisioner/remote/attest_node.py), the answers
and the job proofs the nodes kept recorded in the ledger (its only write).
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


def pull_fleet(args: argparse.Namespace, location: str) -> list[str]:
    """Ask each node of the inventory for its attest over SSH and record the answers (and the
    job proofs the nodes kept since the ledger's newest) in the ledger; returns
    ``node: why`` for each node not asked."""
    from provisioner.errors import ConnectError, UsageError
    from provisioner.fleet import run_parallel
    from provisioner.inventory import load_inventory
    from provisioner.ssh import SSHSettings, runner_factory
    from provisioner.store import Ledger
    from provisioner.validate import check_seconds
    from provisioner.verify import attest_record

    if not args.inventory:
        raise UsageError("--attest asks the nodes of an inventory: add -i INVENTORY")
    if args.parallel < 1:
        raise UsageError(f"--parallel must be at least 1 (got {args.parallel})")
    check_seconds("--connect-timeout", args.connect_timeout)
    inventory = load_inventory(args.inventory, args.limit)
    t = args.connect_timeout
    make = runner_factory(SSHSettings(connect_timeout=t, banner_timeout=1.5 * t,
                                      auth_timeout=1.5 * t, channel_timeout=1.5 * t))
    ledger = Ledger.open(location)
    try:
        since = {node: _epoch(at) for node, at in ledger.newest_job_proofs().items()}

        def one(node: Any) -> dict[str, Any]:
            runner = make(node)
            try:
                runner.connect()
                return attest_record.pull(runner, jobs_since=since.get(node.name))
            finally:
                runner.close()

        results = run_parallel(list(inventory.nodes), one, parallel=args.parallel,
                               name=lambda n: str(n.name))
        missed = []
        for res in results:
            if res.value is None:
                err = res.error
                why = str(err) if isinstance(err, ConnectError) else f"internal error: {err!r}"
                ledger.record_attestation(res.name, None, error=why[:400])
                missed.append(f"{res.name}: {why[:200]}")
                continue
            ledger.record_attestation(res.name, res.value.get("attest"),
                                      jobs=res.value.get("jobs") or [],
                                      error=res.value.get("error"))
        return missed
    finally:
        ledger.close()


def _epoch(text: Any) -> float | None:
    """The ledger's UTC text as epoch seconds (None when it is not one)."""
    from datetime import datetime, timezone

    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
