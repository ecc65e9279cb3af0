"""Where a verified node's coordinator CPU goes, per stage (not a test; issue 31).

Runs ``provisioner verify`` in this process (its CLI entry point, the same code path) against
the SIMULATED lab's bare nodes (tests/harness: containers, sshd on loopback), with a cProfile
in every thread (paramiko's reader threads included) timed by each thread's own CPU clock
(``time.thread_time``), and prints the CPU per verified node split into stages:

* ``ssh transport thread``: paramiko's reader thread of each connection (key exchange, host
  key, packets in and out, decryption, MAC);
* ``ssh connect (worker)``: the worker's part of connecting (socket, client, auth request,
  known_hosts, the private key);
* ``ssh commands (worker)``: opening the channels, sending the scripts, reading the output;
* ``facts+checks``, ``I/O test (controller side)``, ``report of the node``, ``JSON report``
  (masking and encoding), and what is left (the fleet loop, the start).

Profiling inflates every Python call, so the absolute figures are higher than getrusage's
(``bench_verify.py --controller-only``); the split is what this is for. Also printed: the
process's own CPU (getrusage) and the functions with the most own time.

    .venv/bin/python bench/profile_verify.py                  # 64 hosts on 8 bare nodes
    .venv/bin/python bench/profile_verify.py --hosts 32 --top 40
    .venv/bin/python bench/profile_verify.py --no-profile     # getrusage only (A/B runs)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (stage, function key as pstats names it: (file suffix, function name)), first match wins for
# the worker threads' cumulative time; the stages are disjoint by construction of verify_node
WORKER_STAGES: list[tuple[str, str, str]] = [
    ("ssh connect (worker)", "provisioner/ssh/connection.py", "connect"),
    ("ssh commands (worker)", "provisioner/ssh/connection.py", "run"),
    ("facts+checks", "provisioner/verify/facts.py", "build_facts"),
    ("facts+checks", "provisioner/verify/checks/__init__.py", "evaluate"),
    ("report of the node", "provisioner/verify/model.py", "to_dict"),
]
MAIN_STAGES: list[tuple[str, str, str]] = [
    ("JSON report: safe_document", "provisioner/reports/files.py", "safe_document"),
    ("JSON report: to_json", "provisioner/reports/__init__.py", "to_json"),
]


class _ThreadProfiles:
    """A cProfile per thread, on the thread's CPU clock; merged at the end."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, cProfile.Profile]] = []
        self._lock = threading.Lock()
        self._orig_run = threading.Thread.run

    def _profiled(self, orig: Any, label: Any) -> Any:
        """``orig`` (a thread's run) under a cProfile of its own, named ``label(thread)``."""

        def run(thread: Any) -> None:
            prof = cProfile.Profile(time.thread_time)
            with self._lock:
                self.profiles.append((label(thread), prof))
            prof.enable()
            try:
                orig(thread)
            finally:
                prof.disable()

        return run

    def install(self) -> None:
        threading.Thread.run = self._profiled(  # type: ignore[method-assign]
            self._orig_run, lambda t: t.name + ":" + type(t).__name__)
        # paramiko's Transport (a Thread) has its own run: the reader thread
        import paramiko

        self._orig_transport_run = paramiko.Transport.run
        paramiko.Transport.run = self._profiled(  # type: ignore[method-assign]
            self._orig_transport_run, lambda t: "Transport")

    def uninstall(self) -> None:
        import paramiko

        threading.Thread.run = self._orig_run  # type: ignore[method-assign,assignment]
        paramiko.Transport.run = self._orig_transport_run  # type: ignore[method-assign,assignment]


def _cum(stats: pstats.Stats, suffix: str, func: str) -> float:
    total = 0.0
    for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == func and file.endswith(suffix):
            total += ct
    return total


def _total(stats: pstats.Stats) -> float:
    return float(stats.total_tt)  # type: ignore[attr-defined]


