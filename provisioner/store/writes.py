"""What the rollout and ``verify`` write to the ledger: runs, verifications with their checks,
each node's step and its audit trail, and the dispatches to execution nodes.

Every method is ONE write transaction (``BEGIN IMMEDIATE`` on SQLite), so a node's verification
and its step commit together. ``provisioner.rollout.state`` batches the same rows for large
fleets on the same tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, update
from sqlalchemy.engine import Connection

from provisioner.errors import LedgerError
from provisioner.redact import redact_mapping
from provisioner.store.engine import LedgerBase
from provisioner.store.schema import (
    STEPS,
    _dumps,
    _text,
    attestations,
    check_results,
    dispatches,
    new_run_id,
    node_steps,
    run_results,
    runs,
    step_events,
    utcnow,
    verifications,
)

# --- attestations (issue 44) -------------------------------------------------------------------
_ATTEST_STATUSES = ("ok", "regressed", "unverified", "error")
_JOB_VERDICTS = ("direct", "compat", "mixed", "no-io", "unknown")


def epoch_iso(value: Any) -> str | None:
    """A node's epoch seconds as the ledger's UTC text (None when it is not a sane time)."""
    from datetime import datetime, timezone

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(value), timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, OSError, ValueError):
        return None




class LedgerWrites(LedgerBase):
    """The ledger's writes (see the module's docstring)."""

    # ------------------------------------------------------------------ runs
    def start_run(self, kind: str, fleet: str, args: Mapping[str, Any] | None = None, *,
                  run_id: str | None = None) -> str:
        """A new run, ``running``; ``run_id``: one :func:`new_run_id` made earlier (the
        rollout's first playbook run, started ahead, carries it in its token)."""
        if kind not in ("verify", "rollout"):
            raise LedgerError(f"unknown run kind {kind!r} (verify or rollout)")
        run_id = run_id or new_run_id()
        with self._write() as conn:
            conn.execute(
                insert(runs).values(
                    id=run_id,
                    kind=kind,
                    fleet=fleet,
                    started_at=utcnow(),
                    status="running",
                    # no secret reaches the ledger, whoever calls (provisioner.redact)
                    args_json=_dumps(redact_mapping(dict(args or {}))),
                )
            )
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        with self._write() as conn:
            res = conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(finished_at=utcnow(), status=status)
            )
            if res.rowcount == 0:
                raise LedgerError(f"ledger {self.location}: no run {run_id!r}")

    def record_result(self, run_id: str, result: Mapping[str, Any]) -> None:
        """What the run's latest attempt ended with (``RolloutResult.to_dict()`` without the
        verifications, which are rows of their own), replacing an earlier attempt's: ``report
        RUN`` renders the document a live run wrote from it (one writer,
        :func:`provisioner.reports.model.rollout_document`)."""
        doc = _dumps(redact_mapping(dict(result)))
        with self._write() as conn:
            conn.execute(delete(run_results).where(run_results.c.run_id == run_id))
            conn.execute(insert(run_results).values(run_id=run_id, updated_at=utcnow(),
                                                    result_json=doc))

    # ------------------------------------------------------------------ records
    def record_verification(
        self,
        run_id: str,
        report: Mapping[str, Any],
        *,
        step: str | None = None,
        wave: int | None = None,
        raw: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one node's verification (``NodeReport.to_dict()``), its checks and, when
        ``step`` is given, the node's step: all in ONE transaction.

        Raw outputs come from ``raw`` or the report's ``"raw"`` key; they are stored in
        ``raw_json`` beside (not inside) the parsed report.
        """
        doc = dict(report)
        raw_out = dict(raw) if raw is not None else dict(doc.pop("raw", None) or {})
        doc.pop("raw", None)
        name = str(doc.get("name") or "")
        if not name:
            raise LedgerError("a verification report without a node name cannot be recorded")
        io = doc.get("io_test") or {}
        now = utcnow()
        with self._write() as conn:
            vid = conn.execute(
                insert(verifications)
                .values(
                    run_id=run_id,
                    node=_text(name),
                    at=now,
                    reachable=bool(doc.get("reachable")),
                    compliant=bool(doc.get("compliant")),
                    route=_text(doc.get("route")),
                    path_taken=_text(io.get("path_taken")) if isinstance(io, Mapping) else None,
                    report_json=_dumps(doc),
                    raw_json=_dumps(raw_out),
                )
                .returning(verifications.c.id)
            ).scalar_one()
            rows = [
                {
                    "verification_id": vid,
                    "check_id": _text(str(c.get("id"))),
                    "status": _text(str(c.get("status"))),
                    "expected": _text(c.get("expected")),
                    "observed": _text(c.get("observed")),
                    "message": _text(c.get("message")),
                }
                for c in doc.get("checks") or []
            ]
            if rows:
                conn.execute(insert(check_results), rows)
            if step is not None:
                self._set_steps(conn, run_id, [(name, step, wave, detail)], now)
        return int(vid)

    def set_step(
        self,
        run_id: str,
        node: str,
        step: str,
        *,
        wave: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        self.set_steps(run_id, [(node, step, wave, detail)])

    def set_steps(
        self,
        run_id: str,
        steps: Sequence[tuple[str, str, int | None, Mapping[str, Any] | None]],
    ) -> None:
        """Several nodes' ``(node, step, wave, detail)`` in one transaction (a wave of None
        keeps the node's wave): the hosts of a batch move together (all provisioning before
        their playbook, all provisioned after it), and a commit per host was most of the
        coordinator's CPU per host (1.1 ms each, three per host, in a 300-host rollout's
        profile)."""
        if steps:
            with self._write() as conn:
                self._set_steps(conn, run_id, steps, utcnow())

    def _set_steps(
        self,
        conn: Connection,
        run_id: str,
        steps: Sequence[tuple[str, str, int | None, Mapping[str, Any] | None]],
        now: str,
    ) -> None:
        rows = []
        for node, step, wave, detail in steps:
            if step not in STEPS and step != "verified":
                raise LedgerError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
            rows.append({"run_id": run_id, "node": node, "wave": wave, "step": step,
                         "updated_at": now, "detail_json": _dumps(dict(detail or {}))})
        stmt: Any
        if self._sqlite:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert  # type: ignore[assignment]
        stmt = dialect_insert(node_steps)
        changes = {"step": stmt.excluded.step, "updated_at": stmt.excluded.updated_at,
                   "detail_json": stmt.excluded.detail_json,
                   "wave": func.coalesce(stmt.excluded.wave, node_steps.c.wave)}
        conn.execute(stmt.on_conflict_do_update(index_elements=["run_id", "node"], set_=changes),
                     rows)
        conn.execute(insert(step_events),
                     [{**{k: v for k, v in r.items() if k != "updated_at"}, "at": now}
                      for r in rows])

    def record_dispatch(self, run_id: str, wave: int, shard: int, exec_node: str, token: str,
                        deadline: str | None, state: str, hosts: Sequence[str]) -> int:
        """A dispatch about to be sent; returns its id (for :meth:`update_dispatch`)."""
        now = utcnow()
        with self._write() as conn:
            res = conn.execute(insert(dispatches).values(
                run_id=run_id, wave=wave, shard=shard, exec_node=exec_node, token=token,
                deadline=deadline, state=state, created_at=now, updated_at=now,
                hosts_json=_dumps({"hosts": list(hosts)}), detail_json="{}"))
            key = res.inserted_primary_key
        return int(key[0]) if key else 0

    def update_dispatch(self, dispatch_id: int, state: str,
                        detail: Mapping[str, Any] | None = None) -> None:
        values: dict[str, Any] = {"state": state, "updated_at": utcnow()}
        if detail is not None:
            values["detail_json"] = _dumps(redact_mapping(dict(detail)))
        with self._write() as conn:
            conn.execute(update(dispatches).where(dispatches.c.id == dispatch_id).values(**values))

    # ------------------------------------------------------------------ attestations
    def record_attestation(self, node: str, doc: Mapping[str, Any] | None, *,
                           jobs: Sequence[Mapping[str, Any]] = (),
                           error: str | None = None) -> int:
        """The node's attest document (or the ``error`` that kept it from answering) and the
        job proofs it kept that the ledger does not hold yet; returns the job proofs added."""
        from sqlalchemy import select

        doc = dict(doc or {})
        status = str(doc.get("status")) if doc.get("status") in _ATTEST_STATUSES else "error"
        regs = [{k: _text(str(r.get(k, ""))[:256]) for k in ("id", "expected", "observed",
                                                                 "fix")}
                for r in (doc.get("regressions") or [])[:64] if isinstance(r, Mapping)]
        detail = redact_mapping({"regressions": regs, "error": error,
                                 "verified_at": epoch_iso(doc.get("verified_at")),
                                 "simulated": doc.get("simulated") is True,
                                 "route": _text(str(doc.get("route") or "")[:32]) or None})
        added = 0
        with self._write() as conn:
            conn.execute(insert(attestations).values(
                node=_text(node), kind="attest", at=utcnow(),
                checked_at=epoch_iso(doc.get("checked_at")), status=status, job=None,
                detail_json=_dumps(detail)))
            seen = {(r.job, r.checked_at) for r in conn.execute(
                select(attestations.c.job, attestations.c.checked_at).where(
                    attestations.c.node == node, attestations.c.kind == "job"))}
            for job in list(jobs)[:500]:
                jid = _text(str(job.get("id") or "")[:64])
                until = epoch_iso(job.get("until"))
                if not jid or until is None or (jid, until) in seen:
                    continue
                seen.add((jid, until))
                verdict = job.get("verdict") if job.get("verdict") in _JOB_VERDICTS else "unknown"
                conn.execute(insert(attestations).values(
                    node=_text(node), kind="job", at=utcnow(), checked_at=until,
                    status=verdict, job=jid, detail_json=_dumps(redact_mapping(
                        {k: job.get(k) for k in ("since", "pid", "scope", "baseline", "nvfs",
                                                 "cufile_stats", "cufile_log", "bytes", "why")}))))
                added += 1
        return added
