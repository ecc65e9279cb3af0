"""Event ingest benchmark (not a test): how fast the coordinator folds a playbook's events.

The events are a recorded real ansible-runner event stream
(``tests/fixtures/rollout/truncated_events.json``: ansible-runner 2.4.3 and ansible-core 2.19,
three.yml over 8 hosts; see that folder's README), cycled: copy c of the stream gets its own
event uuids and counters and its 8 hosts renamed into a fixed set of ``--hosts`` names, so the
per-host state is bounded while the number of events grows. Each event is one JSON line, as the
ssh executor reads it from a worker's stream.

Two passes over the same N lines, in one process:

* baseline: ``json.loads`` of each line only;
* handler: ``json.loads`` and :meth:`provisioner.rollout.runner.EventCollector.handle`, the
  handler both executors give ansible-runner, with its ``events.jsonl`` sink
  (:class:`~provisioner.rollout.runner.EventLog`) writing into a temporary folder and a
  per-host callback as the engine's progress display has.

Only the two loops are timed: the lines are made beforehand, 10,000 at a time (memory stays
bounded), as the ssh executor's reader hands them over already read. Printed per N: events/s
of each pass, the handler pass's time over the baseline's, and the peak RSS growth during
the handler pass (``resource.getrusage``). The run fails loudly (no figure) when
the collector did not see every host, or ``events.jsonl`` lacks a line.

    .venv/bin/python bench/bench_event_ingest.py --events 100000 1000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURE = REPO / "tests" / "fixtures" / "rollout" / "truncated_events.json"
TARGET_EPS = 20_000


class BenchFailed(Exception):
    """A measured run did not do what it measures: no figure may be printed."""


def templates() -> list[str]:
    """The recorded events as JSON text with ``@U@`` (uuid), ``@C@`` (counter) and ``@hK@``
    (the host h1..h8) placeholders."""
    events = json.loads(FIXTURE.read_text())
    if not events or not any(e.get("event") == "runner_on_ok" for e in events):
        raise BenchFailed(f"{FIXTURE}: not a recorded event stream")
    out = []
    for ev in events:
        ev = json.loads(json.dumps(ev))
        ev["uuid"] = "@U@"
        ev["counter"] = -1
        data = ev.get("event_data") or {}
        if "uuid" in data:
            data["uuid"] = "@U@"
        if isinstance(data.get("host"), str):
            data["host"] = f"@{data['host']}@"
        if isinstance(data.get("remote_addr"), str):
            data["remote_addr"] = f"@{data['remote_addr']}@"
        out.append(json.dumps(ev).replace('"counter": -1', '"counter": @C@'))
    return out


def lines(n: int, hosts: int, tpl: list[str]) -> Iterator[str]:
    """N event lines: the recorded stream, cycled with fresh uuids, counters and hosts."""
    i = 0
    cycle = 0
    while True:
        names = {f"@h{k}@": f"n{(cycle * 8 + k - 1) % hosts:06d}" for k in range(1, 9)}
        for t in tpl:
            if i >= n:
                return
            text = t.replace("@U@", f"{i:08x}-0000-4000-8000-{cycle:012x}").replace(
                "@C@", str(i + 1))
            for key, name in names.items():
                if key in text:
                    text = text.replace(key, name)
            yield text
            i += 1
        cycle += 1


CHUNK = 10_000


def chunks(n: int, hosts: int, tpl: list[str]) -> Iterator[list[str]]:
    """The lines in lists of CHUNK: made outside the timed part, memory bounded."""
    it = lines(n, hosts, tpl)
    while True:
        chunk = list(itertools.islice(it, CHUNK))
        if not chunk:
            return
        yield chunk


def rss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def baseline(n: int, hosts: int, tpl: list[str]) -> float:
    took = 0.0
    count = 0
    loads = json.loads
    for chunk in chunks(n, hosts, tpl):
        t0 = time.perf_counter()
        for text in chunk:
            loads(text)
        took += time.perf_counter() - t0
        count += len(chunk)
    if count != n:
        raise BenchFailed(f"baseline read {count} of {n} events")
    return took


def handler(n: int, hosts: int, tpl: list[str], work: Path) -> tuple[float, int]:
    from provisioner.rollout.runner import EventCollector, EventLog

    names = [f"n{i:06d}" for i in range(hosts)]
    log = EventLog(work / "artifacts" / "bench" / "events.jsonl")
    progress = {"n": 0}

    def on_host_event(host: str, kind: str, task: str) -> None:
        progress["n"] += 1

    collector = EventCollector(names, on_host_event, sink=log)
    before = rss_kib()
    took = 0.0
    loads, handle = json.loads, collector.handle
    for chunk in chunks(n, hosts, tpl):
        t0 = time.perf_counter()
        for text in chunk:
            handle(loads(text))
        took += time.perf_counter() - t0
    grew = rss_kib() - before
    log.close()
    written = sum(1 for _ in log.path.open("rb"))
    if written != n:
        raise BenchFailed(f"events.jsonl has {written} lines for {n} events")
    seen = sum(1 for o in collector.outcomes().values() if o.ok or o.changed)
    if n >= len(tpl) * -(-hosts // 8) and seen != hosts:  # every host had its cycle
        raise BenchFailed(f"the collector saw {seen} of {hosts} hosts with results")
    if progress["n"] == 0:
        raise BenchFailed("no per-host event reached the callback")
    log.path.unlink()
    return took, grew


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--hosts", type=int, default=2_000,
                    help="distinct host names the events cycle over (default 2,000)")
    args = ap.parse_args(argv)
    tpl = templates()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gdsfleet-ingest-") as tmp:
            for n in args.events:
                base = baseline(n, args.hosts, tpl)
                took, grew = handler(n, args.hosts, tpl, Path(tmp))
                rows.append({"events": n, "baseline_eps": n / base, "handler_eps": n / took,
                             "ratio": took / base, "rss_growth_mib": grew / 1024})
    except BenchFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"recorded stream: {len(tpl)} events ({FIXTURE.name}), hosts: {args.hosts}")
    print("| events | json.loads only: events/s | handler: events/s | time vs baseline "
          "| peak RSS growth |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['events']:,} | {r['baseline_eps']:,.0f} | {r['handler_eps']:,.0f} "
              f"| {r['ratio']:.2f}x | {r['rss_growth_mib']:.1f} MiB |")
    slow = [r for r in rows if r["handler_eps"] < TARGET_EPS]
    if slow:
        print(f"BELOW TARGET: {TARGET_EPS:,} events/s", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
