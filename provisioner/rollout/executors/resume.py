"""Before a resumed run sends anything: fence what its earlier coordinator dispatched.

A coordinator killed mid-wave (``kill -9``, a lost machine) leaves its dispatches' rows in the
ledger in a state other than a clean end, and their workers may still be running playbooks on
the execution nodes. The same command run again (or a second coordinator that was waiting with
``--wait-lock``) resumes the run; before the engine sends any host anywhere, every such
dispatch is fenced by its token (:func:`provisioner.rollout.executors.fence.fence`), or, when
its execution node cannot be reached or something survives, its deadline is waited for (by
then the worker side has stopped the shard by itself). Only then is anything redispatched, so
two playbooks never act on one node at once.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from provisioner.rollout.executors.recover import fence_or_wait
from provisioner.rollout.executors.stream import Dispatch

if TYPE_CHECKING:
    from provisioner.rollout.executors.recover import SshExecutor

# states a dispatch ends in when nothing of it can be running any more ("abandoned" is not
# one: it may have been given up with processes left)
CLEAN = frozenset({"done", "failed", "fenced", "redispatched", "deadline-passed"})


def unfinished(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows whose workers may still run: neither a clean end nor already fenced."""
    return [r for r in rows if str(r.get("state")) not in CLEAN]


def _deadline_at(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def fence_recorded(ex: SshExecutor, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Fence every unfinished dispatch in ``rows`` (the ledger's, of the run being resumed);
    their rows go ``fenced`` or ``awaiting-deadline`` -> ``deadline-passed`` (or
    ``abandoned`` with the reason). Returns what could not be made sure of, one line per
    dispatch; empty when nothing of the earlier coordinator can still be running."""
    problems: list[str] = []
    for row in unfinished(rows):
        name = str(row.get("exec_node"))
        if name not in ex.nodes:
            problems.append(f"dispatch {row.get('id')} went to execution node {name!r}, which "
                            f"the exec inventory does not list")
            continue
        detail = dict(row.get("detail") or {})
        detail.setdefault("history", [str(row.get("state"))])
        rec = Dispatch(str(row.get("run_id")), int(row.get("wave") or 0),
                       int(row.get("shard") or 0), name, list(row.get("hosts") or []),
                       str(row.get("token")), row.get("deadline"), state=str(row.get("state")),
                       id=int(row["id"]) if row.get("id") is not None else None,
                       deadline_at=_deadline_at(row.get("deadline")), detail=detail)
        ex.mark(rec, rec.state, resumed_by_coordinator=True)
        try:
            why = fence_or_wait(ex, rec)
        except ValueError as exc:  # a token in the ledger that is not ours
            why = str(exc)
        if why:
            problems.append(f"dispatch {rec.id} on {name}: {why}")
    return problems
