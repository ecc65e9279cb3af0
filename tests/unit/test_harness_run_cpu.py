"""tests/harness/run_cpu.py, the measurement tool of docs/testing.md "Speed": it counts the
command's own process tree (grandchildren included) and no process outside it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from tests.harness import run_cpu


def test_tree_holds_grandchildren_and_not_strangers() -> None:
    # a child that starts a grandchild, both asleep; a stranger started beside them
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time; "
                              "p = subprocess.Popen(['sleep', '30']); print(p.pid, flush=True); "
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    grandchild = 0
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        tree = run_cpu._tree(child.pid)
        assert {child.pid, grandchild} <= tree
        assert stranger.pid not in tree and os.getpid() not in tree
    finally:
        if grandchild:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grandchild, signal.SIGKILL)
        for p in (child, stranger):
            p.kill()
            p.wait()


def test_no_command_is_a_usage_error() -> None:
    assert run_cpu.main([]) == 64
    assert run_cpu.main(["--"]) == 64
