"""One rollout per ledger and fleet at a time.

SQLite ledger: ``fcntl.flock`` on a lock file beside the database
(``ledger.sqlite.rollout.lock``, mode 0600); the holder writes its pid, host, user, start time
and, once known, its run id into the file, so a refused second rollout can name it. Never the
command line: it can hold secrets, and the file outlives a ``kill -9``. The kernel drops a
flock when its holder dies (even ``kill -9``), so a re-run after a crash takes the lock and
resumes.
PostgreSQL ledger: ``pg_try_advisory_lock`` keyed on the fleet, held on a dedicated
connection for the rollout's lifetime; the holder's details go in ``application_name``.
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from provisioner.errors import LockHeld, UsageError


def holder_info(fleet: str) -> dict[str, Any]:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = str(os.getuid())
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "user": user,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_id": None,
        "fleet": fleet,
    }


def describe(info: dict[str, Any]) -> str:
    """The holder in words: who, since when, which run, and the command it runs, as far as
    it can be said without its arguments (they can hold secrets: only the inventory, which
    the lock file names as the fleet, issue 47)."""
    run = f", run {info['run_id']}" if info.get("run_id") else ""
    fleet = info.get("fleet")
    command = f", running `provisioner rollout -i {fleet}`" if fleet else ""
    return (
        f"pid {info.get('pid', '?')} on {info.get('host', '?')} by {info.get('user', '?')} "
        f"since {info.get('started_at', '?')}{run}{command}"
    )


# what a refused rollout may do instead of giving up (issue 47: the message said neither)
WAIT_HINT = ("or pass --wait-lock SECONDS to wait for it here (a standby that takes the run "
             "over when the holder dies)")


def lock_path_for(ledger: str) -> Path | None:
    """Lock file beside a SQLite ledger; None for a server URL (PostgreSQL)."""
    if "://" in ledger and not ledger.startswith("sqlite"):
        return None
    path = ledger
    if ledger.startswith("sqlite"):
        path = ledger.split(":///", 1)[-1] if ":///" in ledger else ""
        if not path or path == ":memory:":
            return None
    return Path(path).expanduser().with_name(Path(path).name + ".rollout.lock")


CHILDREN_WAIT_S = 15.0


class FileLock:
    """Exclusive, non-blocking flock; raises :class:`LockHeld` naming the holder.

    Beside it, ``<lock>.children``: every playbook's guard (and the ansible-playbook under it)
    holds a shared flock on it while it lives. The kernel drops the rollout's own flock the
    moment a ``kill -9`` ends it, but its playbook may still be dying: ``acquire`` waits up to
    ``children_wait`` seconds for the children lock, then refuses naming the PIDs.
    """

    def __init__(self, path: str | os.PathLike[str], fleet: str, *,
                 children_wait: float = CHILDREN_WAIT_S) -> None:
        self.path = Path(path)
        self.fleet = fleet
        self.children_wait = children_wait
        self.wait_s = 0.0  # --wait-lock: how long __enter__ waits for another holder
        self.say: Any = None
        self._fd: int | None = None
        self._info: dict[str, Any] = {}

    @property
    def children_path(self) -> Path:
        return self.path.with_name(self.path.name + ".children")

    def _wait_for_children(self) -> None:
        """Returns once no playbook of an earlier rollout holds the children lock."""
        from provisioner.fsutil import open_private

        fd = open_private(self.children_path, os.O_RDWR)  # 0600 (umask-narrowed) when created
        try:
            deadline = time.monotonic() + self.children_wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.1)
        finally:
            os.close(fd)
        from provisioner.rollout.guard import holders

        who = holders(str(self.children_path))
        named = "; ".join(f"pid {pid} ({cmd})" for pid, cmd in who) or "unknown processes"
        raise LockHeld(
            f"a playbook of an earlier rollout of this fleet is still running after "
            f"{self.children_wait:.0f}s: {named}; stop those processes (or wait for them), "
            f"then run the same command again to resume"
        )

    def acquire(self) -> FileLock:
        from provisioner.fsutil import open_private, private_dir

        private_dir(self.path.parent)
        fd = open_private(self.path, os.O_RDWR)  # 0600 (umask-narrowed) when created
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                raw = os.pread(fd, 65536, 0).decode("utf-8", "replace")
                info = json.loads(raw) if raw.strip() else {}
            except (OSError, ValueError):
                info = {}
            os.close(fd)
            raise LockHeld(
                f"another rollout holds the lock {str(self.path)!r}: {describe(info)}; "
                f"wait for it to finish, {WAIT_HINT} (or stop it: a killed rollout releases "
                f"the lock, and the same command resumes it)"
            ) from None
        except OSError:
            os.close(fd)
            raise
        mode = os.fstat(fd).st_mode & 0o777
        if mode & 0o077:  # a lock file left by an older version: narrow it, never widen
            os.fchmod(fd, mode & 0o600)
        try:
            self._wait_for_children()
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._fd = fd
        self._info = holder_info(self.fleet)
        self._write_info()
        return self

    def _write_info(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(self._info) + "\n").encode(), 0)
        os.fsync(self._fd)

    def set_run_id(self, run_id: str) -> None:
        """Name the run in the lock file once the engine has started or resumed it."""
        self._info["run_id"] = run_id
        self._write_info()

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        acquire_waiting(self, self.wait_s, self.say)
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def advisory_key(fleet: str) -> int:
    """Signed 64-bit key for pg_try_advisory_lock, stable across processes."""
    digest = hashlib.sha256(f"gdsfleet-rollout:{fleet}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PgAdvisoryLock:
    """``pg_try_advisory_lock`` on a dedicated connection (released when it closes)."""

    def __init__(self, url: str, fleet: str) -> None:
        self.url = url
        self.fleet = fleet
        self._conn: Any = None
        self.children_path: Path | None = None  # playbooks' guards hold no lock here
        self.wait_s = 0.0  # --wait-lock: how long __enter__ waits for another holder
        self.say: Any = None

    def acquire(self) -> PgAdvisoryLock:
        from sqlalchemy import create_engine, text

        info = holder_info(self.fleet)
        app = f"gdsfleet-rollout pid={info['pid']} host={info['host']} user={info['user']}"
        from sqlalchemy.exc import SQLAlchemyError

        from provisioner.errors import LedgerError
        from provisioner.store.engine import _short
        from provisioner.store.location import display_url

        try:
            engine = create_engine(
                self.url, connect_args={"application_name": app[:63]}, pool_size=1
            )
            conn = engine.connect()
        except (SQLAlchemyError, ModuleNotFoundError, OSError) as exc:
            raise LedgerError(
                f"cannot reach the ledger {display_url(self.url)} to take the fleet lock: "
                f"{_short(exc)}; check the server and the URL (--ledger / GDSFLEET_LEDGER)"
            ) from None
        key = advisory_key(self.fleet)
        got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        if not got:
            holder = conn.execute(
                text(
                    "SELECT a.application_name, a.client_addr, a.backend_start "
                    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                    "AND l.classid::text::bigint = :hi AND l.objid::text::bigint = :lo"
                ),
                {"hi": (key & 0xFFFFFFFFFFFFFFFF) >> 32, "lo": key & 0xFFFFFFFF},
            ).first()
            conn.close()
            engine.dispose()
            who = (
                f"{holder[0]} from {holder[1] or 'local socket'} since {holder[2]}"
                if holder
                else "another session"
            )
            raise LockHeld(
                f"another rollout holds the fleet lock for {self.fleet!r}: {who}, running "
                f"`provisioner rollout -i {self.fleet}`; wait for it to finish, {WAIT_HINT}"
            )
        self._conn = (engine, conn)
        return self

    def set_run_id(self, run_id: str) -> None:
        """Nothing to write: the holder is named by its session's application_name."""

    def release(self) -> None:
        if self._conn is None:
            return
        engine, conn = self._conn
        try:
            conn.close()
        finally:
            engine.dispose()
            self._conn = None

    def __enter__(self) -> PgAdvisoryLock:
        acquire_waiting(self, self.wait_s, self.say)
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def fleet_lock(ledger: str, fleet: str, *, wait_s: float = 0.0,
               say: Any = None) -> FileLock | PgAdvisoryLock:
    """The right lock for a ledger path or URL; entering it waits up to ``wait_s`` seconds
    for another holder (``say`` is told once whom it waits for)."""
    path = lock_path_for(ledger)
    lock: FileLock | PgAdvisoryLock
    if path is not None:
        lock = FileLock(path, fleet)
    elif ledger.startswith(("postgresql", "postgres")):
        lock = PgAdvisoryLock(ledger, fleet)
    else:
        raise UsageError(f"ledger {ledger!r}: no rollout lock for this kind of database")
    lock.wait_s, lock.say = wait_s, say
    return lock


def acquire_waiting(lock: FileLock | PgAdvisoryLock, wait_s: float,
                    say: Any = None, poll_s: float = 1.0) -> FileLock | PgAdvisoryLock:
    """Take ``lock``; held by another rollout, try again every ``poll_s`` for up to ``wait_s``
    seconds (``--wait-lock``), saying once whom it waits for. This is how a second coordinator
    takes over: the first one's lock goes when it dies (the kernel drops a flock, PostgreSQL an
    advisory lock whose session ends), and the same command then resumes the unfinished run.
    Ctrl-C or SIGTERM while waiting stops at once (:class:`provisioner.interrupts.Interrupted`);
    after ``wait_s`` the refusal is :class:`LockHeld` (exit 75), as without waiting."""
    from provisioner import interrupts

    deadline = time.monotonic() + max(0.0, wait_s)
    told = False
    while True:
        try:
            return lock.acquire()
        except LockHeld as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                if wait_s > 0:
                    raise LockHeld(f"{exc} (waited {wait_s:.0f}s for it: --wait-lock)") from None
                raise
            if not told and say is not None:
                say(f"waiting up to {wait_s:.0f}s for the fleet lock: {exc}")
                told = True
            interrupts.sleep(min(poll_s, left))
