"""The real Provisioner and Verifier behind the engine's interfaces.

:class:`AnsibleProvisioner` runs the collection's ``playbooks/site.yml`` (and
``playbooks/reboot.yml`` when the rollout decides a reboot) through ansible-runner, one run per
wave, and appends every per-host event to an events log (JSON lines) so that what each run
touched can be shown afterwards. :class:`SshVerifier` verifies each host over SSH, in
parallel, bounded, through the per-node use case (:func:`provisioner.verify.usecase.verify_one`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.errors import ConnectError
from provisioner.inventory import Node
from provisioner.rollout.executors import Executor, LocalExecutor
from provisioner.rollout.runner import HostOutcome


class _Relay:
    """A held run's host-event callback: passes events on to the wave's, once it is let go
    (a held run sends none before: no host is touched until then)."""

    def __init__(self) -> None:
        self.target: Callable[[str, str, str], None] | None = None

    def __call__(self, host: str, event: str, task: str) -> None:
        target = self.target
        if target is not None:
            target(host, event, task)


def cores() -> int:
    """The cores this process may run on (its affinity: a cpuset or taskset narrows it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# provisioner rollout starts its first site playbook run before it has read its inventory,
# held at a gate until the plan gives it its hosts (AnsibleProvisioner.start_ahead); False
# gives the order before it (the lock still first), for a measurement side by side
START_AHEAD = True

# With this many cores or more, the next wave's held run starts together with the current
# wave's run (two ansible-playbook starts side by side, each on a core of its own); with
# fewer, once the current run is at work (its first host event): on the 2-core machine, the
# two starts together delayed the current one, which is on the critical path.
START_TOGETHER_CORES = 4


class AnsibleProvisioner:
    def __init__(
        self,
        *,
        inventory: str | os.PathLike[str],
        playbook: str | os.PathLike[str],
        reboot_playbook: str | os.PathLike[str],
        forks: int,
        envvars: Mapping[str, str] | None = None,
        extravars: Mapping[str, Any] | None = None,
        private_data_dir: str | os.PathLike[str] | None = None,
        events_log: str | os.PathLike[str] | None = None,
        run_tag: str = "",
        timeout: int | None = None,
        children_lock: str | os.PathLike[str] | None = None,
        executor: Executor | None = None,
        start_together: bool | None = None,
    ) -> None:
        self.inventory = Path(inventory)
        # the next wave's held run starts with the current wave's run (True), or at its first
        # host event (False); None: by the cores (START_TOGETHER_CORES)
        self.start_together = (cores() >= START_TOGETHER_CORES if start_together is None
                               else start_together)
        # an FQCN (gdsfleet.gds.site) or a playbook file, given to ansible-playbook as is
        self.playbook = str(playbook)
        self.reboot_playbook = str(reboot_playbook)
        self.envvars = dict(envvars or {})
        self.forks = forks
        self.extravars = dict(extravars or {})
        self.private_data_dir = Path(private_data_dir) if private_data_dir else None
        self.events_log = Path(events_log) if events_log else None
        self.run_tag = run_tag
        self.timeout = timeout
        # held by each playbook's guard while it lives (see provisioner.rollout.guard)
        self.children_lock = children_lock
        self._lock = threading.Lock()
        # where the playbook runs (executors.LocalExecutor: here; SshExecutor: shards on
        # execution nodes)
        self.executor: Executor = executor if executor is not None else LocalExecutor()
        # the site playbook runs started ahead of their wave and held: wave -> (Held, relay)
        self._held: dict[int, tuple[Any, _Relay]] = {}
        # a held run asked for, started once the current wave's run is at work: (wave, hosts)
        self._pending: tuple[int, list[str]] | None = None
        # the first site run, started before its hosts were known (start_ahead)
        self._ahead: tuple[Any, _Relay] | None = None
        self.ran = False  # a wave's playbook run went on (not only one dropped at its gate)

    def _log(self, fd: int | None, wave: int, kind: str, host: str, event: str,
             task: str) -> None:
        if fd is None:
            return
        line = json.dumps({
            "run": self.run_tag, "pid": os.getpid(), "wave": wave, "playbook": kind,
            "host": host, "event": event, "task": task,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        with self._lock:
            os.write(fd, (line + "\n").encode("utf-8"))

    def _run(
        self, playbook: str, kind: str, hosts: Sequence[str], wave: int,
        on_host_event: Callable[[str, str, str], None] | None,
    ) -> Mapping[str, HostOutcome]:
        fd = None
        if self.events_log is not None:
            from provisioner.fsutil import open_private, private_dir

            private_dir(self.events_log.parent)
            # one descriptor for the whole playbook run (O_APPEND, created 0600), not an open
            # and a close per event line; in the runner folder a link is never followed
            named = self.events_log.parent != self.private_data_dir  # --events-log FILE
            fd = open_private(self.events_log, follow=named)
        self.ran = True
        try:
            for h in hosts:
                self._log(fd, wave, kind, h, "start", "")

            if kind == "site" and self._pending is not None and self._pending[0] <= wave:
                self._pending = None  # asked for this wave or an earlier one: too late
            pending = kind == "site" and self._pending is not None

            def on_event(host: str, event: str, task: str) -> None:
                nonlocal pending
                if pending:  # this run is loaded and at work: the next one may load now
                    pending = False
                    self._launch_pending()
                self._log(fd, wave, kind, host, event, task)
                if on_host_event is not None:
                    on_host_event(host, event, task)

            held = self._take_held(kind, hosts, wave)
            if pending and (held is not None or self.start_together):
                # the held run has loaded already, or the cores can start both at once
                pending = False
                self._launch_pending()
            res = None
            if held is not None:
                held[1].target = on_event
                released = getattr(self.executor, "released", None)
                res = (released(held[0], hosts) if released is not None
                       else held[0].release(hosts))
                if not held[0].stood_in(res):
                    res = None  # started ahead, it never reached its gate: start the wave's
            if res is None:
                res = self.executor.run(
                    playbook,
                    self.inventory,
                    list(hosts),
                    forks=self.forks,
                    extravars=self.extravars,
                    envvars=self.envvars,
                    private_data_dir=self.private_data_dir,
                    on_host_event=on_event,
                    timeout=self.timeout,
                    children_lock=self.children_lock,
                    run_tag=self.run_tag,
                    wave=wave,
                    kind=kind,
                )
            for h, out in res.hosts.items():
                self._log(fd, wave, kind, h, f"outcome:{out.status.value}",
                          out.failed_task or "")
        finally:
            if fd is not None:
                os.close(fd)
        return res.hosts

    def prestart(self, hosts: Sequence[str], *, wave: int) -> bool:
        """Start ``wave``'s site playbook run for ``hosts`` ahead, held before its first play
        (:mod:`provisioner.rollout.prestart`), so that :meth:`provision` of the same hosts in
        that wave only lets it go on. It starts once the current wave's run is at work (its
        first host event, or its release if it was held itself), so that its start does not
        compete with the current one's (a wave that runs no site playbook leaves it to the
        next one that does). False (nothing will start) when the executor cannot hold a run
        (the ssh executor) or there are no hosts."""
        if getattr(self.executor, "prestart", None) is None or not hosts:
            self._pending = None
            return False
        self._pending = (wave, list(hosts))
        return True

    def _launch_pending(self) -> None:
        """Start the held run :meth:`prestart` asked for; one held earlier for the same wave
        is dropped."""
        pending, self._pending = self._pending, None
        start = getattr(self.executor, "prestart", None)
        if pending is None or start is None:
            return
        wave, hosts = pending
        old = self._held.pop(wave, None)
        if old is not None:
            old[0].drop()
        relay = _Relay()
        held = start(self.playbook, self.inventory, list(hosts), forks=self.forks,
                     extravars=self.extravars, envvars=self.envvars,
                     private_data_dir=self.private_data_dir, on_host_event=relay,
                     timeout=self.timeout, children_lock=self.children_lock,
                     run_tag=self.run_tag, wave=wave, kind="site")
        self._held[wave] = (held, relay)

    def start_ahead(self) -> bool:
        """Start the first site playbook run now, before the rollout has read its inventory
        or planned its waves, held at a gate until :meth:`provision` gives it its hosts
        (:class:`~provisioner.rollout.prestart.Gate`): ansible-playbook's own start (Python,
        ansible-core, the inventory) overlaps the rollout's. The first wave that provisions
        hosts lets it go on; it is dropped, having touched no host, when another run is
        started first or the rollout stops. False (nothing started) when the executor cannot
        hold a run (the ssh executor)."""
        start = getattr(self.executor, "start_ahead", None)
        if start is None:
            return False
        relay = _Relay()
        held = start(self.playbook, self.inventory, forks=self.forks, extravars=self.extravars,
                     envvars=self.envvars, private_data_dir=self.private_data_dir,
                     on_host_event=relay, timeout=self.timeout,
                     children_lock=self.children_lock, run_tag=self.run_tag)
        self._ahead = (held, relay)
        return True

    def drop_ahead(self) -> None:
        """End the run :meth:`start_ahead` started, if no wave took it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[0].drop()

    def drop_prestarted(self) -> None:
        """End the held runs that were not used (the rollout stopped)."""
        self._pending = None
        self.drop_ahead()
        held, self._held = self._held, {}
        for run, _relay in held.values():
            run.drop()

    def settle(self) -> None:
        """Wait for the tails of the runs that returned at their stats
        (``LocalExecutor.settle``): when the rollout ends, none of its ansible-playbook runs
        is left."""
        settle = getattr(self.executor, "settle", None)
        if settle is not None:
            settle()

    def _take_held(self, kind: str, hosts: Sequence[str], wave: int) -> tuple[Any, _Relay] | None:
        """The held run of this wave's site playbook if it is for exactly ``hosts``; else it
        is dropped, and so is any held for an earlier wave (the wave then starts its run as
        it always did)."""
        if kind != "site":
            return None
        for w in [w for w in self._held if w < wave]:
            self._held.pop(w)[0].drop()
        entry = self._held.pop(wave, None)
        ahead, self._ahead = self._ahead, None  # the first site run's only
        if entry is None and ahead is not None and ahead[0].matches(hosts):
            return ahead
        if ahead is not None:
            ahead[0].drop()
        if entry is None:
            return None
        if entry[0].matches(hosts):
            return entry
        entry[0].drop()
        return None

    def provision(
        self, hosts: Sequence[str], *, wave: int, on_host_event: Callable[[str, str, str], None]
    ) -> Mapping[str, HostOutcome]:
        return self._run(self.playbook, "site", hosts, wave, on_host_event)

    def reboot(self, hosts: Sequence[str], *, wave: int) -> Mapping[str, HostOutcome]:
        return self._run(self.reboot_playbook, "reboot", hosts, wave, None)


class SshVerifier:
    """The per-node verify use case over SSH for each host, ``parallel`` at a time; reports
    as dicts."""

    def __init__(
        self,
        nodes: Mapping[str, Node],
        *,
        policy: Any,
        io: Any,
        cheap_io: Any,
        parallel: int,
        make_runner: Callable[[Node], Any],
    ) -> None:
        self.nodes = dict(nodes)
        self.policy = policy
        self.io = io
        self.cheap_io = cheap_io
        self.parallel = parallel
        self.make_runner = make_runner

    def _one(self, node: Node, io: Any) -> dict[str, Any]:
        from provisioner.verify.usecase import NodeRequest, verify_one

        try:
            runner = self.make_runner(node)
        except ConnectError as exc:
            return {"name": node.name, "reachable": False, "compliant": False,
                    "route": "unknown", "checks": [], "io_test": {"path_taken": "skipped"},
                    "facts": {}, "error": str(exc)}
        from provisioner import interrupts

        # the inventory's gds_verify_io_size sizes the I/O test; its gds_nfd_features: the
        # rollout's verification also labels the node (default expiry)
        req = NodeRequest.for_node(node, node.name, io)
        close = getattr(runner, "close", None)
        if close is None:
            return verify_one(runner, req.name, self.policy, req.io, **req.options())
        with interrupts.closing(close):  # SIGINT/SIGTERM: its SSH connection closes at once
            return verify_one(runner, req.name, self.policy, req.io, **req.options())

    def verify(
        self,
        hosts: Sequence[str],
        *,
        cheap: bool,
        on_report: Callable[[dict[str, Any]], None],
    ) -> dict[str, dict[str, Any]]:
        from provisioner.fleet import HostResult, run_parallel

        io = self.cheap_io if cheap else self.io
        out: dict[str, dict[str, Any]] = {}

        def done(res: HostResult[dict[str, Any]]) -> None:
            doc = res.value if res.value is not None else {
                "name": res.name, "reachable": True, "compliant": False, "route": "unknown",
                "checks": [], "io_test": {"path_taken": "skipped"}, "facts": {},
                "error": f"internal error: {res.error!r}",
            }
            # the inventory's gdsfleet_simulated, on every record (unreachable ones too)
            node = self.nodes.get(res.name)
            doc["simulated"] = bool(getattr(node, "simulated", False))
            out[res.name] = doc
            on_report(doc)

        run_parallel(
            [self.nodes[h] for h in hosts],
            lambda n: self._one(n, io),
            parallel=self.parallel,
            name=lambda n: n.name,
            on_result=done,
        )
        return out
