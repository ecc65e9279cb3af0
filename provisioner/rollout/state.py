"""What the rollout needs from the ledger beyond the public API of provisioner.store.

Built on the Ledger's own engine and tables (no schema of its own):

- :func:`seed_pending`: every planned node as ``pending`` with its wave, in ONE transaction.
- :func:`latest_states`: the latest compliance of each node (node, compliant, reachable, at)
  without loading reports, checks or drift: what planning needs, fast for 10,000 nodes.
- :func:`record_results`: several nodes' verifications, their checks and their steps in ONE
  transaction (each node's result and step still commit together), and :class:`ResultWriter`,
  a group-commit buffer the engine feeds as verifications finish (flushes every
  ``max_batch`` results, after ``max_delay_s``, and before any other step is written).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError

from provisioner.errors import LedgerError
from provisioner.rollout.planner import Plan


def _store() -> Any:
    from provisioner import store

    return store


def _writer(ledger: Any) -> Any:
    return ledger.engine.execution_options(gdsfleet_write=True)


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
    if hasattr(ledger, "set_steps"):
        ledger.set_steps(run_id, [(r["node"], "pending", r["wave"], r["detail"]) for r in rows])
    else:  # test doubles: one write per node
        for r in rows:
            ledger.set_step(run_id, r["node"], "pending", wave=r["wave"], detail=r["detail"])


def latest_states(ledger: Any) -> dict[str, dict[str, Any]]:
    """``{node: {"node", "compliant", "reachable", "at", "route"}}`` from the latest records,
    with ``attest`` where the node's newest attest found it regressed since (issue 44)."""
    states = _latest_verifications(ledger)
    attests = getattr(ledger, "latest_attestations", None)
    if attests is not None:
        from provisioner.store.queries import attest_drift

        for node, row in attests().items():
            if node in states:
                drift = attest_drift(states[node].get("at"), row)
                if drift is not None:
                    states[node] = {**states[node], "attest": drift}
    return states


def _latest_verifications(ledger: Any) -> dict[str, dict[str, Any]]:
    if getattr(ledger, "engine", None) is None:
        return {r["node"]: r for r in ledger.latest()}
    store = _store()
    v = store.verifications
    last = select(func.max(v.c.id).label("vid")).group_by(v.c.node).subquery()
    q = select(v.c.node, v.c.compliant, v.c.reachable, v.c.at, v.c.route).where(
        v.c.id.in_(select(last.c.vid))
    )
    with ledger.engine.connect() as conn:
        return {
            r.node: {"node": r.node, "compliant": bool(r.compliant),
                     "reachable": bool(r.reachable), "at": r.at, "route": r.route}
            for r in conn.execute(q)
        }


_CHECKS_QMARK = (
    "INSERT INTO check_results (verification_id, check_id, status, expected, observed, "
    "message) VALUES (?, ?, ?, ?, ?, ?)"
)
_CHECKS_FORMAT = _CHECKS_QMARK.replace("?", "%s")


@dataclass(frozen=True)
class Result:
    report: Mapping[str, Any]
    step: str | None
    wave: int | None
    detail: Mapping[str, Any]


