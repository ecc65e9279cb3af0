"""Callback plugin for bench/bench_overhead.py only (not a test, never loaded by the product):
when ``GDSFLEET_BENCH_RUSAGE`` names a file, ansible-playbook's main process appends one JSON
line to it at its closing stats: its pid, its own user and system CPU seconds
(``getrusage(RUSAGE_SELF)``: the process that runs the strategy and every callback, without
its forks), and the wall-clock times (``time.time()``) at which each play began (a ``serial``
play begins again for each batch) and at which its stats came: the bench splits each row's
wall time into the time inside its plays and the time outside them from these. The bench
loads it by putting this folder on ``ANSIBLE_CALLBACK_PLUGINS`` of all three rows alike, so
the rows differ only in what they measure.
"""

from __future__ import annotations

import json
import os
import resource
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gdsfleet_bench_rusage"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        self._plays: list[float] = []

    def v2_playbook_on_play_start(self, play: object) -> None:
        self._plays.append(time.time())

    def v2_playbook_on_stats(self, stats: object) -> None:
        path = os.environ.get("GDSFLEET_BENCH_RUSAGE")
        if not path:
            return
        at = time.time()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        line = json.dumps({"pid": os.getpid(), "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                           "plays": self._plays, "stats_at": at})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
