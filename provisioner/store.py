"""The compliance ledger: every verification and every rollout step, append-only.

One code path for SQLite (the default: a file, WAL journal, ``busy_timeout``, writes under
``BEGIN IMMEDIATE``) and PostgreSQL (by URL, ``postgresql+psycopg://...``, when several
controllers share one ledger), through SQLAlchemy Core.

Tables
  ``runs``            one row per ``verify`` or ``rollout`` run (``finished_at`` NULL while it runs)
  ``verifications``   append-only: one row per node per verification, the parsed report
                      (``report_json``) beside the raw command outputs (``raw_json``)
  ``check_results``   the report's checks, one row each, for queries
  ``node_steps``      where each node of a run stands now (one row per run and node)
  ``step_events``     append-only: every step change, for the audit trail

``verifications`` and ``step_events`` refuse UPDATE and DELETE (triggers), so history cannot be
rewritten through the ledger's own database either.

The latest state per node and drift are views over that history: drift is a node whose latest
record differs from its last compliant one (compliance lost, route changed, or a different set
of failing/warning checks).

Threads: a connection is never shared between threads. Each call checks a connection out of
the pool for one transaction, so the parallel verify workers write their results concurrently;
SQLite serialises them with ``BEGIN IMMEDIATE`` and waits up to ``busy_timeout``.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from provisioner.errors import LedgerError
from provisioner.fsutil import create_private, is_project_state_dir, narrow_owned, private_dir
from provisioner.redact import redact_mapping

SCHEMA_VERSION = 1
ENV_LEDGER = "GDSFLEET_LEDGER"
BUSY_TIMEOUT_MS = 30_000

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
_OPTIONAL_TABLES = frozenset({"dispatches"})

_APPEND_ONLY = ("verifications", "check_results", "step_events")


def utcnow() -> str:
    """Timestamps are UTC ISO-8601 strings of fixed width: they sort as text on any backend."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    """Time-ordered, unique run id, e.g. ``20261122T050233Z-3f9a1c``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def fleet_id(inventory: str | os.PathLike[str]) -> str:
    """The name a fleet has in the ledger: its inventory's absolute path.

    ``verify`` and ``rollout`` both use this, so ``last_unfinished_run(kind, fleet)`` finds the
    run of the same fleet whichever relative path the operator typed.
    """
    return str(Path(inventory).expanduser().resolve())


def default_ledger(inventory: str | os.PathLike[str] | None = None) -> str:
    """Where the ledger lives when neither ``--ledger`` nor ``GDSFLEET_LEDGER`` says.

    The simulated lab (an inventory at ``<repo>/inventories/lab``) keeps its ledger in
    ``<repo>/.lab/ledger.sqlite``; anything else in ``~/.local/state/gdsfleet/ledger.sqlite``
    (``$XDG_STATE_HOME`` honoured).
    """
    if inventory is not None:
        p = Path(inventory).expanduser().resolve()
        for cand in (p, *p.parents):
            if cand.name == "lab" and cand.parent.name == "inventories":
                return str(cand.parent.parent / ".lab" / "ledger.sqlite")
            if cand.name == "inventories":
                break
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return str(Path(state) / "gdsfleet" / "ledger.sqlite")


def resolve_ledger(
    explicit: str | None, inventory: str | os.PathLike[str] | None = None
) -> str:
    """``--ledger`` first, then ``$GDSFLEET_LEDGER``, then :func:`default_ledger`."""
    return explicit or os.environ.get(ENV_LEDGER) or default_ledger(inventory)


def display_url(url_or_path: str) -> str:
    """The ledger location with any password hidden (for messages and logs): the URL's
    password and a ``password=`` query parameter (provisioner.redact)."""
    from provisioner.redact import redact_text

    if "://" not in url_or_path:
        return redact_text(url_or_path)
    try:
        return redact_text(make_url(url_or_path).render_as_string(hide_password=True))
    except ArgumentError:
        return "<unparseable ledger URL>"


def _dumps(value: Any) -> str:
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


