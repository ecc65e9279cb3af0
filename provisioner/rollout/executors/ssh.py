"""The ``ssh`` executor: a wave's shards run on execution nodes through ansible-runner's
streaming protocol.

Per shard (one per execution node, in parallel threads)::

    ansible-runner transmit  ->  ssh EXEC RUNNER worker --private-data-dir DIR --delete
                             ->  ansible-runner process  (gdsfleet's EventCollector)

The SSH hop is OpenSSH's ``ssh`` client, not paramiko: the job and its event stream are byte
streams in both directions with back-pressure, which a child process's pipes give for free
(no byte pumping threads of our own), and OpenSSH's keepalives, timeouts and key checks are the
ones operators know. It runs with ``BatchMode=yes`` (no prompt), ``StrictHostKeyChecking=yes``
against a known_hosts file this module writes from the keys that gdsfleet's own known_hosts
reader (provisioner.ssh, the one that checks the nodes) found for the execution node, so an
execution node's key is checked exactly as a node's: ``--known-hosts`` files, the managed file,
``~/.ssh/known_hosts``, ``/etc/ssh/ssh_known_hosts``, ``@revoked`` honoured; nothing is accepted
blindly, and an unknown key refuses the rollout before any change.

The job travels on ssh's stdin, never its command line: extra vars are a 0600 file
(``env/extravars``) inside the transmitted private data dir, which the worker removes with
``--delete``. The ledger's URL is never sent. Every byte coming back is bounded (line length,
stderr) and hosts outside the shard are ignored.

Every process of a dispatch on the execution node carries the dispatch's token; the worker runs
under the shard's deadline and a sweep by token follows it (:mod:`.fence`). A shard whose stream
ends without a final result is fenced and its hosts sent once to a surviving execution node, in
the shard's own thread (:mod:`.recover`). The stream reader and the dispatch record are in
:mod:`.stream`, the exec inventory in :mod:`.nodes`, and how an execution node is reached (the
ssh command line, the pinned known_hosts, the worker's shell command) in :mod:`.transport`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.errors import UsageError
from provisioner.interrupts import requested as _requested
from provisioner.rollout.events import shard_limits
from provisioner.rollout.executors.nodes import (  # noqa: F401 - importable from here too
    DEFAULT_RUNNER,
    DEFAULT_WORKDIR,
    EXEC_GROUP,
    ExecNode,
    load_exec_inventory,
)
from provisioner.rollout.executors.shard import ShardBy, shard_hosts
from provisioner.rollout.executors.stream import (  # noqa: F401 - importable from here too
    MAX_LINE,
    Dispatch,
    DispatchLedger,
    Watchdog,
    _BoundedReader,
    _kill,
    _shown,
)
from provisioner.rollout.executors.transport import (  # noqa: F401 - importable from here too
    SshOptions,
    _copy_inventory,
    _find_runner,
    known_hosts_files,
    pinned_known_hosts,
    ssh_argv,
    worker_command,
)
from provisioner.rollout.launch import _DROPPED_ENV
from provisioner.rollout.runner import (
    EventCollector,
    EventLog,
    HostOutcome,
    HostStatus,
    PlaybookResult,
)

MAX_STDERR = 64 << 10

# ------------------------------------------------------------------------------- dispatch
class SshExecutor:
    name = "ssh"

    def __init__(
        self,
        nodes: Sequence[ExecNode],
        *,
        opts: SshOptions,
        forks_per_node: int | None = None,
        shard_by: ShardBy | None = None,
        value_of: Callable[[str, str], Any] | None = None,
        ledger: Any = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not nodes:
            raise UsageError("--executor ssh: no execution node")
        self.nodes = {n.name: n for n in nodes}
        self.opts = opts
        self.forks_per_node = forks_per_node
        self.shard_by = shard_by or ShardBy()
        self.value_of = value_of
        self.ledger = ledger
        self.state_dir = Path(state_dir) if state_dir else None
        self._tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-exec-"))  # 0700
        self._known: dict[str, Path] = {}
        self._procs: set[subprocess.Popen[bytes]] = set()  # ssh clients of running shards
        self._procs_lock = threading.Lock()
        for n in nodes:  # an unknown key refuses here, before any change
            self._known[n.name] = pinned_known_hosts(n, opts, self._tmp / f"known_hosts.{n.name}")

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def argv(self, node: ExecNode, remote: str) -> list[str]:
        return ssh_argv(node, self._known[node.name], self.opts, remote)

    # -- the Executor interface
    def run(self, playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str], *,
            forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
            private_data_dir: str | os.PathLike[str] | None,
            on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
            children_lock: str | os.PathLike[str] | None, run_tag: str, wave: int,
            kind: str) -> PlaybookResult:
        from provisioner import interrupts
        from provisioner.rollout.executors.recover import Wave
        from provisioner.rollout.playbooks import looks_like_fqcn

        if not hosts:
            return PlaybookResult(str(playbook), 0, "successful", {})
        if not looks_like_fqcn(playbook) and not Path(playbook).is_file():
            from provisioner.errors import ProvisionerError

            raise ProvisionerError(f"playbook {playbook!r} does not exist")
        shards = shard_hosts(list(hosts), list(self.nodes), self.shard_by, self.value_of)
        started = time.monotonic()
        call: dict[str, Any] = {
            "playbook": playbook, "inventory": Path(inventory), "forks": forks,
            "extravars": extravars, "envvars": envvars, "private_data_dir": private_data_dir,
            "on_host_event": on_host_event, "timeout": timeout, "run_tag": run_tag,
            "wave": wave, "kind": kind}
        interrupts.check()
        # a lost shard, in its own thread at once: fence its execution node (or wait out its
        # deadline), then send its hosts once to a surviving one; a second loss in the wave
        # stops (executors.recover)
        wave_state = Wave(self, shards, call)
        results, _ = self.run_shards(
            [(name, i, name, shard) for i, (name, shard) in enumerate(shards.items())], call,
            after=wave_state.after)
        interrupts.check()
        errors = list(wave_state.errors)
        outcomes: dict[str, HostOutcome] = {}
        for name, shard in shards.items():
            res = results.get(name)
            for h in shard:
                got = res.hosts.get(h) if res is not None else None
                outcomes[h] = got if got is not None else HostOutcome(
                    h, HostStatus.LOST, message=f"execution node {name}: no result")
        errors = [r.error for r in results.values() if r.error] + errors
        statuses = {r.status for r in results.values()}
        status = "successful" if statuses <= {"successful"} else (
            "failed" if "failed" in statuses else sorted(statuses)[0])
        rcs = [r.rc for r in results.values()]
        rc = max((r for r in rcs if r is not None), default=None)
        return PlaybookResult(str(playbook), rc, status, outcomes,
                              duration_s=time.monotonic() - started,
                              error="; ".join(e for e in errors if e)[:2000] or None)

    def dispatch_one(self, index: int, node_name: str, shard: list[str],
                     call: Mapping[str, Any], detail: Mapping[str, Any] | None = None,
                     ) -> tuple[PlaybookResult, Dispatch | None]:
        """One shard to one execution node: its ledger row first (``detail`` added to the
        row's detail), then the dispatch. A fault here leaves the shard's hosts lost."""
        record: Dispatch | None = None
        try:
            record = self._record(index, self.nodes[node_name], shard, call)
            record.detail.update(detail or {})
            return self._dispatch(record, self.nodes[node_name], shard, **call), record
        except Exception as exc:  # a bug or an I/O error here: its hosts are lost
            from provisioner.sanitize import printable

            if record is not None:
                record.state = "error"
            why = printable(f"{type(exc).__name__}: {exc}")[:300]
            return PlaybookResult(str(call["playbook"]), None, "error", {
                h: HostOutcome(h, HostStatus.LOST,
                               message=f"execution node {node_name}: dispatch failed: {why}")
                for h in shard}, error=None), record

    def run_shards(self, jobs: Sequence[tuple[str, int, str, list[str]]], call: Mapping[str, Any],
                   after: Callable[..., PlaybookResult] | None = None,
                   ) -> tuple[dict[str, PlaybookResult], dict[str, Dispatch]]:
        """Dispatch ``(key, shard index, execution node, hosts)`` jobs in parallel threads;
        ``after(node, hosts, result, record)``, in the shard's thread, may replace a result.
        A signal cuts every shard's ssh. Returns the results and dispatch records by key."""
        from provisioner import interrupts

        results: dict[str, PlaybookResult] = {}
        records: dict[str, Dispatch] = {}
        lock = threading.Lock()

        def one(key: str, index: int, node_name: str, shard: list[str]) -> None:
            res, record = self.dispatch_one(index, node_name, shard, call)
            if after is not None:
                try:
                    res = after(node_name, shard, res, record)
                except Exception as exc:  # a fault recovering: the shard's hosts stay lost
                    from provisioner.sanitize import printable

                    why = printable(f"{type(exc).__name__}: {exc}")[:300]
                    res = PlaybookResult(str(call["playbook"]), res.rc, "error", {
                        h: o if o.status is not HostStatus.LOST else HostOutcome(
                            h, o.status, message=f"execution node {node_name} lost; recovery "
                                                 f"failed: {why}")
                        for h, o in res.hosts.items()}, error=f"recovery failed: {why}")
            with lock:
                results[key] = res
                if record is not None:
                    records[key] = record

        threads = [threading.Thread(target=one, args=job, daemon=True,
                                    name=f"gdsfleet-shard-{job[2]}") for job in jobs]
        with interrupts.deferred():  # a signal only records the stop; polled below
            for t in threads:
                t.start()
            stopping = False
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
                    if interrupts.requested() and not stopping:
                        # SIGINT/SIGTERM: cut every shard's ssh; its stream ends, its thread
                        # returns (the worker there stops at its next write, then sweeps)
                        stopping = True
                        with self._procs_lock:
                            for proc in list(self._procs):
                                _kill(proc)
        return results, records

    def _record(self, index: int, node: ExecNode, shard: list[str],
                call: Mapping[str, Any]) -> Dispatch:
        """The dispatch's ledger row, written before anything is sent. Its deadline is when
        the execution node has stopped the shard by itself (executors.fence)."""
        from provisioner.rollout import guard
        from provisioner.rollout.executors.fence import check_token, wait_margin_s

        run_tag, timeout = str(call["run_tag"]), call["timeout"]
        token = check_token(guard.new_token(run_tag))
        at = (time.time() + timeout + wait_margin_s(self.opts.connect_timeout)
              if timeout else None)
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at else None
        record = Dispatch(run_tag, int(call["wave"]), index, node.name, list(shard), token,
                          deadline, deadline_at=at)
        record.detail["history"] = ["dispatching"]
        if self.ledger is not None and run_tag:
            record.id = self.ledger.record_dispatch(run_tag, record.wave, index, node.name,
                                                    token, deadline, "dispatching", shard)
        return record

    def mark(self, record: Dispatch, state: str, **detail: Any) -> None:
        """The dispatch's new state; its ``detail.history`` lists every state it went through."""
        record.state = state
        record.detail.update(detail)
        history = record.detail.setdefault("history", [])
        if not history or history[-1] != state:
            history.append(state)
        if record.id is not None:
            self.ledger.update_dispatch(record.id, state, dict(record.detail))

    def _dispatch(self, record: Dispatch, node: ExecNode, shard: list[str], *, playbook: str,
                  inventory: Path, forks: int, extravars: Mapping[str, Any],
                  envvars: Mapping[str, str], private_data_dir: str | os.PathLike[str] | None,
                  on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
                  run_tag: str, wave: int, kind: str) -> PlaybookResult:
        import ansible_runner

        from provisioner.fsutil import private_dir, write_private
        from provisioner.rollout import guard
        from provisioner.rollout.playbooks import looks_like_fqcn

        ident = (f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
                 f"-{kind}-w{wave}-s{record.shard}")
        token = record.token
        try:
            job = Path(tempfile.mkdtemp(prefix="gdsfleet-job-", dir=self._tmp))  # what is sent
            local = (private_dir(Path(private_data_dir), narrow=True) if private_data_dir
                     else Path(tempfile.mkdtemp(prefix="gdsfleet-proc-", dir=self._tmp)))
            event_log = EventLog(local / "artifacts" / ident / "events.jsonl") \
                if private_data_dir else None
            proc: subprocess.Popen[bytes] | None = None
            reader: _BoundedReader | None = None
            watchdog = Watchdog(None, lambda: None)  # the real one once ssh has started

            def cut(_reason: str) -> None:
                # past a bound on what the worker sends: its stream is cut here and now
                if proc is not None and proc.poll() is None:
                    _kill(proc)

            collector = EventCollector(shard, on_host_event, sink=event_log,
                                       limits=shard_limits(len(shard)), on_overflow=cut)
            worker_status: list[str] = []
            stderr_tail = b""
            rc: int | None = None
            try:
                inv_rel = _copy_inventory(inventory, job)
                if looks_like_fqcn(playbook):
                    pb = playbook
                else:
                    private_dir(job / "project")
                    shutil.copy2(playbook, job / "project" / Path(playbook).name)
                    pb = str(job / "project" / Path(playbook).name)
                private_dir(job / "env")
                if extravars:
                    write_private(job / "env" / "extravars", json.dumps(dict(extravars)))
                (job / "env" / "settings").write_text(
                    "pexpect_timeout: 0.5\nsuppress_output_file: true\n", encoding="utf-8")
                env = {k: v for k, v in envvars.items() if k not in _DROPPED_ENV
                       and not k.startswith("ANSIBLE_SSH_CONTROL_PATH")}
                env.update({"ANSIBLE_RETRY_FILES_ENABLED": "False",
                            "ANSIBLE_HOST_KEY_CHECKING": "True", guard.TOKEN_ENV: token})
                env.pop("ANSIBLE_COLLECTIONS_PATH", None)  # the execution node's own collection
                kwargs: dict[str, Any] = {
                    "private_data_dir": str(job), "playbook": pb,
                    # absolute here: the transmitter makes them relative to the job (a relative
                    # path that does not exist here would be taken as inventory text)
                    "inventory": str(job / inv_rel),
                    "limit": ",".join(shard), "forks": max(1, int(self.forks_per_node or forks)),
                    "envvars": env, "ident": ident, "quiet": True, "suppress_env_files": True,
                }
                if timeout:
                    kwargs["timeout"] = timeout
                proc = subprocess.Popen(self.argv(node, worker_command(node, token, timeout)),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
                assert proc.stdin is not None and proc.stdout is not None  # noqa: S101
                with self._procs_lock:
                    self._procs.add(proc)
                ssh_proc = proc  # the coordinator's own deadline: ssh killed then (issue 45)
                watchdog = Watchdog(record.deadline_at, lambda: _kill(ssh_proc))
                err_chunks: list[bytes] = []

                def drain_stderr() -> None:
                    assert proc is not None and proc.stderr is not None  # noqa: S101
                    total = 0
                    for chunk in iter(lambda: proc.stderr.read(4096), b""):  # type: ignore[union-attr]
                        total += len(chunk)
                        err_chunks.append(chunk)
                        while total > MAX_STDERR and len(err_chunks) > 1:
                            total -= len(err_chunks.pop(0))

                t_err = threading.Thread(target=drain_stderr, daemon=True)
                t_err.start()

                def transmit() -> None:
                    assert proc is not None and proc.stdin is not None  # noqa: S101
                    try:
                        ansible_runner.run(streamer="transmit", _output=proc.stdin,
                                           cancel_callback=_requested, **kwargs)
                    except (OSError, ValueError):
                        pass  # ssh gone: the process side sees the stream end
                    finally:
                        with contextlib.suppress(OSError):
                            proc.stdin.close()

                t_tx = threading.Thread(target=transmit, daemon=True)
                t_tx.start()
                self.mark(record, "running")

                def on_status(data: Mapping[str, Any], runner_config: Any = None) -> None:
                    worker_status.append(str(data.get("status", ""))[:32])

                reader = _BoundedReader(proc.stdout)
                ansible_runner.run(
                    streamer="process", _input=reader,
                    private_data_dir=str(local), ident=ident, quiet=True,
                    event_handler=collector.handle, status_handler=on_status,
                    settings={"suppress_output_file": True},
                    # ours, always: without a cancel callback ansible-runner installs SIGINT and
                    # SIGTERM handlers of its own on the main thread and never puts ours back
                    cancel_callback=_requested,
                )
                t_tx.join(30)
                try:
                    rc = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    _kill(proc)
                    rc = proc.wait()
                t_err.join(5)
                stderr_tail = b"".join(err_chunks)[-2000:]
            finally:
                watchdog.cancel()
                with self._procs_lock:
                    self._procs.discard(proc)  # type: ignore[arg-type]
                if proc is not None and proc.poll() is None:
                    _kill(proc)
                    proc.wait()
                if proc is not None:
                    for stream in (proc.stdin, proc.stdout, proc.stderr):
                        with contextlib.suppress(OSError):
                            if stream is not None:
                                stream.close()
                if event_log is not None:
                    event_log.close()
                shutil.rmtree(job, ignore_errors=True)
                if not private_data_dir:
                    shutil.rmtree(local, ignore_errors=True)
            outcomes = {h: o for h, o in collector.outcomes().items() if h in set(shard)}
            worker_ran = any(s in ("starting", "running", "successful", "failed", "timeout",
                                   "canceled") for s in worker_status)
            # the worker's own last word (the stream ended as the protocol says); a cut stream
            # leaves the Processor's "error" last
            completed = bool(worker_status) and worker_status[-1] in (
                "successful", "failed", "timeout", "canceled")
            error = None
            why = _shown(stderr_tail)
            if reader is not None and reader.refused:
                why = f"its stream was refused: {reader.refused}" + (f"; {why}" if why else "")
            ended = collector.overflow or (watchdog.reason(node.name) if watchdog.passed
                                           and not collector.saw_stats else None)
            if ended is not None:  # cut here: too much sent, or still sending at the deadline
                msg = (f"execution node {node.name} sent {ended}; its stream was cut and the "
                       f"shard is lost") if collector.overflow is not None else ended
                outcomes = {h: HostOutcome(h, HostStatus.LOST, message=msg) for h in shard}
                state = "lost"
            elif not collector.saw_stats and not worker_ran:
                # the execution node never started the job: not the hosts' failure
                msg = (f"execution node {node.name} did not run the job (ssh rc={rc}"
                       + (f": {why}" if why else "") + ")")
                outcomes = {h: HostOutcome(h, HostStatus.LOST, message=msg) for h in shard}
                state = "unreachable"
            elif (completed and not collector.saw_stats and not collector.started
                  and not collector.seen_any):
                # the worker finished and says the playbook never began (syntax error, missing
                # role): every host failed, as with the local executor
                from provisioner.rollout.start_error import did_not_start, stopped_before_start

                final = str(worker_status[-1])
                error = did_not_start(collector.error_lines or collector.stdout_tail, final, rc,
                                      f" on {node.name}")
                kind = (HostStatus.FAILED if stopped_before_start(final)
                        else HostStatus.NOT_STARTED)
                outcomes = {h: HostOutcome(h, kind, message=error) for h in shard}
                state = "failed"
            elif not collector.saw_stats:
                suffix = f" (execution node {node.name}, ssh rc={rc}" + (
                    f": {why}" if why else "") + ")"
                outcomes = {h: HostOutcome(o.host, o.status, ok=o.ok, changed=o.changed,
                                           skipped=o.skipped, failed_task=o.failed_task,
                                           message=(o.message or "")[:1400] + suffix)
                            for h, o in outcomes.items()}
                state = "lost"
            else:
                state = "done"
            for h in shard:
                outcomes.setdefault(h, HostOutcome(h, HostStatus.NOT_RUN,
                                                   message="the play did not reach this host"))
            if private_data_dir:
                from provisioner.rollout.runner import _scrub_artifacts, _write_outcomes

                art = local / "artifacts" / ident
                if art.is_dir():
                    _write_outcomes(art / "hosts.json", str(playbook),
                                    worker_status[-1] if worker_status else "error", rc,
                                    collector.saw_stats, error, outcomes)
                _scrub_artifacts(local)  # 0700/0600, as the local executor leaves them
            counts: dict[str, int] = {}
            for o in outcomes.values():
                counts[o.status.value] = counts.get(o.status.value, 0) + 1
            if ended is not None:
                self.mark(record, state, ssh_rc=rc, outcomes=counts, reason=ended)
            else:
                self.mark(record, state, ssh_rc=rc, outcomes=counts)
            final = worker_status[-1] if worker_status else "error"
            return PlaybookResult(str(playbook), rc, final if collector.saw_stats else "error",
                                  outcomes, error=error)
        except Exception as exc:
            # the dispatch is never left "running" by an error here (its hosts: lost)
            with contextlib.suppress(Exception):
                self.mark(record, "error", error=type(exc).__name__)
            record.state = "error"
            raise
