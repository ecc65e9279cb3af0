"""One exception tree for the orchestrator.

Every error an operator can see derives from :class:`ProvisionerError` and carries a message
that says what to do. Low-level errors (paramiko, socket, sqlite, ansible) are turned into one
of these at the boundary where they happen.
"""

from __future__ import annotations


def mask_url_credentials(text: str) -> str:
    """``text`` with URL credentials and every other secret masked (provisioner.redact)."""
    from provisioner.redact import redact_text

    return redact_text(text)


class ProvisionerError(Exception):
    """Base class: an error with an operator-facing message."""

    exit_code = 1


class UsageError(ProvisionerError):
    """Bad command-line input, inventory, variables or configuration."""

    exit_code = 64


class InventoryError(UsageError):
    """The inventory cannot be read, or holds values that are refused."""


class ConnectError(ProvisionerError):
    """A node could not be reached or authenticated."""

    exit_code = 2

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class HostKeyError(ConnectError):
    """Unknown or changed host key; never retried."""


class CommandTimeout(ConnectError):
    """A remote command ran past its deadline."""


class OutputTooLarge(ConnectError):
    """A node wrote more than the controller reads from one command (provisioner.sanitize):
    the command is stopped and the node's answer refused, as for an unreachable node."""


class CheckError(ProvisionerError):
    """A check could not be evaluated (bad captured output, unknown format)."""


class LedgerError(ProvisionerError):
    """The compliance ledger cannot be opened, read or written (unreachable server, corrupt
    or foreign file, unknown schema version, full disk). Exit 74 (sysexits ``EX_IOERR``): not
    a statement about any node, so never 1 ("not compliant")."""

    exit_code = 74


class LockHeld(ProvisionerError):
    """Another rollout holds the fleet lock."""

    exit_code = 75


class RolloutAborted(ProvisionerError):
    """A rollout stopped on a gate or a failure budget."""

    exit_code = 3
