"""``provisioner export deepspeed|env``: what a training job needs on a node, taken from the
ledger's latest verification of that node (read-only, like ``status`` and ``history``).

``export deepspeed`` prints DeepSpeed's ``"aio"`` config block. ``use_gds`` is true only for a
node whose latest record proved the direct path (the same proof ``verify`` requires for
compliance: :attr:`provisioner.verify.model.IoTestResult.direct_proven`), is reachable, and is
not older than ``--max-age``; any other node gets ``use_gds: false`` and the reason on stderr.
Block size, queue depth and parallelism come from the inventory (``gds_deepspeed_aio_*``) or
DeepSpeed's own defaults.

``export env`` prints the environment of a kvikio-based job on one node:
``KVIKIO_COMPAT_MODE`` (``OFF`` on a proven node, so a lost direct path fails loudly instead of
silently running through POSIX; ``ON`` elsewhere, so kvikio never tries cuFile),
``CUFILE_ENV_PATH_JSON`` (a cufile.json that existed on the node, preferably one with
allow_compat_mode false), ``CUFILE_ALLOW_COMPAT_MODE=false`` with ``OFF`` (as in the proof) and
``GDSFLEET_GDS_MOUNT`` (the directory the controller asked the I/O test to use).

A proof counts only as :func:`provisioner.verify.proof.unproven_reason` allows (a current proof
kind that agrees with the facts of the same verification). Every value printed comes from the
ledger, i.e. from a node or an inventory: each format is quoted for its consumer and values it
cannot carry safely are left out (see :mod:`provisioner.envfile`, docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from provisioner.envfile import _DOTENV_BARE, _printable, render_env, safe_env
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.store import open_read_only
from provisioner.store.location import display_url, resolve_ledger
from provisioner.verify import proof
from provisioner.verify.model import NodeReport

HELP = "print a training job's GDS settings (DeepSpeed aio block, kvikio env) from the ledger"

# ---------------------------------------------------------------------------------------------
# DeepSpeed's "aio" keys, as read in deepspeedai/DeepSpeed
# deepspeed/runtime/swap_tensor/constants.py and aio_config.py (get_aio_config):
#   v0.15.0 (commit 5f0d177, "DeepNVMe GDS" #5852) added "use_gds";
#   v0.16.4 (tag e2dc3ee; commit c9da489, "Rename aio_thread_count to intra_op_parallelism"
#   #7056) renamed "thread_count" to "intra_op_parallelism";
#   unchanged since, through v0.19.5 (tag cf44300) and master edaa722 (2026-08-22).
# get_scalar_param() reads each key with a default and ignores keys it does not know, so a
# block with the other release's name is accepted silently and that setting falls back to 1.
# Before 0.15.0 there is no "use_gds" at all: refused.
DS_FIRST_GDS = (0, 15, 0)
DS_RENAME = (0, 16, 4)
DS_NEWEST_CHECKED = (0, 19, 5)
# DeepSpeed's defaults (AIO_*_DEFAULT in the same constants.py, equal in every release above).
DS_DEFAULTS: dict[str, Any] = {
    "block_size": 1048576,
    "queue_depth": 8,
    "intra_op_parallelism": 1,
    "single_submit": False,
    "overlap_events": True,
}
# Inventory variables (host_vars/group_vars) that set them, and their types.
INVENTORY_PREFIX = "gds_deepspeed_aio_"
_INT_SETTINGS = ("block_size", "queue_depth", "intra_op_parallelism")
_BOOL_SETTINGS = ("single_submit", "overlap_events")

DEFAULT_MAX_AGE = "7d"
ENV_MOUNT = "GDSFLEET_GDS_MOUNT"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    ds = sub.add_parser(
        "deepspeed", help="DeepSpeed's \"aio\" block (use_gds only where the direct path was "
                          "proven)",
        description="Print DeepSpeed's \"aio\" config block for a node or a group, from the "
                    "ledger's latest verification. use_gds is true only for nodes whose direct "
                    "path was proven; others get false and the reason on stderr.")
    _selection_arguments(ds, groups=True)
    ds.add_argument("--deepspeed-version", default="current", metavar="VERSION",
                    help="DeepSpeed release the block is for: 'current' (>= 0.16.4: "
                         "intra_op_parallelism), or e.g. 0.15.4 (0.15.0-0.16.3: thread_count); "
                         "releases before 0.15.0 have no use_gds and are refused")
    ds.add_argument("--per-node", action="store_true",
                    help="print one block per node ({\"nodes\": {NODE: {\"aio\": ...}}}) "
                         "instead of one block for all")
    ds.add_argument("--require-gds", action="store_true",
                    help="exit 1 when some selected node gets use_gds false (the block is "
                         "still printed)")
    env = sub.add_parser(
        "env", help="the environment of a kvikio-based job on one node",
        description="Print the environment a kvikio-based job needs on one node: "
                    "KVIKIO_COMPAT_MODE, CUFILE_ENV_PATH_JSON, CUFILE_ALLOW_COMPAT_MODE and "
                    "GDSFLEET_GDS_MOUNT. Values are quoted for the format's reader; a value "
                    "that cannot be carried safely (control characters; ' or \\ in dotenv) "
                    "is left out, with the reason on stderr and exit 1.")
    _selection_arguments(env, groups=False)
    env.add_argument("--format", choices=("shell", "dotenv", "json"), default="shell",
                     help="shell: `export K='V'` lines (default); dotenv: K=V / K='V' lines "
                          "read alike by bash `set -a; .`, python-dotenv and systemd "
                          "EnvironmentFile; json")
    env.add_argument("--allow-fallback", action="store_true",
                     help="KVIKIO_COMPAT_MODE=AUTO instead of OFF on a proven node: a node that "
                          "loses its direct path then runs through POSIX, silently, instead "
                          "of failing")
    env.add_argument("--require-gds", action="store_true",
                     help="exit 1 when the node's direct path is not proven (the environment "
                          "is still printed)")


def _selection_arguments(p: argparse.ArgumentParser, *, groups: bool) -> None:
    if groups:
        p.add_argument("--node", action="append", metavar="NODE",
                       help="node name as in the ledger (repeatable)")
        # two options (one meaning), so that an error names the one the operator typed
        p.add_argument("-l", "--limit", dest="limit", metavar="PATTERN",
                       help="Ansible host pattern selecting nodes (needs -i)")
        p.add_argument("--group", dest="group", metavar="GROUP",
                       help="an inventory group (needs -i); the same as --limit GROUP")
    else:
        p.add_argument("--node", required=True, metavar="NODE",
                       help="node name as in the ledger")
    p.add_argument("--ledger", metavar="PATH|URL",
                   help="compliance ledger (SQLite path or postgresql+psycopg:// URL); default "
                        "$GDSFLEET_LEDGER, else the inventory's default ledger")
    p.add_argument("-i", "--inventory", metavar="INVENTORY",
                   help="inventory whose host/group vars give the settings (gds_deepspeed_aio_*, "
                        "nvme_mount_point) and whose default ledger is read")
    p.add_argument("--max-age", default=DEFAULT_MAX_AGE, metavar="AGE",
                   help="a verification older than this is stale and proves nothing: 90m, "
                        "36h, 7d (default %(default)s); 0 for no limit")


# ---------------------------------------------------------------------------------------------
@dataclass
class NodeState:
    """What the ledger says about one node, for a job's settings."""

    node: str
    use_gds: bool
    reason: str = ""  # why use_gds is false
    notes: list[str] = field(default_factory=list)  # other things to know (stderr)
    record: Mapping[str, Any] | None = None
    report: NodeReport | None = None


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def parse_age(value: str) -> timedelta | None:
    """``90m``, ``36h``, ``7d``, ``3600`` (seconds), ``0`` (no limit: None)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
    if not m:
        raise UsageError(f"--max-age {value!r}: give a number with s, m, h or d (e.g. 7d, 36h)")
    n = float(m.group(1))
    if n == 0:
        return None
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return timedelta(seconds=n * unit)
    except OverflowError:  # beyond datetime's 999,999,999 days
        raise UsageError(f"--max-age {value!r} is too large; give at most 9999999d, or 0 for "
                         f"no limit") from None


def _parse_at(at: str) -> datetime | None:
    try:
        return datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return None


def _human(delta: timedelta) -> str:
    s = int(delta.total_seconds())
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} hours"
    return f"{max(s, 0) // 60} minutes"


def node_state(node: str, record: Mapping[str, Any] | None, *, max_age: timedelta | None,
               now: datetime, ledger: str) -> NodeState:
    """Decide use_gds for one node from its latest ledger record (None: never verified)."""
    if record is None:
        return NodeState(node, False, f"never verified in the ledger {ledger}: run "
                                      f"`provisioner verify` on it first")
    at = str(record.get("at") or "")
    if not record.get("reachable"):
        return NodeState(node, False, f"unreachable in its latest verification ({at}): "
                                      f"{record.get('error') or 'no detail'}", record=record)
    report = NodeReport.from_dict(dict(record.get("report") or {"name": node}))
    io = report.io_test
    # Today's proof rule, applied again to what the ledger holds: an old proof kind, or a proof
    # the same verification's facts contradict, proves nothing (provisioner.verify.proof).
    refused = proof.unproven_reason(io, report.facts)
    if refused:
        return NodeState(node, False, f"direct path not proven at {at} (route {report.route}, "
                                      f"I/O path {io.path_taken}): {refused}",
                         record=record, report=report)
    if not io.direct_proven:
        why = " ".join(str(io.reason or "no I/O test result").split())
        if len(why) > 300:
            why = why[:297] + "..."
        return NodeState(node, False, f"direct path not proven at {at} (route {report.route}, "
                                      f"I/O path {io.path_taken}): {why}",
                         record=record, report=report)
    when = _parse_at(at)
    if max_age is not None and (when is None or now - when > max_age):
        age = _human(now - when) if when else "of unknown age"
        return NodeState(node, False, f"its proof is stale: verified {at}, {age} ago, more than "
                                      f"--max-age allows; run `provisioner verify` on it again",
                         record=record, report=report)
    st = NodeState(node, True, record=record, report=report)
    if not record.get("compliant"):
        failing = ", ".join(record.get("failing") or []) or "see `provisioner history`"
        st.notes.append(f"direct path proven at {at}, but the node is NOT COMPLIANT "
                        f"(failing/warning: {failing}); use_gds stays true")
    return st


# the words every report uses (provisioner.reports.model.simulated_line), for one node
SIMULATED_NOTE = ("SIMULATED: the inventory marks this node simulated (gdsfleet_simulated): "
                  "its proof comes from stand-in hardware, not a proof of GPUDirect Storage on "
                  "a real node")


def simulated(record: Mapping[str, Any] | None) -> bool:
    """Does the node's latest record carry the inventory's simulation mark (JSON true only)?"""
    return bool(record) and (record or {}).get("simulated") is True


def _states(args: argparse.Namespace, names: Sequence[str]) -> tuple[list[NodeState], str]:
    location = resolve_ledger(args.ledger, args.inventory)
    shown = display_url(location)
    max_age = parse_age(args.max_age)
    now = utc_now()
    with open_read_only(location) as ledger:  # never creates anything
        if len(names) == 1:
            rec = ledger.latest_for(names[0])
            records = {names[0]: rec} if rec else {}
        else:
            records = {r["node"]: r for r in ledger.latest()}
    return [node_state(n, records.get(n), max_age=max_age, now=now, ledger=shown)
            for n in names], shown


def _select(args: argparse.Namespace) -> tuple[list[str], dict[str, Mapping[str, Any]]]:
    """Node names in order, and each one's inventory vars (empty without -i)."""
    nodes = args.node if isinstance(args.node, list) else ([args.node] if args.node else [])
    from provisioner.validate import check_node_name

    for n in nodes:
        check_node_name("--node", n)
    given = [(opt, val) for opt, val in (("--limit", getattr(args, "limit", None)),
                                         ("--group", getattr(args, "group", None))) if val]
    if len(given) > 1:
        raise UsageError("give --limit or --group, not both (they select the same way)")
    opt, limit = given[0] if given else ("", None)
    if limit and not args.inventory:
        raise UsageError(f"{opt} {limit!r} needs -i INVENTORY (group membership is in the "
                         f"inventory); or name nodes with --node")
    if limit and nodes:
        raise UsageError(f"give --node or {opt}, not both")
    if not args.inventory:
        if not nodes:
            raise UsageError("name the node(s): --node NAME, or -i INVENTORY [--group GROUP]"
                             if hasattr(args, "group") else "name the node: --node NAME")
        return list(dict.fromkeys(nodes)), {}
    from provisioner.inventory import load_inventory

    inv = load_inventory(args.inventory, limit)
    from provisioner.identifiers import protect

    protect(inv.names(), "a node name")  # never masked in any output (issue 45)
    by_name = {n.name: n.vars for n in inv.nodes}
    if not nodes:
        return inv.names(), by_name
    unknown = [n for n in nodes if n not in by_name]
    if unknown:
        # without -i: deepspeed takes DeepSpeed's defaults, env the node's verified mount
        without = ("DeepSpeed's defaults for the aio settings" if hasattr(args, "group")
                   else "the ledger's record only (the mount the verification used)")
        raise UsageError(f"{', '.join(unknown)} not in the inventory {args.inventory!r}; check "
                         f"the name, or leave out -i to use {without}")
    return list(dict.fromkeys(nodes)), by_name


