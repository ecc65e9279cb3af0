"""The ledger's schema: its tables, the formats of its columns, its version and migrations.

Tables
  ``runs``            one row per ``verify`` or ``rollout`` run (``finished_at`` NULL while it runs)
  ``verifications``   append-only: one row per node per verification, the parsed report
                      (``report_json``) beside the raw command outputs (``raw_json``)
  ``check_results``   the report's checks, one row each, for queries
  ``node_steps``      where each node of a run stands now (one row per run and node)
  ``step_events``     append-only: every step change, for the audit trail
  ``dispatches``      one shard of a wave sent to an execution node (``--executor ssh``)
  ``attestations``    append-only: what each node's attest said, and its job proofs
  ``run_results``     what a rollout's last attempt ended with (its exit code, message, wave
                      summaries and each node's outcome), so ``report RUN`` writes the document
                      a live ``rollout --json`` wrote, from one writer (issue 47)

``verifications`` and ``step_events`` refuse UPDATE and DELETE (triggers), so history cannot be
rewritten through the ledger's own database either.

Migrations (:func:`migrate`): a new database gets every table, its version row and the
append-only triggers; an existing ledger of a known version gets the tables it lacks (tables
added since version 1 without a version bump, e.g. ``dispatches``); anything else is refused
untouched (:func:`schema_version`); ``run_results`` came that way too.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    inspect,
    select,
)
from sqlalchemy.engine import Connection

from provisioner.errors import LedgerError
from provisioner.sanitize import storable
from provisioner.store.ids import new_run_id as new_run_id
from provisioner.store.ids import utcnow as utcnow
from provisioner.store.location import ENV_LEDGER

SCHEMA_VERSION = 1

# Rollout steps (contract); verify runs use "verified".
STEPS = (
    "pending",
    "provisioning",
    "rebooting",
    "reboot_pending",
    "verifying",
    "compliant",
    "failed",
    "skipped",
    "interrupted",
    "lost",  # the playbook's stream ended without a final result; redone on resume
)

metadata = MetaData()

ledger_meta = Table(
    "ledger_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("fleet", Text, nullable=False),
    Column("started_at", String(32), nullable=False),
    Column("finished_at", String(32)),
    Column("status", String(32), nullable=False),
    Column("args_json", Text, nullable=False, default="{}"),
    Index("ix_runs_kind_fleet", "kind", "fleet", "started_at"),
)

verifications = Table(
    "verifications",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("node", String(255), nullable=False),
    Column("at", String(32), nullable=False),
    Column("reachable", Boolean, nullable=False),
    Column("compliant", Boolean, nullable=False),
    Column("route", String(32)),
    Column("path_taken", String(32)),
    Column("report_json", Text, nullable=False),
    Column("raw_json", Text, nullable=False),
    Index("ix_verifications_node_id", "node", "id"),
    Index("ix_verifications_run", "run_id"),
)

check_results = Table(
    "check_results",
    metadata,
    Column("verification_id", Integer, ForeignKey("verifications.id"), nullable=False),
    Column("check_id", String(128), nullable=False),
    Column("status", String(8), nullable=False),
    Column("expected", Text),
    Column("observed", Text),
    Column("message", Text),
    Index("ix_check_results_verification", "verification_id"),
)

node_steps = Table(
    "node_steps",
    metadata,
    Column("run_id", String(40), ForeignKey("runs.id"), primary_key=True),
    Column("node", String(255), primary_key=True),
    Column("wave", Integer),
    Column("step", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("detail_json", Text, nullable=False, default="{}"),
)

step_events = Table(
    "step_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("node", String(255), nullable=False),
    Column("wave", Integer),
    Column("step", String(32), nullable=False),
    Column("at", String(32), nullable=False),
    Column("detail_json", Text, nullable=False, default="{}"),
    Index("ix_step_events_run_node", "run_id", "node"),
)

# One shard of a wave sent to one execution node (--executor ssh): written before the
# dispatch ("dispatching"), updated after ("running", then "done", "lost", "unreachable",
# "failed"). The token tags every process of the job on the execution node. Added after
# schema version 1 without a version bump: opening a ledger creates the table when it lacks
# it (create_all), and a read-only open of an older ledger does without it.
dispatches = Table(
    "dispatches",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("wave", Integer, nullable=False),
    Column("shard", Integer, nullable=False),
    Column("exec_node", String(255), nullable=False),
    Column("token", String(128), nullable=False),
    Column("deadline", String(32)),
    Column("state", String(32), nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("hosts_json", Text, nullable=False, default="{}"),  # {"hosts": [...]}
    Column("detail_json", Text, nullable=False, default="{}"),
    Index("ix_dispatches_run", "run_id", "wave"),
)
run_results = Table(
    "run_results",
    metadata,
    Column("run_id", String(40), ForeignKey("runs.id"), primary_key=True),
    Column("updated_at", String(32), nullable=False),
    Column("result_json", Text, nullable=False, default="{}"),
)

# What a node's attest said (``status --attest`` pulls it over SSH; issue 44): kind "attest"
# (status ok / regressed / unverified / error, the node's regressions in detail_json) and kind
# "job" (one job proof the node kept, status = its verdict). ``at`` is when the controller
# recorded it, ``checked_at`` the node's own time of it (UTC, as ``at``). Append-only; added
# without a version bump, like ``dispatches``.
attestations = Table(
    "attestations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("node", String(255), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("at", String(32), nullable=False),
    Column("checked_at", String(32)),
    Column("status", String(16), nullable=False),
    Column("job", String(64)),
    Column("detail_json", Text, nullable=False, default="{}"),
    Index("ix_attestations_node_id", "node", "id"),
)
# tables added after version 1 without a version bump: a ledger may lack them
_OPTIONAL_TABLES = frozenset({"dispatches", "run_results", "attestations"})

_APPEND_ONLY = ("verifications", "check_results", "step_events", "attestations")


def _dumps(value: Any) -> str:
    """A JSON column's text: ASCII (``ensure_ascii``), so a NUL or a lone surrogate a node sent
    is stored as JSON's escape (``\\u0000``, ``\\ud800``), which SQLite and PostgreSQL's
    text type take, and read back as the node said it (shown through printable(), refused by
    ``export``)."""
    return json.dumps(value, sort_keys=True, default=str)


def _loads(value: str | None, where: str = "a row") -> Any:
    """A JSON column's value (a mapping, or None when empty). A row that is not JSON or not
    a mapping (written by hand, a damaged file) is a :class:`LedgerError` naming the row (exit
    74), never a traceback."""
    if not value:
        return None
    try:
        out = json.loads(value)
    except (ValueError, TypeError, RecursionError) as exc:
        problem = f"is not JSON ({str(exc)[:80]})"
    else:
        if isinstance(out, dict):
            return out
        problem = f"holds a {type(out).__name__}, not a JSON object"
    raise LedgerError(
        f"the ledger holds a corrupt row: {where} {problem}; nothing was changed. Restore the "
        f"ledger from a backup, or start a new one with --ledger NEW_PATH (the damaged one "
        f"can be inspected with sqlite3)"
    )


def _text(value: Any) -> str | None:
    """A text column's value: a string with NUL and lone surrogates escaped (no ledger can
    store them: SQLite's and PostgreSQL's drivers raise, and one node's text would cost the
    whole fleet's results), anything else as JSON (ASCII, so storable as it is)."""
    if value is None:
        return None
    if isinstance(value, str):
        return storable(value)
    return _dumps(value)



