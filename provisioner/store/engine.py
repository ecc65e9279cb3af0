"""The ledger's connections: opening a path or URL, SQLite's and PostgreSQL's engines, one
write or read transaction at a time, and every database error mapped to :class:`LedgerError`
(exit 74), read paths on a full disk or a read-only filesystem included.

One code path for SQLite (the default: a file, WAL journal, ``busy_timeout``, writes under
``BEGIN IMMEDIATE``) and PostgreSQL (by URL, ``postgresql+psycopg://...``, when several
controllers share one ledger), through SQLAlchemy Core.

Threads: a connection is never shared between threads. Each call checks a connection out of
the pool for one transaction, so the parallel verify workers write their results concurrently;
SQLite serialises them with ``BEGIN IMMEDIATE`` and waits up to ``busy_timeout``.

Reads (:meth:`LedgerBase._read`) run in a read-only transaction on both backends, so a query
cannot write whatever SQL it sends.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from provisioner.errors import LedgerError, UsageError
from provisioner.fsutil import (
    UnsafeFolderError,
    create_private,
    is_project_state_dir,
    narrow_owned,
    owned_dir,
    private_dir,
)
from provisioner.store.location import ENV_LEDGER, display_url
from provisioner.store.schema import check_complete, migrate, schema_version

BUSY_TIMEOUT_MS = 30_000

_L = TypeVar("_L", bound="LedgerBase")


def _owned_folder(folder: Path) -> None:
    """The folder a SQLite ledger is written in: the caller's alone (``fsutil.owned_dir``),
    or refused (exit 64) before its file, ``-wal`` or lock is made there."""
    try:
        owned_dir(folder)
    except UnsafeFolderError as exc:
        raise UsageError(f"refusing to write the ledger: {exc.strerror}") from None


class LedgerBase:
    """An open ledger: its engine and its transactions. :mod:`provisioner.store.writes` and
    :mod:`provisioner.store.queries` add what is written and what is read."""

    def __init__(self, engine: Engine, location: str) -> None:
        self.engine = engine
        self.location = location
        self._writer = engine.execution_options(gdsfleet_write=True)
        self._sqlite = engine.dialect.name == "sqlite"

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls: type[_L], url_or_path: str | os.PathLike[str], *,
             read_only: bool = False) -> _L:
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
                if not read_only:  # the caller's alone, a folder it creates 0700 (issue 45)
                    _owned_folder(path.resolve().parent)
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
                _preflight_sqlite(url, shown)  # a foreign file is refused untouched
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
                with ledger._read() as conn:
                    check_complete(conn, ledger.location)
            else:
                with ledger._write() as conn:
                    migrate(conn, ledger.location)
        except LedgerError:
            if engine is not None:
                engine.dispose()
            raise
        except (SQLAlchemyError, OSError, ArgumentError, ModuleNotFoundError) as exc:
            if engine is not None:
                engine.dispose()
            raise LedgerError(
                f"cannot open the ledger {shown} ({_short(exc)}); pass --ledger PATH|URL or set "
                f"{ENV_LEDGER}"
            ) from exc
        return ledger

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
        try:
            with self._writer.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            # the location never right before ": ", where a path ending in a secret-like
            # word (/etc/passwd) would read as "passwd: <value>" and mask the reason (issue 47)
            raise LedgerError(f"write failed on the ledger {self.location} "
                              f"({_short(exc)})") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """One read-only transaction: PostgreSQL's ``SET TRANSACTION READ ONLY``; SQLite's
        ``query_only`` (set by the ``begin`` hook of :func:`_sqlite_events`, or for good by a
        read-only open)."""
        try:
            with self.engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"read failed on the ledger {self.location} "
                              f"({_short(exc)})") from exc



def _short(exc: BaseException) -> str:
    msg = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__




def _preflight_sqlite(url: Any, shown: str) -> None:
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
        with LedgerBase(engine, shown)._read() as conn:
            schema_version(conn, set(inspect(conn).get_table_names()), shown)
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
            conn.exec_driver_sql("PRAGMA query_only = OFF")
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("PRAGMA query_only = ON")  # a reader cannot write
            conn.exec_driver_sql("BEGIN")