def run_verify(inv: Path, hosts: int, out: Path, profile: bool) -> dict[str, Any]:
    from provisioner import cli

    argv = ["verify", "-i", str(inv), "--parallel", str(hosts), "--io-size", "1M",
            "--no-ledger", "-q", "--ssh-config", "none", "--json", str(out)]
    tp = _ThreadProfiles()
    main = cProfile.Profile(time.thread_time)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if profile:
        tp.install()
        main.enable()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the fleet's table
            rc = cli.main(argv)
    finally:
        if profile:
            main.disable()
            tp.uninstall()
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    doc = json.loads(out.read_text())
    s = doc.get("summary") or {}
    if rc not in (0, 1) or s.get("total") != hosts or s.get("unreachable") or s.get("errors"):
        raise SystemExit(f"profile_verify: FAILED, no figure: verify exited {rc}: {s}")
    return {"wall": wall, "cpu": cpu, "main": main, "threads": tp.profiles, "profiled": profile}


def report(res: dict[str, Any], hosts: int, top: int) -> None:
    per = 1e3 / hosts
    print(f"verify of {hosts} hosts in-process: wall {res['wall']:.2f} s, process CPU "
          f"(getrusage) {res['cpu']:.2f} s = {res['cpu'] * per:.1f} ms per host "
          "(profiling included)")
    if not res["profiled"]:
        return
    reader = [p for n, p in res["threads"] if "Transport" in n]
    workers = [p for n, p in res["threads"] if "Transport" not in n]
    rows: dict[str, float] = {}

    def merged(profs: list[cProfile.Profile]) -> pstats.Stats | None:
        profs = [p for p in profs if p.getstats()]
        if not profs:
            return None
        st = pstats.Stats(profs[0], stream=io.StringIO())
        for p in profs[1:]:
            st.add(p)
        return st

    rs = merged(reader)
    if rs is not None:
        rows["ssh transport thread (paramiko reader: kex, packets, crypto)"] = _total(rs)
    ws = merged(workers)
    if ws is not None:
        known = 0.0
        for stage, suffix, func in WORKER_STAGES:
            v = _cum(ws, suffix, func)
            rows[stage] = rows.get(stage, 0.0) + v
            known += v
        rows["worker: the rest (fleet loop, I/O test's controller side, NodeReport)"] = (
            _total(ws) - known)
    ms = pstats.Stats(res["main"], stream=io.StringIO())
    mknown = 0.0
    for stage, suffix, func in MAIN_STAGES:
        v = _cum(ms, suffix, func)
        rows[stage] = rows.get(stage, 0.0) + v
        mknown += v
    rows["main thread: the rest (start, inventory, imports, output)"] = _total(ms) - mknown
    total = sum(rows.values())
    print(f"{'stage (thread CPU under cProfile)':<72} {'ms/host':>8} {'share':>6}")
    for k, v in rows.items():
        print(f"{k:<72} {v * per:8.2f} {v / total:6.1%}")
    print(f"{'total':<72} {total * per:8.2f}")
    if top:
        allst = merged([p for _n, p in res["threads"]] + [res["main"]])
        assert allst is not None
        buf = io.StringIO()
        allst.stream = buf  # type: ignore[attr-defined]
        allst.sort_stats("tottime").print_stats(top)
        print("\n".join(buf.getvalue().splitlines()[-(top + 3):]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--top", type=int, default=25, help="functions by own time (0: none)")
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--inventory", help="an inventory of running lab nodes (else 8 are started)")
    args = ap.parse_args(argv)
    # bench_verify's helpers: the aliased inventory, the free ports, the lab's environment
    sys.path.insert(0, str(REPO / "bench"))
    import bench_verify as bv

    os.environ.update({k: v for k, v in bv._env().items() if k not in os.environ})
    work = Path(tempfile.mkdtemp(prefix="gdsfleet-profile-verify-"))
    lab = None
    try:
        if args.inventory:
            inv_base = Path(args.inventory)
            inv = inv_base
        else:
            from tests.harness import lab as labmod

            lab = labmod.Lab(work / "lab", prefix=f"gdsfleet-pv-{secrets.token_hex(2)}",
                             port_base=bv._free_port_base(bv.MAX_PER_NODE))
            nodes = lab.up(bv.MAX_PER_NODE)
            inv = bv.aliased_inventory(lab, work / "inv" / "hosts.yml", nodes, args.hosts)
        run_verify(inv, args.hosts, work / "warm.json", False)  # imports, caches: warm
        for _ in range(max(1, args.repeat)):
            report(run_verify(inv, args.hosts, work / "verify.json", args.profile), args.hosts,
                   args.top if args.profile else 0)
            print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    finally:
        if lab is not None:
            lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
