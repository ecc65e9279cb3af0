"""verify_node: one node, one SSH session: gather (one round trip), I/O test, checks, report."""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from provisioner.errors import ConnectError
from provisioner.remote import load_script
from provisioner.sanitize import MAX_ITEM_CHARS, clip, human_bytes
from provisioner.verify import checks as checks_mod
from provisioner.verify import gdsio as gdsio_mod
from provisioner.verify import iostats, iotest
from provisioner.verify.facts import build_facts, raw_outputs
from provisioner.verify.model import (
    FAIL,
    GIB,
    PATH_FAILED,
    PATH_SKIPPED,
    CheckResult,
    CommandRunner,
    GdsioResult,
    IoTestOptions,
    IoTestResult,
    NodeReport,
)
from provisioner.verify.policy import Policy

GATHER_SCRIPT = "gather.py"
GATHER_COMMAND = "python3 -"
GATHER_TIMEOUT_S = 180.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def unreachable_report(name: str, error: str | BaseException) -> NodeReport:
    """The report of a node that could not be reached (the caller caught ConnectError)."""
    message = str(error)
    return NodeReport(
        name=name,
        reachable=False,
        compliant=False,
        route="unknown",
        checks=[CheckResult("node.reachable", FAIL, "reachable over SSH", "unreachable",
                            f"{message}. Check the address, SSH key and host key, then retry.")],
        io_test=IoTestResult(path_taken=PATH_SKIPPED, reason="node unreachable"),
        error=message,
        started_at=_now(),
    )


