# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""``gdsfleet-attest`` / ``provisioner attest``: is this node still in the state its last verify
proved? Answers from local files only, in milliseconds, without an I/O test, SSH or network.

Exit codes (stable, docs/operations.md): 0 nothing regressed; 1 at least one regression, or the
node has no usable compliant record (never verified, last verified NOT compliant, a record that
cannot be trusted); 70 attest's own failure (a bug, the ``--deadline`` hit, a file it must read
and may not, an output it could not write). Nothing else.

Output: one line per regression, ``<id>: <what>, <expected> -> <observed>; fix: <fix>`` (escaped,
at most 200 characters), or one ``ok:`` line; ``--json`` the document ``gdsfleet.attest/1``;
``--textfile FILE`` node_exporter metrics; ``--nfd [FILE]`` Node Feature Discovery's local
feature file (the labels ``verify --nfd`` writes, ``compliant=false`` and no ``io-path`` once
the node regressed). ``--job ID`` adds the job's proof (attest_counters.py).

This file, attest_state.py, attest_compare.py, attest_counters.py and cufile_json.py sit beside
each other: in the collection's plugins/module_utils/, in the provisioner wheel
(provisioner/_collection/) and on a node (``/usr/local/lib/gdsfleet/attest/``, role
``gdsfleet.gds.attest``); ``main`` loads its siblings by path unless they are given (``verify``
sends them bundled over SSH, provisioner/remote/attest_node.py). Standard library only,
Python 3.8+; it never imports anything of the provisioner, SQLAlchemy, rich or Ansible.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time

# typing is imported for the type checker only: a node pays for no import it does not need
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "gdsfleet.attest/1"
ENTRY_POINT = "/usr/local/sbin/gdsfleet-attest"
EXIT_OK, EXIT_REGRESSED, EXIT_INTERNAL = 0, 1, 70
LINE_MAX = 200
DEFAULT_DEADLINE = 10.0
NFD_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gdsfleet-gds"
NFD_NS = "gds.feature.node.kubernetes.io"
SIBLINGS = ("attest_state", "attest_compare", "attest_counters", "cufile_json")
_STAGE = {"now": "starting"}


class AttestFailure(Exception):
    """attest's own failure: exit 70 with this one line."""


# --- options -----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", metavar="FILE", default="/var/lib/gdsfleet/verified.json",
                   help="the record verify wrote on this node (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the JSON document")
    p.add_argument("--textfile", metavar="FILE",
                   help="write node_exporter textfile metrics to FILE (atomically)")
    p.add_argument("--nfd", metavar="FILE", nargs="?", const=NFD_FILE,
                   help="write Node Feature Discovery's local feature file (default FILE "
                        f"{NFD_FILE})")
    p.add_argument("--nfd-ttl", type=float, default=24.0, metavar="HOURS",
                   help="hours after which NFD drops the labels if attest stops running "
                        "(default 24; 0 = never)")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE, metavar="SECONDS",
                   help="hard wall-clock limit; past it attest exits 70 (default 10)")
    job = p.add_argument_group("per-job proof (docs/operations.md)")
    job.add_argument("--job", metavar="ID", help="the job (e.g. $SLURM_JOB_ID)")
    job.add_argument("--job-start", action="store_true",
                     help="with --job, in the prolog: store the counters baseline")
    job.add_argument("--since", metavar="TIME",
                     help="with --job: when the job started (epoch seconds or ISO 8601)")
    job.add_argument("--pid", type=int, metavar="PID",
                     help="read cuFile's per-process stats of PID (gds_stats; it must run)")
    p.add_argument("--root", default="/", help=argparse.SUPPRESS)


