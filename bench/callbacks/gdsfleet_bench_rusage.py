"""Callback plugin for bench/bench_overhead.py only (not a test, never loaded by the product):
when ``GDSFLEET_BENCH_RUSAGE`` names a file, ansible-playbook's main process appends one JSON
line to it at its closing stats: its pid and its own user and system CPU seconds
(``getrusage(RUSAGE_SELF)``: the process that runs the strategy and every callback, without
its forks). The bench loads it by putting this folder on ``ANSIBLE_CALLBACK_PLUGINS`` of all
three rows alike, so the rows differ only in what they measure.
"""

from __future__ import annotations

import json
import os
import resource

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gdsfleet_bench_rusage"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_stats(self, stats: object) -> None:
        path = os.environ.get("GDSFLEET_BENCH_RUSAGE")
        if not path:
            return
        ru = resource.getrusage(resource.RUSAGE_SELF)
        line = json.dumps({"pid": os.getpid(), "user_s": ru.ru_utime, "sys_s": ru.ru_stime})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
