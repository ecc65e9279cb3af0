"""What the rollout needs from the ledger beyond provisioner/store.py's public API.

Built on the Ledger's own engine and tables (no schema of its own): seeding every planned
node as ``pending`` in one transaction, so a 10,000-node plan costs one commit, not 10,000.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert

from provisioner.rollout.planner import Plan


def seed_pending(ledger: Any, run_id: str, plan: Plan) -> None:
    """Record every planned node as ``pending`` with its wave, in ONE transaction."""
    rows = [
        {"node": p.name, "wave": w.index, "detail": {"action": p.action.value,
                                                      "reason": p.reason}}
        for w in plan.waves
        for p in w.nodes
    ]
    if not rows:
        return
    engine = getattr(ledger, "engine", None)
    if engine is None:  # a ledger without an engine (test doubles): one write per node
        for r in rows:
            ledger.set_step(run_id, r["node"], "pending", wave=r["wave"], detail=r["detail"])
        return
    from provisioner import store

    now = store.utcnow()
    steps = [
        {
            "run_id": run_id,
            "node": r["node"],
            "wave": r["wave"],
            "step": "pending",
            "updated_at": now,
            "detail_json": store._dumps(r["detail"]),
        }
        for r in rows
    ]
    events = [
        {k: v for k, v in s.items() if k != "updated_at"} | {"at": now} for s in steps
    ]
    writer = engine.execution_options(gdsfleet_write=True)
    with writer.begin() as conn:
        conn.execute(insert(store.node_steps), steps)
        conn.execute(insert(store.step_events), events)


__all__ = ["seed_pending"]
_ = Any