# ---------------------------------------------------------------------------------------------
def parse_deepspeed_version(value: str) -> tuple[int, int, int]:
    """``current`` -> the newest release checked; ``0.15.4``, ``0.16.4+cu12``, ``0.17`` -> tuple."""
    if str(value).strip().lower() in ("current", "latest"):
        return DS_NEWEST_CHECKED
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(value))
    if not m:
        raise UsageError(f"--deepspeed-version {value!r}: give a release such as 0.16.4, or "
                         f"'current'")
    version = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if version < DS_FIRST_GDS:
        raise UsageError(f"DeepSpeed {value} has no aio.use_gds (GDS support came in 0.15.0): "
                         f"upgrade DeepSpeed to 0.15.0 or later")
    return version


def parallelism_key(version: tuple[int, int, int]) -> str:
    return "intra_op_parallelism" if version >= DS_RENAME else "thread_count"


def inventory_settings(node: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The aio settings of a node: DeepSpeed's defaults overlaid with gds_deepspeed_aio_*."""
    out = dict(DS_DEFAULTS)
    known = {INVENTORY_PREFIX + k for k in (*_INT_SETTINGS, *_BOOL_SETTINGS)}
    for var, raw in sorted(hostvars.items()):
        if not var.startswith(INVENTORY_PREFIX):
            continue
        if var not in known:
            hint = (f"; use {INVENTORY_PREFIX}intra_op_parallelism (the key name DeepSpeed "
                    f"reads is chosen by --deepspeed-version)" if var.endswith("thread_count")
                    else "")
            raise UsageError(f"inventory host {node!r}: unknown variable {var}{hint}; known: "
                             f"{', '.join(sorted(known))}")
        key = var[len(INVENTORY_PREFIX):]
        if key in _INT_SETTINGS:
            try:
                value = int(str(raw).strip())
            except ValueError:
                value = 0
            if value < 1 or isinstance(raw, bool):
                raise UsageError(f"inventory host {node!r}: {var}={raw!r} must be a whole "
                                 f"number >= 1; fix it in group_vars/ or host_vars/")
            if key == "block_size" and value % 4096:
                raise UsageError(f"inventory host {node!r}: {var}={raw!r} is not a multiple "
                                 f"of 4096 (GDS needs 4 KiB-aligned I/O); e.g. 1048576")
            out[key] = value
        else:
            text = str(raw).strip().lower()
            if text not in ("true", "false", "yes", "no", "1", "0"):
                raise UsageError(f"inventory host {node!r}: {var}={raw!r} must be true or "
                                 f"false; fix it in group_vars/ or host_vars/")
            out[key] = text in ("true", "yes", "1")
    return out


def aio_block(settings: Mapping[str, Any], use_gds: bool,
              version: tuple[int, int, int]) -> dict[str, Any]:
    """The "aio" block in DeepSpeed's key order, with the release's key names."""
    return {
        "block_size": settings["block_size"],
        "queue_depth": settings["queue_depth"],
        parallelism_key(version): settings["intra_op_parallelism"],
        "single_submit": settings["single_submit"],
        "overlap_events": settings["overlap_events"],
        "use_gds": bool(use_gds),
    }


def _say(prog: str, text: str) -> None:
    # One line per message, whatever the ledger's text holds (newlines, escape sequences).
    sys.stderr.write(f"{prog}: {_printable(text, 2000)}\n")


def run_deepspeed(args: argparse.Namespace) -> int:
    prog = "provisioner export deepspeed"
    version = parse_deepspeed_version(args.deepspeed_version)
    parse_age(args.max_age)  # bad input is refused before the inventory or ledger is read
    names, hostvars = _select(args)
    settings = {n: inventory_settings(n, hostvars.get(n) or {}) for n in names}
    states, shown = _states(args, names)
    # stdout is DeepSpeed's JSON: the ledger read is named on stderr's first line, as rollout
    # names its own (issue 30: every command names its ledger first)
    sys.stderr.write(_printable(f"ledger {shown}", 2000) + "\n")
    if version > DS_NEWEST_CHECKED:
        _say(prog, f"note: DeepSpeed {args.deepspeed_version} is newer than the newest release "
                   f"checked ({'.'.join(map(str, DS_NEWEST_CHECKED))}); its key names are assumed")
    blocks: dict[str, dict[str, Any]] = {}
    for st in states:
        if not st.use_gds:
            _say(prog, f"{st.node}: use_gds false: {st.reason}")
        for note in st.notes:
            _say(prog, f"{st.node}: {note}")
        blocks[st.node] = aio_block(settings[st.node], st.use_gds, version)
    unproven = [st.node for st in states if not st.use_gds]
    marked = {st.node for st in states if simulated(st.record)}
    if marked and not args.per_node:  # DeepSpeed's own block has no room for it: stderr
        _say(prog, f"SIMULATED: {_names(sorted(marked))}: the inventory marks "
                   f"{'it' if len(marked) == 1 else 'them'} simulated (gdsfleet_simulated); "
                   f"use_gds comes from stand-in hardware, not from a real node")
    if args.per_node:
        doc: dict[str, Any] = {"nodes": {
            n: {"aio": b, **({"simulated": True} if n in marked else {})}
            for n, b in blocks.items()}}
    else:
        differ = _differences(blocks)
        if differ:
            _say(prog, f"the {len(blocks)} nodes do not share one aio block: "
                       + "; ".join(differ)
                       + ". Pass --per-node for one block per node, or select the nodes that "
                         "agree (--node, --limit)")
            return int(Exit.NOT_COMPLIANT)
        doc = {"aio": next(iter(blocks.values()))}
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return int(Exit.NOT_COMPLIANT) if args.require_gds and unproven else int(Exit.OK)


def _differences(blocks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per key that differs: which nodes have which value (empty when all agree)."""
    out = []
    keys = next(iter(blocks.values())).keys() if blocks else ()
    for key in keys:
        by_value: dict[str, list[str]] = {}
        for node, block in blocks.items():
            by_value.setdefault(json.dumps(block[key]), []).append(node)
        if len(by_value) > 1:
            out.append(f"{key} " + ", ".join(f"{v} on {_names(ns)}" for v, ns in
                                             by_value.items()))
    return out


def _names(nodes: list[str], most: int = 8) -> str:
    return ", ".join(nodes[:most]) + (f" and {len(nodes) - most} more" if len(nodes) > most
                                      else "")


# ---------------------------------------------------------------------------------------------
def _usable_cufile(entry: Mapping[str, Any]) -> bool:
    path = entry.get("path")
    return (isinstance(path, str) and path.startswith("/") and bool(entry.get("exists"))
            and entry.get("valid") is not False)


def cufile_candidates(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cufile.json files the verification saw on the node, in order of preference: the one
    the gather read (cuFile's own lookup: ``$CUFILE_ENV_PATH_JSON``, else /etc/cufile.json),
    then the others it looked at (``cufile_files``: /etc/cufile.json and the CUDA toolkit's
    gds/cufile.json). Each: path, exists, valid, allow_compat_mode (None: unknown)."""
    out: list[dict[str, Any]] = []
    cf = facts.get("cufile") or {}
    if isinstance(cf, Mapping) and cf.get("path"):
        out.append({"path": cf.get("path"), "exists": bool(cf.get("present")),
                    "valid": cf.get("valid"), "allow_compat_mode": cf.get("allow_compat_mode")})
    for entry in facts.get("cufile_files") or []:
        if isinstance(entry, Mapping) and entry.get("path"):
            out.append({k: entry.get(k) for k in ("path", "exists", "valid",
                                                   "allow_compat_mode")})
    seen: set[str] = set()
    unique = []
    for entry in out:
        if str(entry["path"]) not in seen:
            seen.add(str(entry["path"]))
            unique.append(entry)
    return unique


def cufile_environment(facts: Mapping[str, Any], strict: bool
                       ) -> tuple[dict[str, str], list[str]]:
    """CUFILE_ENV_PATH_JSON (and, with ``strict``, CUFILE_ALLOW_COMPAT_MODE=false) for a job.

    ``strict`` (KVIKIO_COMPAT_MODE=OFF on a proven node): the job must not fall back to POSIX
    inside cuFile either, as in the I/O test, which ran with allow_compat_mode false in a
    test-scoped cufile.json and CUFILE_ALLOW_COMPAT_MODE=false. The path exported is a file that
    existed on the node, preferably one whose allow_compat_mode is false; the override is
    exported in every case (cuFile honours it over the file: the H100 capture
    tests/fixtures/iotest/h100-kvikio-26.10_no-nvidia-fs_1GiB.yml reads allow_compat_mode false
    through kvikio with the variable set while /etc/cufile.json says true; NVIDIA's GDS
    Installation and Troubleshooting Guide lists it among cuFile's environment variables)."""
    env: dict[str, str] = {}
    notes: list[str] = []
    found = [c for c in cufile_candidates(facts) if _usable_cufile(c)]
    strict_files = [c for c in found if c.get("allow_compat_mode") is False]
    checked = ", ".join(str(c["path"]) for c in cufile_candidates(facts)) or "none recorded"
    chosen = (strict_files or found)[0] if (strict_files or found) else None
    if chosen is not None:
        env["CUFILE_ENV_PATH_JSON"] = str(chosen["path"])
    if not strict:
        if chosen is None:
            notes.append(f"no cufile.json found on the node in the latest verification "
                         f"(looked at: {checked}); CUFILE_ENV_PATH_JSON not set")
        return env, notes
    env["CUFILE_ALLOW_COMPAT_MODE"] = "false"
    if chosen is None:
        notes.append(f"no cufile.json found on the node in the latest verification (looked "
                     f"at: {checked}): CUFILE_ENV_PATH_JSON not set, cuFile runs on its "
                     f"built-in defaults, which allow compat mode; "
                     f"CUFILE_ALLOW_COMPAT_MODE=false keeps it off. Install one with "
                     f"allow_compat_mode false (role gdsfleet.gds.cufile)")
    elif chosen.get("allow_compat_mode") is not False:
        state = ("allows compat mode (properties.allow_compat_mode true)"
                 if chosen.get("allow_compat_mode") else
                 "does not say whether it allows compat mode")
        notes.append(f"{chosen['path']} {state}, unlike the I/O test's config; "
                     f"CUFILE_ALLOW_COMPAT_MODE=false keeps cuFile from falling back to POSIX. "
                     f"Set properties.allow_compat_mode false there (role gdsfleet.gds.cufile)")
    return env, notes


def job_environment(st: NodeState, hostvars: Mapping[str, Any], *,
                    allow_fallback: bool = False) -> tuple[dict[str, str], list[str]]:
    """The environment of a kvikio job on this node, and notes on what is missing."""
    env: dict[str, str] = {}
    notes: list[str] = []
    # OFF on a proven node: kvikio raises when cuFile cannot take a file, instead of AUTO's
    # silent fallback to POSIX (gds-reference.md section 8; kvikio compat_mode_manager.cpp).
    # ON elsewhere: kvikio never calls cuFile, the one path the node was seen to take.
    if st.use_gds:
        env["KVIKIO_COMPAT_MODE"] = "AUTO" if allow_fallback else "OFF"
    else:
        env["KVIKIO_COMPAT_MODE"] = "ON"
    facts: Mapping[str, Any] = (st.report.facts if st.report else None) or {}
    cu_env, cu_notes = cufile_environment(facts, strict=env["KVIKIO_COMPAT_MODE"] == "OFF")
    env.update(cu_env)
    notes.extend(cu_notes)
    # The directory the controller asked the I/O test to use (facts.io_path, set by verify),
    # never the node's echo of it; records written before that rule fall back to io_test.path.
    mount = facts.get("io_path")
    if not mount and st.report is not None:
        mount = st.report.io_test.path
    mount = mount or hostvars.get("nvme_mount_point")
    if mount:
        env[ENV_MOUNT] = str(mount)
    else:
        notes.append(f"no GDS mount known (no verification, no nvme_mount_point in the "
                     f"inventory); {ENV_MOUNT} not set")
    return env, notes


# Quoting: provisioner.envfile (shell and dotenv, the values refused).


def run_env(args: argparse.Namespace) -> int:
    prog = "provisioner export env"
    parse_age(args.max_age)
    names, hostvars = _select(args)
    (st,), shown = _states(args, names)
    if st.record is None:
        # an error, not a default: a typo or the wrong ledger must not print a job's settings
        raise UsageError(f"{st.node}: {st.reason} (or pass the ledger that verified it: "
                         f"--ledger, or -i its inventory); nothing printed")
    env, notes = job_environment(st, hostvars.get(st.node) or {},
                                 allow_fallback=args.allow_fallback)
    env, refused = safe_env(env, args.format)
    if simulated(st.record):
        _say(prog, f"{st.node}: {SIMULATED_NOTE}")
    if not st.use_gds:
        _say(prog, f"{st.node}: direct path not usable, KVIKIO_COMPAT_MODE=ON: {st.reason}")
    for note in [*st.notes, *notes, *refused]:
        _say(prog, f"{st.node}: {note}")
    if args.format == "dotenv" and any(not _DOTENV_BARE.fullmatch(v) for v in env.values()):
        _say(prog, f"{st.node}: note: quoted values are read without their quotes by bash, "
                   f"python-dotenv and systemd, but not by docker --env-file")
    rec = st.record or {}
    sim = simulated(rec)
    if args.format == "json":
        json.dump({"node": st.node, "use_gds": st.use_gds, "reason": st.reason or None,
                   "simulated": sim, "verified_at": rec.get("at"), "run_id": rec.get("run_id"),
                   "ledger": shown, "env": env}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        # the reason itself (a stale proof is not "compat I/O", issue 47), and the mark
        state = (f"direct path proven at {rec.get('at')} (run {rec.get('run_id')})" if st.use_gds
                 else f"KVIKIO_COMPAT_MODE=ON (POSIX I/O): {st.reason}")
        if sim:
            state = f"SIMULATED node (gdsfleet_simulated, stand-in hardware): {state}"
        header = [f"gdsfleet: {st.node}: {state}; ledger {shown}"]
        if args.format != "shell" and not sim:  # dotenv: a comment only for the mark
            header = []
        sys.stdout.write(render_env(env, args.format, header=header))
    if refused:
        return int(Exit.NOT_COMPLIANT)
    return int(Exit.NOT_COMPLIANT) if args.require_gds and not st.use_gds else int(Exit.OK)


def run(args: argparse.Namespace) -> int:
    if args.what == "deepspeed":
        return run_deepspeed(args)
    return run_env(args)
