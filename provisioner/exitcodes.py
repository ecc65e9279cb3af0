"""Stable, documented exit codes of the ``provisioner`` command (docs/cli.md)."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # every node compliant / the command did what was asked
    NOT_COMPLIANT = 1  # at least one node reached and not compliant (or a rollout node failed)
    UNREACHABLE = 2  # at least one node could not be reached (takes precedence over 1)
    ABORTED = 3  # a rollout stopped on a gate, a failure budget or a person's "no"
    USAGE = 64  # bad command line, inventory, variables or configuration; nothing ran
    INTERNAL = 70  # a bug: one line on stderr, the traceback in the debug log it names
    LEDGER = 74  # the ledger cannot be opened, read or written (sysexits EX_IOERR)
    LOCKED = 75  # another rollout holds the fleet lock; nothing ran
    INTERRUPTED = 130  # SIGINT (Ctrl-C); the ledger holds where it stopped, run the same again
    TERMINATED = 143  # SIGTERM; as 130
