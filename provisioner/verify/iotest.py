"""The kvikio I/O test, controller side: which interpreter runs it on the node, the remote
command, running it and reading the last JSON document it printed. What that document proves
(the path the data took, and with what evidence) is judged in :mod:`provisioner.verify.iojudge`
(docs/checks.md, ``io.direct_path``); :func:`evaluate` is that judgement, named here for
callers that run and judge in one place.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, replace
from typing import Any

from provisioner.remote import load_script
from provisioner.verify.iojudge import evaluate as evaluate
from provisioner.verify.model import (
    PATH_FAILED,
    PATH_SKIPPED,
    CommandRunner,
    IoTestOptions,
    IoTestResult,
)

SCRIPT = "iotest.py"
# The verification runtime (kvikio + cupy): installed by this role, recorded in this fact file
# (read by the gather script); without it the test runs with the node's plain python3.
RUNTIME_ROLE = "gdsfleet.gds.verify_runtime"
RUNTIME_FACT_FILE = "/etc/ansible/facts.d/gdsfleet_verify_runtime.fact"
FALLBACK_PYTHON = "python3"
# Seconds on top of the attempts' own limit for interpreter start, stats and clean-up.
_SLACK_S = 60.0
# KVIKIO_GDS_THRESHOLD set for the direct attempt: kvikio sends pread/pwrite calls smaller than
# this through POSIX even with compat mode off (rapidsai/kvikio cpp/src/file_handle.cpp, the
# "size < gds_threshold" shortcut). 4 KiB, the GDS alignment unit, keeps every test size on cuFile.
GDS_THRESHOLD_BYTES = 4096


@dataclass(frozen=True)
class Interpreter:
    """Which interpreter runs the I/O test, and why."""

    python: str
    source: str  # "fact_file" (the role's runtime) or "fallback" (plain python3)
    note: str

    def to_dict(self) -> dict[str, str]:
        return {"python": self.python, "source": self.source, "note": self.note}


def choose_interpreter(runtime: dict[str, Any] | None) -> Interpreter:
    """The fact file's interpreter when the file names one; else the node's ``python3`` (pure).
    ``runtime`` is ``facts["verify_runtime"]`` (provisioner.verify.facts)."""
    rt = runtime or {}
    python = rt.get("python")
    if rt.get("present") and isinstance(python, str) and python:
        return Interpreter(python, "fact_file", f"from {RUNTIME_FACT_FILE}")
    if rt.get("present"):
        return Interpreter(FALLBACK_PYTHON, "fallback",
                           f"{RUNTIME_FACT_FILE} is unusable ({rt.get('error')}); "
                           f"falling back to {FALLBACK_PYTHON}")
    if rt.get("error"):
        return Interpreter(FALLBACK_PYTHON, "fallback",
                           f"{RUNTIME_FACT_FILE}: {rt.get('error')}; "
                           f"falling back to {FALLBACK_PYTHON}")
    return Interpreter(FALLBACK_PYTHON, "fallback",
                       f"no {RUNTIME_FACT_FILE}; falling back to {FALLBACK_PYTHON}")


def runtime_missing_reason(interp: Interpreter, detail: str) -> str:
    """The I/O test's reason when kvikio/cupy are not usable (pure)."""
    where = (f"the interpreter {interp.python} named in {RUNTIME_FACT_FILE}"
             if interp.source == "fact_file"
             else f"{interp.python} ({interp.note})")
    return (f"verification runtime missing: {detail} [{where}]. The role {RUNTIME_ROLE} "
            f"(the last role of playbooks/site.yml) installs kvikio and cupy into a virtual "
            f"environment (/opt/gdsfleet/venv) and records it in {RUNTIME_FACT_FILE}: run "
            f"site.yml, or that role, on this node")


def operator_library_path(driver_root: str | None) -> str | None:
    """LD_LIBRARY_PATH for the I/O test on a GPU Operator node: the host has no libcuda of its
    own, the operator's driver container keeps it under its root (/run/nvidia/driver)."""
    if not driver_root:
        return None
    return ":".join(f"{driver_root}/{d}" for d in ("usr/lib/x86_64-linux-gnu",
                                                   "usr/lib/aarch64-linux-gnu", "usr/lib64"))