def check_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the options (None: nothing)."""
    if not (args.deadline > 0 and args.deadline <= 3600):
        return f"--deadline must be more than 0 and at most 3600 seconds (got {args.deadline})"
    if not (args.nfd_ttl >= 0 and math.isfinite(args.nfd_ttl)):
        return f"--nfd-ttl must be 0 or a number of hours (got {args.nfd_ttl})"
    if (args.job_start or args.since) and not args.job:
        return "--job-start and --since go with --job ID"
    if args.job_start and args.since:
        return "--job-start (prolog) and --since (epilog) exclude each other"
    if args.job and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", args.job):
        return f"--job {str(args.job)[:40]!r}: letters, digits, '_', '.', '-' only, at most 64"
    if args.pid is not None and args.pid <= 0:
        return f"--pid must be a process id (got {args.pid})"
    if args.since:
        try:
            args.since_ts = parse_time(args.since)
        except ValueError as exc:
            return f"--since {str(args.since)[:40]!r}: {exc}"
    return None


def parse_time(text: str) -> float:
    """Epoch seconds, or ISO 8601 (``Z`` or an offset; naive = local time)."""
    try:
        value = float(text)
    except ValueError:
        t = text.strip()
        if t.endswith(("Z", "z")):
            t = t[:-1] + "+00:00"
        try:
            import datetime  # only here: an ISO time given

            value = datetime.datetime.fromisoformat(t).timestamp()
        except ValueError:
            raise ValueError("not epoch seconds or an ISO 8601 time") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("not a time")
    return value


# --- output ------------------------------------------------------------------------------------

def printable(text: str, limit: int = LINE_MAX) -> str:
    """One line: control characters escaped, at most ``limit`` characters."""
    out = []
    for ch in str(text):
        o = ord(ch)
        if o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0:
            out.append(f"\\x{o:02x}")
        elif o in (0x2028, 0x2029) or 0xD800 <= o < 0xE000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    line = "".join(out)
    return line if len(line) <= limit else line[:limit - 3] + "..."


def regression_line(r: dict[str, Any]) -> str:
    """``<id>: <what>, <expected> -> <observed>; fix: <fix>`` within LINE_MAX, the fix kept."""
    head = printable(f"{r['id']}: {r.get('what') or r['id']}, ", 120)
    tail = printable(f"; fix: {r['fix']}", 160)
    exp, obs = printable(r["expected"], 1000), printable(r["observed"], 1000)
    room = max(LINE_MAX - len(head) - len(tail) - 4, 20)
    if len(exp) + len(obs) > room:  # shorten the longer one first, the fix stays whole
        short = min(len(exp), len(obs), room // 2)
        exp = printable(exp, max(room - min(len(obs), short), 10)) if len(exp) > short else exp
        obs = printable(obs, max(room - len(exp), 10))
    return printable(f"{head}{exp} -> {obs}{tail}")


def _iso(ts: float | None) -> str:
    if ts is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def ok_line(record: dict[str, Any], now: dict[str, Any]) -> str:
    nv = now.get("nvfs") or {}
    mount = now.get("mount") or {}
    parts = [f"kernel {now.get('kernel')}"]
    parts.append(f"nvidia-fs {nv.get('version') or '?'}" if nv.get("loaded")
                 else "no nvidia-fs (as verified)")
    cf = now.get("cufile") or {}
    if cf.get("present"):
        parts.append(f"cufile.json sha256:{str(cf.get('sha256'))[:12]}")
    if mount.get("target"):
        parts.append(f"{mount.get('fstype')} on {mount.get('target')}")
    sim = " [SIMULATED node]" if record.get("simulated") else ""
    return printable(f"ok: {record.get('node')} as verified at {_iso(record['verified_at'])}"
                     f"{sim} ({', '.join(parts)})")


def job_line(job: dict[str, Any]) -> str:
    b = job.get("bytes") or {}

    def fmt(n: Any) -> str:
        return "?" if n is None else f"{n / (1 << 20):.0f} MiB"

    return printable(f"job {job['id']}: {job['verdict']}: nvfs {fmt(b.get('nvfs'))}, p2pdma "
                     f"{fmt(b.get('p2pdma'))}, compat {fmt(b.get('compat'))}; {job['why']}")


def _label(value: str) -> str:
    v = re.sub(r"[^A-Za-z0-9._-]", "-", str(value))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)


def nfd_labels(record: dict[str, Any] | None, status: str) -> dict[str, str]:
    """The labels ``verify --nfd`` gives a node (from the record), with ``compliant=false`` and no
    ``io-path`` unless nothing regressed (pure)."""
    labels = {}
    if record is not None:
        labels = {str(k)[:128]: _label(v) for k, v in (record.get("labels") or {}).items()
                  if str(k).startswith(NFD_NS + "/")}
        labels.setdefault(f"{NFD_NS}/verified-at", time.strftime(
            "%Y%m%dT%H%M%SZ", time.gmtime(record["verified_at"])))
        if record.get("route"):
            labels.setdefault(f"{NFD_NS}/route", _label(record["route"]))
    ok = status == "ok"
    labels[f"{NFD_NS}/compliant"] = "true" if ok else "false"
    if not ok:
        labels.pop(f"{NFD_NS}/io-path", None)
        labels[f"{NFD_NS}/regressed"] = "true" if status == "regressed" else "false"
        labels[f"{NFD_NS}/unverified"] = "true" if status == "unverified" else "false"
    return {k: v for k, v in labels.items() if v}


def nfd_text(labels: dict[str, str], checked_at: float, ttl_hours: float) -> str:
    lines = ["# Written by gdsfleet-attest: the GPUDirect Storage state this node proved, as "
             "attested", f"# at {_iso(checked_at)}. Do not edit: the next attest or verify "
             "replaces this file."]
    if ttl_hours:
        lines.append("# +expiry-time=" + _iso(checked_at + ttl_hours * 3600))
    lines += [f"{k}={v}" for k, v in sorted(labels.items())]
    return "\n".join(lines) + "\n"


def _prom(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def textfile_text(doc: dict[str, Any], nvfs: dict[str, Any] | None,
                  totals: dict[str, dict[str, int]]) -> str:
    """The node_exporter textfile (the metric names of the contract, docs/operations.md)."""
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{labels} {value:.17g}" for labels, value in samples)

    regs = doc["regressions"]
    metric("gdsfleet_attest_ok", "gauge", "1 when nothing regressed since the node's last verify",
           [("", 1 if doc["status"] == "ok" else 0)])
    metric("gdsfleet_attest_regressions", "gauge", "regressions since the node's last verify",
           [("", len(regs))])
    metric("gdsfleet_attest_regression", "gauge", "1 per regression (check id)",
           [(f'{{check="{_prom(r["id"])}"}}', 1) for r in regs])
    metric("gdsfleet_attest_unverified", "gauge", "1 when the node has no usable compliant record",
           [("", 1 if doc["status"] == "unverified" else 0)])
    if doc["verified_at"] is not None:
        metric("gdsfleet_attest_verified_timestamp_seconds", "gauge",
               "when verify wrote the node's record", [("", doc["verified_at"])])
    metric("gdsfleet_attest_timestamp_seconds", "gauge", "when attest ran",
           [("", doc["checked_at"])])
    metric("gdsfleet_attest_simulated", "gauge", "1 on a simulated node (stand-in hardware)",
           [("", 1 if doc["simulated"] else 0)])
    samples = []
    if nvfs and nvfs.get("rw_stats"):
        for op, key in (("read", "read_mib"), ("write", "write_mib")):
            if nvfs.get(key) is not None:
                samples.append((f'{{path="nvfs",op="{op}"}}', nvfs[key] * (1 << 20)))
    for path in ("p2pdma", "compat"):
        for op in ("read", "write"):
            if path in totals:
                samples.append((f'{{path="{path}",op="{op}"}}', totals[path][op]))
    if samples:
        metric("gdsfleet_nvfs_bytes_total", "counter", "bytes moved by path: nvfs from "
               "nvidia-fs's counters, p2pdma and compat summed over the node's job proofs",
               samples)
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """``path`` replaced atomically (a dot file in the same folder, then rename), mode 0644."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# --- the run -----------------------------------------------------------------------------------

