"""Wave planning: which node goes in which wave, and what will happen to it.

A wave spec is a comma list of sizes, each a count (``5``) or a percentage of the whole target
set (``20%``, rounded up, at least one node). The first wave is the canary. Sizes that exceed
what is left are capped; when the spec runs out before the nodes do, the nodes left form one
last wave of their own (issue 47: ``1`` on 8 nodes was one wave of 8, every node "the
canary"). A canary is never the whole selection of more than one node: a first entry that
would take every node is refused (exit 64), unless the spec is the word ``all``, which asks in
words for one wave of every node and no canary. Planning is pure: it reads the ledger's latest
state through a mapping handed in and changes nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from provisioner.errors import UsageError

DEFAULT_WAVES = "1,5,25%,100%"
# the spec that asks, in words, for every node in one wave, without a canary
ALL_AT_ONCE = "all"

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


class Action(str, Enum):
    """What the rollout will do to a node."""

    VERIFY = "verify"  # latest record says compliant: verify only, no change
    PROVISION = "provision"  # not compliant, unknown or forced: run the playbook, then verify
    RESUME = "resume"  # caught mid-step by an interrupted run: redone first

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class WaveSize:
    """One entry of a wave spec (``whole``: the spec ``all``)."""

    value: int
    percent: bool
    whole: bool = False

    def resolve(self, total: int) -> int:
        """Number of nodes this entry stands for in a target set of ``total`` nodes."""
        if self.whole:
            return total
        if self.percent:
            return max(1, math.ceil(total * self.value / 100))
        return self.value

    def __str__(self) -> str:
        if self.whole:
            return ALL_AT_ONCE
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True)
class PlannedNode:
    name: str
    action: Action
    reason: str


@dataclass(frozen=True)
class Wave:
    index: int  # 0 = canary
    nodes: tuple[PlannedNode, ...]
    whole: bool = False  # --waves all: every node at once, asked in words; no canary

    @property
    def canary(self) -> bool:
        return self.index == 0 and not self.whole

    @property
    def label(self) -> str:
        if self.whole:
            return "all (no canary)"
        return "canary" if self.canary else f"wave {self.index}"

    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def __len__(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class Plan:
    spec: str
    waves: tuple[Wave, ...]

    @property
    def nodes(self) -> list[PlannedNode]:
        return [n for w in self.waves for n in w.nodes]

    def __len__(self) -> int:
        return sum(len(w) for w in self.waves)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {a.value: 0 for a in Action}
        for n in self.nodes:
            out[n.action.value] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "waves": [
                {
                    "index": w.index,
                    "label": w.label,
                    **({"whole": True} if w.whole else {}),
                    "nodes": [
                        {"name": n.name, "action": n.action.value, "reason": n.reason}
                        for n in w.nodes
                    ],
                }
                for w in self.waves
            ],
            "counts": self.counts(),
        }


def parse_wave_spec(spec: str) -> tuple[WaveSize, ...]:
    """Parse ``"1,5,20%,100%"``; raise :class:`UsageError` with the reason when malformed."""
    if spec is None or not str(spec).strip():
        raise UsageError("--waves is empty; give sizes like '1,5,20%,100%'")
    if str(spec).strip().lower() == ALL_AT_ONCE:
        return (WaveSize(100, True, whole=True),)
    sizes: list[WaveSize] = []
    for i, raw in enumerate(str(spec).split(","), start=1):
        m = _SIZE_RE.match(raw)
        if not m:
            also = (f" ('{ALL_AT_ONCE}' stands alone: --waves {ALL_AT_ONCE})"
                    if raw.strip().lower() == ALL_AT_ONCE else "")
            raise UsageError(
                f"--waves {spec!r}: entry {i} ({raw.strip()!r}) is not a count or a "
                f"percentage; give sizes like '1,5,20%,100%'{also}"
            )
        value, pct = int(m.group(1)), bool(m.group(2))
        if value <= 0:
            raise UsageError(f"--waves {spec!r}: entry {i} ({raw.strip()!r}) must be above 0")
        if pct and value > 100:
            raise UsageError(
                f"--waves {spec!r}: entry {i} ({raw.strip()!r}) is over 100% of the fleet"
            )
        sizes.append(WaveSize(value, pct))
    return tuple(sizes)


def wave_sizes(spec: str | Sequence[WaveSize], total: int) -> list[int]:
    """Split ``total`` nodes into wave sizes following ``spec`` (see the module doc); a
    first entry that would make the whole selection of more than one node the canary is
    refused (UsageError, exit 64), the spec ``all`` excepted."""
    sizes = parse_wave_spec(spec) if isinstance(spec, str) else tuple(spec)
    if total > 1 and sizes and not sizes[0].whole and sizes[0].resolve(total) >= total:
        first = sizes[0]
        text = ",".join(str(x) for x in sizes)
        took = f"{first} of {total} = {first.resolve(total)}" if first.percent else str(first)
        raise UsageError(
            f"--waves {text} on {total} nodes: the canary ({took}) would be every selected "
            f"node, and a canary is never the whole fleet; give a smaller first entry "
            f"(--waves 1,{text} puts one node first), or --waves {ALL_AT_ONCE} to provision "
            f"all {total} at once with no canary")
    out: list[int] = []
    left = total
    for size in sizes:
        if left <= 0:
            break
        n = min(size.resolve(total), left)
        out.append(n)
        left -= n
    if left > 0:  # the spec ran out first: the rest is one last wave of its own
        out.append(left)
    return out


def describe_waves(spec: str | Sequence[WaveSize], total: int) -> str:
    """How ``spec`` splits ``total`` nodes, in words (issue 30 item 5): ``1,5,25%,100% on 8
    nodes -> 3 waves of 1, 5, 2 (25% of 8 = 2; 100%: no node left)``, as :func:`wave_sizes`
    computes it: a percentage is of the whole fleet, rounded up; an entry larger than what is
    left takes what is left; entries after the last node add nothing; nodes left after the last
    entry form a last wave of their own."""
    sizes = parse_wave_spec(spec) if isinstance(spec, str) else tuple(spec)
    text = ",".join(str(x) for x in sizes)
    if total <= 0:
        return f"{text} on 0 nodes -> no wave"
    out = wave_sizes(sizes, total)
    if sizes and sizes[0].whole:
        return (f"{text} on {total} node{'s' if total != 1 else ''} -> 1 wave of {total} "
                f"(asked for: every node at once, no canary)")
    notes: list[str] = []
    empty: list[str] = []
    left = total
    for size in sizes:
        want = size.resolve(total)
        if left <= 0:
            empty.append(str(size))
            continue
        took = min(want, left)
        if size.percent and took == want:
            notes.append(f"{size} of {total} = {want}")
        elif took < want:
            notes.append(f"{size}{f' of {total} = {want}' if size.percent else ''}: "
                         f"only {took} left")
        left -= took
    if empty:
        notes.append(f"{', '.join(empty)}: no node left")
    if left > 0:
        notes.append(f"the {left} node(s) after the last entry form a last wave")
    waves = f"{len(out)} wave{'s' if len(out) != 1 else ''} of {', '.join(map(str, out))}"
    return (f"{text} on {total} node{'s' if total != 1 else ''} -> {waves}"
            + (f" ({'; '.join(notes)})" if notes else ""))


def describe_plan(plan: Plan) -> str:
    """:func:`describe_waves` of the plan's spec when it splits the plan's nodes as the plan
    does; otherwise (a run resumed from a plan an earlier version made by another rule, or a
    spec refused now) the waves the plan really has."""
    sizes = [len(w) for w in plan.waves]
    try:
        if wave_sizes(plan.spec, len(plan)) == sizes:
            return describe_waves(plan.spec, len(plan))
    except UsageError:
        pass
    total = len(plan)
    return (f"{plan.spec} on {total} node{'s' if total != 1 else ''} -> {len(sizes)} "
            f"wave{'s' if len(sizes) != 1 else ''} of {', '.join(map(str, sizes))} "
            f"(as planned when the run began)")


def node_action(
    name: str, latest: Mapping[str, Mapping[str, Any]], *, force: bool = False
) -> tuple[Action, str]:
    """Action for one node from the ledger's latest record of it."""
    rec = latest.get(name)
    if force:
        return Action.PROVISION, "--force"
    if rec is None:
        return Action.PROVISION, "no record in the ledger"
    if not rec.get("reachable", True):
        return Action.PROVISION, "unreachable at last verification"
    drift = rec.get("attest")
    if rec.get("compliant") and drift and drift.get("status") == "regressed":
        # attest found it changed since it was verified (status --attest): drift, reconciled
        ids = ", ".join(drift.get("regressions") or []) or "?"
        return Action.PROVISION, f"regressed since verified ({ids}; attest at {drift.get('at')})"
    if rec.get("compliant"):
        return Action.VERIFY, f"compliant at {rec.get('at', '?')}"
    return Action.PROVISION, "not compliant at last verification"


