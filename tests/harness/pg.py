"""A throw-away PostgreSQL cluster on a free loopback port, for the tests and the benchmarks.

Made with the Debian ``postgresql`` package's ``initdb``/``pg_ctl`` (scripts/setup.sh installs
it), as the ``postgres`` user when running as root, and removed afterwards.
``GDSFLEET_TEST_PG_URL`` names a server to use instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


class NoPostgres(RuntimeError):
    """No server binaries, or no ``postgres`` user to run them as (the reason is the text)."""


def pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def cluster(*, fsync: bool = False) -> Iterator[str]:
    """Yields a SQLAlchemy URL of a fresh cluster. ``fsync=False`` (the tests): commits do not
    wait for the disk; a benchmark of commit rates passes True, as a real server runs."""
    if os.environ.get("GDSFLEET_TEST_PG_URL"):
        yield os.environ["GDSFLEET_TEST_PG_URL"]
        return
    bindir = pg_bin()
    if bindir is None:
        raise NoPostgres("PostgreSQL server binaries not installed (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    prefix: list[str] = []
    base = tempfile.mkdtemp(prefix="gdsfleet-pg-")
    if as_root:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base, ignore_errors=True)
            raise NoPostgres("running as root and there is no 'postgres' user to run the "
                             "cluster") from None
        os.chown(base, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data = os.path.join(base, "data")
    port = _free_port()
    env = dict(os.environ, LC_ALL="C.UTF-8")
    subprocess.run([*prefix, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "gds",
                    "-E", "UTF8"], check=True, capture_output=True, env=env)
    opts = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if fsync else 'off'}")
    subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l",
                    os.path.join(base, "log"), "-w", "start"], check=True,
                   capture_output=True, env=env)
    try:
        yield f"postgresql+psycopg://gds@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True, env=env)
        shutil.rmtree(base, ignore_errors=True)