def _parse_gather(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                return None
            if isinstance(doc, dict) and "gdsfleet_gather" in doc:
                return doc
    return None


def _bounded_items(doc: dict[str, Any]) -> dict[str, Any]:
    """The gather document with every item larger than ``MAX_ITEM_CHARS`` (twice what the
    gather script itself keeps) replaced by a failed item that says so: a node that answers
    with one huge item gets that item's checks failed, and the controller never parses it."""
    items = doc.get("items")
    if not isinstance(items, dict):
        return doc
    bounded: dict[str, Any] = {}
    for key, item in items.items():
        if isinstance(item, dict):
            size = sum(len(v) for v in item.values() if isinstance(v, str))
            if size > MAX_ITEM_CHARS:
                item = {"rc": None, "out": "",
                        "err": f"output too large: {size} characters (the controller reads at "
                               f"most {human_bytes(MAX_ITEM_CHARS)} of one item)"}
        bounded[key] = item
    return {**doc, "items": bounded}


def _bounded_raw(raw: dict[str, str]) -> dict[str, str]:
    """The raw texts kept in the report and the ledger, each at most ``MAX_RAW_CHARS``."""
    return {k: clip(v) for k, v in raw.items() if v}


def choose_io_path(facts: dict[str, Any], io: IoTestOptions, policy: Policy) -> str:
    """``io.path`` when given; else the policy's GDS mount when it is mounted; else the first
    NVMe-backed mount that is not a system mount; else the first network-filesystem mount of
    the policy's ``network_filesystems``; else the policy's GDS mount."""
    if io.path:
        return io.path
    default = policy.gds_mount or io.default_path
    st = facts.get("storage") or {}
    mounts = st.get("mounts") or []
    if any(m.get("target") == default for m in mounts):
        return default
    for target in st.get("nvme_mounts") or []:
        if target not in ("/", "/boot", "/boot/efi", "/home", "/var"):
            return str(target)
    # a node fed from network storage: its first mount of a filesystem GDS reaches over RDMA
    # (the policy's network_filesystems), judged by fs.mount.type like a local one
    for m in mounts:
        if m.get("fstype") in policy.network_filesystems and m.get("target") not in (
                "/", "/home"):
            return str(m.get("target"))
    return default


def verify_node(runner: CommandRunner, name: str, policy: Policy, io: IoTestOptions) -> NodeReport:
    """Verify one node. Never raises for node-side problems (they become failed checks); a
    ConnectError from the transport propagates for the caller to turn into
    :func:`unreachable_report`."""
    started_at = _now()
    t0 = time.monotonic()
    raw: dict[str, str] = {}
    try:
        res = runner.run(GATHER_COMMAND, timeout=GATHER_TIMEOUT_S,
                         stdin=load_script(GATHER_SCRIPT))
        raw["gather_stderr"] = res.stderr[-4000:] if res.stderr.strip() else ""
        doc = _parse_gather(res.stdout)
        if doc is None:
            why = ("python3 is not installed on the node (the verification scripts need it)"
                   if res.exit_status == 127 else
                   f"the gather script produced no report (exit {res.exit_status}): "
                   f"{(res.stderr or res.stdout).strip()[-400:]}")
            raw["gather"] = res.stdout[-20000:]
            return NodeReport(
                name=name, reachable=True, compliant=False, route="unknown",
                checks=[CheckResult("node.gather", FAIL, "gather report", "none",
                                    why + ". Install python3 (3.8+) on the node and retry.")],
                io_test=IoTestResult(path_taken=PATH_SKIPPED, reason="no facts"),
                raw=_bounded_raw(raw),
                error=why, started_at=started_at, duration_s=time.monotonic() - t0,
            )
        doc = _bounded_items(doc)
        raw.update(raw_outputs(doc))
        facts = build_facts(doc)
        route = checks_mod.determine_route(facts)
        io_path = choose_io_path(facts, io, policy)
        facts["io_path"] = io_path
        facts["route_evidence"] = checks_mod.route_evidence(facts)
        facts["policy"] = policy.to_dict()
        io_opts = io
        if not io.size_explicit and io.size_bytes == GIB and policy.io_test_size != GIB:
            io_opts = replace(io, size_bytes=policy.io_test_size)
        if not io_opts.enabled:
            io_result = IoTestResult(path_taken=PATH_SKIPPED, reason="I/O test disabled",
                                     path=io_path)
        else:
            op = facts.get("operator") or {}
            io_result, io_raw = iotest.run_io_test(
                runner, io_opts, io_path, route=route, runtime=facts.get("verify_runtime"),
                library_path=iotest.operator_library_path(
                    op.get("driver_root") if op.get("managed") else None),
                operator=bool(op.get("managed")),
                netfs=iostats.netfs_context(facts, io_path))
            raw["io_test"] = io_raw[-20000:]
        gdsio_result: GdsioResult | None = None
        gdsio_check: CheckResult | None = None
        if io.gdsio is not None:
            gd_opts = gdsio_mod.effective(io.gdsio, io_opts.aligned_size())
            gdsio_result, gdsio_check, gd_raw = gdsio_mod.run_gdsio(
                runner, gd_opts, io_path, policy.gdsio_min_ratio, io_test=io_result)
            raw["gdsio"] = gd_raw[-20000:]
        route, check_list, compliant = checks_mod.evaluate(
            facts, io_result, policy, route=route, io_path=io_path)
        if gdsio_check is not None:
            check_list = [*check_list, gdsio_check]
            compliant = compliant and gdsio_check.status != FAIL
        return NodeReport(
            name=name, reachable=True, compliant=compliant, route=route, checks=check_list,
            io_test=io_result, facts=facts, raw=_bounded_raw(raw),
            error=None, started_at=started_at, duration_s=time.monotonic() - t0,
            gdsio=gdsio_result,
        )
    except ConnectError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug or odd node must not stop the fleet
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raw["traceback"] = traceback.format_exc()[-8000:]
        return NodeReport(
            name=name, reachable=True, compliant=False, route="unknown",
            checks=[CheckResult("node.verify", FAIL, "verification completes", detail,
                                "The verification could not be evaluated (see raw.traceback); "
                                "please report this with the raw outputs.")],
            io_test=IoTestResult(path_taken=PATH_FAILED, reason=detail),
            raw=_bounded_raw(raw), error=detail, started_at=started_at,
            duration_s=time.monotonic() - t0,
        )
