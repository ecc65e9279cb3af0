"""The follow-up commands ``scripts/lab.sh`` prints when the SIMULATED lab is up, in one place.

lab.sh prints this block, and tests/fleet/test_rollout.py runs the same commands, as printed,
on a rolled-out simulated fleet in a directory shaped like a checkout (``inventories/lab``,
``.lab/ledger.sqlite``, ``.venv``), so the script and the test cannot drift apart. Every
command finds the ledger by the one rule (docs/cli.md, Which ledger): ``-i inventories/lab``
names ``.lab/ledger.sqlite``.

    python -m tests.harness.lab_followups --rc RC [--limit HOSTS] [-- ROLLOUT_EXTRA_ARGS...]
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence

INVENTORY = "inventories/lab"
LEDGER = ".lab/ledger.sqlite"
NODE = "gdsfleet-lab-01"  # the first node: there whatever LAB_NODES says
TEARDOWN = ("CONTAINERS_CONF=tests/harness/containers.conf .venv/bin/python -m "
            "tests.harness.lab down")
# plain ansible in the lab finds the collection only where lab.sh installed it (issue 47: the
# lab never said so); a gated kernel update in the lab: docs/lifecycle.md
ANSIBLE_NOTE = ("(plain ansible/ansible-playbook here: ANSIBLE_COLLECTIONS_PATH=.lab/collections; "
                "a gated kernel update in the lab: docs/lifecycle.md, \"In the lab\")")


def followups(limit: str = "", rollout_extra: Sequence[str] = (), *, node: str = NODE
              ) -> list[tuple[str, str]]:
    """(label, command) in the order printed; the last one tears the lab down. ``node``: the
    node ``history`` and ``export`` name (a test fleet's nodes have names of their own)."""
    pv = ".venv/bin/provisioner"
    inv = f"-i {INVENTORY}"
    sel = f"{inv} --limit {shlex.quote(limit)}" if limit else inv
    extra = "".join(" " + shlex.quote(a) for a in rollout_extra)
    return [
        ("run it again (reconcile, fast)", f"{pv} rollout {sel}{extra}"),
        ("verify the nodes yourself", f"{pv} verify {sel}"),
        ("the ledger, node by node", f"{pv} status {inv}"),
        ("", f"{pv} history {node} {inv}"),
        ("an HTML report of the last run", f"{pv} report latest {inv} --html .lab/fleet.html"),
        ("a training job's GDS settings", f"{pv} export env --node {node} {inv}"),
        ("tear the lab down", TEARDOWN),
    ]


def render(rc: int, limit: str = "", rollout_extra: Sequence[str] = (), *, node: str = NODE
           ) -> str:
    """The block lab.sh prints after the rollout (``rc``: the rollout's exit code)."""
    lines = [f"The simulated lab is still up (provisioner rollout exited {rc}; reports in "
             f".lab/rollout-report.*)."]
    for label, cmd in followups(limit, rollout_extra, node=node):
        lines.append(f"  {(label + ':') if label else '':<33}{cmd}")
    lines.append(ANSIBLE_NOTE)
    lines.append(f"(every provisioner command above reads the ledger {LEDGER}: "
                 f"-i {INVENTORY} names it)")
    lines.append("(remember: a SIMULATION - containers with stand-in hardware, not GPU nodes)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.harness.lab_followups",
                                description="print lab.sh's follow-up commands")
    p.add_argument("--rc", type=int, required=True, help="the rollout's exit code")
    p.add_argument("--limit", default="", help="the --limit of a lab with fewer nodes")
    p.add_argument("extra", nargs="*", help="extra arguments the rollout needs again")
    args = p.parse_args(argv)
    print("\n" + render(args.rc, args.limit, args.extra), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
