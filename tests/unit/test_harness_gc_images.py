"""lab.gc() and the images tests commit of a converged sim node (fixtures.commit_node): it
removes those of pytest processes that are gone and keeps those of live ones. No podman: the
harness's podman calls are recorded and answered here."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from tests.harness import fixtures
from tests.harness import lab as labmod
from tests.harness import run as runmod


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel hands it out again)


def test_gc_removes_only_the_images_of_gone_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    live, dead = os.getpid(), _dead_pid()
    calls: list[tuple[str, ...]] = []

    def podman(*args: str, check: bool = True, timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        out = ""
        if args[0] == "images":
            assert f"label={fixtures.SNAPSHOT_LABEL}" in args
            out = f"aaaa1111bbbb {live}\ncccc2222dddd {dead}\neeee3333ffff not-a-pid\n"
        return subprocess.CompletedProcess(["podman", *args], 0, out, "")

    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(labmod, "podman", podman)
    monkeypatch.setattr(labmod, "run", run)
    monkeypatch.setattr(runmod, "gc_runs", lambda _root: [])
    done = labmod.gc()
    removed = [c for c in calls if c[0] == "rmi"]
    assert removed == [("rmi", "-f", "cccc2222dddd")]
    assert done == ["image cccc2222dddd"]


def test_commit_node_labels_the_image_with_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(labmod, "podman", lambda *a, **_: calls.append(a))
    node = fixtures.SimNode("gdsfleet-hx-abc123-m-1", "nvfs")
    tag = fixtures.commit_node(node)
    assert tag == "localhost/gdsfleet-hx-abc123-m-1:converged"
    assert calls == [("commit", "-q", "--change", f"LABEL {fixtures.SNAPSHOT_LABEL}={os.getpid()}",
                      node.name, tag)]
