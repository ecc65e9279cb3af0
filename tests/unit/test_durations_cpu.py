"""GDSFLEET_TEST_DURATIONS records each test phase's CPU-seconds beside its seconds
(tests/conftest.py; issue 46): on the 2-core CI machine, CPU-bound from start to end, a test's
CPU is what it costs every other test, and a loaded machine's seconds do not show it. The
phase's CPU counts the test process and the child processes it waited for (ansible-playbook,
molecule, provisioner), so a test whose work runs in a child must show it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BURN = """
import subprocess, sys, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_burns_in_a_child():
    # the work of a test that runs a program: CPU in a child process it waits for
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_burns_here():
    burn(0.4)

def test_sleeps():
    time.sleep(0.5)
"""


def test_each_phase_has_its_cpu_seconds(tmp_path: Path) -> None:
    # one xdist worker, as CI runs: the worker measures, the controller writes the line
    (tmp_path / "test_burn.py").write_text(BURN)
    out = tmp_path / "durations.jsonl"
    env = {**os.environ, "GDSFLEET_TEST_DURATIONS": str(out)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run on a worker
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-q", "--rootdir", str(tmp_path), "-c", os.devnull, "-n", "1",
         str(tmp_path / "test_burn.py")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    calls = {x["nodeid"].rsplit("::", 1)[1]: x for x in lines if x["when"] == "call"}
    assert set(calls) == {"test_burns_in_a_child", "test_burns_here", "test_sleeps"}
    assert all("cpu" in x for x in lines), lines  # every phase, setup and teardown too
    assert calls["test_burns_in_a_child"]["cpu"] >= 0.55, calls
    assert calls["test_burns_here"]["cpu"] >= 0.35, calls
    # a test that waits costs nothing: its seconds are not its CPU
    assert calls["test_sleeps"]["seconds"] >= 0.5 and calls["test_sleeps"]["cpu"] < 0.2, calls
