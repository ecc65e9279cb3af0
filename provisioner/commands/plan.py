"""``provisioner plan``: print the rollout waves and what will happen to each node.

Reads the inventory and the ledger's latest state; changes nothing (not even the ledger: a
missing ledger is not created). Takes the same selection options as ``provisioner rollout``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from provisioner.exitcodes import Exit

HELP = "print the rollout waves and what would change; changes nothing"


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``plan`` and ``rollout``."""
    from provisioner.rollout.planner import DEFAULT_WAVES

    sel = p.add_argument_group("which nodes, in which waves")
    sel.add_argument("-i", "--inventory", metavar="INVENTORY", required=True,
                     help="Ansible inventory (file or directory), e.g. inventories/lab")
    sel.add_argument("-l", "--limit", metavar="PATTERN",
                     help="Ansible host pattern selecting nodes of the inventory")
    sel.add_argument("--waves", metavar="SPEC", default=DEFAULT_WAVES,
                     help="wave sizes, counts or percentages of the selected nodes; the first "
                          "is the canary, the last takes the rest (default %(default)s)")
    sel.add_argument("--force", action="store_true",
                     help="re-provision nodes the ledger says are compliant")
    sel.add_argument("--ledger", metavar="PATH|URL",
                     help="compliance ledger (SQLite path or postgresql+psycopg:// URL); "
                          "default $GDSFLEET_LEDGER, .lab/ledger.sqlite for inventories/lab, "
                          "else ~/.local/state/gdsfleet/ledger.sqlite")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the plan as JSON ('-' for stdout)")


def latest_state(location: str) -> tuple[dict[str, dict[str, Any]], Any]:
    """Latest record per node, and the ledger (None when it does not exist yet)."""
    from provisioner.store import Ledger

    if "://" not in location and not Path(location).expanduser().exists():
        return {}, None
    from provisioner.rollout.state import latest_states

    ledger = Ledger.open(location, read_only=True)  # never creates a schema, file or row
    try:
        return latest_states(ledger), ledger
    except BaseException:
        ledger.close()
        raise


def run(args: argparse.Namespace) -> int:
    from provisioner.inventory import load_inventory
    from provisioner.rollout.planner import parse_wave_spec, plan_waves
    from provisioner.store import display_url, fleet_id, resolve_ledger

    parse_wave_spec(args.waves)  # refuse a bad spec before touching anything else
    from provisioner.outputs import check_output_path

    check_output_path("--json", args.json)
    inventory = load_inventory(args.inventory, args.limit)
    location = resolve_ledger(args.ledger, args.inventory)
    latest, ledger = latest_state(location)
    unfinished = None
    steps: dict[str, dict[str, Any]] = {}
    try:
        if ledger is not None:
            unfinished = ledger.last_unfinished_run("rollout", fleet_id(args.inventory))
            if unfinished:
                steps = ledger.node_steps(unfinished)
    finally:
        if ledger is not None:
            ledger.close()
    plan = plan_waves(inventory.names(), args.waves, latest=latest, force=args.force)
    from provisioner.inventory import selection_problems

    problems = selection_problems(inventory)  # rollout refuses these before anything runs
    doc = plan.to_dict()
    doc["problems"] = problems
    doc["ledger"] = display_url(location)  # never a password
    doc["unfinished_run"] = unfinished
    if args.json:
        from provisioner.fsutil import write_private
        from provisioner.redact import redact_known

        text = redact_known(json.dumps(doc, indent=2) + "\n")
        if args.json == "-":
            sys.stdout.write(text)
            return int(Exit.USAGE) if problems else int(Exit.OK)
        write_private(args.json, text)  # 0600, atomic

    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"rollout plan: {len(plan)} node(s), {len(plan.waves)} wave(s) "
                        f"({args.waves})")
    for col in ("wave", "node", "will", "because"):
        table.add_column(col)
    words = {"verify": "verify only", "provision": "provision + verify",
             "resume": "redo (resume)"}
    for w in plan.waves:
        for i, n in enumerate(w.nodes):
            table.add_row(w.label if i == 0 else "", n.name, words[n.action.value], n.reason)
        table.add_section()
    console.print(table)
    counts = plan.counts()
    console.print(f"{counts['provision']} to provision, {counts['verify']} to verify only; "
                  f"ledger {display_url(location)}; nothing was changed")
    if unfinished:
        done = sum(1 for s in steps.values()
                   if s.get("step") in ("compliant", "failed", "skipped", "reboot_pending"))
        console.print(f"note: rollout {unfinished} is unfinished ({done}/{len(steps)} node(s) "
                      f"finished); `provisioner rollout` with the same selection resumes it")
    for problem in problems:
        sys.stderr.write(f"provisioner plan: refused by rollout: {problem}\n")
    return int(Exit.USAGE) if problems else int(Exit.OK)
