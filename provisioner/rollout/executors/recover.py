"""A lost shard inside the ssh executor: fence, then redispatch once.

A shard is lost when its stream ended without the playbook's closing stats (the execution node
died, its ssh was cut, the worker was killed) or when it never ran there: its hosts have no
final result (``lost``). Before anything is sent again, the execution node is fenced by the
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

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from provisioner.rollout.runner import HostOutcome, HostStatus, PlaybookResult

if TYPE_CHECKING:
    from provisioner.rollout.executors.ssh import SshExecutor
    from provisioner.rollout.executors.stream import Dispatch

LOST_STATES = frozenset({"lost", "unreachable", "error"})


def _fence_or_wait(ex: SshExecutor, rec: Dispatch) -> str | None:
    """Make sure nothing of ``rec`` runs any more: None when sure, else why not."""
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


def _stop(ex: SshExecutor, recs: list[Dispatch], why: str) -> str:
    """Fence each lost dispatch without waiting (its hosts are not sent again), then mark it
    ``abandoned``; returns ``why``."""
    from provisioner.rollout.executors.fence import fence

    for rec in recs:
        if rec.state in LOST_STATES:
            res = fence(ex.nodes[rec.exec_node], rec.token, ex.argv,
                        connect_timeout=ex.opts.connect_timeout)
            ex.mark(rec, "fenced" if res.state == "fenced" else "fence-" + res.state,
                    **res.as_detail())
            ex.mark(rec, "abandoned")
    return why


def _say(results: dict[str, PlaybookResult], names: list[str], why: str) -> None:
    """Put the stop's reason first in each lost host's message (the rollout shows it)."""
    import dataclasses

    for name in names:
        res = results.get(name)
        if res is None:
            continue
        hosts = {h: HostOutcome(h, o.status, ok=o.ok, changed=o.changed, skipped=o.skipped,
                                failed_task=o.failed_task,
                                message=f"{why}; {o.message or ''}"[:2000])
                 if o.status is HostStatus.LOST else o for h, o in res.hosts.items()}
        results[name] = dataclasses.replace(res, hosts=hosts)


def recover(ex: SshExecutor, shards: Mapping[str, list[str]], results: dict[str, PlaybookResult],
            records: Mapping[str, Dispatch], call: Mapping[str, Any]) -> list[str]:
    """Fence and redispatch a lost shard in place (``results`` updated); returns errors."""
    from provisioner import interrupts

    lost = [n for n in shards if n in records and records[n].state in LOST_STATES]
    if not lost or interrupts.requested():
        return []
    wave = call["wave"]
    if len(lost) > 1:
        both = _stop(ex, [records[n] for n in lost],
                     f"execution node lost: {', '.join(lost)} in wave {wave}; their hosts "
                     f"stay lost (a resume redoes them)")
        _say(results, lost, both)
        return [both]
    name = lost[0]
    rec = records[name]
    why = _fence_or_wait(ex, rec)
    if why is not None:
        if rec.state != "abandoned":
            ex.mark(rec, "abandoned")
        msg = f"execution node lost: {name} in wave {wave} ({why}); its hosts stay lost"
        _say(results, [name], msg)
        return [msg]
    survivors = [n for n in ex.nodes if n != name]
    if not survivors:
        ex.mark(rec, "abandoned")
        msg = (f"execution node lost: {name} in wave {wave}, no other execution node to send "
               f"its hosts to; they stay lost (a resume redoes them)")
        _say(results, [name], msg)
        return [msg]
    first = results.get(name)
    hosts = [h for h in shards[name] if first is None or first.hosts.get(h) is None
             or first.hosts[h].status is HostStatus.LOST]
    if not hosts:
        return []
    target = min(survivors, key=lambda n: (len(shards.get(n, ())), n))
    again, again_recs = ex.run_shards([("again", rec.shard, target, hosts)], call)
    new = again_recs.get("again")
    ex.mark(rec, "redispatched", redispatched_to={"exec_node": target,
                                                  "id": new.id if new else None})
    if new is not None:
        new.detail["redispatch_of"] = rec.id
    res = again.get("again")
    merged = dict(first.hosts) if first is not None else {}
    if res is not None:
        merged.update({h: o for h, o in res.hosts.items() if h in set(hosts)})
    for h in hosts:
        merged.setdefault(h, HostOutcome(h, HostStatus.LOST,
                                         message=f"execution node {target}: no result"))
    errors: list[str] = []
    base = res if res is not None else first
    results[name] = PlaybookResult(
        str(call["playbook"]), base.rc if base else None,
        base.status if base else "error", merged,
        error=base.error if base else None)
    if interrupts.requested():
        pass
    elif new is None or new.state in LOST_STATES:
        errors.append(_stop(ex, [new] if new is not None else [],
                            f"execution node lost: {name}, then {target} (its redispatch) in "
                            f"wave {wave}; those hosts stay lost (a resume redoes them)"))
        _say(results, [name], errors[-1])
    elif new.id is not None:
        ex.mark(new, new.state)  # write redispatch_of on its row
    return errors
