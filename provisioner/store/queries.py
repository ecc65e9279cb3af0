"""The ledger's read-only queries, for ``status``, ``history``, ``report``, ``export`` and
``plan`` (and the resume of a rollout): runs, node steps, verifications, the latest state of
every node and its drift.

Nothing here writes: every query runs through :meth:`LedgerBase._read`, a read-only
transaction, and the commands open the ledger with :meth:`LedgerQueries.open` and
``read_only=True``, which never creates a file, a schema or a row
(tests/unit/test_store_split.py holds this module to that).

Drift is a node whose latest record differs from its last compliant one (compliance lost,
route changed, or a different set of failing/warning checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Connection

from provisioner.errors import LedgerError
from provisioner.store.engine import LedgerBase
from provisioner.store.schema import (
    _loads,
    attestations,
    check_results,
    dispatches,
    node_steps,
    run_results,
    runs,
    step_events,
    verifications,
)
from provisioner.verify.model import STATUSES


def attest_drift(verification_at: str | None,
                 attestation: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a node's newest attest says since its latest verification (both times are the
    controller's, so they compare): ``{"status", "at", "regressions": [ids]}`` when it found
    the node regressed or without a usable record after that verification; None when it found
    nothing, could not judge, or is older (pure)."""
    if not attestation or attestation.get("status") not in ("regressed", "unverified"):
        return None
    at = str(attestation.get("at") or "")
    if verification_at and at <= str(verification_at):
        return None
    regs = (attestation.get("detail") or {}).get("regressions") or []
    return {"status": attestation["status"], "at": at,
            "regressions": [str(r.get("id")) for r in regs if isinstance(r, Mapping)]}