def plan_waves(
    names: Sequence[str],
    spec: str = DEFAULT_WAVES,
    *,
    latest: Mapping[str, Mapping[str, Any]] | None = None,
    force: bool = False,
    resume_first: Iterable[str] = (),
) -> Plan:
    """Plan the waves over ``names`` (inventory order kept within each group).

    Nodes in ``resume_first`` (caught mid-step by an interrupted run) come first, then the
    nodes that need provisioning, then those that are only verified: the canary is a node that
    will really change whenever there is one.
    """
    sizes = parse_wave_spec(spec)
    latest = latest or {}
    unique = list(dict.fromkeys(names))
    first = set(resume_first)
    resumed: list[PlannedNode] = []
    provision: list[PlannedNode] = []
    verify: list[PlannedNode] = []
    for name in unique:
        if name in first:
            resumed.append(PlannedNode(name, Action.RESUME, "caught mid-step; redone first"))
            continue
        action, reason = node_action(name, latest, force=force)
        (verify if action is Action.VERIFY else provision).append(
            PlannedNode(name, action, reason)
        )
    ordered = resumed + provision + verify
    waves: list[Wave] = []
    start = 0
    whole = bool(sizes) and sizes[0].whole
    for i, n in enumerate(wave_sizes(sizes, len(ordered))):
        waves.append(Wave(i, tuple(ordered[start : start + n]), whole=whole))
        start += n
    return Plan(spec=str(spec), waves=tuple(waves))


