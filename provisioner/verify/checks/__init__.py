"""Checks: facts + I/O test result + policy -> CheckResult list, route and compliance (pure).

Every check has a stable id (docs/checks.md lists them with what to do). A check that does not
apply to the node's route is ``skip`` with the reason.

One module per subsystem registers its checks in :mod:`.registry` (see there for the rules);
:func:`evaluate` runs them in the registry's order. The route itself comes from
:mod:`.evidence`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from provisioner.verify.checks.evidence import (
    DIRECT_ROUTES,
    P2PDMA_REGISTRY_KEYS,
    determine_route,
    route_evidence,
    stack_present,
)
from provisioner.verify.checks.registry import REGISTRY, SUBSYSTEMS, Context, ordered, run
from provisioner.verify.model import FAIL, PATH_SKIPPED, CheckResult, IoTestResult
from provisioner.verify.policy import Policy

# Each subsystem module registers its checks when imported; registry.SUBSYSTEMS names them
# and orders the report (the import order does not matter).
for _name in SUBSYSTEMS:
    import_module(f"{__name__}.{_name}")


def evaluate(facts: dict[str, Any], io: IoTestResult, policy: Policy, *,
             route: str | None = None, io_path: str | None = None) -> tuple[
                 str, list[CheckResult], bool]:
    """(route, checks, compliant). Compliant only when no check fails and the I/O test proved
    the direct path."""
    from provisioner.verify import proof

    route = route or determine_route(facts)
    checks = list(run(Context(facts, io, policy, route, io_path)))
    io_ok = proof.counts(io, facts) or (not policy.require_io_test
                                        and io.path_taken == PATH_SKIPPED)
    compliant = route in DIRECT_ROUTES and io_ok and not any(c.status == FAIL for c in checks)
    return route, checks, compliant


__all__ = [
    "DIRECT_ROUTES",
    "P2PDMA_REGISTRY_KEYS",
    "REGISTRY",
    "determine_route",
    "evaluate",
    "ordered",
    "route_evidence",
    "stack_present",
]
