"""What one test run owns: a run directory, the stand-in repository's port and server, and the
loopback ports it hands out.

TEST HARNESS ONLY. A run is one pytest invocation, with all of its xdist workers. The process
that starts it (the pytest controller, or the only process without xdist) calls
:func:`start_run` before any worker exists: it makes ``<lab dir>/runs/<id>/``, chooses a free
loopback port for the stand-in repository and exports both (``GDSFLEET_TEST_RUN_DIR``,
``GDSFLEET_REPO_PORT``), so workers, molecule, ansible-playbook and the nodes' APT sources all
use this run's port. The repository server itself starts on first use (:class:`RepoServer`,
under a lock in the run directory, so one server serves every worker) and the controller stops
it in :func:`finish_run`.

A run never attaches to a server it did not start: if anything answers on its port before its
own server is up, or its server cannot keep the port, the run stops with an error. (Before,
every session reused whatever answered on 127.0.0.1:8470, e.g. another checkout's lab, whose
repository is signed with that checkout's key: NO_PUBKEY.)

Loopback ports for simulated nodes come from :func:`reserve_ports`: one machine-wide record of
reservations (under a lock) keyed by the reserving process, so xdist workers and concurrent runs
of other checkouts never hand out the same port twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

RUN_DIR_ENV = "GDSFLEET_TEST_RUN_DIR"
REPO_PORT_ENV = "GDSFLEET_REPO_PORT"
DEFAULT_REPO_PORT = 8470  # the operator lab's port (inventories/lab); never a test run's
PROBE = "cuda/repos/debian12/x86_64/InRelease"
PORTS_FILE = Path(os.environ.get("GDSFLEET_PORTS_FILE", "/var/tmp/gdsfleet-ports.json"))


class RunError(RuntimeError):
    """The test run cannot own what it needs (its repository port, a loopback port)."""


# ------------------------------------------------------------------------------ the run
def free_loopback_port() -> int:
    """A port the kernel hands out as free on 127.0.0.1 (the ephemeral range), never 8470."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != DEFAULT_REPO_PORT:
            return port


def start_run(lab: Path) -> Path:
    """Make this run's directory, choose its repository port and export both (controller)."""
    runs = lab / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    gc_runs(runs)
    d = runs / f"{os.getpid()}-{secrets.token_hex(3)}"
    d.mkdir()
    port = free_loopback_port()
    (d / "run.json").write_text(json.dumps({"pid": os.getpid(), "repo_port": port,
                                            "started": time.time()}))
    os.environ[RUN_DIR_ENV] = str(d)
    os.environ[REPO_PORT_ENV] = str(port)
    return d


def run_dir() -> Path:
    """This run's directory (made by the controller's start_run)."""
    value = os.environ.get(RUN_DIR_ENV)
    if not value:
        raise RunError(f"{RUN_DIR_ENV} is not set: the harness runs inside pytest "
                       "(tests/conftest.py loads it)")
    return Path(value)


