"""The compliance ledger: every verification and every rollout step, append-only.

A package in rooms of its own:

- :mod:`provisioner.store.schema`: the tables, the formats of their columns, the schema
  version and its migrations;
- :mod:`provisioner.store.engine`: opening a path or URL (SQLite or PostgreSQL), the read and
  write transactions, database errors mapped to :class:`~provisioner.errors.LedgerError`;
- :mod:`provisioner.store.writes`: what ``verify`` and the rollout write;
- :mod:`provisioner.store.queries`: the read-only queries of ``status``, ``history``,
  ``report``, ``export`` and ``plan``;
- :mod:`provisioner.store.location`: where the ledger lives.

:class:`Ledger` has both sides, for the commands that write (``verify``, ``rollout``); the
read-only commands open :class:`~provisioner.store.queries.LedgerQueries`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provisioner import lazy_attribute
from provisioner.store.ids import new_run_id, utcnow
from provisioner.store.location import (
    ENV_LEDGER,
    default_ledger,
    display_url,
    fleet_id,
    resolve_ledger,
)

if TYPE_CHECKING:
    from provisioner.store.engine import BUSY_TIMEOUT_MS, _short
    from provisioner.store.queries import LedgerQueries
    from provisioner.store.schema import (
        SCHEMA_VERSION,
        STEPS,
        _dumps,
        _loads,
        _text,
        check_results,
        dispatches,
        ledger_meta,
        metadata,
        node_steps,
        run_results,
        runs,
        step_events,
        verifications,
    )
    from provisioner.store.writes import LedgerWrites

    class Ledger(LedgerWrites, LedgerQueries):
        """The compliance ledger. Open with :meth:`Ledger.open`; thread-safe."""


# Names from the modules that import SQLAlchemy (about 0.2 CPU-s to import) are loaded when
# first used (PEP 562), so a command run without a ledger (``verify --no-ledger``, ``verify
# --local`` writing only a report) never pays for them.
_LAZY = {
    "BUSY_TIMEOUT_MS": "engine", "_short": "engine",
    "LedgerQueries": "queries", "LedgerWrites": "writes",
    **dict.fromkeys(("SCHEMA_VERSION", "STEPS", "_dumps", "_loads", "_text", "check_results",
                     "dispatches", "ledger_meta", "metadata", "node_steps", "run_results", "runs",
                     "step_events", "verifications"), "schema"),
}


def __getattr__(name: str) -> Any:
    if name == "Ledger":
        from provisioner.store.queries import LedgerQueries
        from provisioner.store.writes import LedgerWrites

        cls = type("Ledger", (LedgerWrites, LedgerQueries), {
            "__doc__": "The compliance ledger. Open with :meth:`Ledger.open`; thread-safe.",
            "__module__": __name__})
        globals()["Ledger"] = cls
        return cls
    return lazy_attribute(globals(), _LAZY, name)


def open_read_only(location: str) -> LedgerQueries:
    """The ledger at ``location`` for reading: never creates a schema, file or row (what
    ``status``, ``history``, ``report``, ``export`` and ``plan`` open; SQLAlchemy is imported
    here, when one is opened)."""
    from provisioner.store.queries import LedgerQueries

    return LedgerQueries.open(location, read_only=True)


__all__ = [
    "BUSY_TIMEOUT_MS",
    "ENV_LEDGER",
    "SCHEMA_VERSION",
    "STEPS",
    "Ledger",
    "LedgerQueries",
    "LedgerWrites",
    "_dumps",
    "_loads",
    "_short",
    "_text",
    "check_results",
    "default_ledger",
    "dispatches",
    "display_url",
    "fleet_id",
    "ledger_meta",
    "metadata",
    "open_read_only",
    "new_run_id",
    "run_results",
    "node_steps",
    "resolve_ledger",
    "runs",
    "step_events",
    "utcnow",
    "verifications",
]
