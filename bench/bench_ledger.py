"""Ledger benchmark (not a test): the rollout's step commits per second, PostgreSQL vs SQLite.

A rollout commits one transaction per node step (``Ledger.set_step``: pending -> provisioning
-> verifying -> compliant, and more with drains and reboots), from the engine's threads. This
replays that write pattern: T threads, each taking nodes in turn through S steps, every step
its own transaction, against a throw-away PostgreSQL cluster on loopback WITH fsync on (a real
server's durability; tests/harness/pg.py) and, as the baseline in the same run, a SQLite file
ledger (WAL) on the same disk. Printed: commits per second for each, and what a 10,000-node
rollout's steps cost at that rate (docs/scale.md's plan uses it).

    .venv/bin/python bench/bench_ledger.py                      # 2,000 nodes x 5 steps, 8 threads
    .venv/bin/python bench/bench_ledger.py --nodes 500 --threads 1 4 16

Every write must land: the benchmark counts the step events afterwards and stops with exit
status 1 and no figure when any is missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STEPS = ("provisioning", "verifying", "rebooting", "verifying", "compliant")


class BenchFailed(Exception):
    """A measured run did not do what it measures: no figure."""


def run(url: str, nodes: int, threads: int) -> float:
    """Commits per second of ``nodes`` x len(STEPS) step writes from ``threads`` threads."""
    from provisioner.store import Ledger

    led = Ledger.open(url)
    try:
        run_id = led.start_run("rollout", f"bench-{threads}")
        names = [f"gpu-{i:05d}" for i in range(nodes)]
        todo = iter(names)
        lock = threading.Lock()
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                while True:
                    with lock:
                        name = next(todo, None)
                    if name is None:
                        return
                    for step in STEPS:
                        led.set_step(run_id, name, step, wave=1, detail={"bench": True})
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        took = time.perf_counter() - t0
        if errors:
            raise BenchFailed(f"a writer failed: {errors[0]!r}")
        steps = led.node_steps(run_id)
        written = sum(len(led.step_events(run_id, n)) for n in names[:50])
        if len(steps) != nodes or any(s["step"] != "compliant" for s in steps.values()) \
                or written != 50 * len(STEPS):
            raise BenchFailed(f"{len(steps)} of {nodes} nodes recorded, {written} events of "
                              f"{50 * len(STEPS)} in the first 50")
        return nodes * len(STEPS) / took
    finally:
        led.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--threads", type=int, nargs="+", default=[8])
    args = ap.parse_args(argv)
    from tests.harness import pg

    try:
        with pg.cluster(fsync=True) as url, tempfile.TemporaryDirectory() as tmp:
            for t in args.threads:
                sqlite_rate = run(str(Path(tmp) / f"l{t}.sqlite"), args.nodes, t)
                pg_rate = run(url, args.nodes, t)
                n = 10_000 * len(STEPS)
                print(f"{args.nodes} nodes x {len(STEPS)} steps, {t} threads: PostgreSQL "
                      f"{pg_rate:,.0f} commits/s, SQLite {sqlite_rate:,.0f} commits/s "
                      f"(ratio {pg_rate / sqlite_rate:.2f}); 10,000 nodes' {n:,} step commits:"
                      f" {n / pg_rate:.0f} s on PostgreSQL", flush=True)
    except (BenchFailed, pg.NoPostgres) as exc:
        sys.stderr.write(f"bench_ledger: FAILED, no figure: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
