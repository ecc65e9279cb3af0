"""Where a wave's playbook runs: the executors behind :class:`AnsibleProvisioner`.

``local`` (the default): one ``ansible-playbook`` on this machine (runner.run_playbook).
``ssh``: the wave split into shards, one per execution node, each shipped with
``ansible-runner transmit``, run there by ``ansible-runner worker`` over OpenSSH and its event
stream read back with ``ansible-runner process`` into the same per-host outcome logic
(:mod:`provisioner.rollout.executors.ssh`). The engine, the ledger and verification stay on
this machine: an execution node never sees the ledger.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from provisioner.rollout.runner import PlaybookResult

if TYPE_CHECKING:
    from provisioner.rollout.prestart import Held, Hold


class Executor(Protocol):
    def run(
        self,
        playbook: str,
        inventory: str | os.PathLike[str],
        hosts: Sequence[str],
        *,
        forks: int,
        extravars: Mapping[str, Any],
        envvars: Mapping[str, str],
        private_data_dir: str | os.PathLike[str] | None,
        on_host_event: Callable[[str, str, str], None] | None,
        timeout: int | None,
        children_lock: str | os.PathLike[str] | None,
        run_tag: str,
        wave: int,
        kind: str,
    ) -> PlaybookResult: ...


class LocalExecutor:
    """One ansible-playbook here, under the guard, in a thread of its own
    (:class:`~provisioner.rollout.prestart.Held`): :meth:`run` returns at the run's closing
    stats, and the run's tail (ansible-playbook's exit, the guard's sweep, the artifacts'
    scrub) goes on until :meth:`settle`."""

    name = "local"

    def __init__(self) -> None:
        self._tails: list[Held[PlaybookResult]] = []

    def run(self, playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str], *,
            forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
            private_data_dir: str | os.PathLike[str] | None,
            on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
            children_lock: str | os.PathLike[str] | None, run_tag: str, wave: int,
            kind: str) -> PlaybookResult:
        run = self._start(playbook, inventory, hosts, forks=forks, extravars=extravars,
                          envvars=envvars, private_data_dir=private_data_dir,
                          on_host_event=on_host_event, timeout=timeout,
                          children_lock=children_lock, run_tag=run_tag,
                          name=f"{kind}-wave-{wave}", hold=False)
        return self.released(run)

    def released(self, run: Held[PlaybookResult], hosts: Sequence[str] = ()) -> PlaybookResult:
        """``run.release(hosts)``, its tail kept for :meth:`settle`."""
        self._tails = [t for t in self._tails if not t.done]
        self._tails.append(run)
        return run.release(hosts)

    def settle(self, timeout: float = 120.0) -> None:
        """Wait for the tails of the runs that returned at their stats (each at most
        ``timeout`` s; the guard ends a run past its own timeout)."""
        tails, self._tails = self._tails, []
        for run in tails:
            run.wait(timeout)

    def prestart(self, playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str],
                 *, forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
                 private_data_dir: str | os.PathLike[str] | None,
                 on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
                 children_lock: str | os.PathLike[str] | None, run_tag: str, wave: int,
                 kind: str) -> Held[PlaybookResult]:
        """The same run as :meth:`run`, started now and held before its first play
        (:mod:`provisioner.rollout.prestart`): pass it to :meth:`released` for its result."""
        return self._start(playbook, inventory, hosts, forks=forks, extravars=extravars,
                           envvars=envvars, private_data_dir=private_data_dir,
                           on_host_event=on_host_event, timeout=timeout,
                           children_lock=children_lock, run_tag=run_tag,
                           name=f"held-{kind}-wave-{wave}", hold=True)

    def start_ahead(self, playbook: str, inventory: str | os.PathLike[str], *, forks: int,
                    extravars: Mapping[str, Any], envvars: Mapping[str, str],
                    private_data_dir: str | os.PathLike[str] | None,
                    on_host_event: Callable[[str, str, str], None] | None,
                    timeout: int | None, children_lock: str | os.PathLike[str] | None,
                    run_tag: str) -> Held[PlaybookResult]:
        """:meth:`prestart` before the hosts are known (the first wave's run, while the
        rollout starts): ``released`` with the hosts gives its result
        (:class:`~provisioner.rollout.prestart.Gate`)."""
        return self._start(playbook, inventory, None, forks=forks, extravars=extravars,
                           envvars=envvars, private_data_dir=private_data_dir,
                           on_host_event=on_host_event, timeout=timeout,
                           children_lock=children_lock, run_tag=run_tag,
                           name="held-site-ahead", hold=True)

    @staticmethod
    def _start(playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str] | None, *,
               forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
               private_data_dir: str | os.PathLike[str] | None,
               on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
               children_lock: str | os.PathLike[str] | None, run_tag: str, name: str,
               hold: bool) -> Held[PlaybookResult]:
        from provisioner.rollout.prestart import Held
        from provisioner.rollout.runner import run_playbook

        def start(hold: Hold | None, on_final: Callable[[PlaybookResult], None]
                  ) -> PlaybookResult:
            return run_playbook(playbook, inventory, list(hosts or ()), forks=forks,
                                extravars=extravars, envvars=envvars,
                                private_data_dir=private_data_dir, on_host_event=on_host_event,
                                timeout=timeout, children_lock=children_lock, run_tag=run_tag,
                                hold=hold, on_final=on_final)

        gate_dir = None
        if hosts is None and private_data_dir is not None:
            from provisioner.fsutil import private_dir

            gate_dir = private_dir(private_data_dir)  # where the guard wrapper goes too
        return Held(hosts, start, name=name, hold=hold, gate_dir=gate_dir)
