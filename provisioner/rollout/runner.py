"""Drive the collection's playbooks through ansible-runner, one run per wave.

The per-host outcome (ok, changed, failed task and its message, unreachable) is read from
the runner's events, never from the exit code: ``ansible-playbook`` folds failed and
unreachable hosts into one number and a malformed playbook can look like either. Only the
closing ``playbook_on_stats`` event makes an outcome final: a stream that ends without it (the
playbook was OOM-killed, crashed, timed out or its stream was cut) leaves every host ``lost``,
never ok or changed (a failure seen before the cut may still have been rescued).
:class:`EventCollector` is the pure part (fed recorded events in the unit tests);
:func:`run_playbook` is the thin driver around ``ansible_runner.run``.

On disk, per run (``artifacts/<ident>/`` of a kept runner folder): ansible-runner's own small
files (``command``, ``status``, ``rc``), one slim ``events.jsonl`` (one line per event, only
the fields gdsfleet uses, see :func:`~provisioner.rollout.events.event_line`) and
``hosts.json`` (the per-host outcomes).
Nothing else per event: the event handler returns False, which tells ansible-runner not to
write its ``job_events/<n>-<uuid>.json`` (one file per event, 6 per host for a 3-task play),
and its ``stdout``/``stderr`` copies are off (``suppress_output_file``).

Inside ``ansible-playbook`` the events come from gdsfleet's own stdout callback
(:mod:`provisioner.rollout.stream`), not ansible-runner's ``awx_display``: the same events
with the fields gdsfleet reads, one inline record each, no partial file per event, no
human-readable output (tests/unit/test_rollout_stream.py runs one playbook through both).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from provisioner.errors import ProvisionerError
from provisioner.rollout.events import (
    EventLog,
    _bounded,
    _message,
    _slim,
    event_line,
)
from provisioner.rollout.launch import (
    _ansible_bin_dir,
    _guard_wrapper,
    _scrub_runner_env,
    _write_extravars,
)
from provisioner.rollout.prestart import Gate, Hold

# each run's events come through gdsfleet's own stdout callback (provisioner/rollout/stream/),
# not ansible-runner's awx_display; False: awx_display (the tests compare the two)
SLIM_STREAM = True


class HostStatus(str, Enum):
    OK = "ok"  # every task ok, nothing changed
    CHANGED = "changed"  # ok, with changes
    FAILED = "failed"  # a task failed (not ignored, not rescued)
    UNREACHABLE = "unreachable"
    NOT_RUN = "not_run"  # no event for the host: the play never reached it
    # the playbook never began (Ansible could not load it: a module it cannot resolve, a
    # missing role, a YAML error): no host touched; the message is Ansible's own error
    NOT_STARTED = "not_started"
    # the playbook started but its event stream ended without playbook_on_stats: no final
    # result (not a failure: no budget spent; the rollout redoes the host on resume)
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class HostOutcome:
    host: str
    status: HostStatus
    ok: int = 0
    changed: int = 0
    skipped: int = 0
    failed_task: str | None = None
    message: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status in (HostStatus.OK, HostStatus.CHANGED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.value,
            "ok": self.ok,
            "changed": self.changed,
            "skipped": self.skipped,
            "failed_task": self.failed_task,
            "message": self.message,
        }


@dataclass(frozen=True)
class PlaybookResult:
    playbook: str
    rc: int | None
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    hosts: Mapping[str, HostOutcome]
    duration_s: float = 0.0
    error: str | None = None  # the playbook did not run at all (syntax error, missing file)
    events: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False)



def _host_counts(value: Any) -> dict[str, int]:
    """One ``playbook_on_stats`` table (host -> count) as a worker may send it: entries that
    are not a host name and a whole number are left out."""
    if not isinstance(value, Mapping):
        return {}
    return {h: n for h, n in value.items()
            if isinstance(h, str) and isinstance(n, int) and not isinstance(n, bool)}


class EventCollector:
    """Fold ansible-runner events into one :class:`HostOutcome` per host.

    Call :meth:`handle` with each event (it is ansible-runner's ``event_handler``); read
    :meth:`outcomes` at the end. Safe to call from the runner's thread.
    """

    def __init__(
        self,
        hosts: Sequence[str] = (),
        on_host_event: Callable[[str, str, str], None] | None = None,
        *,
        keep_events: bool = False,
        sink: Callable[[dict[str, Any]], Any] | None = None,
        limits: tuple[int, int] | None = None,
        on_overflow: Callable[[str], None] | None = None,
        on_stats: Callable[[], None] | None = None,
    ) -> None:
        self._hosts = list(hosts)
        # called once the closing stats are folded in (every outcome final from then on)
        self._on_stats = on_stats
        # gets event_line() of each event (the run's events.jsonl); an int it returns is the
        # bytes that line took, counted against limits[1]
        self._sink = sink
        # (most events, most sink bytes): past either, every further event is ignored,
        # ``overflow`` says why and ``on_overflow`` is called once (the ssh executor cuts the
        # worker's stream there, and the shard is lost with that reason)
        self._limits = limits
        self._on_overflow = on_overflow
        self.overflow: str | None = None
        self._count = 0
        self._bytes = 0
        self._ok: dict[str, int] = {}
        self._changed: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        self._unreachable: dict[str, tuple[str, str]] = {}
        self._stats: dict[str, dict[str, int]] | None = None
        self._started = False  # playbook_on_start seen: the playbook was loaded and began
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._on_host_event = on_host_event
        self._keep = keep_events
        self.events: list[dict[str, Any]] = []
        self.stdout_tail: list[str] = []
        # the output from Ansible's first error line on (at most 16 lines): why a playbook
        # that never began did not (start_error.ansible_error)
        self.error_lines: list[str] = []

    def handle(self, event: Mapping[str, Any]) -> bool:
        """Fold one event in. Returns False: ansible-runner then writes no file for it
        (its ``job_events/``); what is kept goes to ``sink`` as one slim line."""
        if self.overflow is not None:
            return False
        self._count += 1
        if self._limits is not None and self._count > self._limits[0]:
            self._overflowed(f"more than {self._limits[0]:,} events (the limit of one shard)")
            return False
        had_stats = self._stats is not None
        self._fold(event)
        if self._sink is not None:
            written = self._sink(event_line(event))
            if isinstance(written, int) and not isinstance(written, bool):
                self._bytes += written
                if self._limits is not None and self._bytes > self._limits[1]:
                    from provisioner.sanitize import human_bytes

                    self._overflowed(f"more than {human_bytes(self._limits[1])} of events "
                                     f"(the limit of one shard's events.jsonl)")
        if not had_stats and self._stats is not None and self._on_stats is not None:
            self._on_stats()  # after the sink: the stats line is in events.jsonl first
        return False

    def _overflowed(self, reason: str) -> None:
        self.overflow = reason
        if self._on_overflow is not None:
            self._on_overflow(reason)

    def _fold(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("event", ""))[:64]
        data = event.get("event_data")
        data = data if isinstance(data, Mapping) else {}  # a worker's stream is hostile
        host = data.get("host")
        if not isinstance(host, str) or len(host) > 255:  # no host name is longer
            host = None
        with self._lock:
            if self._keep:
                self.events.append(_slim(event))
            stdout = event.get("stdout")
            if isinstance(stdout, str) and stdout.strip():
                # the last 20 lines, each at most 2,000 characters (a node's line may be MiBs)
                lines = [ln[-2000:] for ln in stdout[-64_000:].splitlines()]
                self.stdout_tail = (self.stdout_tail + lines)[-20:]
                self._keep_error(lines)
            if kind in ("playbook_on_start", "playbook_on_play_start"):
                self._started = True
            if kind == "playbook_on_stats":
                self._stats = {
                    key: _host_counts(data.get(key))
                    for key in ("ok", "changed", "failures", "dark", "skipped", "ignored",
                                "rescued", "processed")
                }
                return
            if not host:
                return
            task = str(data.get("task") or "")[-2000:]
            res = data.get("res")
            res = res if isinstance(res, Mapping) else {}
            if kind == "runner_on_ok":
                self._seen.add(host)
                self._ok[host] = self._ok.get(host, 0) + 1
                if res.get("changed"):
                    self._changed[host] = self._changed.get(host, 0) + 1
            elif kind == "runner_on_failed":
                self._seen.add(host)
                if data.get("ignore_errors"):
                    self._ok[host] = self._ok.get(host, 0) + 1
                else:
                    self._failed.setdefault(host, (task, _message(res)))
            elif kind == "runner_on_unreachable":
                self._seen.add(host)
                self._unreachable.setdefault(host, (task, _message(res)))
            elif kind == "runner_on_skipped":
                self._seen.add(host)
                self._skipped[host] = self._skipped.get(host, 0) + 1
            elif kind in ("runner_item_on_failed",):
                self._seen.add(host)
            else:
                return
        if self._on_host_event is not None:
            self._on_host_event(host, kind, task)

    def _keep_error(self, lines: Sequence[str]) -> None:
        if len(self.error_lines) >= 16:
            return
        if not self.error_lines:
            from provisioner.rollout.start_error import strip_colour

            first = next((i for i, ln in enumerate(lines)
                          if strip_colour(ln).lstrip().startswith(("[ERROR]:", "ERROR!"))), None)
            if first is None:
                return
            lines = lines[first:]
        self.error_lines = (self.error_lines + list(lines))[:16]

    @property
    def hosts(self) -> list[str]:
        """The run's hosts: given at its start, or at its gate's release (:meth:`expect`)."""
        with self._lock:
            return list(self._hosts)

    def expect(self, hosts: Sequence[str]) -> None:
        """The run's hosts, when they were not known as it started (prestart.Gate)."""
        with self._lock:
            self._hosts = list(hosts)

    def outcomes(self) -> dict[str, HostOutcome]:
        with self._lock:
            hosts = list(dict.fromkeys(
                list(self._hosts) + sorted(self._seen)
                + sorted((self._stats or {}).get("processed", {}))
            ))
            stats = self._stats or {}
            out: dict[str, HostOutcome] = {}
            if self._stats is None:
                return {h: self._lost(h) for h in hosts}
            for h in hosts:
                ok, chg, skp = (self._ok.get(h, 0), self._changed.get(h, 0),
                                self._skipped.get(h, 0))
                dark = stats.get("dark", {}).get(h, 0) if stats else 0
                failures = stats.get("failures", {}).get(h, 0) if stats else 0
                if h in self._unreachable or dark:
                    task, msg = self._unreachable.get(h, ("", "unreachable"))
                    out[h] = HostOutcome(h, HostStatus.UNREACHABLE, ok=ok, changed=chg, skipped=skp,
                                         failed_task=task or None, message=msg)
                elif (failures > 0) if stats else (h in self._failed):
                    task, msg = self._failed.get(h, ("", "failed"))
                    out[h] = HostOutcome(h, HostStatus.FAILED, ok=ok, changed=chg, skipped=skp,
                                         failed_task=task or None, message=msg)
                elif h in self._seen or (stats and h in stats.get("processed", {})):
                    status = HostStatus.CHANGED if chg else HostStatus.OK
                    out[h] = HostOutcome(h, status, ok=ok, changed=chg, skipped=skp)
                else:
                    out[h] = HostOutcome(h, HostStatus.NOT_RUN, ok=ok, changed=chg, skipped=skp,
                                         message="the play did not reach this host")
            return out

    def _lost(self, h: str) -> HostOutcome:
        """A host of a stream that ended without stats: what was seen, kept for the reader,
        decides nothing (an ok may have been followed by a failure, a failure by a rescue)."""
        msg = "no final result: the playbook's event stream ended without its closing stats " \
              "(playbook killed, crashed, timed out or its stream cut)"
        task = None
        for seen in (self._unreachable, self._failed):
            if h in seen:
                task, last = seen[h]
                msg += f"; last seen: task {task!r}: {last}"
                break
        return HostOutcome(h, HostStatus.LOST, ok=self._ok.get(h, 0),
                           changed=self._changed.get(h, 0), skipped=self._skipped.get(h, 0),
                           failed_task=task or None, message=msg[-2000:])

    @property
    def saw_stats(self) -> bool:
        return self._stats is not None

    @property
    def seen_any(self) -> bool:
        """Some host had an event."""
        return bool(self._seen)

    @property
    def started(self) -> bool:
        """The playbook was loaded and began (its first event came)."""
        return self._started


def redact(extravars: Mapping[str, Any]) -> dict[str, Any]:
    """Extra vars fit to record: secret-named values ``<redacted>`` (provisioner.redact)."""
    from provisioner.redact import redact_mapping

    return dict(redact_mapping(dict(extravars)))


def _scrub_artifacts(pdd: Path) -> None:
    """Owner-only modes for everything in the runner's folder, and secrets masked in its
    ``artifacts/*/command`` files (they record the job's environment): the same scrub that
    ``provisioner.rollout.artifacts`` gives a killed run's leftovers at the next start."""
    from provisioner.rollout.artifacts import scrub_artifacts

    scrub_artifacts(pdd)


def _write_outcomes(path: Path, playbook: str, status: str, rc: int | None, saw_stats: bool,
                    error: str | None, outcomes: Mapping[str, HostOutcome]) -> None:
    """The run's per-host outcomes, beside its events.jsonl (0600, written atomically)."""
    from provisioner.fsutil import write_private
    from provisioner.redact import redact_mapping

    doc = {"playbook": playbook, "status": status, "rc": rc, "final_stats": saw_stats,
           "error": error, "hosts": {h: o.to_dict() for h, o in outcomes.items()}}
    with contextlib.suppress(OSError):
        write_private(path, json.dumps(redact_mapping(doc), ensure_ascii=False, indent=1))


def run_playbook(
    playbook: str | os.PathLike[str],
    inventory: str | os.PathLike[str],
    hosts: Sequence[str],
    *,
    forks: int = 5,
    extravars: Mapping[str, Any] | None = None,
    private_data_dir: str | os.PathLike[str] | None = None,
    envvars: Mapping[str, str] | None = None,
    on_host_event: Callable[[str, str, str], None] | None = None,
    keep_events: bool = False,
    timeout: int | None = None,
    cancel: Callable[[], bool] | None = None,
    children_lock: str | os.PathLike[str] | None = None,
    run_tag: str = "",
    hold: Hold | None = None,
    on_final: Callable[[PlaybookResult], None] | None = None,
) -> PlaybookResult:
    """Run ``playbook`` against ``hosts`` of ``inventory``; per-host outcomes from events.

    ``ansible-playbook`` runs under :mod:`provisioner.rollout.guard` (it dies with this process,
    holds ``children_lock`` while it lives); SIGINT/SIGTERM cancel it (the guard ends it and
    everything it started, :class:`guard.Stop`) and raise
    :class:`provisioner.interrupts.Interrupted` once it is gone.

    ``hold``: a run started ahead of its wave, in a thread of its own
    (:mod:`provisioner.rollout.prestart`): it waits before its first play until
    ``hold.go()``; ``hold.drop()`` ends it there (its artifacts are then removed: it ran
    nothing). Its timeout and duration count from the release.

    ``on_final``: called (in the thread that runs the playbook) with the run's result as soon
    as its closing ``playbook_on_stats`` event is in: every host's outcome is final from
    there, while ansible-playbook still takes a few tenths of a second to exit (its workers,
    its temporary files, the interpreter) and this function to sweep and scrub after it.
    That result has ``rc`` None (the process has not exited yet) and ``status``
    ``successful`` or ``failed`` from the outcomes. What this function returns at the end is
    the whole run's, with the same outcomes. See :class:`provisioner.rollout.prestart.Held`,
    which hands it to the wave so that the next wave need not wait for that exit.
    """
    import time
    import uuid

    import ansible_runner  # heavy: imported when a playbook really runs

    from provisioner import interrupts
    from provisioner.rollout import guard
    from provisioner.rollout.playbooks import FORWARDED_ENV, looks_like_fqcn

    gate = hold if isinstance(hold, Gate) else None  # its hosts come at its release
    if not hosts and gate is None:
        return PlaybookResult(str(playbook), 0, "successful", {})
    # a collection playbook's FQCN (gdsfleet.gds.site) goes to ansible-playbook as it is
    fqcn = isinstance(playbook, str) and looks_like_fqcn(playbook)
    if not fqcn and not Path(playbook).is_file():
        raise ProvisionerError(f"playbook {str(playbook)!r} does not exist")
    bindir = _ansible_bin_dir()
    if bindir:
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    from provisioner.fsutil import private_dir

    pdd_tmp = None
    if private_data_dir is None:
        pdd_tmp = tempfile.mkdtemp(prefix="gdsfleet-runner-")  # 0700
        pdd = Path(pdd_tmp)
    else:
        pdd = private_dir(private_data_dir, narrow=True)  # 0700; an older 0755 one narrowed
    # ansible-runner makes artifacts/<ident> 0700 but its parent with the umask's default
    private_dir(pdd / "artifacts", narrow=True)
    ident = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"
    artifact_dir = pdd / "artifacts" / ident
    # a temporary runner folder is removed at the end: no log to keep there
    event_log = EventLog(artifact_dir / "events.jsonl") if pdd_tmp is None else None
    started = time.monotonic()  # set again when ansible-playbook starts

    def duration() -> float:
        """Seconds since the run began (a held run: since its release)."""
        if hold is not None and hold.released_at is not None:
            return time.monotonic() - hold.released_at
        return time.monotonic() - started

    def stats_in() -> None:
        if on_final is None:
            return
        outcomes = collector.outcomes()
        ok = all(o.succeeded for o in outcomes.values())
        on_final(PlaybookResult(playbook=str(playbook), rc=None,
                                status="successful" if ok else "failed", hosts=outcomes,
                                duration_s=duration(), events=tuple(collector.events)))

    collector = EventCollector(hosts, on_host_event, keep_events=keep_events, sink=event_log,
                               on_stats=stats_in)
    if gate is not None:
        gate.on_go = collector.expect
    env = {"ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_HOST_KEY_CHECKING": "True"}
    for key in FORWARDED_ENV:
        if os.environ.get(key):
            env[key] = os.environ[key]
    env.update(envvars or {})
    stdout_callback = None
    if SLIM_STREAM:
        from provisioner.rollout.stream import STDOUT_CALLBACK, STREAM_PLUGIN_DIR, callback_dirs

        stdout_callback = STDOUT_CALLBACK
        env["ANSIBLE_CALLBACK_PLUGINS"] = callback_dirs({**os.environ, **env}, STREAM_PLUGIN_DIR)
    if hold is not None:
        env.update(hold.env({**os.environ, **env}))
    token = guard.new_token(run_tag)
    env[guard.TOKEN_ENV] = token
    env[guard.PARENT_ENV] = str(os.getpid())
    wrapper = _guard_wrapper(pdd, children_lock, stdout_callback)
    started = time.monotonic()
    extravars_file = None
    interrupts.check()
    try:
        extravars_file = _write_extravars(pdd, extravars or {}, ident)
        kwargs: dict[str, Any] = {
            "private_data_dir": str(pdd),
            "playbook": str(playbook) if fqcn else str(Path(playbook).resolve()),
            # a gate: its script is the last inventory source, the hosts come in a file
            "inventory": str(Path(inventory).resolve()) if gate is None
            else [str(Path(inventory).resolve()), gate.script],
            "limit": ",".join(hosts) if gate is None else f"@{gate.limit_file}",
            "forks": max(1, int(forks)),
            # no "extravars": they are in env/extravars-<ident>, never on the command line
            "envvars": env,
            "event_handler": collector.handle,
            "status_handler": _scrub_runner_env,
            "ident": ident,
            "quiet": True,
            "suppress_env_files": True,
            "rotate_artifacts": 5,
        }
        # our cancel callback, always: without one ansible-runner installs SIGINT/SIGTERM
        # handlers of its own and never puts ours back. It also keeps the timeout: the guard,
        # not the runner's SIGKILL of its process group, ends a canceled or timed-out playbook
        def asked() -> bool:
            return (interrupts.requested() or (cancel is not None and bool(cancel()))
                    or (hold is not None and hold.dropped))

        stop = guard.Stop(token, asked, timeout=timeout,
                          began=hold.clock if hold is not None else None)
        kwargs["cancel_callback"] = stop
        # how often the runner looks at the cancel callback (its default: every 5 s); and no
        # stdout/stderr copies of the whole output (events.jsonl keeps what gdsfleet uses):
        # ansible-runner 2.4.3 takes suppress_output_file from its settings only (its keyword
        # is overwritten by them), and reads settings only when env/settings exists; an older
        # settings file is merged over this dict, keeping these keys
        kwargs["settings"] = {"pexpect_timeout": 0.5, "suppress_output_file": True}
        settings_file = pdd / "env" / "settings"
        if not settings_file.exists():
            settings_file.parent.mkdir(parents=True, exist_ok=True)
            settings_file.write_text("pexpect_timeout: 0.5\nsuppress_output_file: true\n",
                                     encoding="utf-8")
        options = ([f"-e @{shlex.quote(str(extravars_file))}"]
                   if extravars_file is not None else [])
        if wrapper is not None:
            kwargs["binary"] = str(wrapper)
            kwargs["cmdline"] = " ".join([shlex.quote(kwargs["playbook"]), *options])
        elif options:
            kwargs["cmdline"] = " ".join(options)
        # a held run waits in a thread of its own: the signals stay the main thread's, which
        # waits for it under interrupts.deferred() once released (Held.release)
        with interrupts.deferred() if hold is None else contextlib.nullcontext():
            r = ansible_runner.run(**kwargs)
        rc, status = r.rc, str(r.status)
        if stop.reason is not None:  # as ansible-runner reports a run it ended
            rc, status = 254, stop.reason
    finally:
        # normally nothing is left: the guard swept before it exited. A guard that was
        # SIGKILLed (the runner's last resort, or a kill of its own) swept nothing
        guard.sweep(token)
        if wrapper is not None:
            with contextlib.suppress(OSError):
                wrapper.unlink()
        if extravars_file is not None:
            extravars_file.unlink(missing_ok=True)
        if event_log is not None:
            event_log.close()
        if hold is not None and hold.dropped:
            # dropped before its first play: no run to keep (nothing ran)
            shutil.rmtree(artifact_dir, ignore_errors=True)
        if pdd_tmp:
            shutil.rmtree(pdd_tmp, ignore_errors=True)
        else:
            _scrub_artifacts(pdd)
    interrupts.check()  # canceled by SIGINT/SIGTERM: the hosts' outcomes mean nothing
    outcomes = collector.outcomes()
    error = None
    if not collector.saw_stats and not collector.started and not collector.seen_any:
        # never began (a module it cannot resolve, a missing role, a YAML error, no
        # ansible-playbook): every host of the run (a gate's: those it was released for) gets
        # Ansible's own error line; no host was touched
        from provisioner.rollout.start_error import did_not_start, stopped_before_start

        error = did_not_start(collector.error_lines or collector.stdout_tail, status, rc)
        kind = HostStatus.FAILED if stopped_before_start(status) else HostStatus.NOT_STARTED
        outcomes = {h: HostOutcome(h, kind, message=error)
                    for h in (list(hosts) or collector.hosts)}
    elif not collector.saw_stats:
        # began, then its stream ended early: every host lost; say why in their message
        tail = _bounded("\n".join(collector.stdout_tail[-4:]), 600)
        why = f" ({status}, rc={rc}" + (f": {tail}" if tail else "") + ")"
        outcomes = {
            h: HostOutcome(o.host, o.status, ok=o.ok, changed=o.changed, skipped=o.skipped,
                           failed_task=o.failed_task, message=(o.message or "")[:1400] + why)
            for h, o in outcomes.items()
        }
    if event_log is not None and artifact_dir.is_dir():
        _write_outcomes(artifact_dir / "hosts.json", str(playbook), status, rc,
                        collector.saw_stats, error, outcomes)
    return PlaybookResult(
        playbook=str(playbook),
        rc=rc,
        status=status,
        hosts=outcomes,
        duration_s=duration(),
        error=error,
        events=tuple(collector.events),
    )
