"""verify evaluates nodes in parallel threads, and every node reads the collection's shared
module_utils (the cufile.json schema, modprobe.d reading): the first thread to load one must not
let the others see it half-loaded (seen in the simulated fleet as ``AttributeError: module
'provisioner._collection_cufile_schema' has no attribute 'load'`` on one node of eight)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from provisioner import collection_utils


def test_threads_wait_for_a_shared_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = tmp_path / "slow_shared.py"
    # TEST STAND-IN for a plugins/module_utils file, slow to load on purpose
    slow.write_text("import time\ntime.sleep(0.3)\n\ndef load():\n    return {'stand_in': 1}\n")
    monkeypatch.setattr(collection_utils, "candidates", lambda filename: [slow])
    name = "provisioner._collection_slow_shared"
    results: list[object] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        try:
            results.append(collection_utils.load("slow_shared.py").load())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            results.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.modules.pop(name, None)
    assert results == [{"stand_in": 1}] * 8


def test_a_module_that_fails_to_load_is_not_left_half_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken_shared.py"
    broken.write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.setattr(collection_utils, "candidates", lambda filename: [broken])
    for _ in range(2):  # the second call loads again rather than returning a half module
        with pytest.raises(RuntimeError, match="broken on purpose"):
            collection_utils.load("broken_shared.py")
    assert "provisioner._collection_broken_shared" not in sys.modules
