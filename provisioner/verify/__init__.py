"""Node verification: gather facts, run gdscheck and the kvikio I/O test, evaluate the policy.

Public interface (other parts code against these names):
CommandResult, CommandRunner, CheckResult, IoTestOptions, IoTestResult, Policy, NodeReport,
verify_node(runner, name, policy, io) -> NodeReport, unreachable_report(name, error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provisioner import lazy_attribute
from provisioner.verify.model import (
    FAIL,
    GIB,
    PASS,
    PATH_COMPAT,
    PATH_DIRECT,
    PATH_FAILED,
    PATH_SKIPPED,
    SKIP,
    WARN,
    CheckResult,
    CommandResult,
    CommandRunner,
    GdsioOptions,
    GdsioResult,
    GdsioRun,
    IoTestOptions,
    IoTestResult,
    NodeReport,
)

if TYPE_CHECKING:
    from provisioner.verify.node import choose_io_path, unreachable_report, verify_node
    from provisioner.verify.policy import Policy

# The checks and the policy (YAML) are loaded when first used (PEP 562): a command that only
# needs the model's names (``rollout --no-verify``, through provisioner.validate) does not
# import every check and parser (about 30 ms).
_LAZY = {"choose_io_path": "node", "unreachable_report": "node", "verify_node": "node",
         "Policy": "policy"}


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), _LAZY, name)


__all__ = [
    "FAIL",
    "GIB",
    "PASS",
    "PATH_COMPAT",
    "PATH_DIRECT",
    "PATH_FAILED",
    "PATH_SKIPPED",
    "SKIP",
    "WARN",
    "CheckResult",
    "CommandResult",
    "CommandRunner",
    "GdsioOptions",
    "GdsioResult",
    "GdsioRun",
    "IoTestOptions",
    "IoTestResult",
    "NodeReport",
    "Policy",
    "choose_io_path",
    "unreachable_report",
    "verify_node",
]