def load_siblings() -> dict[str, Any]:
    """attest_state, attest_compare, attest_counters and cufile_json from this file's folder."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    mods = {}
    for name in SIBLINGS:
        key = "gdsfleet_attest_" + name
        mod = sys.modules.get(key)
        if mod is None:
            spec = importlib.util.spec_from_file_location(key, os.path.join(here, name + ".py"))
            if spec is None or spec.loader is None:
                raise AttestFailure(f"{name}.py is missing beside {__file__}: reinstall attest")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[key] = mod
            spec.loader.exec_module(mod)
        mods[name] = mod
    return mods


def _watchdog(seconds: float) -> threading.Timer:
    def expire() -> None:
        sys.stderr.write(printable(
            f"gdsfleet-attest: deadline of {seconds:g}s hit while {_STAGE['now']}; the node was "
            "not judged (exit 70): look for a hung file system or device, or raise --deadline",
            400) + "\n")
        sys.stderr.flush()
        os._exit(EXIT_INTERNAL)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def judge(args: argparse.Namespace, mods: dict[str, Any]) -> dict[str, Any]:
    """The document ``gdsfleet.attest/1`` of this node now, plus what the outputs need."""
    st, cmp_, ctr = mods["attest_state"], mods["attest_compare"], mods["attest_counters"]
    node = st.Node(args.root)
    started = time.time()
    _STAGE["now"] = f"reading the record {args.record}"
    record = problem = None
    try:
        record = st.load_record(node, args.record)
    except st.RecordError as exc:
        problem = f"untrusted record: {exc}"
    except st.Unjudgeable as exc:
        raise AttestFailure(f"{exc} (run attest as root, or as a user who may read it)") from None
    _STAGE["now"] = "reading the node's state"
    try:
        now = st.snapshot(node, (record or {}).get("mount_path") or st.DEFAULT_MOUNT,
                          mods["cufile_json"].strip_comments)
        counters = ctr.nvfs_counters(node)
    except st.Unjudgeable as exc:
        raise AttestFailure(f"{exc} (run attest as root)") from None
    except st.RecordError as exc:  # /proc/self/mountinfo not a file: nothing to compare with
        raise AttestFailure(f"the node's state cannot be read: {exc}") from None
    if record is None:
        status = "unverified"
        regs = [cmp_.unverified(problem or f"never (no record {args.record})",
                                cmp_.VERIFY_FIX + " (as root: it writes the record)")]
    elif not record.get("compliant"):
        status = "unverified"
        failing = ", ".join(record.get("failing") or []) or "?"
        regs = [cmp_.unverified(f"NOT compliant at {_iso(record['verified_at'])} (failing: "
                                f"{failing})", "fix the failing checks, then " + cmp_.VERIFY_FIX)]
    else:
        regs = cmp_.compare(record, now)
        status = "regressed" if regs else "ok"
    name = (record or {}).get("node") or node.text("/proc/sys/kernel/hostname") or \
        os.uname().nodename
    doc: dict[str, Any] = {
        "schema": SCHEMA, "node": str(name)[:255], "status": status,
        "verified_at": record["verified_at"] if record else None,
        "checked_at": round(started, 3), "simulated": bool(record and record.get("simulated")),
        "record": args.record, "route": (record or {}).get("route"),
        "regressions": regs, "job": None,
    }
    if args.job:
        _STAGE["now"] = f"the proof of job {args.job}"
        doc["job"] = job_part(args, node, ctr, counters, now, record)
    doc["duration_s"] = round(time.time() - started, 4)
    return {"doc": doc, "record": record, "now": now, "counters": counters, "node": node}


def job_part(args: argparse.Namespace, node: Any, ctr: Any, counters: Any,
             now: dict[str, Any], record: dict[str, Any] | None) -> dict[str, Any] | None:
    if args.job_start:
        try:
            ctr.write_baseline(node, args.job, counters)
        except OSError as exc:
            sys.stderr.write(printable(f"gdsfleet-attest: job {args.job}: baseline NOT stored "
                                       f"({exc.strerror}): the epilog's proof will lack the "
                                       "nvidia-fs delta; run the prolog as root") + "\n")
        return None
    since = getattr(args, "since_ts", None)
    baseline = ctr.read_baseline(node, args.job)
    stats = None
    if args.pid:
        left = args.deadline - (time.time() - args.started)
        stats = ctr.cufile_stats(node, args.pid, max(0.2, min(5.0, left - 1.0)))
    log = ctr.cufile_log(node, (now.get("cufile") or {}).get("logging_dir"),
                         since if since is not None else (baseline or {}).get("at"))
    proof = ctr.job_proof(args.job, since=since, until=round(time.time(), 3), pid=args.pid,
                          baseline=baseline, counters=counters, stats=stats, log=log,
                          route=(record or {}).get("route"))
    if baseline is not None:
        ctr.remove_baseline(node, args.job)
    try:
        ctr.append_job(node, {"node": (record or {}).get("node"), **proof})
        ctr.add_totals(node, proof)
    except OSError as exc:
        sys.stderr.write(printable(f"gdsfleet-attest: job {args.job}: proof NOT kept in "
                                   f"{ctr.JOBS_LOG} ({exc.strerror}); run the epilog as root")
                         + "\n")
    return proof


def attest(args: argparse.Namespace, modules: dict[str, Any] | None = None) -> int:
    """One attest; returns the exit code (0, 1 or 70)."""
    args.started = time.time()
    bad = check_arguments(args)
    if bad:
        sys.stderr.write(printable(f"gdsfleet-attest: {bad}", 400) + "\n")
        return EXIT_INTERNAL
    timer = _watchdog(args.deadline)
    try:
        try:
            mods = modules or load_siblings()
            result = judge(args, mods)
        except AttestFailure as exc:
            sys.stderr.write(printable(f"gdsfleet-attest: cannot judge the node: {exc}", 400)
                             + "\n")
            return EXIT_INTERNAL
        doc = result["doc"]
        _STAGE["now"] = "writing the outputs"
        try:
            if args.textfile:
                totals = mods["attest_counters"].read_totals(result["node"])
                write_atomic(args.textfile, textfile_text(doc, result["counters"], totals))
            if args.nfd:
                write_atomic(args.nfd, nfd_text(nfd_labels(result["record"], doc["status"]),
                                                doc["checked_at"], args.nfd_ttl))
        except OSError as exc:
            sys.stderr.write(printable(f"gdsfleet-attest: output NOT written: {exc}", 400)
                             + "\n")
            return EXIT_INTERNAL
        if args.json:
            sys.stdout.write(json.dumps(doc, sort_keys=True, allow_nan=False) + "\n")
        else:
            lines = ([regression_line(r) for r in doc["regressions"]]
                     or [ok_line(result["record"], result["now"])])
            if doc["job"]:
                lines.append(job_line(doc["job"]))
            sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return EXIT_OK if doc["status"] == "ok" else EXIT_REGRESSED
    finally:
        timer.cancel()


class _Parser(argparse.ArgumentParser):
    """A bad option is attest's own failure too: exit 70, never argparse's 2 (a prolog reads
    every other code as a verdict)."""

    def error(self, message: str) -> Any:  # noqa: D102
        self.exit(EXIT_INTERNAL, printable(f"{self.prog}: error: {message}", 400) + "\n")


def main(argv: list[str] | None = None, modules: dict[str, Any] | None = None) -> int:
    parser = _Parser(
        prog="gdsfleet-attest",
        description="Is this node still in the GPUDirect Storage state its last verify proved? "
                    "Exit 0 nothing regressed, 1 regressed or never verified, 70 cannot judge.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return attest(args, modules)
    except Exception as exc:  # noqa: BLE001 - a bug: one line, exit 70, never a traceback
        sys.stderr.write(printable(f"gdsfleet-attest: internal error (a bug, please report "
                                   f"it): {type(exc).__name__}: {exc}", 400) + "\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
