"""verify evaluates nodes in parallel threads, and every node reads the cufile.json schema: the
first thread to load the schema module must not let the others see it half-loaded (seen in the
simulated fleet as ``AttributeError: module 'provisioner._collection_cufile_schema' has no
attribute 'load'`` on one node of eight)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from provisioner.verify.parsers import cufile


def test_threads_wait_for_the_schema_module(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    slow = tmp_path / "cufile_schema.py"
    # TEST STAND-IN for plugins/module_utils/cufile_schema.py, slow to load on purpose
    slow.write_text("import time\ntime.sleep(0.3)\n\ndef load():\n    return {'stand_in': 1}\n")
    monkeypatch.setattr(cufile, "_schema_candidates", lambda: [slow])
    real = sys.modules.pop(cufile._SCHEMA_MODULE, None)
    results: list[object] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        try:
            results.append(cufile.schema())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            results.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:  # the real schema module again for the other tests
        sys.modules.pop(cufile._SCHEMA_MODULE, None)
        if real is not None:
            sys.modules[cufile._SCHEMA_MODULE] = real
    assert results == [{"stand_in": 1}] * 8
