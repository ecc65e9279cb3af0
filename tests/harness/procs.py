"""This machine's processes as the tests look at them: each one's argv from /proc.

Shared by the execution-node tests (which worker, ssh or playbook process is whose, and the
sampler that looks for secrets in every command line while a run goes on). A process that ends
while it is read is skipped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def cmdlines() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every process readable now."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        yield int(pid), raw.split(b"\0")


def pids_where(match: Callable[[list[bytes]], bool]) -> list[int]:
    """PIDs whose argv ``match`` accepts."""
    return [pid for pid, argv in cmdlines() if argv and match(argv)]


def sample_cmdlines(seen: list[str], stop: threading.Event, every: float = 0.05) -> None:
    """Append every command line (argv joined by spaces) to ``seen`` until ``stop`` is set;
    run it in a thread beside the run under test."""
    while not stop.is_set():
        for _pid, argv in cmdlines():
            seen.append(b" ".join(argv).decode("utf-8", "replace"))
        time.sleep(every)
