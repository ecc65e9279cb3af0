"""What gdsfleet keeps of one ansible-runner event: the one-line reason of a failed task
(:func:`_message`), the bounded, redacted line ``events.jsonl`` keeps of each event
(:func:`event_line`), the 0600 line-buffered writer of that file (:class:`EventLog`) and the
slim copy of an event a run keeps in memory (:func:`_slim`). Used by
:mod:`provisioner.rollout.runner` and the execution-node executor.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_WHY = re.compile(r"error|fail|unmet|depends:|unable|not installable|no such|denied|refus",
                  re.IGNORECASE)

# events.jsonl: longest message kept (its tail), longest host/task name kept
_EVENT_MSG_MAX = 500
_EVENT_NAME_MAX = 200
# the event's own time stamp (ansible-runner's "created": 26 characters of ISO 8601)
_EVENT_AT_MAX = 40
# what one shard's worker may send (issue 27 item 6: an execution node filled the
# coordinator's disk with 300 events of 2 MiB). A site.yml run is about 460 events per host
# (bench_exec_lab) at about 200 bytes each on its events.jsonl line, so the bounds leave an
# order of magnitude of room; past one, the shard is lost with that reason.
MAX_EVENTS_BASE = 10_000
MAX_EVENTS_PER_HOST = 5_000
MAX_EVENT_BYTES_BASE = 16 << 20
MAX_EVENT_BYTES_PER_HOST = 1 << 20


def shard_limits(hosts: int) -> tuple[int, int]:
    """The most events, and the most ``events.jsonl`` bytes, a shard of ``hosts`` hosts
    may produce."""
    n = max(1, hosts)
    return (MAX_EVENTS_BASE + MAX_EVENTS_PER_HOST * n,
            MAX_EVENT_BYTES_BASE + MAX_EVENT_BYTES_PER_HOST * n)


def _counter(value: Any) -> int | None:
    """An event's counter as events.jsonl keeps it: an integer of at most 15 digits, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15:
        return value
    return None
_FAILED_EVENTS = frozenset({"runner_on_failed", "runner_item_on_failed", "runner_on_async_failed",
                            "runner_on_unreachable"})


def _message(res: Mapping[str, Any]) -> str:
    """The most useful one-line reason in a task result."""
    for key in ("msg", "stderr", "module_stderr", "reason", "stdout"):
        val = res.get(key)
        if isinstance(val, str) and val.strip():
            text = val.strip()
            break
    else:
        results = res.get("results")
        if isinstance(results, list):
            for item in results:
                if isinstance(item, Mapping) and item.get("failed"):
                    return _message(item)
        text = "task failed (no message)"
    if res.get("_ansible_no_log"):
        return "task failed (output hidden by no_log)"
    # a generic msg ("... failed: E: Sub-process ... error code (1)") says little: add the
    # output lines that say why (unmet dependencies, a DKMS build error, ...)
    extra: list[str] = []
    for key in ("stdout", "stderr"):
        val = res.get(key)
        if isinstance(val, str) and val is not text:
            extra += [ln.strip() for ln in val.splitlines()
                      if _WHY.search(ln) and ln.strip() and ln.strip() not in text]
    if extra:
        text = text + "\n" + "\n".join(list(dict.fromkeys(extra))[-4:])
    # keep the ledger and reports readable: last lines of long outputs
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > 6:
        lines = ["..."] + lines[-6:]
    out = "\n".join(lines)
    return out[-2000:]


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def event_line(event: Mapping[str, Any]) -> dict[str, Any]:
    """The line ``events.jsonl`` keeps of one event: its kind, counter and time, the host and
    task, changed/failed of a result, its duration, and a bounded, redacted message (the
    reason of a failure, or a host-less event's output, e.g. ``ERROR!`` lines); never the
    task's arguments or its full result."""
    from provisioner.redact import redact_text

    kind = str(event.get("event", ""))[:64]
    data = event.get("event_data") or {}
    if not isinstance(data, Mapping):
        data = {}
    created = event.get("created")
    # every field bounded: counter and created were copied whole (2 MiB each, per event)
    line: dict[str, Any] = {"event": kind, "counter": _counter(event.get("counter")),
                            "at": created[:_EVENT_AT_MAX] if isinstance(created, str) else None}
    for key in ("host", "task"):
        val = data.get(key)
        if isinstance(val, str) and val:
            line[key] = _bounded(val, _EVENT_NAME_MAX)
    res = data.get("res")
    res = res if isinstance(res, Mapping) else {}
    msg = ""
    if kind.startswith("runner_"):
        if "changed" in res:
            line["changed"] = bool(res.get("changed"))
        line["failed"] = kind in _FAILED_EVENTS
        if data.get("ignore_errors"):
            line["ignored"] = True
        duration = data.get("duration")
        if (isinstance(duration, int | float) and not isinstance(duration, bool)
                and 0 <= duration < 10**9):  # finite, a plausible number of seconds
            line["duration"] = round(float(duration), 3)
        if line["failed"]:
            msg = _message(res)
    elif not data.get("host"):
        stdout = event.get("stdout")
        msg = stdout.strip() if isinstance(stdout, str) and kind in ("verbose", "error") else ""
    if msg:
        line["message"] = _bounded(redact_text(msg), _EVENT_MSG_MAX)
    return line


class EventLog:
    """``events.jsonl`` of one run: a 0600 file, one line per event, opened on the first line
    (ansible-runner creates the run's artifacts folder before its first event), line-buffered
    so that a killed controller leaves every line written so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None
        self._lock = threading.Lock()
        self.lines = 0
        self.bytes = 0

    def __call__(self, line: Mapping[str, Any]) -> int:
        """Write ``line``; returns the bytes it took (0 when there is no file)."""
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)
        # a lone surrogate in a node's host or task name: escaped, never an encoding error
        data = text.encode("utf-8", "backslashreplace") + b"\n"
        with self._lock:
            if self._fh is None:
                from provisioner.fsutil import open_private, private_dir

                try:
                    private_dir(self.path.parent)
                    fd = open_private(self.path)
                except OSError:
                    self._fh = False  # no folder to write into: the outcomes still count
                    return 0
                self._fh = os.fdopen(fd, "ab", buffering=0)
            if self._fh:
                self._fh.write(data)
                self.lines += 1
                self.bytes += len(data)
                return len(data)
            return 0

    def close(self) -> None:
        with self._lock:
            if self._fh:
                self._fh.close()
            self._fh = None


def _slim(event: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an event small enough to keep (no stdout, no module args)."""
    data = dict(event.get("event_data") or {})
    res = data.get("res")
    if isinstance(res, Mapping):
        data["res"] = {k: res[k] for k in ("changed", "msg", "unreachable", "failed",
                                           "skipped", "rc") if k in res}
    for k in ("task_args", "playbook_uuid", "play_uuid", "task_uuid", "uuid"):
        data.pop(k, None)
    return {"event": event.get("event"), "counter": event.get("counter"), "event_data": data}

