"""LocalRunner (``verify --local``): the CommandRunner contract without SSH."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from provisioner.errors import CommandTimeout, ConnectError
from provisioner.local import LocalRunner


def test_runs_a_shell_command() -> None:
    r = LocalRunner("me")
    res = r.run("echo out; echo err >&2; exit 5", timeout=10)
    assert (res.exit_status, res.stdout, res.stderr) == (5, "out\n", "err\n")
    assert res.duration_s >= 0


def test_stdin_and_env() -> None:
    res = LocalRunner().run("cat; printf %s \"$GDS_X\"", timeout=10, stdin=b"abc\n",
                            env={"GDS_X": "it's $x"})
    assert res.stdout == "abc\nit's $x"


def test_large_output_on_both_streams() -> None:
    res = LocalRunner().run("head -c 3000000 /dev/zero; head -c 2000000 /dev/zero >&2",
                            timeout=30)
    assert len(res.stdout) == 3_000_000 and len(res.stderr) == 2_000_000


def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="deadline"):
        # the grandchild holds the pipes open: only killing the group returns in time
        LocalRunner("me").run(f"sleep 30 & echo $! > {pidfile}; wait", timeout=1)
    assert time.monotonic() - t0 < 5
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"grandchild {pid} still runs after the deadline")


def test_missing_shell_is_a_connect_error() -> None:
    with pytest.raises(ConnectError):
        LocalRunner("me", shell="/nonexistent/sh").run("true", timeout=5)  # noqa: S604