def parse_budget(value: str | int | None, *, option: str) -> Budget:
    """Parse a failure budget: ``N`` (count) or ``P%`` (of the wave / of the target set)."""
    if value is None:
        return Budget(0, False)
    m = _SIZE_RE.match(str(value))
    if not m:
        raise UsageError(f"{option} {value!r}: give a count (2) or a percentage (10%)")
    n, pct = int(m.group(1)), bool(m.group(2))
    if pct and n > 100:
        raise UsageError(f"{option} {value!r}: a percentage cannot be over 100%")
    return Budget(n, pct)


@dataclass(frozen=True)
class Budget:
    """How many failures are tolerated: a count, or a percentage of a set's size."""

    value: int
    percent: bool

    def allowed(self, size: int) -> int:
        """Failures tolerated in a set of ``size`` nodes (percent rounds down)."""
        if self.percent:
            return math.floor(size * self.value / 100)
        return self.value

    def exceeded(self, failures: int, size: int) -> bool:
        return failures > self.allowed(size)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def parse_threshold(value: str | float | None, *, option: str = "--health-threshold") -> float:
    """Health threshold as the fraction of already-rolled nodes that must still be compliant.

    Accepts ``1.0``, ``0.9`` or ``90%``.
    """
    if value is None:
        return 1.0
    text = str(value).strip()
    try:
        frac = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(
            f"{option} {value!r}: give a fraction (0.9) or a percentage (90%)"
        ) from None
    if not 0.0 <= frac <= 1.0:
        raise UsageError(f"{option} {value!r}: must be between 0 and 1 (or 0% and 100%)")
    return frac