def schema_version(conn: Connection, tables: set[str], location: str) -> int | None:
    """The ledger's schema version; None for an empty database (a new ledger).

    Refuses a database holding other tables but no ``ledger_meta`` (not a gdsfleet ledger)
    and a version that is not an integer this provisioner knows.
    """
    if not tables:
        return None
    if "ledger_meta" not in tables:
        names = ", ".join(sorted(tables)[:5]) + (" ..." if len(tables) > 5 else "")
        raise LedgerError(
            f"{location} is not a gdsfleet ledger (it holds the tables {names} but no "
            f"ledger_meta); it was left untouched: pass --ledger with the ledger's path or "
            f"URL, or a new file"
        )
    row = conn.execute(
        select(ledger_meta.c.value).where(ledger_meta.c.key == "schema_version")
    ).first()
    raw = None if row is None else str(row[0]).strip()
    try:
        version = int(raw) if raw is not None else None
    except ValueError:
        version = None
    if version is None or version < 1:
        raise LedgerError(
            f"the ledger {location} has an unknown schema version {raw!r} (this "
            f"provisioner writes {SCHEMA_VERSION}); it was left untouched: restore it from "
            f"a backup or point --ledger elsewhere"
        )
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger {location} has schema version {version}, newer than this "
            f"provisioner understands ({SCHEMA_VERSION}); upgrade the provisioner"
        )
    return version


def check_complete(conn: Connection, location: str) -> None:
    """A read-only open's check: a ledger of a known version with every table (the optional
    ones aside); never creates or changes anything."""
    tables = set(inspect(conn).get_table_names())
    if schema_version(conn, tables, location) is None:
        raise LedgerError(
            f"the ledger {location} is empty (no gdsfleet tables): nothing was ever "
            f"recorded there; check --ledger / {ENV_LEDGER}"
        )
    missing = {t.name for t in metadata.sorted_tables} - tables - _OPTIONAL_TABLES
    if missing:
        raise LedgerError(
            f"the ledger {location} lacks the tables {', '.join(sorted(missing))}; "
            f"run `provisioner verify` once to complete it"
        )


def migrate(conn: Connection, location: str) -> None:
    """Create or upgrade the schema inside the caller's write transaction."""
    tables = set(inspect(conn).get_table_names())
    version = schema_version(conn, tables, location)
    metadata.create_all(conn)
    if version is None:
        conn.execute(
            insert(ledger_meta).values(key="schema_version", value=str(SCHEMA_VERSION))
        )
    if version is None or "attestations" not in tables:  # a table added since: its triggers
        append_only_triggers(conn)


def append_only_triggers(conn: Connection) -> None:
    """UPDATE and DELETE refused on the append-only tables (SQLite and PostgreSQL)."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        for table in _APPEND_ONLY:
            for op in ("UPDATE", "DELETE"):
                conn.exec_driver_sql(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON "
                    f"{table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
                )
    elif dialect == "postgresql":
        conn.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION gdsfleet_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION USING MESSAGE = TG_TABLE_NAME || ' is append-only'; "
            "END $$ "
            "LANGUAGE plpgsql"
        )
        for table in _APPEND_ONLY:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            conn.exec_driver_sql(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION gdsfleet_append_only()"
            )