class LedgerQueries(LedgerBase):
    """The ledger's read-only queries (see the module's docstring)."""

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
        return _run_dict(dict(row)) if row else None

    def runs(self, *, kind: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        q = select(runs).order_by(runs.c.started_at.desc(), runs.c.id.desc()).limit(limit)
        if kind:
            q = q.where(runs.c.kind == kind)
        with self._read() as conn:
            return [_run_dict(dict(r)) for r in conn.execute(q).mappings()]

    def last_unfinished_run(self, kind: str, fleet: str) -> str | None:
        q = (
            select(runs.c.id)
            .where(runs.c.kind == kind, runs.c.fleet == fleet, runs.c.finished_at.is_(None))
            .order_by(runs.c.started_at.desc(), runs.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            row = conn.execute(q).first()
        return str(row[0]) if row else None

    def run_node_count(self, run_id: str, kind: str) -> int:
        """How many nodes run ``run_id`` recorded: verified (verify) or stepped past pending
        (rollout); what ``report latest`` needs to skip an empty run, without its reports."""
        if kind == "rollout":
            q = select(func.count()).select_from(node_steps).where(
                node_steps.c.run_id == run_id, node_steps.c.step != "pending")
        else:
            q = select(func.count(func.distinct(verifications.c.node))).where(
                verifications.c.run_id == run_id)
        with self._read() as conn:
            return int(conn.execute(q).scalar() or 0)

    def run_result(self, run_id: str) -> dict[str, Any] | None:
        """What the rollout's latest attempt ended with (``record_result``); None for a run
        without one (a verify run, a rollout recorded by an older release, a ledger without
        the table)."""
        with self._read() as conn:
            if "run_results" not in set(inspect(conn).get_table_names()):
                return None
            row = conn.execute(select(run_results.c.result_json)
                               .where(run_results.c.run_id == run_id)).first()
        return _loads(row[0], f"run_results {run_id} result_json") if row else None

    def dispatches(self, run_id: str) -> list[dict[str, Any]]:
        """The run's dispatches in order; [] for a ledger without the table."""
        with self._read() as conn:
            if "dispatches" not in set(inspect(conn).get_table_names()):
                return []
            rows = conn.execute(select(dispatches).where(dispatches.c.run_id == run_id)
                                .order_by(dispatches.c.id)).mappings()
            out = []
            for r in rows:
                d = dict(r)
                d["hosts"] = (_loads(d.pop("hosts_json"), f"dispatches {d['id']} hosts_json")
                              or {}).get("hosts", [])
                d["detail"] = _loads(d.pop("detail_json"),
                                     f"dispatches {d['id']} detail_json") or {}
                out.append(d)
            return out

    def node_steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        """``{node: {"step", "wave", "updated_at", "detail"}}`` for one run."""
        with self._read() as conn:
            rows = conn.execute(
                select(node_steps).where(node_steps.c.run_id == run_id)
            ).mappings()
            return {
                r["node"]: {
                    "step": r["step"],
                    "wave": r["wave"],
                    "updated_at": r["updated_at"],
                    "detail": _loads(r["detail_json"],
                                     f"node_steps {run_id}/{r['node']} detail_json") or {},
                }
                for r in rows
            }

    def step_events(self, run_id: str, node: str | None = None) -> list[dict[str, Any]]:
        q = select(step_events).where(step_events.c.run_id == run_id).order_by(step_events.c.id)
        if node:
            q = q.where(step_events.c.node == node)
        with self._read() as conn:
            return [
                {
                    "node": r["node"],
                    "wave": r["wave"],
                    "step": r["step"],
                    "at": r["at"],
                    "detail": _loads(r["detail_json"],
                                     f"step_events id {r['id']} detail_json") or {},
                }
                for r in conn.execute(q).mappings()
            ]

    # ------------------------------------------------------------------ attestations
    def _attestation_rows(self, q: Any) -> list[dict[str, Any]]:
        with self._read() as conn:
            if "attestations" not in set(inspect(conn).get_table_names()):
                return []  # a ledger from before issue 44: nothing attested
            out = []
            for r in conn.execute(q).mappings():
                d = dict(r)
                d["detail"] = _loads(d.pop("detail_json"),
                                     f"attestations {d['id']} detail_json") or {}
                out.append(d)
            return out

    def latest_attestations(self) -> dict[str, dict[str, Any]]:
        """The newest attest of every node that has one (``status --attest``)."""
        a = attestations
        last = (select(func.max(a.c.id).label("aid")).where(a.c.kind == "attest")
                .group_by(a.c.node).subquery())
        rows = self._attestation_rows(select(a).where(a.c.id.in_(select(last.c.aid))))
        return {str(r["node"]): r for r in rows}

    def newest_job_proofs(self) -> dict[str, str]:
        """``{node: checked_at}`` of each node's newest job proof (what to ask for after)."""
        a = attestations
        with self._read() as conn:
            if "attestations" not in set(inspect(conn).get_table_names()):
                return {}
            q = (select(a.c.node, func.max(a.c.checked_at)).where(a.c.kind == "job")
                 .group_by(a.c.node))
            return {str(n): str(at) for n, at in conn.execute(q) if at}

    def job_proofs(self, node: str, limit: int = 20) -> list[dict[str, Any]]:
        """The node's job proofs, newest first (at most ``limit``)."""
        a = attestations
        return self._attestation_rows(
            select(a).where(a.c.node == node, a.c.kind == "job")
            .order_by(a.c.checked_at.desc(), a.c.id.desc()).limit(limit))

    # ------------------------------------------------------------------ views
    def latest(self) -> list[dict[str, Any]]:
        """The latest verification of every node (sorted by node), each with ``drift``."""
        last = (
            select(verifications.c.node, func.max(verifications.c.id).label("vid"))
            .group_by(verifications.c.node)
            .subquery()
        )
        q = (
            select(verifications)
            .join(last, verifications.c.id == last.c.vid)
            .order_by(verifications.c.node)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            return self._with_drift(conn, rows)

    def latest_for(self, node: str) -> dict[str, Any] | None:
        q = (
            select(verifications)
            .where(verifications.c.node == node)
            .order_by(verifications.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            out = self._with_drift(conn, rows)
        return out[0] if out else None

    def history(self, node: str, limit: int = 20) -> list[dict[str, Any]]:
        """The node's verifications, newest first (at most ``limit``)."""
        q = (
            select(verifications)
            .where(verifications.c.node == node)
            .order_by(verifications.c.id.desc())
            .limit(limit)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            checks = self._checks(conn, [r["id"] for r in rows])
        return [_verification_dict(r, checks.get(r["id"], [])) for r in rows]

    def run_verifications(self, run_id: str) -> list[dict[str, Any]]:
        """Every verification of one run, oldest first, each with ``baseline`` and ``drift``
        against the node's last compliant record *before* it (the rule of :meth:`latest`)."""
        q = (
            select(verifications)
            .where(verifications.c.run_id == run_id)
            .order_by(verifications.c.id)
        )
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            base_ids: dict[int, int] = {}
            for r in rows:
                vid = conn.execute(
                    select(func.max(verifications.c.id)).where(
                        verifications.c.node == r["node"],
                        verifications.c.compliant.is_(True),
                        verifications.c.id < r["id"],
                    )
                ).scalar()
                if vid is not None:
                    base_ids[int(r["id"])] = int(vid)
            base_rows: dict[int, dict[str, Any]] = {}
            if base_ids:
                q2 = select(verifications).where(
                    verifications.c.id.in_(sorted(set(base_ids.values())))
                )
                base_rows = {int(r["id"]): dict(r) for r in conn.execute(q2).mappings()}
            checks = self._checks(conn, [r["id"] for r in rows] + list(base_rows))
        return [_with_drift(r, base_rows.get(base_ids.get(int(r["id"]), -1)), checks)
                for r in rows]

    def raw_for(self, verification_id: int) -> dict[str, str]:
        with self._read() as conn:
            row = conn.execute(
                select(verifications.c.raw_json).where(verifications.c.id == verification_id)
            ).first()
        if row is None:
            raise LedgerError(f"ledger {self.location}: no verification {verification_id}")
        return dict(_loads(row[0], f"verifications id {verification_id} raw_json") or {})

    def drift(self) -> list[dict[str, Any]]:
        """Nodes whose latest record differs from their last compliant one."""
        return [r for r in self.latest() if r["drift"]]

    def _checks(self, conn: Connection, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        if not ids:
            return out
        for chunk in range(0, len(ids), 500):
            q = select(check_results).where(
                check_results.c.verification_id.in_(ids[chunk : chunk + 500])
            )
            for r in conn.execute(q).mappings():
                out.setdefault(r["verification_id"], []).append(
                    {
                        "id": r["check_id"],
                        "status": r["status"],
                        "expected": r["expected"],
                        "observed": r["observed"],
                        "message": r["message"],
                    }
                )
        return out

    def _with_drift(self, conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Attach the baseline (last compliant record before the latest) and the drift."""
        if not rows:
            return []
        prev = verifications.alias("prev")
        base_ids: dict[str, int] = {}
        nodes = [r["node"] for r in rows]
        for chunk in range(0, len(nodes), 500):
            part = nodes[chunk : chunk + 500]
            latest_ids = {r["node"]: r["id"] for r in rows[chunk : chunk + 500]}
            q = (
                select(prev.c.node, func.max(prev.c.id))
                .where(prev.c.node.in_(part), prev.c.compliant.is_(True))
                .group_by(prev.c.node)
            )
            # The baseline must be older than the latest record: a per-node bound.
            q = q.where(
                prev.c.id
                < select(func.max(verifications.c.id))
                .where(verifications.c.node == prev.c.node)
                .scalar_subquery()
            )
            for node, vid in conn.execute(q):
                if vid is not None and vid < latest_ids[node]:
                    base_ids[node] = int(vid)
        base_rows = {}
        if base_ids:
            q2 = select(verifications).where(verifications.c.id.in_(list(base_ids.values())))
            base_rows = {r["node"]: dict(r) for r in conn.execute(q2).mappings()}
        checks = self._checks(conn, [r["id"] for r in rows] + list(base_ids.values()))
        return [_with_drift(r, base_rows.get(r["node"]), checks) for r in rows]


def _with_drift(row: Mapping[str, Any], base: Mapping[str, Any] | None,
                checks: Mapping[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """A verification row as a dict, with its ``baseline`` (the node's last compliant record
    ``base``, summarised) and its ``drift`` from it."""
    cur = _verification_dict(row, checks.get(row["id"], []))
    baseline = _verification_dict(base, checks.get(base["id"], [])) if base else None
    cur["baseline"] = (
        {k: baseline[k] for k in ("id", "run_id", "at", "route", "failing")} if baseline else None
    )
    cur["drift"] = _drift(cur, baseline)
    return cur


def _drift(cur: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """Why ``cur`` differs from the last compliant record ``base`` (empty: no drift)."""
    if base is None:
        return []
    reasons: list[str] = []
    if not cur["reachable"]:
        reasons.append(f"unreachable (compliant at {base['at']})")
        return reasons
    if not cur["compliant"]:
        reasons.append(f"compliance lost (compliant at {base['at']})")
    if (cur["route"] or None) != (base["route"] or None):
        reasons.append(f"route changed: {base['route']} -> {cur['route']}")
    new = sorted(set(cur["failing"]) - set(base["failing"]))
    gone = sorted(set(base["failing"]) - set(cur["failing"]))
    if new or gone:
        parts = [f"+{c}" for c in new] + [f"-{c}" for c in gone]
        reasons.append("failing/warning checks changed: " + " ".join(parts))
    return reasons


# The shape of a stored node record (NodeReport.to_dict()) that the readers rely on: field ->
# the types its value may have. A row of another writer (a shared PostgreSQL ledger) with
# valid JSON of another shape (``checks: 5``, ``io_test: "x"``) made report, status and
# export exit 70; it is now a LedgerError naming the row (exit 74).
_MAPPING_OR_NONE = (dict, type(None))
_LIST_OR_NONE = (list, type(None))
_TEXT_OR_NONE = (str, type(None))
_NUMBER_OR_NONE = (int, float, type(None))
_REPORT_SHAPE: dict[str, tuple[type, ...]] = {
    "name": _TEXT_OR_NONE, "error": _TEXT_OR_NONE, "route": _TEXT_OR_NONE,
    "started_at": _TEXT_OR_NONE, "duration_s": _NUMBER_OR_NONE, "checks": _LIST_OR_NONE,
    "io_test": _MAPPING_OR_NONE, "gdsio": _MAPPING_OR_NONE, "facts": _MAPPING_OR_NONE,
    "raw": _MAPPING_OR_NONE, "policy": _MAPPING_OR_NONE, "rollout": _MAPPING_OR_NONE,
}
_IO_SHAPE: dict[str, tuple[type, ...]] = {
    "path_taken": _TEXT_OR_NONE, "reason": _TEXT_OR_NONE, "path": _TEXT_OR_NONE,
    "write_gbps": _NUMBER_OR_NONE, "read_gbps": _NUMBER_OR_NONE, "bytes": _NUMBER_OR_NONE,
    "duration_s": _NUMBER_OR_NONE, "evidence": _MAPPING_OR_NONE, "attempts": _LIST_OR_NONE,
}
_GDSIO_SHAPE: dict[str, tuple[type, ...]] = {
    "runs": _LIST_OR_NONE, "ratio": _NUMBER_OR_NONE, "min_ratio": _NUMBER_OR_NONE,
}


def _shape_problem(report: Mapping[str, Any], checks: list[dict[str, Any]]) -> str | None:
    """What in a stored node record (and its check rows) is not of the shape the readers
    rely on, or None."""
    def wrong(doc: Mapping[str, Any], shape: Mapping[str, tuple[type, ...]],
              prefix: str) -> str | None:
        for key, types in shape.items():
            value = doc.get(key)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types
                                                and key not in ("name",)):
                return f"{prefix}{key} is a {type(value).__name__}"
        return None

    problem = wrong(report, _REPORT_SHAPE, "")
    if problem is None and isinstance(report.get("io_test"), dict):
        problem = wrong(report["io_test"], _IO_SHAPE, "io_test.")
    if problem is None and isinstance(report.get("gdsio"), dict):
        problem = wrong(report["gdsio"], _GDSIO_SHAPE, "gdsio.")
        runs = report["gdsio"].get("runs") or []
        if problem is None and not all(isinstance(x, dict) for x in runs):
            problem = "gdsio.runs holds a value that is not an object"
    if problem is None and not all(isinstance(c, dict) for c in report.get("checks") or []):
        problem = "checks holds a value that is not an object"
    if problem is None:
        for c in checks:
            if not isinstance(c["id"], str) or c["status"] not in STATUSES:
                problem = f"its check_results row {str(c['id'])[:80]!r} has no text id or " \
                          f"no status of {'/'.join(STATUSES)}"
                break
    if problem is None:
        # the readers' own parse (export, status): every value it converts must convert
        from provisioner.verify.model import NodeReport

        try:
            NodeReport.from_dict({"name": "", **report})
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            problem = f"{type(exc).__name__}: {str(exc)[:160]}"
    return problem


def _verification_dict(r: Mapping[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    where = f"verifications id {r['id']}"
    report = _loads(r["report_json"], f"{where} report_json") or {}
    problem = _shape_problem(report, checks)
    if problem is None and not isinstance(r["node"], str):
        problem = f"its node is a {type(r['node']).__name__}"
    if problem is not None:
        from provisioner.sanitize import printable

        raise LedgerError(printable(
            f"the ledger holds a row of another shape: {where} (node {str(r['node'])[:200]!r}, "
            f"run {str(r['run_id'])[:80]}): {problem}; nothing was changed. A writer other "
            f"than this provisioner wrote it: fix or delete that row (or record the node again "
            f"with `provisioner verify`)"))
    return {
        "id": int(r["id"]),
        "run_id": r["run_id"],
        "node": r["node"],
        "at": r["at"],
        "reachable": bool(r["reachable"]),
        "compliant": bool(r["compliant"]),
        "route": r["route"],
        "path_taken": r["path_taken"],
        "error": report.get("error"),
        # the inventory's gdsfleet_simulated when recorded; only a JSON true counts
        "simulated": report.get("simulated") is True,
        "failing": sorted(c["id"] for c in checks if c["status"] in ("fail", "warn")),
        "checks": sorted(checks, key=lambda c: c["id"]),
        "report": report,
    }


def _run_dict(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "kind": r["kind"],
        "fleet": r["fleet"],
        "started_at": r["started_at"],
        "finished_at": r["finished_at"],
        "status": r["status"],
        "args": _loads(r["args_json"], f"runs id {r['id']} args_json") or {},
    }


