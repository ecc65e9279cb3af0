"""The node-side record of a verification, for ``attest`` (issue 44).

After a node is judged, ``verify`` (over SSH, ``--local``, and the rollout's verification) sends
the node-side attest bundled (provisioner/remote/attest_node.py) with the verdict; the node takes
its own state with attest's code and writes both to ``/var/lib/gdsfleet/verified.json``
(atomically, 0644, root), so that ``gdsfleet-attest`` later compares like with like.

The record is written for EVERY verdict of a reachable node, compliant or not: a later failed
verification replaces a compliant record, and attest passes only on a compliant one. Writing it
needs root (or ``sudo -n``); when that fails the verification itself stands and the report's
``attest_record`` says why (``verify`` prints it), never silently. ``verify --no-attest-record``
does not write it.
"""

from __future__ import annotations

import json
import os
import shlex
from datetime import datetime, timezone
from typing import Any

from provisioner.errors import ConnectError
from provisioner.remote import load_script
from provisioner.sanitize import clip
from provisioner.verify import nfd

SCRIPT = "attest_node.py"
RECORD_PATH = "/var/lib/gdsfleet/verified.json"
# Where verify writes the record (and status --attest has attest read it) when not the default:
# `gdsfleet-attest --record FILE` reads the same place on the node.
ENV_RECORD = "GDSFLEET_ATTEST_RECORD"
TIMEOUT_S = 30.0


def record_path() -> str:
    """``$GDSFLEET_ATTEST_RECORD``, else /var/lib/gdsfleet/verified.json."""
    return os.environ.get(ENV_RECORD) or RECORD_PATH


def command(request: dict[str, Any]) -> str:
    """The shell command that runs the bundled script (on stdin) as root, else ``sudo -n``."""
    body = f"python3 - {shlex.quote(json.dumps(request, sort_keys=True))}"
    return f'if [ "$(id -u)" = 0 ]; then {body}; else sudo -n {body}; fi'


def verdict(doc: dict[str, Any], *, simulated: bool = False,
            now: datetime | None = None) -> dict[str, Any]:
    """What the record keeps of a node's report (``NodeReport.to_dict()``) (pure)."""
    io = doc.get("io_test") or {}
    facts = doc.get("facts") or {}
    failing = [str(c.get("id")) for c in doc.get("checks") or []
               if isinstance(c, dict) and c.get("status") == "fail"]
    return {
        "compliant": doc.get("compliant") is True,
        "route": doc.get("route"),
        "path_taken": io.get("path_taken"),
        "failing": failing,
        "simulated": simulated,
        "operator_managed": bool((facts.get("operator") or {}).get("managed")),
        "mount_path": io.get("path") or facts.get("io_path"),
        "labels": nfd.labels(doc, now or datetime.now(timezone.utc)),
    }


def expectation(doc: dict[str, Any]) -> dict[str, Any]:
    """What the gather saw, for the node to check its state against before it writes."""
    facts = doc.get("facts") or {}
    kernel = (facts.get("kernel") or {}).get("release")
    nv = facts.get("nvfs") or {}
    out: dict[str, Any] = {}
    if kernel:
        out["kernel"] = kernel
    if "loaded" in nv:
        out["nvfs_loaded"] = bool(nv.get("loaded"))
    if nv.get("module_version"):
        out["nvfs_version"] = nv["module_version"]
    return out


def publish(runner: Any, name: str, doc: dict[str, Any], *, simulated: bool = False,
            path: str | None = None) -> dict[str, Any]:
    """Write the record on the node; never raises (the result says what went wrong)."""
    path = path or record_path()
    request = {"mode": "record", "node": name, "path": path,
               "verdict": verdict(doc, simulated=simulated), "expect": expectation(doc)}
    try:
        res = runner.run(command(request), timeout=TIMEOUT_S, stdin=load_script(SCRIPT))
    except ConnectError as exc:
        return {"path": path, "written": False, "error": clip(f"connection lost: {exc}", 300)}
    except Exception as exc:  # noqa: BLE001 - the verification stands; the record says why not
        return {"path": path, "written": False, "error": clip(f"{type(exc).__name__}: {exc}",
                                                              300)}
    answer = None
    for line in reversed((res.stdout or "").strip().splitlines()[-5:]):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            break
    if not isinstance(answer, dict) or answer.get("error") or not answer.get("written"):
        why = (answer or {}).get("error") if isinstance(answer, dict) else None
        why = why or (res.stderr or res.stdout or "").strip()[-300:] or f"exit {res.exit_status}"
        return {"path": path, "written": False,
                "error": clip(f"{why} (the record needs root: connect as root or allow "
                              "passwordless sudo for python3)", 400)}
    changed = [clip(str(c), 200) for c in answer.get("changed") or []][:8]
    return {"path": path, "written": True, "error": None,
            "compliant": answer.get("compliant") is True, "changed": changed}




def pull(runner: Any, *, jobs_since: float | None = None) -> dict[str, Any]:
    """The node's attest (``--json``) and the job proofs it kept since ``jobs_since`` (epoch
    seconds), over the node's runner: ``{"attest": doc|None, "jobs": [...], "error": str|None}``.
    Never raises for the node's own failures; ConnectError (transport) propagates."""
    request: dict[str, Any] = {"mode": "attest", "record": record_path()}
    if jobs_since is not None:
        request["jobs_since"] = jobs_since
    res = runner.run(command(request), timeout=TIMEOUT_S, stdin=load_script(SCRIPT))
    answer = None
    for line in reversed((res.stdout or "").strip().splitlines()[-5:]):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            break
    if not isinstance(answer, dict) or not isinstance(answer.get("attest"), dict):
        why = (answer or {}).get("error") if isinstance(answer, dict) else None
        why = why or (res.stderr or res.stdout or "").strip()[-300:] or f"exit {res.exit_status}"
        return {"attest": None, "jobs": [], "error": clip(str(why), 400)}
    jobs = [j for j in answer.get("jobs") or [] if isinstance(j, dict)][:500]
    return {"attest": answer["attest"], "jobs": jobs, "error": None}


__all__ = ["ENV_RECORD", "RECORD_PATH", "command", "expectation", "publish", "pull",
           "record_path", "verdict"]