def command(options: IoTestOptions, path: str, python: str = FALLBACK_PYTHON,
            library_path: str | None = None) -> str:
    args = {
        "path": path,
        "size_bytes": options.aligned_size(),
        "keep_file": options.keep_file,
        "timeout_s": options.timeout_s,
        "enable_rw_stats": options.enable_rw_stats,
        "try_compat": options.try_compat,
        "gds_threshold": GDS_THRESHOLD_BYTES,
        "cufile_log": True,
    }
    prefix = f"env LD_LIBRARY_PATH={shlex.quote(library_path)} " if library_path else ""
    return prefix + shlex.quote(python) + " - " + shlex.quote(json.dumps(args, sort_keys=True))


def run_io_test(runner: CommandRunner, options: IoTestOptions, path: str, *,
                route: str | None = None,
                runtime: dict[str, Any] | None = None,
                library_path: str | None = None,
                operator: bool = False,
                netfs: dict[str, Any] | None = None) -> tuple[IoTestResult, str]:
    """Run the remote script with the verification runtime's interpreter (``runtime``: the
    gather's ``verify_runtime`` facts; see :func:`choose_interpreter`); return the evaluated
    result and the raw output. Node-side failures become a ``failed``/``skipped`` result;
    ConnectError (transport) propagates."""
    started = time.monotonic()
    attempts = 2 if options.try_compat else 1
    timeout = options.timeout_s * attempts + _SLACK_S
    interp = choose_interpreter(runtime)
    # ConnectError (transport) propagates to verify_node's caller.
    res = runner.run(command(options, path, interp.python, library_path), timeout=timeout,
                     stdin=load_script(SCRIPT))
    raw = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr.strip() else "")
    doc = last_json(res.stdout)
    if doc is None and res.exit_status in (126, 127) and interp.source == "fact_file":
        reason = runtime_missing_reason(
            interp, f"{interp.python} cannot run on the node (exit {res.exit_status}: "
            f"{res.stderr.strip()[-200:]})")
        return (
            IoTestResult(path_taken=PATH_SKIPPED, reason=reason, path=path,
                         evidence={"interpreter": interp.to_dict()},
                         duration_s=time.monotonic() - started),
            raw,
        )
    if doc is None:
        reason = (
            "python3 is not installed on the node"
            if res.exit_status == 127
            else f"the I/O test script produced no report (exit {res.exit_status}): "
            f"{(res.stderr or res.stdout).strip()[-400:]}"
        )
        return (
            IoTestResult(path_taken=PATH_FAILED, reason=reason, path=path,
                         duration_s=time.monotonic() - started),
            raw,
        )
    result = with_interpreter(evaluate(doc, route=route, operator=operator, netfs=netfs),
                              interp)
    return with_requested_path(result, path), raw


def with_requested_path(result: IoTestResult, requested: str) -> IoTestResult:
    """The result's ``path`` is the directory the controller asked the test to use, never the
    node's echo of it (a node's bytes reach job environments through ``export``: issue 17).
    An echo that differs is kept, escaped, in the evidence only (pure)."""
    echoed = result.path
    if echoed == requested:
        return result
    evidence = dict(result.evidence)
    if echoed is not None:
        evidence["node_path"] = ascii(str(echoed)[:200])
    return replace(result, path=requested, evidence=evidence)


def with_interpreter(result: IoTestResult, interp: Interpreter) -> IoTestResult:
    """Record the interpreter in the evidence; a test skipped because cupy or kvikio did not
    import says that the verification runtime is missing and which role installs it (pure)."""
    evidence = dict(result.evidence)
    evidence["interpreter"] = interp.to_dict()
    reason = result.reason
    missing = next((a for a in result.attempts
                    if a.get("missing") in ("kvikio", "cupy")), None)
    if result.path_taken == PATH_SKIPPED and missing is not None:
        reason = runtime_missing_reason(
            interp, str(missing.get("error") or f"{missing.get('missing')} does not import"))
    return replace(result, evidence=evidence, reason=reason)


def last_json(text: str, key: str | None = None) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (holding ``key``, when given): what a
    node-side script printed last, whatever the tools it ran printed before."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                # NaN and Infinity are not JSON: read as null, never carried into a report
                value = json.loads(line, parse_constant=lambda _name: None)
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict) and (key is None or key in value):
                return value
    return None
