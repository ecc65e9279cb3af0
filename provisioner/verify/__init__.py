"""Node verification: gather facts, run gdscheck and the kvikio I/O test, evaluate the policy.

Public interface (other parts code against these names):
CommandResult, CommandRunner, CheckResult, IoTestOptions, IoTestResult, Policy, NodeReport,
verify_node(runner, name, policy, io) -> NodeReport, unreachable_report(name, error).
"""

from __future__ import annotations

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
from provisioner.verify.node import choose_io_path, unreachable_report, verify_node
from provisioner.verify.policy import Policy

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
