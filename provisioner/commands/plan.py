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
# Up to this many nodes the table lists every node; above, a summary per wave (a table of
# 10,000 rows is read by nobody and took a third of the command's time to render).
FULL_TABLE_MAX = 50
SHOWN_PER_WAVE = 5
# The inventory is code (docs/security.md): as to ansible-playbook, so to the provisioner
INVENTORY_HELP = ("Ansible inventory (file or directory), e.g. inventories/lab. It is evaluated "
                  "as Ansible evaluates it, on this machine: templates and lookups run, an "
                  "inventory script or plugin executes, a ProxyCommand runs here; use only an "
                  "inventory you trust as you trust code (docs/security.md)")
WORDS = {"verify": "verify only", "provision": "provision + verify", "resume": "redo (resume)"}


def add_selection_arguments(p: argparse.ArgumentParser, top: Any = None) -> Any:
    """Options shared by ``plan`` and ``rollout``. With ``top`` (rollout's leading group),
    ``-i`` and ``--waves`` go there and the caller adds ``--ledger`` (add_ledger_option) where
    it wants it; the group of the other selection options is returned."""
    from provisioner.rollout.planner import DEFAULT_WAVES

    sel = p.add_argument_group("which nodes, in which waves")
    lead = top if top is not None else sel
    lead.add_argument("-i", "--inventory", metavar="INVENTORY", required=True,
                      help=INVENTORY_HELP)
    lead.add_argument("--waves", metavar="SPEC", default=DEFAULT_WAVES,
                      help="wave sizes, counts or percentages of the selected nodes; the first "
                           "is the canary, never every node ('all': one wave of every node, no "
                           "canary); nodes after the last entry form a last wave (default "
                           "%(default)s)")
    sel.add_argument("-l", "--limit", metavar="PATTERN",
                     help="Ansible host pattern selecting nodes of the inventory (default: all)")
    sel.add_argument("--allow-local-connection", action="store_true",
                     help="roll out to hosts with ansible_connection=local, that is to this "
                          "controller itself (refused by default: the site playbook and a "
                          "reboot would run here)")
    sel.add_argument("--force", action="store_true",
                     help="re-provision nodes the ledger says are compliant (default: verify "
                          "them only)")
    if top is None:
        add_ledger_option(sel)
    return sel


def add_ledger_option(group: Any) -> None:
    group.add_argument("--ledger", metavar="PATH|URL",
                       help="compliance ledger (SQLite path or postgresql+psycopg:// URL); "
                            "default $GDSFLEET_LEDGER, .lab/ledger.sqlite for inventories/lab, "
                            "else ~/.local/state/gdsfleet/ledger.sqlite")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sel = add_selection_arguments(p)
    sel.add_argument("--playbook", metavar="FILE|FQCN",
                     help="plan the rollout of this playbook (default gdsfleet.gds.site): it is "
                          "found and checked as rollout would (collection, dependencies), and "
                          "one whose change verification cannot see "
                          "(gdsfleet.gds.kernel_update) provisions every node")
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the plan as JSON ('-' for stdout)")
    out.add_argument("--all-nodes", action="store_true",
                     help=f"list every node; by default a plan of more than {FULL_TABLE_MAX} "
                          f"nodes prints a summary per wave (the JSON always holds every node)")


def latest_state(location: str) -> tuple[dict[str, dict[str, Any]], Any]:
    """Latest record per node, and the ledger (None when it does not exist yet)."""
    from provisioner.store import open_read_only

    if "://" not in location and not Path(location).expanduser().exists():
        return {}, None
    from provisioner.rollout.state import latest_states

    ledger = open_read_only(location)
    try:
        return latest_states(ledger), ledger
    except BaseException:
        ledger.close()
        raise