class Ledger:
    """The compliance ledger. Open with :meth:`Ledger.open`; thread-safe."""

    def __init__(self, engine: Engine, location: str) -> None:
        self.engine = engine
        self.location = location
        self._writer = engine.execution_options(gdsfleet_write=True)
        self._sqlite = engine.dialect.name == "sqlite"

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, url_or_path: str | os.PathLike[str], *, read_only: bool = False) -> Ledger:
        """Open (and create or upgrade) the ledger at a path (SQLite) or a SQLAlchemy URL.

        ``read_only`` (``status``, ``history``, ``plan``): never create a file, a directory, a
        schema or a row; a missing SQLite file is an error; SQLite is opened ``mode=ro`` (and
        ``immutable`` on a read-only filesystem, where no writer can exist). Either way a file
        that is not a gdsfleet ledger (corrupt, another application's database) or a schema
        version this provisioner does not know is refused with :class:`LedgerError`.
        """
        target = str(url_or_path)
        shown = display_url(target)
        engine: Engine | None = None
        try:
            if "://" in target:
                url = make_url(target)
            else:
                path = Path(target).expanduser()
                if not read_only:
                    private_dir(path.parent)  # a folder it creates is 0700
                url = make_url(f"sqlite:///{path.resolve()}")
            database = str(url.database or "")
            if (url.get_backend_name() == "sqlite" and not read_only and database
                    and database != ":memory:" and not database.startswith("file:")):
                # created 0600 before SQLite opens it (SQLite would make it 0644); its -wal,
                # -shm and -journal files take the database file's mode
                private_dir(Path(database).parent)
                if not create_private(database) and is_project_state_dir(
                        Path(database).parent):
                    # the default ledger of an older version: 0644, like its -wal and -shm
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        narrow_owned(database + suffix)
            if url.get_backend_name() == "sqlite" and read_only:
                engine = _sqlite_read_only_engine(url, shown)
            elif url.get_backend_name() == "sqlite":
                _preflight_sqlite(cls, url, shown)  # a foreign file is refused untouched
                engine = create_engine(
                    url,
                    connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
                    pool_size=8,
                    max_overflow=56,
                )
                _sqlite_events(engine)
            else:
                engine = create_engine(url, pool_size=8, max_overflow=56, pool_pre_ping=True)
            ledger = cls(engine, shown)
            if read_only:
                ledger._check_read_only()
            else:
                ledger._create()
        except LedgerError:
            if engine is not None:
                engine.dispose()
            raise
        except (SQLAlchemyError, OSError, ArgumentError, ModuleNotFoundError) as exc:
            if engine is not None:
                engine.dispose()
            raise LedgerError(
                f"cannot open the ledger {shown}: {_short(exc)}; pass --ledger PATH|URL or set "
                f"{ENV_LEDGER}"
            ) from exc
        return ledger

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _schema_version(self, conn: Connection, tables: set[str]) -> int | None:
        """The ledger's schema version; None for an empty database (a new ledger).

        Refuses a database holding other tables but no ``ledger_meta`` (not a gdsfleet ledger)
        and a version that is not an integer this provisioner knows.
        """
        if not tables:
            return None
        if "ledger_meta" not in tables:
            names = ", ".join(sorted(tables)[:5]) + (" ..." if len(tables) > 5 else "")
            raise LedgerError(
                f"{self.location} is not a gdsfleet ledger (it holds the tables {names} but no "
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
                f"the ledger {self.location} has an unknown schema version {raw!r} (this "
                f"provisioner writes {SCHEMA_VERSION}); it was left untouched: restore it from "
                f"a backup or point --ledger elsewhere"
            )
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger {self.location} has schema version {version}, newer than this "
                f"provisioner understands ({SCHEMA_VERSION}); upgrade the provisioner"
            )
        return version

    def _check_read_only(self) -> None:
        with self._read() as conn:
            tables = set(inspect(conn).get_table_names())
            if self._schema_version(conn, tables) is None:
                raise LedgerError(
                    f"the ledger {self.location} is empty (no gdsfleet tables): nothing was ever "
                    f"recorded there; check --ledger / {ENV_LEDGER}"
                )
            missing = {t.name for t in metadata.sorted_tables} - tables - _OPTIONAL_TABLES
            if missing:
                raise LedgerError(
                    f"the ledger {self.location} lacks the tables {', '.join(sorted(missing))}; "
                    f"run `provisioner verify` once to complete it"
                )

    def _create(self) -> None:
        with self._write() as conn:
            tables = set(inspect(conn).get_table_names())
            version = self._schema_version(conn, tables)
            metadata.create_all(conn)
            if version is None:
                conn.execute(
                    insert(ledger_meta).values(key="schema_version", value=str(SCHEMA_VERSION))
                )
                self._append_only_triggers(conn)

    def _append_only_triggers(self, conn: Connection) -> None:
        if self._sqlite:
            for table in _APPEND_ONLY:
                for op in ("UPDATE", "DELETE"):
                    conn.exec_driver_sql(
                        f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON "
                        f"{table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
                    )
        elif self.engine.dialect.name == "postgresql":
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

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
        try:
            with self._writer.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"ledger {self.location}: write failed: {_short(exc)}") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"ledger {self.location}: read failed: {_short(exc)}") from exc

    # ------------------------------------------------------------------ runs
    def start_run(self, kind: str, fleet: str, args: Mapping[str, Any] | None = None) -> str:
        if kind not in ("verify", "rollout"):
            raise LedgerError(f"unknown run kind {kind!r} (verify or rollout)")
        run_id = new_run_id()
        with self._write() as conn:
            conn.execute(
                insert(runs).values(
                    id=run_id,
                    kind=kind,
                    fleet=fleet,
                    started_at=utcnow(),
                    status="running",
                    # no secret reaches the ledger, whoever calls (provisioner.redact)
                    args_json=_dumps(redact_mapping(dict(args or {}))),
                )
            )
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        with self._write() as conn:
            res = conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(finished_at=utcnow(), status=status)
            )
            if res.rowcount == 0:
                raise LedgerError(f"ledger {self.location}: no run {run_id!r}")

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
        return _run_dict(dict(row)) if row else None

    def runs(self, *, kind: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        q = select(runs).order_by(runs.c.started_at.desc(), runs.c.id.desc()).limit(limit)
        if kind:
            q = q.where(runs.c.kind == kind)
        with self._read() as conn:
            return [_run_dict(dict(r)) for r in conn.execute(q).mappings()]

    def last_unfinished_run(self, kind: str, fleet: str) -> str | None:
        q = (
            select(runs.c.id)
            .where(runs.c.kind == kind, runs.c.fleet == fleet, runs.c.finished_at.is_(None))
            .order_by(runs.c.started_at.desc(), runs.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            row = conn.execute(q).first()
        return str(row[0]) if row else None

    # ------------------------------------------------------------------ records
    def record_verification(
        self,
        run_id: str,
        report: Mapping[str, Any],
        *,
        step: str | None = None,
        wave: int | None = None,
        raw: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one node's verification (``NodeReport.to_dict()``), its checks and, when
        ``step`` is given, the node's step: all in ONE transaction.

        Raw outputs come from ``raw`` or the report's ``"raw"`` key; they are stored in
        ``raw_json`` beside (not inside) the parsed report.
        """
        doc = dict(report)
        raw_out = dict(raw) if raw is not None else dict(doc.pop("raw", None) or {})
        doc.pop("raw", None)
        name = str(doc.get("name") or "")
        if not name:
            raise LedgerError("a verification report without a node name cannot be recorded")
        io = doc.get("io_test") or {}
        now = utcnow()
        with self._write() as conn:
            vid = conn.execute(
                insert(verifications)
                .values(
                    run_id=run_id,
                    node=name,
                    at=now,
                    reachable=bool(doc.get("reachable")),
                    compliant=bool(doc.get("compliant")),
                    route=doc.get("route"),
                    path_taken=io.get("path_taken") if isinstance(io, Mapping) else None,
                    report_json=_dumps(doc),
                    raw_json=_dumps(raw_out),
                )
                .returning(verifications.c.id)
            ).scalar_one()
            rows = [
                {
                    "verification_id": vid,
                    "check_id": str(c.get("id")),
                    "status": str(c.get("status")),
                    "expected": _text(c.get("expected")),
                    "observed": _text(c.get("observed")),
                    "message": _text(c.get("message")),
                }
                for c in doc.get("checks") or []
            ]
            if rows:
                conn.execute(insert(check_results), rows)
            if step is not None:
                self._set_step(conn, run_id, name, step, wave, detail, now)
        return int(vid)

    def set_step(
        self,
        run_id: str,
        node: str,
        step: str,
        *,
        wave: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        with self._write() as conn:
            self._set_step(conn, run_id, node, step, wave, detail, utcnow())

    def _set_step(
        self,
        conn: Connection,
        run_id: str,
        node: str,
        step: str,
        wave: int | None,
        detail: Mapping[str, Any] | None,
        now: str,
    ) -> None:
        if step not in STEPS and step != "verified":
            raise LedgerError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
        values = {
            "run_id": run_id,
            "node": node,
            "wave": wave,
            "step": step,
            "updated_at": now,
            "detail_json": _dumps(dict(detail or {})),
        }
        stmt: Any
        if self._sqlite:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert  # type: ignore[assignment]
        stmt = dialect_insert(node_steps).values(**values)
        changes = {"step": step, "updated_at": now, "detail_json": values["detail_json"]}
        if wave is not None:
            changes["wave"] = wave
        stmt = stmt.on_conflict_do_update(index_elements=["run_id", "node"], set_=changes)
        conn.execute(stmt)
        event_row = {k: v for k, v in values.items() if k != "updated_at"}
        conn.execute(insert(step_events).values(**event_row, at=now))

    def record_dispatch(self, run_id: str, wave: int, shard: int, exec_node: str, token: str,
                        deadline: str | None, state: str, hosts: Sequence[str]) -> int:
        """A dispatch about to be sent; returns its id (for :meth:`update_dispatch`)."""
        now = utcnow()
        with self._write() as conn:
            res = conn.execute(insert(dispatches).values(
                run_id=run_id, wave=wave, shard=shard, exec_node=exec_node, token=token,
                deadline=deadline, state=state, created_at=now, updated_at=now,
                hosts_json=_dumps({"hosts": list(hosts)}), detail_json="{}"))
            key = res.inserted_primary_key
        return int(key[0]) if key else 0

    def update_dispatch(self, dispatch_id: int, state: str,
                        detail: Mapping[str, Any] | None = None) -> None:
        values: dict[str, Any] = {"state": state, "updated_at": utcnow()}
        if detail is not None:
            values["detail_json"] = _dumps(redact_mapping(dict(detail)))
        with self._write() as conn:
            conn.execute(update(dispatches).where(dispatches.c.id == dispatch_id).values(**values))

    def dispatches(self, run_id: str) -> list[dict[str, Any]]:
        """The run's dispatches in order; [] for a ledger without the table."""
        with self._read() as conn:
            if "dispatches" not in set(inspect(conn).get_table_names()):
                return []
            rows = conn.execute(select(dispatches).where(dispatches.c.run_id == run_id)
                                .order_by(dispatches.c.id)).mappings()
            out = []
            for r in rows:
                d = dict(r)
                d["hosts"] = (_loads(d.pop("hosts_json"), f"dispatches {d['id']} hosts_json")
                              or {}).get("hosts", [])
                d["detail"] = _loads(d.pop("detail_json"),
                                     f"dispatches {d['id']} detail_json") or {}
                out.append(d)
            return out

    def node_steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        """``{node: {"step", "wave", "updated_at", "detail"}}`` for one run."""
        with self._read() as conn:
            rows = conn.execute(
                select(node_steps).where(node_steps.c.run_id == run_id)
            ).mappings()
            return {
                r["node"]: {
                    "step": r["step"],
                    "wave": r["wave"],
                    "updated_at": r["updated_at"],
                    "detail": _loads(r["detail_json"],
                                     f"node_steps {run_id}/{r['node']} detail_json") or {},
                }
                for r in rows
            }

    def step_events(self, run_id: str, node: str | None = None) -> list[dict[str, Any]]:
        q = select(step_events).where(step_events.c.run_id == run_id).order_by(step_events.c.id)
        if node:
            q = q.where(step_events.c.node == node)
        with self._read() as conn:
            return [
                {
                    "node": r["node"],
                    "wave": r["wave"],
                    "step": r["step"],
                    "at": r["at"],
                    "detail": _loads(r["detail_json"],
                                     f"step_events id {r['id']} detail_json") or {},
                }
                for r in conn.execute(q).mappings()
            ]

    # ------------------------------------------------------------------ views
    def latest(self) -> list[dict[str, Any]]:
        """The latest verification of every node (sorted by node), each with ``drift``."""
        last = (
            select(verifications.c.node, func.max(verifications.c.id).label("vid"))
            .group_by(verifications.c.node)
            .subquery()
        )
        q = (
            select(verifications)
            .join(last, verifications.c.id == last.c.vid)
            .order_by(verifications.c.node)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            return self._with_drift(conn, rows)

    def latest_for(self, node: str) -> dict[str, Any] | None:
        q = (
            select(verifications)
            .where(verifications.c.node == node)
            .order_by(verifications.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            out = self._with_drift(conn, rows)
        return out[0] if out else None

    def history(self, node: str, limit: int = 20) -> list[dict[str, Any]]:
        """The node's verifications, newest first (at most ``limit``)."""
        q = (
            select(verifications)
            .where(verifications.c.node == node)
            .order_by(verifications.c.id.desc())
            .limit(limit)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            checks = self._checks(conn, [r["id"] for r in rows])
        return [_verification_dict(r, checks.get(r["id"], [])) for r in rows]

    def run_verifications(self, run_id: str) -> list[dict[str, Any]]:
        """Every verification of one run, oldest first, each with ``baseline`` and ``drift``
        against the node's last compliant record *before* it (the rule of :meth:`latest`)."""
        q = (
            select(verifications)
            .where(verifications.c.run_id == run_id)
            .order_by(verifications.c.id)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            base_ids: dict[int, int] = {}
            for r in rows:
                vid = conn.execute(
                    select(func.max(verifications.c.id)).where(
                        verifications.c.node == r["node"],
                        verifications.c.compliant.is_(True),
                        verifications.c.id < r["id"],
                    )
                ).scalar()
                if vid is not None:
                    base_ids[int(r["id"])] = int(vid)
            base_rows: dict[int, dict[str, Any]] = {}
            if base_ids:
                q2 = select(verifications).where(
                    verifications.c.id.in_(sorted(set(base_ids.values())))
                )
                base_rows = {int(r["id"]): dict(r) for r in conn.execute(q2).mappings()}
            checks = self._checks(conn, [r["id"] for r in rows] + list(base_rows))
        return [_with_drift(r, base_rows.get(base_ids.get(int(r["id"]), -1)), checks)
                for r in rows]

    def raw_for(self, verification_id: int) -> dict[str, str]:
        with self._read() as conn:
            row = conn.execute(
                select(verifications.c.raw_json).where(verifications.c.id == verification_id)
            ).first()
        if row is None:
            raise LedgerError(f"ledger {self.location}: no verification {verification_id}")
        return dict(_loads(row[0], f"verifications id {verification_id} raw_json") or {})

    def drift(self) -> list[dict[str, Any]]:
        """Nodes whose latest record differs from their last compliant one."""
        return [r for r in self.latest() if r["drift"]]

    def _checks(self, conn: Connection, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        if not ids:
            return out
        for chunk in range(0, len(ids), 500):
            q = select(check_results).where(
                check_results.c.verification_id.in_(ids[chunk : chunk + 500])
            )
            for r in conn.execute(q).mappings():
                out.setdefault(r["verification_id"], []).append(
                    {
                        "id": r["check_id"],
                        "status": r["status"],
                        "expected": r["expected"],
                        "observed": r["observed"],
                        "message": r["message"],
                    }
                )
        return out

    def _with_drift(self, conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Attach the baseline (last compliant record before the latest) and the drift."""
        if not rows:
            return []
        prev = verifications.alias("prev")
        base_ids: dict[str, int] = {}
        nodes = [r["node"] for r in rows]
        for chunk in range(0, len(nodes), 500):
            part = nodes[chunk : chunk + 500]
            latest_ids = {r["node"]: r["id"] for r in rows[chunk : chunk + 500]}
            q = (
                select(prev.c.node, func.max(prev.c.id))
                .where(prev.c.node.in_(part), prev.c.compliant.is_(True))
                .group_by(prev.c.node)
            )
            # The baseline must be older than the latest record: a per-node bound.
            q = q.where(
                prev.c.id
                < select(func.max(verifications.c.id))
                .where(verifications.c.node == prev.c.node)
                .scalar_subquery()
            )
            for node, vid in conn.execute(q):
                if vid is not None and vid < latest_ids[node]:
                    base_ids[node] = int(vid)
        base_rows = {}
        if base_ids:
            q2 = select(verifications).where(verifications.c.id.in_(list(base_ids.values())))
            base_rows = {r["node"]: dict(r) for r in conn.execute(q2).mappings()}
        checks = self._checks(conn, [r["id"] for r in rows] + list(base_ids.values()))
        return [_with_drift(r, base_rows.get(r["node"]), checks) for r in rows]


def _with_drift(row: Mapping[str, Any], base: Mapping[str, Any] | None,
                checks: Mapping[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """A verification row as a dict, with its ``baseline`` (the node's last compliant record
    ``base``, summarised) and its ``drift`` from it."""
    cur = _verification_dict(row, checks.get(row["id"], []))
    baseline = _verification_dict(base, checks.get(base["id"], [])) if base else None
    cur["baseline"] = (
        {k: baseline[k] for k in ("id", "run_id", "at", "route", "failing")} if baseline else None
    )
    cur["drift"] = _drift(cur, baseline)
    return cur


def _drift(cur: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """Why ``cur`` differs from the last compliant record ``base`` (empty: no drift)."""
    if base is None:
        return []
    reasons: list[str] = []
    if not cur["reachable"]:
        reasons.append(f"unreachable (compliant at {base['at']})")
        return reasons
    if not cur["compliant"]:
        reasons.append(f"compliance lost (compliant at {base['at']})")
    if (cur["route"] or None) != (base["route"] or None):
        reasons.append(f"route changed: {base['route']} -> {cur['route']}")
    new = sorted(set(cur["failing"]) - set(base["failing"]))
    gone = sorted(set(base["failing"]) - set(cur["failing"]))
    if new or gone:
        parts = [f"+{c}" for c in new] + [f"-{c}" for c in gone]
        reasons.append("failing/warning checks changed: " + " ".join(parts))
    return reasons


def _verification_dict(r: Mapping[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    report = _loads(r["report_json"], f"verifications id {r['id']} report_json") or {}
    return {
        "id": int(r["id"]),
        "run_id": r["run_id"],
        "node": r["node"],
        "at": r["at"],
        "reachable": bool(r["reachable"]),
        "compliant": bool(r["compliant"]),
        "route": r["route"],
        "path_taken": r["path_taken"],
        "error": report.get("error"),
        "failing": sorted(c["id"] for c in checks if c["status"] in ("fail", "warn")),
        "checks": sorted(checks, key=lambda c: c["id"]),
        "report": report,
    }


def _run_dict(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "kind": r["kind"],
        "fleet": r["fleet"],
        "started_at": r["started_at"],
        "finished_at": r["finished_at"],
        "status": r["status"],
        "args": _loads(r["args_json"], f"runs id {r['id']} args_json") or {},
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return _dumps(value)


def _short(exc: BaseException) -> str:
    msg = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__


def _preflight_sqlite(cls: type[Ledger], url: Any, shown: str) -> None:
    """Before the writer opens an existing SQLite file (and switches it to WAL, which rewrites
    its header), check read-only that it is empty or a ledger of a known schema version."""
    database = str(url.database or "")
    if not database or database == ":memory:":
        return
    path = Path(database)
    if not path.is_file() or path.stat().st_size == 0:
        return
    engine = _sqlite_read_only_engine(url, shown)
    try:
        probe = cls(engine, shown)
        with probe._read() as conn:
            probe._schema_version(conn, set(inspect(conn).get_table_names()))
    finally:
        engine.dispose()


def _sqlite_read_only_engine(url: Any, shown: str) -> Engine:
    """A SQLite engine that cannot write: ``mode=ro`` URI, ``query_only``, no WAL switch.

    The file must exist (``mode=ro`` never creates it; checked first for a clear message).

    A WAL-mode reader needs the WAL index (``-shm``) beside the file, and creates and grows it
    when it is missing: on a read-only filesystem that cannot happen, and on a full disk it
    fails with "disk I/O error". So (:func:`_read_only_uri`):

    * the usual case: ``mode=ro`` (an existing ``-shm`` is used as it is, so a ledger a writer
      left with a ``-wal`` reads fine on a full disk too);
    * ``mode=ro`` failing, or a read-only filesystem, or a full disk and no ``-shm``: when the
      ``-wal`` is absent or empty, every committed row is in the main file and it is read
      ``immutable=1`` (no lock, no ``-shm``; no writer can commit on a read-only or full
      filesystem meanwhile);
    * the same with a ``-wal`` holding committed rows (a writer killed before its checkpoint):
      reading the main file alone would miss them, so the file and its ``-wal`` are copied
      into a private temporary folder (``$TMPDIR``, another filesystem as a rule) and the copy
      is read; it is removed when the process exits.
    """
    import sqlite3

    from sqlalchemy.pool import NullPool

    path = Path(str(url.database or ""))
    if not str(url.database or "") or str(url.database) == ":memory:":
        raise LedgerError(f"the ledger {shown} is not a file; give a path or a server URL")
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise LedgerError(
            f"the ledger {shown} {what}; nothing was recorded there (status, history and plan "
            f"never create a ledger): check --ledger / {ENV_LEDGER}, or run `provisioner "
            f"verify` first"
        )
    uri = _read_only_uri(path, shown)

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False,
                               timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = ON")
        return conn

    return create_engine("sqlite://", creator=connect, poolclass=NullPool)


# below this much free space, a missing -shm is not created (it would fail half-way)
_SHM_ROOM = 1 << 20


def _read_only_uri(path: Path, shown: str) -> str:
    """The SQLite URI a read-only open of ``path`` uses (see :func:`_sqlite_read_only_engine`)."""
    import sqlite3
    from urllib.parse import quote

    plain = f"file:{quote(str(path))}?mode=ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    ro_fs, room = False, True
    with suppress(OSError):
        st = os.statvfs(path.parent)
        ro_fs = bool(st.f_flag & os.ST_RDONLY)
        room = st.f_bavail * st.f_frsize >= _SHM_ROOM
    if not ro_fs and (room or shm.exists()):
        try:
            conn = sqlite3.connect(plain, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                conn.close()
            return plain
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return plain  # a writer is at work: the usual open, with its busy timeout
        except sqlite3.Error:
            return plain  # not a database, malformed...: the usual open says so
    try:
        wal_rows = wal.stat().st_size > 0
    except OSError:
        wal_rows = False
    if not wal_rows:
        return plain + "&immutable=1"
    return _read_only_copy(path, wal, shown)


def _read_only_copy(path: Path, wal: Path, shown: str) -> str:
    import atexit
    import shutil
    import tempfile
    from urllib.parse import quote

    tmp = tempfile.mkdtemp(prefix="gdsfleet-ledger-")  # 0700
    atexit.register(shutil.rmtree, tmp, True)
    copy = Path(tmp) / "ledger.sqlite"
    try:
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, f"{copy}-wal")
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise LedgerError(
            f"the ledger {shown} cannot be read: its folder takes no new file (full or "
            f"read-only) and its -wal holds rows SQLite reads only through a -shm file; the "
            f"copy in {tempfile.gettempdir()} failed too ({exc.strerror}): free some space"
        ) from None
    # not mode=ro: SQLite replays the copied -wal into the copy's own -shm
    return f"file:{quote(str(copy))}"


def _sqlite_events(engine: Engine) -> None:
    """WAL + busy_timeout on every connection; explicit BEGIN / BEGIN IMMEDIATE.

    pysqlite's own implicit transactions are switched off (isolation_level None), so the
    ``begin`` hook decides: writers take the write lock up front (``BEGIN IMMEDIATE``), so two
    writers never deadlock on a lock upgrade; readers use a plain deferred ``BEGIN``.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("gdsfleet_write"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


__all__ = [
    "ENV_LEDGER",
    "SCHEMA_VERSION",
    "STEPS",
    "Ledger",
    "default_ledger",
    "display_url",
    "fleet_id",
    "new_run_id",
    "resolve_ledger",
    "utcnow",
]
