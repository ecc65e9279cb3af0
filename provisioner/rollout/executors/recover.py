"""A lost shard inside the ssh executor: fence, then redispatch once.

A shard is lost when its stream ended without the playbook's closing stats (the execution node
died, its ssh was cut, the worker was killed) or when it never ran there: its hosts have no
final result (``lost``). At once, in the shard's own thread (the other shards run on), and
before anything is sent again, the execution node is fenced by the
dispatch's token (:func:`provisioner.rollout.executors.fence.fence`); when it cannot be reached,
or something survives the fence, the coordinator waits until the dispatch's deadline, by which
the worker side has stopped the shard by itself. Then the lost hosts go once, as one new
dispatch, to the surviving execution node with the fewest hosts in this wave.

A second loss in the same wave (two shards lost, or the redispatch lost too) stops: every lost
node is still fenced, no host is sent again, the hosts stay ``lost`` (a resume redoes them) and
the result's error says "execution node lost". The engine is not involved: it sees per-host
outcomes as from one playbook run.

The dispatch rows show it: the lost shard's row goes ``lost`` (or ``unreachable``, ``error``)
-> ``fenced`` (or ``awaiting-deadline`` -> ``deadline-passed``) -> ``redispatched`` (detail:
``redispatched_to``) or ``abandoned``; the new dispatch is a row of its own (``detail.
redispatch_of``). ``detail.history`` lists every state a row went through.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from provisioner.rollout.runner import HostOutcome, HostStatus, PlaybookResult

if TYPE_CHECKING:
    from provisioner.rollout.executors.nodes import ExecNode
    from provisioner.rollout.executors.stream import Dispatch
    from provisioner.rollout.executors.transport import SshOptions


class SshExecutor(Protocol):
    """What recovery needs of the ``ssh`` executor (:class:`.ssh.SshExecutor`): its execution
    nodes, their ssh command line, its ledger rows and a dispatch. A protocol, so that
    recovery and the executor that calls it do not import each other."""

    @property
    def nodes(self) -> Mapping[str, ExecNode]: ...

    @property
    def opts(self) -> SshOptions: ...

    def argv(self, node: ExecNode, remote: str) -> list[str]: ...

    def mark(self, record: Dispatch, state: str, **detail: Any) -> None: ...

    def dispatch_one(self, index: int, node_name: str, shard: list[str],
                     call: Mapping[str, Any], detail: Mapping[str, Any] | None = None,
                     ) -> tuple[PlaybookResult, Dispatch | None]: ...

LOST_STATES = frozenset({"lost", "unreachable", "error"})


def fence_or_wait(ex: SshExecutor, rec: Dispatch,
                  stopped: Callable[[], bool] = lambda: False) -> str | None:
    """Make sure nothing of ``rec`` runs any more: None when sure, else why not. The wait for
    the deadline ends early when ``stopped()`` (a second loss: nothing will be sent again)."""
    from provisioner import interrupts
    from provisioner.rollout.executors.fence import fence

    node = ex.nodes[rec.exec_node]
    res = fence(node, rec.token, ex.argv, connect_timeout=ex.opts.connect_timeout)
    if res.state == "fenced":
        ex.mark(rec, "fenced", **res.as_detail())
        return None
    if rec.deadline_at is None:
        ex.mark(rec, "abandoned", **res.as_detail())
        return f"fence {res.state} and the dispatch has no deadline to wait for"
    ex.mark(rec, "awaiting-deadline", **res.as_detail())
    while time.time() < rec.deadline_at:
        if interrupts.requested():
            return "interrupted while waiting for the deadline"
        if stopped():
            return "another execution node was lost meanwhile"
        time.sleep(0.2)
    if res.state == "still-running":  # reachable: look again, past the deadline
        again = fence(node, rec.token, ex.argv, connect_timeout=ex.opts.connect_timeout)
        if again.state == "still-running":
            ex.mark(rec, "abandoned", **again.as_detail())
            return f"{again.left} process(es) of the dispatch survive SIGKILL"
        if again.state == "fenced":
            ex.mark(rec, "fenced", **again.as_detail())
            return None
    ex.mark(rec, "deadline-passed")
    return None


def _stop(ex: SshExecutor, rec: Dispatch | None) -> None:
    """Fence a lost dispatch without waiting (its hosts are not sent again), then mark it
    ``abandoned``."""
    from provisioner.rollout.executors.fence import fence

    if rec is None:
        return
    res = fence(ex.nodes[rec.exec_node], rec.token, ex.argv,
                connect_timeout=ex.opts.connect_timeout)
    ex.mark(rec, "fenced" if res.state == "fenced" else "fence-" + res.state, **res.as_detail())
    ex.mark(rec, "abandoned")


def _say(res: PlaybookResult, why: str) -> PlaybookResult:
    """Put the stop's reason first in each lost host's message (the rollout shows it)."""
    hosts = {h: HostOutcome(h, o.status, ok=o.ok, changed=o.changed, skipped=o.skipped,
                            failed_task=o.failed_task,
                            message=f"{why}; {o.message or ''}"[:2000])
             if o.status is HostStatus.LOST else o for h, o in res.hosts.items()}
    return dataclasses.replace(res, hosts=hosts)


class Wave:
    """The losses of one wave, shared by its shards' threads (``after`` of run_shards)."""

    def __init__(self, ex: SshExecutor, shards: Mapping[str, list[str]],
                 call: Mapping[str, Any]) -> None:
        self.ex = ex
        self.shards = shards
        self.call = call
        self.lock = threading.Lock()
        self.lost: list[str] = []  # execution nodes lost in this wave, in order
        self.errors: list[str] = []

    def _lose(self, name: str) -> bool:
        """Count a loss; True for the wave's first."""
        with self.lock:
            self.lost.append(name)
            return len(self.lost) == 1

    def _stopped(self, res: PlaybookResult, why: str) -> PlaybookResult:
        with self.lock:
            self.errors.append(why)
        return _say(res, why)

    def after(self, name: str, shard: list[str], res: PlaybookResult,
              rec: Dispatch | None) -> PlaybookResult:
        from provisioner import interrupts

        if rec is None or rec.state not in LOST_STATES or interrupts.requested():
            return res
        ex, wave = self.ex, self.call["wave"]
        if not self._lose(name):
            _stop(ex, rec)
            return self._stopped(res, f"execution node lost: {', '.join(self.lost)} in wave "
                                      f"{wave}; the hosts of {name} stay lost (a resume "
                                      f"redoes them)")
        why = fence_or_wait(ex, rec, lambda: len(self.lost) > 1)
        if why is not None:
            if rec.state != "abandoned":
                ex.mark(rec, "abandoned")
            return self._stopped(res, f"execution node lost: {', '.join(self.lost)} in wave "
                                      f"{wave} ({why}); the hosts of {name} stay lost (a "
                                      f"resume redoes them)")
        with self.lock:
            second = len(self.lost) > 1
            survivors = [n for n in ex.nodes if n not in self.lost]
        if second or not survivors:
            ex.mark(rec, "abandoned")
            return self._stopped(res, f"execution node lost: {', '.join(self.lost)} in wave "
                                      f"{wave}; " + ("" if survivors else "no other execution "
                                      "node; ") + f"the hosts of {name} stay lost (a resume "
                                      f"redoes them)")
        hosts = [h for h in shard if res.hosts.get(h) is None
                 or res.hosts[h].status is HostStatus.LOST]
        if not hosts:
            return res
        target = min(survivors, key=lambda n: (len(self.shards.get(n, ())), n))
        ex.mark(rec, "redispatched", redispatched_to={"exec_node": target})
        again, new = ex.dispatch_one(rec.shard, target, hosts, self.call,
                                     {"redispatch_of": rec.id})
        ex.mark(rec, "redispatched", redispatched_to={"exec_node": target,
                                                      "id": new.id if new else None})
        merged = dict(res.hosts)
        merged.update({h: o for h, o in again.hosts.items() if h in set(hosts)})
        for h in hosts:
            merged.setdefault(h, HostOutcome(h, HostStatus.LOST,
                                             message=f"execution node {target}: no result"))
        out = dataclasses.replace(again, hosts=merged)
        if (new is None or new.state in LOST_STATES) and not interrupts.requested():
            self._lose(target)
            _stop(ex, new)
            return self._stopped(out, f"execution node lost: {name}, then {target} (its "
                                      f"redispatch) in wave {wave}; those hosts stay lost (a "
                                      f"resume redoes them)")
        return out