def run(args: argparse.Namespace) -> int:
    from provisioner.inventory import load_inventory
    from provisioner.rollout.planner import parse_wave_spec, plan_waves
    from provisioner.store.location import display_url, fleet_id, ledger_line, resolve_ledger

    parse_wave_spec(args.waves)  # refuse a bad spec before touching anything else
    from provisioner.outputs import check_output_path

    check_output_path("--json", args.json)
    from provisioner.rollout import playbooks

    # --playbook: the playbook rollout would run, found and checked as rollout finds it
    # (issue 47: plan could not preview another playbook than the site's); without it the
    # site playbook, as before (plan needs no collection installed)
    playbook = (playbooks.resolve(args.playbook, env=playbooks.run_env()) if args.playbook
                else playbooks.Playbook(playbooks.SITE, Path("site.yml"), fqcn=True))
    every = playbooks.always_provisions(playbook)
    inventory = load_inventory(args.inventory, args.limit)
    from provisioner.identifiers import protect

    protect(inventory.names(), "a node name")  # never masked in any output (issue 45)
    from provisioner.errors import InventoryError
    from provisioner.inventory import host_key_problems

    weak = host_key_problems(inventory)  # rollout refuses these too (selection_problems)
    if weak:
        raise InventoryError("refused, the playbook runs would not check host keys as the "
                             "provisioner does: " + "; ".join(weak))
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
    plan = plan_waves(inventory.names(), args.waves, latest=latest,
                      force=args.force or every)
    from provisioner.inventory import SITE_TARGET_DEFAULT, selection_problems

    # rollout refuses these before anything runs (the site playbook's target group too)
    site = playbook.spec == playbooks.SITE or playbook.path.name == "site.yml"
    problems = selection_problems(inventory, SITE_TARGET_DEFAULT if site else None,
                                  allow_local=args.allow_local_connection)
    doc = plan.to_dict()
    doc["playbook"] = playbook.spec
    doc["problems"] = problems
    doc["ledger"] = display_url(location)  # never a password
    doc["unfinished_run"] = unfinished
    if args.json:
        from provisioner.redact import redact_document
        from provisioner.reports.files import write_output

        # masked in the data, never in the JSON text (a registered "false" broke the JSON)
        text = json.dumps(redact_document(doc), indent=2) + "\n"
        if args.json == "-":  # the document names the ledger; the line goes to stderr
            sys.stderr.write(ledger_line(location) + "\n")
            sys.stdout.write(text)
            return int(Exit.USAGE) if problems else int(Exit.OK)
        write_output(args.json, text, what="--json", recorded=False)  # 0600, atomic; links followed

    from rich.console import Console

    console = Console()
    sys.stdout.write(ledger_line(location) + "\n")  # the first line, as every command's
    from provisioner.rollout.planner import describe_waves

    # how the spec collapsed on these nodes, not only how many waves (issue 30 item 5)
    # (a line of its own: a table's title wraps at the table's width)
    sys.stdout.write(f"rollout plan: {describe_waves(args.waves, len(plan))}\n")
    if every and not args.force:
        sys.stdout.write(f"{playbook.spec}: a change that verification cannot see, so every "
                         f"selected node is provisioned (as with --force), compliant ones too\n")
    title = "rollout plan"
    if len(plan) <= FULL_TABLE_MAX:
        console.print(_full_table(plan, title))
    elif args.all_nodes:
        _print_every_node(plan, title)
    else:
        console.print(_summary_table(plan, title))
        console.print(f"(a summary of {len(plan)} nodes: --all-nodes lists every node, "
                      f"--json FILE writes them all)")
    counts = plan.counts()
    # short enough never to wrap before "nothing was changed" (the ledger is the first line)
    console.print(f"{counts['provision']} to provision, {counts['verify']} to verify only; "
                  f"nothing was changed", soft_wrap=True)
    if unfinished:
        done = sum(1 for s in steps.values()
                   if s.get("step") in ("compliant", "failed", "skipped", "reboot_pending"))
        console.print(f"note: rollout {unfinished} is unfinished ({done}/{len(steps)} node(s) "
                      f"finished); `provisioner rollout` with the same selection resumes it")
    for problem in problems:
        sys.stderr.write(f"provisioner plan: refused by rollout: {problem}\n")
    return int(Exit.USAGE) if problems else int(Exit.OK)


def _full_table(plan: Any, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("wave", "node", "will", "because"):
        table.add_column(col)
    for w in plan.waves:
        for i, n in enumerate(w.nodes):
            table.add_row(w.label if i == 0 else "", n.name, WORDS[n.action.value], n.reason)
        table.add_section()
    return table


def _summary_table(plan: Any, title: str) -> Any:
    """One row per wave: how many nodes, what will happen to them, the first few names."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("wave", "nodes", "will", "first nodes"):
        table.add_column(col)
    for w in plan.waves:
        counts: dict[str, int] = {}
        for n in w.nodes:
            counts[n.action.value] = counts.get(n.action.value, 0) + 1
        will = ", ".join(f"{c} {WORDS[a]}" for a, c in counts.items())
        first = ", ".join(w.names()[:SHOWN_PER_WAVE])
        if len(w) > SHOWN_PER_WAVE:
            first += f", ... (+{len(w) - SHOWN_PER_WAVE})"
        table.add_row(w.label, str(len(w)), will, first)
    return table


def _print_every_node(plan: Any, title: str) -> None:
    """Every node, one plain line each (rich would take seconds to lay out 10,000 rows)."""
    width = max(len(n.name) for n in plan.nodes)
    lines = [title, f"{'wave':<8}  {'node':<{width}}  {'will':<18}  because"]
    for w in plan.waves:
        lines += [f"{w.label:<8}  {n.name:<{width}}  {WORDS[n.action.value]:<18}  {n.reason}"
                  for n in w.nodes]
    sys.stdout.write("\n".join(lines) + "\n")
