"""scripts/cpu_by_command.py decodes the kernel's v3 process-accounting records (linux/acct.h,
``struct acct_v3``; comp_t as encode_comp_t in kernel/acct.c writes it)."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cpu_by_command.py"
spec = importlib.util.spec_from_file_location("cpu_by_command", SCRIPT)
assert spec and spec.loader
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def _record(comm: bytes, utime: int, stime: int, *, fork: bool = False, version: int = 3
            ) -> bytes:
    return struct.pack("<BBHIIIIIIf8H16s", 1 if fork else 0, version, 0, 0, 0, 0, 42, 1, 0,
                       1.0, utime, stime, 0, 0, 0, 0, 0, 0, comm)


def test_comp_t() -> None:
    assert mod.comp_t(150) == 150
    assert mod.comp_t((1 << 13) | 5) == 40  # 5 * 8
    assert mod.comp_t((2 << 13) | 3) == 192  # 3 * 64


def test_table_adds_up_per_command_and_fork() -> None:
    data = (_record(b"ansible-playboo", 100, 37) + _record(b"ansible-playboo", 3, 0, fork=True)
            + _record(b"ansible-playboo", 2, 1, fork=True) + _record(b"python3", 19, 1))
    rows = list(mod.records(data))
    assert rows[0] == ("ansible-playboo", False, 1.37)
    assert rows[1][1] is True
    text = mod.table(data)
    assert text.splitlines()[0] == "1.6 CPU-s in 4 exited processes"  # 1.37 + 0.03 + 0.03 + 0.2
    assert "ansible-playboo (fork)" in text and "python3" in text


def test_other_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="version 2"):
        list(mod.records(_record(b"x", 1, 1, version=2)))
