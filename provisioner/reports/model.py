"""The report documents, built from the records the ledger holds.

A verify run's document is the run envelope of docs/report-schema.md around the nodes'
``NodeReport.to_dict()`` records; a rollout's is :func:`rollout_document`, from the ledger's
records of the run (what a live ``rollout --json`` writes too).
:func:`from_ledger` rebuilds either from the ledger alone (``provisioner report RUN_ID``), and
:func:`node_view` gives every renderer (HTML, Prometheus) the same per-node record for both
kinds, with ``drift`` attached when the ledger knows the node's history.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.exitcodes import Exit

SCHEMA_VERSION = 1

RESULT_COMPLIANT = "COMPLIANT"
RESULT_NOT_COMPLIANT = "NOT COMPLIANT"
RESULT_UNREACHABLE = "UNREACHABLE"
RESULT_ERROR = "ERROR"


def node_result(node: Mapping[str, Any]) -> str:
    """One word for a node: COMPLIANT, NOT COMPLIANT, UNREACHABLE or ERROR (a bug)."""
    if node.get("internal_error"):
        return RESULT_ERROR
    if not node.get("reachable"):
        return RESULT_UNREACHABLE
    return RESULT_COMPLIANT if node.get("compliant") else RESULT_NOT_COMPLIANT


def is_simulated(node: Mapping[str, Any]) -> bool:
    """Whether the node's record says the inventory marked it simulated
    (``gdsfleet_simulated``); only a JSON ``true`` counts, a record without it is not."""
    return node.get("simulated") is True


def simulated_line(nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """``SIMULATED: N of M nodes ...`` when any node is simulated, else None: the one
    wording of the HTML banner, ``status`` and ``verify``."""
    n = sum(1 for x in nodes if is_simulated(x))
    if not n:
        return None
    return (f"SIMULATED: {n} of {len(nodes)} node(s) are marked simulated by their inventory "
            f"(gdsfleet_simulated): stand-in hardware, not a proof of GPUDirect Storage on a "
            f"real node")


def exit_code(nodes: Sequence[Mapping[str, Any]]) -> Exit:
    """INTERNAL if verifying a node hit a bug, else UNREACHABLE > NOT_COMPLIANT > OK."""
    results = {node_result(n) for n in nodes}
    if RESULT_ERROR in results:
        return Exit.INTERNAL
    if RESULT_UNREACHABLE in results:
        return Exit.UNREACHABLE
    if RESULT_NOT_COMPLIANT in results:
        return Exit.NOT_COMPLIANT
    return Exit.OK


def io_path(node: Mapping[str, Any]) -> str:
    return str((node.get("io_test") or {}).get("path_taken"))


def incomplete_reason(run: Mapping[str, Any], recorded: int,
                      result: Mapping[str, Any] | None = None) -> str | None:
    """Why run ``run`` (a ledger row) proves nothing about its fleet, or None: it was
    interrupted, it is still open (running, killed, or a rollout left to resume), or no node
    was recorded in it (issue 47: ``report latest`` of an interrupted ``verify`` said "0
    node(s): 0 compliant ... (exit 0)" and the HTML "Every node is compliant.")."""
    args = run.get("args") or {}
    selected = args.get("selected_nodes")
    of = f" of {selected}" if isinstance(selected, int) and not isinstance(selected, bool) \
        else ""
    status = str((result or {}).get("status") or run.get("status") or "")
    kind = run.get("kind") or "verify"
    if kind == "rollout" and not run.get("finished_at"):
        how = {"interrupted": "interrupted", "lost": "stopped with nodes lost"}.get(
            status, "not finished (still running, or its process was killed)")
        return (f"INCOMPLETE: rollout {run.get('id')} was {how}, {recorded} node(s) recorded; "
                f"the same `provisioner rollout` command resumes it")
    if status == "interrupted":
        return (f"INCOMPLETE: verify run {run.get('id')} was interrupted after {recorded}"
                f"{of} node(s); it proves nothing about the nodes it did not reach: run "
                f"`provisioner verify` again")
    if not run.get("finished_at"):
        return (f"INCOMPLETE: {kind} run {run.get('id')} is not finished (still running, or its "
                f"process was killed), {recorded}{of} node(s) recorded so far")
    if recorded == 0:
        return f"EMPTY: {kind} run {run.get('id')} recorded no node; it proves nothing"
    return None


def summarize(nodes: Sequence[Mapping[str, Any]], *,
              incomplete: str | None = None) -> dict[str, Any]:
    """Counts of a run's nodes and the run's exit code: at least 1 for an ``incomplete`` run
    (it does not show every node compliant, whatever the few it holds say)."""
    results = Counter(node_result(n) for n in nodes)
    code = exit_code(nodes)
    if incomplete and code == Exit.OK:
        code = Exit.NOT_COMPLIANT
    return {
        "total": len(nodes),
        "compliant": results[RESULT_COMPLIANT],
        "not_compliant": results[RESULT_NOT_COMPLIANT],
        "unreachable": results[RESULT_UNREACHABLE],
        "errors": results[RESULT_ERROR],
        "routes": dict(sorted(Counter(str(n.get("route")) for n in nodes).items())),
        "paths": dict(sorted(Counter(io_path(n) for n in nodes).items())),
        "exit_code": int(code),
        "simulated": sum(1 for n in nodes if is_simulated(n)),
        "incomplete": incomplete,
    }


def build_report(
    *,
    run_id: str,
    started_at: str,
    finished_at: str,
    nodes: Sequence[Mapping[str, Any]],
    fleet: str | None = None,
    policy: Mapping[str, Any] | None = None,
    ledger: str | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """The verify document (docs/report-schema.md, run envelope); ``incomplete``: why the run
    proves nothing (:func:`incomplete_reason`), None for a finished run."""
    ordered = sorted((dict(n) for n in nodes), key=lambda n: str(n.get("name")))
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "verify",
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": finished_at,
        "fleet": fleet,
        "ledger": ledger,
        "policy": dict(policy) if policy is not None else None,
        "incomplete": incomplete,
        "nodes": ordered,
        "summary": summarize(ordered, incomplete=incomplete),
    }


def rollout_document(run: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]],
                     verifications: Mapping[str, Mapping[str, Any]],
                     result: Mapping[str, Any] | None, *,
                     location: str | None) -> dict[str, Any]:
    """The rollout document, the one writer of both ``rollout --json`` (read back from the
    ledger once the run ends) and ``report RUN --json`` (issue 47: they had two shapes).

    ``run``: the ledger's run (its ``args`` hold the plan, the inventory and the nodes its
    inventory marks simulated); ``steps``: each node's step (``node_steps``); ``verifications``:
    each node's latest verification of the run; ``result``: what the run's latest attempt ended
    with (``RolloutResult.to_dict(verifications=False)``, the ledger's ``run_results``), None
    for a run an older release recorded (its keys are then null). Every key is always there.
    """
    args = run.get("args") or {}
    res = result or {}
    live = {str(n.get("name")): n for n in res.get("nodes") or [] if isinstance(n, Mapping)}
    marked = set(args.get("simulated") or [])
    plan = args.get("plan") or res.get("plan")
    planned: dict[str, tuple[Any, Any]] = {}
    for w in (plan or {}).get("waves") or []:
        for n in w.get("nodes") or []:
            planned[str(n.get("name"))] = (w.get("index"), n.get("action"))
    order = list(dict.fromkeys([*planned, *live, *sorted(set(steps) | set(verifications))]))
    nodes = []
    for name in order:
        st = steps.get(name) or {}
        detail = st.get("detail") or {}
        mine = live.get(name) or {}
        outcome = mine.get("outcome", detail.get("outcome"))
        ver = verifications.get(name)
        ok = isinstance(outcome, Mapping) and outcome.get("status") in ("ok", "changed")
        nodes.append({
            "name": name,
            "wave": st.get("wave", mine.get("wave", planned.get(name, (None, None))[0])),
            "action": mine.get("action") or planned.get(name, (None, None))[1]
            or detail.get("action"),
            "step": st.get("step") or mine.get("step"),
            "reason": str(detail.get("message") or mine.get("reason") or detail.get("reason")
                          or ""),
            "failure": detail["failure"] if "failure" in detail else mine.get("failure"),
            "provisioned": bool(mine.get("provisioned", ok)),
            "rebooted": bool(mine.get("rebooted", detail.get("rebooted", False))),
            "carried_over": bool(mine.get("carried_over", False)),
            "outcome": outcome,
            "duration_s": mine.get("duration_s"),
            "updated_at": st.get("updated_at"),
            "simulated": name in marked or is_simulated(ver or {}),
            "verification": ver,
        })
    counts = Counter(str(n["step"]) for n in nodes)
    return {
        "kind": "rollout",
        "generated_at": _now(),
        "run_id": run.get("id") or res.get("run_id"),
        "status": res.get("status") or run.get("status"),
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "fleet": run.get("fleet"),
        "inventory": args.get("inventory"),
        "ledger": location,
        "exit_code": res.get("exit_code"),
        "message": res.get("message"),
        "resumed": res.get("resumed"),
        "duration_s": res.get("duration_s"),
        "simulated": sum(1 for n in nodes if n["simulated"]),
        "incomplete": None,  # from_ledger says why a run proves nothing (incomplete_reason)
        "counts": dict(sorted(counts.items())),
        "plan": plan,
        "waves": list(res.get("waves") or []),
        "nodes": nodes,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --------------------------------------------------------------------------- one view
def _stand_in(n: Mapping[str, Any]) -> dict[str, Any]:
    """A rollout node without a verification in the document, as a node record."""
    failure = n.get("failure")
    reason = str(n.get("reason") or "")
    done = n.get("step") == "compliant"  # e.g. --no-verify, or finished in an earlier attempt
    return {
        "name": n.get("name"),
        "reachable": failure != "unreachable",
        "compliant": done,
        "route": None,
        "checks": [],
        "io_test": {"path_taken": "skipped"},
        "error": None if done else (f"{n.get('step')}: {reason}" if reason
                                    else str(n.get("step"))),
    }


def node_view(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every node as a verification record (``NodeReport.to_dict()`` keys), for both kinds.

    A rollout node carries its latest verification plus ``rollout`` {wave, step, reason,
    failure}; a node the rollout never verified gets a stand-in record with the reason as
    ``error``. ``drift`` (a list of reasons) is kept where the document has it.
    """
    out: list[dict[str, Any]] = []
    if doc.get("kind") == "rollout":
        for n in doc.get("nodes") or []:
            rec = dict(n.get("verification") or _stand_in(n))
            rec["name"] = n.get("name")
            # the inventory's mark, on every node (one never verified too)
            rec["simulated"] = n.get("simulated") is True or is_simulated(rec)
            rec["rollout"] = {k: n.get(k) for k in ("wave", "step", "reason", "failure",
                                                     "action")}
            if n.get("step") != "compliant":
                rec["compliant"] = False
            if "drift" in n:
                rec["drift"] = n["drift"]
            out.append(rec)
    else:
        out = [dict(n) for n in doc.get("nodes") or []]
    return sorted(out, key=lambda r: str(r.get("name")))


# --------------------------------------------------------------------------- from the ledger
def attach_drift(doc: dict[str, Any], drift: Mapping[str, list[str]]) -> dict[str, Any]:
    """Set each node's ``drift`` (reasons; empty: none) from ``{node: reasons}``."""
    for n in doc.get("nodes") or []:
        name = str(n.get("name"))
        if name in drift:
            n["drift"] = list(drift[name])
    return doc


def from_ledger(ledger: Any, run_id: str, *, location: str | None = None) -> dict[str, Any]:
    """Rebuild the report of run ``run_id`` from ``ledger`` (a :class:`Ledger`).

    verify: the run envelope around each node's recorded report (raw outputs re-attached), as
    ``verify --json`` wrote it. rollout: the run's plan (recorded with the run), every node's
    last step and its latest verification in this run. Both carry ``drift`` per node: how the
    node's record differs from its last compliant one before it (``provisioner status``'s rule).
    """
    from provisioner.errors import UsageError

    run = ledger.get_run(run_id)
    if run is None:  # a mistyped id, like history's unknown node: exit 64
        raise UsageError(f"no run {run_id!r} in the ledger {location or ledger.location}; "
                         f"`provisioner history NODE` lists the run ids, `latest` is the newest")
    records = ledger.run_verifications(run_id)
    drift = {r["node"]: r["drift"] for r in records}
    if run["kind"] == "verify":
        nodes = []
        for r in records:
            rep = dict(r["report"])
            rep.setdefault("name", r["node"])
            raw = ledger.raw_for(r["id"])
            if raw:
                rep["raw"] = raw
            nodes.append(rep)
        args = run.get("args") or {}
        doc = build_report(run_id=run_id, started_at=run["started_at"],
                           finished_at=run["finished_at"] or "", nodes=nodes,
                           fleet=run["fleet"], policy=None, ledger=location,
                           incomplete=incomplete_reason(run, len(nodes)))
        doc["status"] = run["status"]
        doc["args"] = args
        return attach_drift(doc, drift)
    return attach_drift(_rollout_from_ledger(ledger, run, records, location), drift)


def _rollout_from_ledger(ledger: Any, run: Mapping[str, Any], records: list[dict[str, Any]],
                         location: str | None) -> dict[str, Any]:
    latest: dict[str, dict[str, Any]] = {}
    for r in records:  # oldest first: the last one wins
        latest[r["node"]] = dict(r["report"], name=r["node"])
    result = ledger.run_result(run["id"]) if hasattr(ledger, "run_result") else None
    doc = rollout_document(run, ledger.node_steps(run["id"]), latest, result,
                           location=location)
    done = sum(1 for n in doc["nodes"] if n["step"] not in ("pending", None))
    doc["incomplete"] = incomplete_reason(run, done if doc["nodes"] else 0, result)
    return doc


__all__ = [
    "RESULT_COMPLIANT",
    "RESULT_ERROR",
    "RESULT_NOT_COMPLIANT",
    "RESULT_UNREACHABLE",
    "SCHEMA_VERSION",
    "attach_drift",
    "build_report",
    "exit_code",
    "from_ledger",
    "incomplete_reason",
    "io_path",
    "node_result",
    "node_view",
    "rollout_document",
    "summarize",
]