def record_results(ledger: Any, run_id: str, results: Sequence[Result]) -> None:
    """Append the verifications, their checks and the node steps of ``results`` in ONE
    transaction (the same rows ``Ledger.record_verification`` writes, one node at a time)."""
    if not results:
        return
    if getattr(ledger, "engine", None) is None:
        for r in results:
            ledger.record_verification(run_id, r.report, step=r.step, wave=r.wave,
                                       detail=r.detail)
        return
    store = _store()
    now = store.utcnow()
    vrows: list[dict[str, Any]] = []
    checks: list[list[dict[str, Any]]] = []
    for r in results:
        doc = dict(r.report)
        raw = dict(doc.pop("raw", None) or {})
        name = str(doc.get("name") or "")
        if not name:
            raise LedgerError("a verification report without a node name cannot be recorded")
        io = doc.get("io_test") or {}
        vrows.append({
            "run_id": run_id, "node": store._text(name), "at": now,
            "reachable": bool(doc.get("reachable")), "compliant": bool(doc.get("compliant")),
            "route": store._text(doc.get("route")),
            "path_taken": store._text(io.get("path_taken")) if isinstance(io, Mapping) else None,
            "report_json": store._dumps(doc), "raw_json": store._dumps(raw),
        })
        checks.append([
            {"check_id": store._text(str(c.get("id"))),
             "status": store._text(str(c.get("status"))),
             "expected": store._text(c.get("expected")),
             "observed": store._text(c.get("observed")),
             "message": store._text(c.get("message"))}
            for c in doc.get("checks") or []
        ])
    v = store.verifications
    try:
        with _writer(ledger).begin() as conn:
            ids = [
                row[0]
                for row in conn.execute(
                    insert(v).returning(v.c.id, sort_by_parameter_order=True), vrows
                )
            ]
            crow = [
                (vid, c["check_id"], c["status"], c["expected"], c["observed"], c["message"])
                for vid, cs in zip(ids, checks, strict=True)
                for c in cs
            ]
            if crow:
                # the bulk of the rows: straight to the driver's executemany
                conn.exec_driver_sql(
                    _CHECKS_QMARK if conn.dialect.paramstyle == "qmark" else _CHECKS_FORMAT,
                    crow,
                )
            steps = [
                {"run_id": run_id, "node": str(r.report.get("name")), "wave": r.wave,
                 "step": r.step, "updated_at": now, "detail_json": store._dumps(dict(r.detail))}
                for r in results if r.step is not None
            ]
            if steps:
                for s in steps:
                    if s["step"] not in store.STEPS:
                        raise LedgerError(f"unknown step {s['step']!r}")
                if ledger.engine.dialect.name == "sqlite":
                    from sqlalchemy.dialects.sqlite import insert as dialect_insert
                else:
                    from sqlalchemy.dialects.postgresql import (  # type: ignore[assignment]
                        insert as dialect_insert,
                    )
                stmt = dialect_insert(store.node_steps)
                stmt = stmt.on_conflict_do_update(
                    index_elements=["run_id", "node"],
                    set_={"step": stmt.excluded.step, "updated_at": stmt.excluded.updated_at,
                          "detail_json": stmt.excluded.detail_json,
                          "wave": func.coalesce(stmt.excluded.wave, store.node_steps.c.wave)},
                )
                conn.execute(stmt, steps)
                conn.execute(insert(store.step_events), [
                    {k: val for k, val in s.items() if k != "updated_at"} | {"at": now}
                    for s in steps
                ])
    except SQLAlchemyError as exc:
        raise LedgerError(
            f"write failed on the ledger {ledger.location} ({store._short(exc)})"
        ) from exc


class ResultWriter:
    """Group commit of verification results.

    ``add`` queues one node's result; the queue is written in one transaction when it holds
    ``max_batch`` results, ``max_delay_s`` after its oldest result arrived (a timer), or on
    ``flush``. A result not written when the process dies leaves its node in ``verifying``,
    which a resume redoes: nothing is lost that is not redone.
    """

    def __init__(self, ledger: Any, run_id: str, *, max_batch: int = 256,
                 max_delay_s: float = 0.25) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self._queue: list[Result] = []
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self.error: BaseException | None = None

    def add(self, report: Mapping[str, Any], step: str | None, wave: int | None,
            detail: Mapping[str, Any]) -> None:
        with self._lock:
            self._raise()
            self._queue.append(Result(report, step, wave, dict(detail)))
            if len(self._queue) >= self.max_batch or self.max_delay_s <= 0:
                self._flush_locked()
            elif self._timer is None:
                self._timer = threading.Timer(self.max_delay_s, self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            try:
                self._flush_locked()
            except Exception as exc:  # noqa: BLE001 - re-raised in the engine's thread
                self.error = exc

    def _raise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._queue = self._queue, []
        record_results(self.ledger, self.run_id, batch)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()
            self._raise()

    close = flush


__all__ = ["Result", "ResultWriter", "latest_states", "record_results", "seed_pending"]
