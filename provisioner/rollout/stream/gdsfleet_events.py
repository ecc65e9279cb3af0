"""Stdout callback plugin: each event of an ``ansible-playbook`` run, as one slim record on
ansible-runner's event stream.

ansible-runner reads a run's events from its standard output: an event is a base64 JSON
record between ``ESC [K`` markers (its ``OutputEventFilter``), and the text written between
an event's record and the closing empty record is that event's ``stdout``. Its own callback,
``awx_display``, writes for every event the whole task result to a ``job_events/*-partial.json``
file, which the runner's process reads back and deletes, puts two records on the stream and
formats the human-readable output besides; all of it in ``ansible-playbook``'s main process,
the one that also drives every fork. ``provisioner rollout`` keeps far less of an event
(:func:`provisioner.rollout.events.event_line`), so this plugin sends only that, inline, in
one write:

- every event ``awx_display`` sends for a playbook run, with the same names and the fields
  gdsfleet reads: ``host``, ``task`` (the task's name, else its action, as ``awx_display``),
  ``duration``, ``ignore_errors``, the play and playbook, and the closing stats per host;
- of a result, ``changed`` (and ``skipped``, ``failed``, ``unreachable``, ``rc``); of a
  failed or unreachable one also the fields a failure's reason is read from (``msg``,
  ``stderr``, ``stdout``, ``module_stderr``, ``reason``, a loop's failed items), each kept
  to its last 16 KiB; a ``no_log`` result keeps none of them. Never the task's arguments,
  never facts or whole module output;
- no human-readable output, except one line per failed or unreachable host that names the
  host and the task (never the node's text: a node's output can hold a forged record).

Warnings and errors that ansible-core displays itself still reach the stream as text, which
ansible-runner turns into ``verbose`` events, as before.

Stdlib and ansible-core only: it runs inside ansible-playbook, never imported by the
provisioner.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ansible.plugins.callback import CallbackBase

_TEXT_MAX = 16 << 10  # the tail kept of each text field of a failed result
_ITEMS_MAX = 20  # failed loop items kept
_REASON_KEYS = ("msg", "stderr", "stdout", "module_stderr", "reason")
_FLAG_KEYS = ("changed", "skipped", "failed", "unreachable")
_END = "\x1b[Ke30=\x1b[4D\x1b[K"  # the closing record: base64 of "{}"


def _text(value: Any) -> Any:
    if isinstance(value, str):
        return value[-_TEXT_MAX:]
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value[:64]):
        return [v[-_TEXT_MAX:] for v in value[-64:]]
    return None if value is None else str(value)[-_TEXT_MAX:]


def slim_result(res: Mapping[str, Any], *, failed: bool) -> dict[str, Any]:
    """What an event keeps of a task result (module-level: the unit tests call it)."""
    out: dict[str, Any] = {}
    for key in _FLAG_KEYS:
        if key in res:
            out[key] = bool(res[key])
    rc = res.get("rc")
    if isinstance(rc, int) and not isinstance(rc, bool):
        out["rc"] = rc
    if res.get("_ansible_no_log"):
        out["_ansible_no_log"] = True
        out["censored"] = ("the output has been hidden due to the fact that 'no_log: true' "
                           "was specified for this result")
        return out
    if not failed:
        return out
    for key in _REASON_KEYS:
        if key in res and res[key] is not None:
            out[key] = _text(res[key])
    items = res.get("results")
    if isinstance(items, list):
        kept = []
        for item in items:
            if isinstance(item, Mapping) and item.get("failed"):
                kept.append(slim_result(item, failed=True))
                if len(kept) >= _ITEMS_MAX:
                    break
        out["results"] = kept
    return out


def _plain(text: str) -> str:
    """A line written as an event's own output: no control characters (no forged record)."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:1000]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gdsfleet_events"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._playbook: dict[str, str] = {}
        self._play: dict[str, str] = {}
        self._started: dict[str, float] = {}

    # the stream -------------------------------------------------------------------------
    def _emit(self, event: str, data: dict[str, Any], text: str = "") -> None:
        record = {
            "uuid": str(uuid.uuid4()),
            "event": event,
            "pid": os.getpid(),
            "created": datetime.now(timezone.utc).isoformat(),
            "event_data": {**self._playbook, **self._play, **data},
        }
        b64 = base64.b64encode(json.dumps(record, default=str, separators=(",", ":"))
                               .encode("utf-8", "backslashreplace")).decode("ascii")
        chunks = "".join(f"{b64[i:i + 4096]}\x1b[{len(b64[i:i + 4096])}D"
                         for i in range(0, len(b64), 4096))
        out = sys.stdout
        out.write(f"\x1b[K{chunks}\x1b[K{text}{_END}")
        out.flush()

    @staticmethod
    def _task_name(task: Any) -> str:
        return str(getattr(task, "name", None) or getattr(task, "action", ""))

    @staticmethod
    def _raw(result: Any) -> Mapping[str, Any]:
        """The result's fields as the task returned them (already cleaned and, under
        ``no_log``, censored, for callbacks): ansible-core 2.19's ``result`` property would
        first copy the whole result into plain types, which only a few fields are read of."""
        raw = getattr(result, "_return_data", None)
        return raw if isinstance(raw, Mapping) else result._result

    def _result_event(self, event: str, result: Any, *, failed: bool = False,
                      timed: bool = False, res: bool = True, **extra: Any) -> None:
        """One event of a host's result; ``timed``: with its duration since the host's
        ``runner_on_start`` (the final results, as ``awx_display``); ``res``: with the slim
        result (not for a skipped task, as ``awx_display``)."""
        host = result._host.get_name()
        raw = self._raw(result)
        data: dict[str, Any] = {"host": host, "task": self._task_name(result._task), **extra}
        if res:
            data["res"] = slim_result(raw, failed=failed)
        started = self._started.get(host) if timed else None
        if started is not None:
            data["duration"] = round(time.monotonic() - started, 6)
        text = ""
        if failed:
            kind = "UNREACHABLE" if event == "runner_on_unreachable" else "FAILED"
            text = _plain(f"fatal: [{host}]: {kind}! (task: {data['task']})")
        self._emit(event, data, text)
        if not any(key in raw for key in ("warnings", "deprecations", "exception")):
            return  # nothing to display
        handle = getattr(self, "_handle_warnings_and_exception", None)
        if handle is not None:
            handle(result)
        else:  # ansible-core before 2.19
            self._handle_warnings(result._result)

    # playbook, play, task ---------------------------------------------------------------
    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._playbook = {"playbook": os.path.basename(str(getattr(playbook, "_file_name", "")))}
        self._emit("playbook_on_start", {})

    def v2_playbook_on_play_start(self, play: Any) -> None:
        hosts = getattr(play, "hosts", "")
        pattern = ",".join(hosts) if isinstance(hosts, list) else str(hosts)
        name = str(play.get_name()).strip() or pattern
        self._play = {"play": name, "play_uuid": str(getattr(play, "_uuid", ""))}
        self._emit("playbook_on_play_start", {"name": name, "pattern": pattern})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._emit("playbook_on_task_start", {"task": self._task_name(task),
                                              "is_conditional": bool(is_conditional)})

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._emit("playbook_on_handler_task_start", {"task": self._task_name(task)})

    def v2_playbook_on_cleanup_task_start(self, task: Any) -> None:
        self._emit("playbook_on_cleanup_task_start", {"task": self._task_name(task)})

    def v2_playbook_on_include(self, included_file: Any) -> None:
        self._emit("playbook_on_include",
                   {"included": os.path.basename(str(getattr(included_file, "_filename", "")))})

    def v2_playbook_on_no_hosts_matched(self) -> None:
        self._emit("playbook_on_no_hosts_matched", {}, "skipping: no hosts matched")

    def v2_playbook_on_no_hosts_remaining(self) -> None:
        self._emit("playbook_on_no_hosts_remaining", {}, "NO MORE HOSTS LEFT")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        custom = getattr(stats, "custom", None) or {}
        self._emit("playbook_on_stats", {
            "changed": stats.changed, "dark": stats.dark, "failures": stats.failures,
            "ignored": getattr(stats, "ignored", {}), "ok": stats.ok,
            "processed": stats.processed, "rescued": getattr(stats, "rescued", {}),
            "skipped": stats.skipped,
            "artifact_data": custom.get("_run", {}) if isinstance(custom, dict) else {},
        })

    # a host's results -------------------------------------------------------------------
    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        name = host.get_name()
        self._started[name] = time.monotonic()
        self._emit("runner_on_start", {"host": name, "task": self._task_name(task)})

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result_event("runner_on_ok", result, timed=True)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result_event("runner_on_failed", result, failed=True, timed=True,
                           ignore_errors=bool(ignore_errors))

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._result_event("runner_on_skipped", result, timed=True, res=False)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result_event("runner_on_unreachable", result, failed=True, timed=True)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._result_event("runner_item_on_ok", result)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._result_event("runner_item_on_failed", result, failed=True)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._result_event("runner_item_on_skipped", result)

    def v2_runner_retry(self, result: Any) -> None:
        self._result_event("runner_retry", result)

    def v2_runner_on_async_poll(self, result: Any) -> None:
        self._result_event("runner_on_async_poll", result)

    def v2_runner_on_async_ok(self, result: Any) -> None:
        self._result_event("runner_on_async_ok", result)

    def v2_runner_on_async_failed(self, result: Any) -> None:
        self._result_event("runner_on_async_failed", result, failed=True)
