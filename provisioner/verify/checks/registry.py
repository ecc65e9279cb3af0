"""The check registry: every node check, its stable id, subsystem, title and route.

A subsystem module (``provisioner/verify/checks/<subsystem>.py``) registers its checks with
:func:`check` (a decorator on the function that judges one check) or, for a check another part
of ``verify`` emits, with :func:`declare`. The subsystem is the module's name, and a module may
only register ids under its own prefixes (:data:`SUBSYSTEMS`), so adding a check touches one
file. docs/checks.md documents every registered id under its subsystem
(tests/unit/test_checks_registry.py holds the two to each other).

Order is stable: subsystems in :data:`SUBSYSTEMS` order, checks in the order their module
registers them. It is the order of the report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from provisioner.verify.checks import operator
from provisioner.verify.checks.evidence import target_route
from provisioner.verify.model import SKIP, CheckResult, IoTestResult
from provisioner.verify.policy import Policy

# subsystem -> the id prefixes its module owns, in report order
SUBSYSTEMS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu.", "kernel."),
    "nvfs": ("nvfs.", "mofed."),
    "p2pdma": ("p2pdma.",),
    "cufile": ("cufile.", "libcufile.", "packages."),
    "fs": ("fs.",),
    "platform": ("gdscheck.", "iommu.", "pcie."),
    "route": ("route.", "reboot.", "secureboot."),
    "io": ("io.", "gdsio."),
    # operator-managed nodes are a mode of the other checks, not a subsystem of ids
    "operator": (),
    "node": ("node.",),
    # the kernel gate's verdict on the kernel the node boots next (issue 29)
    "gate": ("gate.",),
}

# the routes a check's prerequisites are judged for (Context.target)
ALL_TARGETS: frozenset[str | None] = frozenset({None, "nvfs", "p2pdma"})


class Context:
    """What a check judges: the facts, the I/O test result, the policy and the route."""

    def __init__(self, facts: dict[str, Any], io: IoTestResult, policy: Policy, route: str,
                 io_path: str | None) -> None:
        self.f = facts
        self.io = io
        self.p = policy
        self.route = route
        # the route whose prerequisites apply: the policy's, else the observed direct one
        self.target = target_route(route, policy)
        self.io_path = io_path
        # The NVIDIA GPU Operator's driver container brings the driver, nvidia-fs and CUDA:
        # host-package and host-DKMS checks do not apply (they skip and say so).
        self.operator = operator.managed(facts)
        self.operator_evidence = operator.evidence(facts)

    def operator_skip(self, cid: str, expected: str, why: str) -> CheckResult:
        """``skip`` for an operator-managed node; only a check registered with
        ``operator_skip=True`` may (docs/checks.md lists those)."""
        rec = REGISTRY.get(cid)
        if rec is None or not rec.operator_skip:
            raise ValueError(f"{cid} is not registered with operator_skip=True")
        return CheckResult(cid, SKIP, expected, f"operator-managed ({self.operator_evidence})",
                           f"operator-managed node: {why}")


Judge = Callable[[Context], CheckResult | None]


@dataclass(frozen=True)
class Skip:
    """The ``skip`` a check gives off the routes it applies to; ``{route}`` is the node's."""

    expected: str
    observed: str
    message: str

    def result(self, cid: str, ctx: Context) -> CheckResult:
        return CheckResult(cid, SKIP, self.expected, self.observed.format(route=ctx.route),
                           self.message)


@dataclass(frozen=True)
class Check:
    """One registered check. ``fn`` judges it (None: emitted elsewhere, ``emitted_by``);
    ``targets`` the routes it applies to (Context.target; None stands for no direct route),
    ``off_target`` the skip it gives elsewhere; ``operator_skip``: it may skip on an
    operator-managed node."""

    id: str
    subsystem: str
    module: str
    title: str
    fn: Judge | None
    targets: frozenset[str | None]
    off_target: Skip | None
    operator_skip: bool
    emitted_by: str | None
    seq: int

    def run(self, ctx: Context) -> CheckResult | None:
        if self.fn is None:
            return None
        if ctx.target not in self.targets:
            if self.off_target is None:
                return None
            return self.off_target.result(self.id, ctx)
        result = self.fn(ctx)
        if result is not None and result.id != self.id:
            raise ValueError(f"the judge of {self.id} returned a result for {result.id}")
        return result


REGISTRY: dict[str, Check] = {}


def _add(cid: str, module: str, title: str, fn: Judge | None,
         targets: frozenset[str | None], off_target: Skip | None, operator_skip: bool,
         emitted_by: str | None) -> Check:
    subsystem = module.rsplit(".", 1)[-1]
    prefixes = SUBSYSTEMS.get(subsystem)
    if prefixes is None:
        raise ValueError(f"{module}: not a subsystem module (add it to SUBSYSTEMS)")
    if not cid.startswith(prefixes):
        raise ValueError(f"{cid}: the {subsystem} module registers only {', '.join(prefixes)}")
    if cid in REGISTRY:
        raise ValueError(f"{cid} is registered twice")
    if targets != ALL_TARGETS and off_target is None:
        raise ValueError(f"{cid}: a check limited to some routes needs off_target")
    rec = Check(cid, subsystem, module, title, fn, targets, off_target, operator_skip,
                emitted_by, len(REGISTRY))
    REGISTRY[cid] = rec
    return rec


def check(cid: str, title: str, *, targets: frozenset[str | None] = ALL_TARGETS,
          off_target: Skip | None = None,
          operator_skip: bool = False) -> Callable[[Judge], Judge]:
    """Register the decorated function as the judge of check ``cid``. It returns the
    CheckResult, or None where the check does not appear (the warn-only ones)."""

    def wrap(fn: Judge) -> Judge:
        _add(cid, fn.__module__, title, fn, targets, off_target, operator_skip, None)
        return fn

    return wrap


def declare(cid: str, module: str, title: str, *, emitted_by: str) -> Check:
    """Register a check that ``emitted_by`` (another module of verify) produces itself."""
    return _add(cid, module, title, None, ALL_TARGETS, None, False, emitted_by)


def ordered() -> list[Check]:
    """Every registered check in report order."""
    rank = {name: i for i, name in enumerate(SUBSYSTEMS)}
    return sorted(REGISTRY.values(), key=lambda c: (rank[c.subsystem], c.seq))


def operator_skipping() -> list[str]:
    """The ids of the checks that may skip on an operator-managed node, in report order."""
    return [c.id for c in ordered() if c.operator_skip]


def run(ctx: Context) -> Iterator[CheckResult]:
    """The results of every check evaluate() runs, in report order."""
    for rec in ordered():
        result = rec.run(ctx)
        if result is not None:
            yield result