def finish_run(d: Path) -> None:
    """Stop this run's repository server and remove the run directory (controller)."""
    try:
        RepoServer(d).stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gc_runs(runs: Path) -> list[str]:
    """Stop the servers of runs whose controller is gone (killed) and remove their folders."""
    done = []
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:
        try:
            pid = int(json.loads((d / "run.json").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = 0
        if pid and _alive(pid):
            continue
        RepoServer(d).stop()
        shutil.rmtree(d, ignore_errors=True)
        done.append(f"test run {d.name}")
    return done


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def once(name: str, action: Callable[[], None]) -> None:
    """Run ``action`` once per test run, whichever worker asks first; the others wait for it.
    A failed action is retried by the next caller (nothing is recorded)."""
    d = run_dir()
    with locked(d / f"{name}.lock"):
        done = d / f"{name}.done"
        if done.exists():
            return
        action()
        done.touch()


# ------------------------------------------------------------------------------ repository
def answers(port: int, timeout: float = 2) -> bytes | None:
    """What 127.0.0.1:port serves as the CUDA repository's InRelease (None: nothing)."""
    try:
        url = f"http://127.0.0.1:{port}/{PROBE}"  # http on loopback only
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310
            return bytes(resp.read(1 << 20))
    except OSError:
        return None


class RepoServer:
    """The stand-in repository served by this run (one server for all of its workers)."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.pidfile = d / "repo-server.pid"
        self.log = d / "repo-server.log"

    @property
    def port(self) -> int:
        return int(json.loads((self.dir / "run.json").read_text())["repo_port"])

    def _pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        # ours: http.server on this run's port (a recycled pid is someone else's)
        return pid if b"http.server" in cmdline and str(self.port).encode() in cmdline else None

    def ensure(self, directory: Path) -> str:
        """Serve ``directory`` on the run's port (start the server unless this run already
        did); return the base URL. Raises RunError when the port is someone else's."""
        port = self.port
        with locked(self.dir / "repo-server.lock"):
            if self._pid() is not None and answers(port) is not None:
                return f"http://127.0.0.1:{port}"
            if answers(port) is not None:
                raise RunError(f"something this test run did not start answers on 127.0.0.1:"
                               f"{port}; the run will not use it (stop it, then run again)")
            with open(self.log, "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory",
                     str(directory), str(port)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
            self.pidfile.write_text(str(proc.pid))
            want = (directory / PROBE).read_bytes()
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:  # could not bind: the port was taken meanwhile
                    raise RunError(f"the stand-in repository server of this run could not "
                                   f"serve 127.0.0.1:{port}: {self.log.read_text()[-300:]}")
                got = answers(port)
                if got is not None:
                    if got != want:
                        raise RunError(f"127.0.0.1:{port} serves another repository than "
                                       f"{directory}")
                    return f"http://127.0.0.1:{port}"
                if time.monotonic() > deadline:
                    raise RunError(f"the stand-in repository server on 127.0.0.1:{port} did "
                                   f"not answer: {self.log.read_text()[-300:]}")
                time.sleep(0.1)

    def stop(self) -> None:
        try:
            pid = self._pid()
        except (OSError, ValueError, KeyError):
            pid = None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                if not _alive(pid) or _zombie(pid):
                    break
                time.sleep(0.1)
        with contextlib.suppress(OSError):
            self.pidfile.unlink()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


# ------------------------------------------------------------------------------ ports
def reserve_ports(count: int = 1, *, start: int = 23000, end: int = 29000) -> int:
    """Reserve ``count`` consecutive free loopback ports for this process; returns the first.
    Reservations of processes that are gone lapse. Machine-wide, so neither xdist workers nor
    concurrent runs of other checkouts get the same port."""
    with locked(PORTS_FILE.with_suffix(".lock")):
        try:
            table = json.loads(PORTS_FILE.read_text())
        except (OSError, ValueError):
            table = {}
        if not isinstance(table, dict):
            table = {}
        table = {p: pid for p, pid in table.items()
                 if isinstance(pid, int) and str(p).isdigit() and _alive(pid)}
        for _ in range(500):
            first = start + secrets.randbelow(end - start - count)
            ports = range(first, first + count)
            if any(str(p) in table for p in ports) or not all(_bindable(p) for p in ports):
                continue
            for p in ports:
                table[str(p)] = os.getpid()
            tmp = PORTS_FILE.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(table))
            tmp.replace(PORTS_FILE)
            return first
    raise RunError(f"no {count} free consecutive loopback port(s) in {start}-{end}")


def release_ports(first: int, count: int = 1) -> None:
    """Give back ports this process reserved (a process that exits gives back all of its own)."""
    with locked(PORTS_FILE.with_suffix(".lock")):
        try:
            table = json.loads(PORTS_FILE.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(table, dict):
            return
        for p in range(first, first + count):
            if table.get(str(p)) == os.getpid():
                del table[str(p)]
        tmp = PORTS_FILE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(PORTS_FILE)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
