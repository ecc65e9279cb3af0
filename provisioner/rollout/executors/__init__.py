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
    """Today's behaviour: one ansible-playbook here, under the guard."""

    name = "local"

    def run(self, playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str], *,
            forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
            private_data_dir: str | os.PathLike[str] | None,
            on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
            children_lock: str | os.PathLike[str] | None, run_tag: str, wave: int,
            kind: str) -> PlaybookResult:
        from provisioner.rollout.runner import run_playbook

        return run_playbook(playbook, inventory, list(hosts), forks=forks, extravars=extravars,
                            envvars=envvars, private_data_dir=private_data_dir,
                            on_host_event=on_host_event, timeout=timeout,
                            children_lock=children_lock, run_tag=run_tag)

    def prestart(self, playbook: str, inventory: str | os.PathLike[str], hosts: Sequence[str],
                 *, forks: int, extravars: Mapping[str, Any], envvars: Mapping[str, str],
                 private_data_dir: str | os.PathLike[str] | None,
                 on_host_event: Callable[[str, str, str], None] | None, timeout: int | None,
                 children_lock: str | os.PathLike[str] | None, run_tag: str, wave: int,
                 kind: str) -> Held:
        """The same run as :meth:`run`, started now and held before its first play
        (:mod:`provisioner.rollout.prestart`): ``release()`` gives its result."""
        from provisioner.rollout.prestart import Held
        from provisioner.rollout.runner import run_playbook

        def start(hold: Hold) -> PlaybookResult:
            return run_playbook(playbook, inventory, list(hosts), forks=forks,
                                extravars=extravars, envvars=envvars,
                                private_data_dir=private_data_dir, on_host_event=on_host_event,
                                timeout=timeout, children_lock=children_lock, run_tag=run_tag,
                                hold=hold)

        return Held(hosts, start, name=f"held-{kind}-wave-{wave}")
