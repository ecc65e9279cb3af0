"""gdsfleet attest on a node, sent by the controller: runs ON a node, prints ONE JSON document.

Sent over SSH on stdin to ``python3 - '<request json>'`` (as root, or through ``sudo -n``),
bundled with the collection's node-side attest (plugins/module_utils/attest*.py and
cufile_json.py; provisioner/remote/bundle.py), so a node needs nothing installed. Two modes:

- ``{"mode": "record", ...}`` (``verify``, after it judged the node): take the node's state with
  attest's own code and write it with the verdict to ``/var/lib/gdsfleet/verified.json``
  (atomic, 0644). When the state differs from what the verification's gather saw (``expect``:
  the kernel, nvidia-fs loaded and its version), the node changed while it was verified: the
  record says NOT compliant (``attest.record.changed``), never a state nobody proved.
- ``{"mode": "attest"}`` (``status --attest``): ``gdsfleet-attest --json`` and the node's job
  proofs kept since (``/var/lib/gdsfleet/attest-jobs.jsonl``, the newest ``jobs`` of them).

Stdlib only, Python 3.8+. Output: ``{"gdsfleet_attest_node": 1, ...}`` on the last line.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

# gdsfleet:bundle-begin
from provisioner.remote.bundle import shared as _shared  # controller side; bundle() inlines

# gdsfleet:bundle-end
_attest = _shared("attest.py")
_state = _shared("attest_state.py")
_compare = _shared("attest_compare.py")
_counters = _shared("attest_counters.py")
_cufile_json = _shared("cufile_json.py")
JOBS_MAX = 200


def record_verdict(req: dict) -> dict:
    node = _state.Node(str(req.get("root") or "/"))
    path = str(req.get("path") or _state.RECORD_PATH)
    verdict = dict(req.get("verdict") or {})
    state = _state.snapshot(node, verdict.get("mount_path"), _cufile_json.strip_comments)
    changed = []
    expect = req.get("expect") or {}
    if "kernel" in expect and expect["kernel"] != state.get("kernel"):
        changed.append(f"kernel {expect['kernel']} -> {state.get('kernel')}")
    nv = state.get("nvfs") or {}
    if "nvfs_loaded" in expect and bool(expect["nvfs_loaded"]) != bool(nv.get("loaded")):
        changed.append(f"nvidia-fs loaded {expect['nvfs_loaded']} -> {nv.get('loaded')}")
    elif expect.get("nvfs_version") and nv.get("loaded") and \
            expect["nvfs_version"] != nv.get("version"):
        changed.append(f"nvidia-fs {expect['nvfs_version']} -> {nv.get('version')}")
    if changed and verdict.get("compliant"):
        verdict["compliant"] = False
        verdict["failing"] = list(verdict.get("failing") or []) + ["attest.record.changed"]
    rec = _state.new_record(str(req.get("node") or ""), verdict, state)
    written = _state.write_record(node, rec, path)
    return {"written": written, "compliant": rec["compliant"], "changed": changed}


def run_attest(req: dict) -> dict:
    argv = ["--json"]
    if req.get("root"):
        argv += ["--root", str(req["root"])]
    if req.get("record"):
        argv += ["--record", str(req["record"])]
    out = io.StringIO()
    err = io.StringIO()
    mods = {"attest_state": _state, "attest_compare": _compare, "attest_counters": _counters,
            "cufile_json": _cufile_json}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _attest.main(argv, mods)
    doc = None
    for line in reversed(out.getvalue().splitlines()):
        if line.startswith("{"):
            doc = json.loads(line)
            break
    jobs = []
    node = _state.Node(str(req.get("root") or "/"))
    try:
        data = node.read(_counters.JOBS_LOG, _counters.JOBS_LOG_MAX_BYTES, follow=False) or b""
    except Exception:  # noqa: BLE001 - an unreadable log: no jobs
        data = b""
    since = req.get("jobs_since")
    for line in data.decode("utf-8", "replace").splitlines()[-JOBS_MAX:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (not isinstance(since, (int, float)) or isinstance(
                entry.get("until"), (int, float)) and entry["until"] > since):
            jobs.append(entry)
    return {"exit": code, "attest": doc, "stderr": err.getvalue()[-2000:], "jobs": jobs}


def main() -> int:
    try:
        req = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
        mode = req.get("mode")
        if mode == "record":
            doc = record_verdict(req)
        elif mode == "attest":
            doc = run_attest(req)
        else:
            doc = {"error": f"unknown mode {str(mode)[:40]!r}"}
    except Exception as exc:  # noqa: BLE001 - report, never crash without a document
        doc = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    sys.stdout.write(json.dumps({"gdsfleet_attest_node": 1, **doc}, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
