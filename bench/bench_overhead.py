"""Orchestrator overhead benchmark (issue 31, not a test): one serial play run three ways.

At N hosts (names only, ``ansible_connection: local``), a 3-task play (command, set_fact,
command), the same batches (1, N/10, the rest) and the same forks, this prints, from ONE run
of this script, three rows with wall time and user/sys CPU of the whole process tree
(``os.wait4``'s rusage of the child and every descendant it reaped) and their ratios to raw:

1. raw ``ansible-playbook`` of the play with ``serial: [1, N/10, 100%]``;
2. the same serial play through ``ansible_runner.run()`` with stock settings (what AWX uses);
3. ``provisioner rollout --no-verify --waves 1,N/10,100%`` of the play without ``serial``
   (the rollout makes the waves itself), with ``--executor local``.

Under the table, for every row, where its wall time went: inside its plays (each
ansible-playbook run's first play until its closing stats, summed) and outside them (the start
until the first play, the gaps between one run's stats and the next run's first play, the last
stats until the process exited), from the times the bench-only callback
(``bench/callbacks/``) writes in every row's ansible-playbook runs alike. And, with
``--repeat``, each round's ratio to raw of the same round beside the ratio of the medians.

    .venv/bin/python bench/bench_overhead.py --hosts 500 2000 --forks 50
    .venv/bin/python bench/bench_overhead.py --hosts 50 --forks 10 --json overhead.json
    .venv/bin/python bench/bench_overhead.py --hosts 500 --forks 50 --repeat 3
    .venv/bin/python bench/bench_overhead.py --hosts 2000 --turn 1 --json r1.json   # one round
    .venv/bin/python bench/bench_overhead.py --merge r0.json r1.json r2.json        # the series

``--repeat N`` runs N rounds, each in another order of the rows, and prints each row's medians
(a cloud VM's speed drifts between runs by more than the difference measured here).

On a shared machine the wall times say little; the CPU columns are what to compare. A run
that fails prints no figure: a non-zero exit status, a recap or event count that does not show
every host ok on each of the 3 tasks, or a rollout ledger without every host's final ok step
stops the benchmark with exit status 1 and the run's log named.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TASKS = """\
  tasks:
    - name: Runs a command
      ansible.builtin.command: "true"
      changed_when: false
    - name: Sets a fact
      ansible.builtin.set_fact:
        bench_mark: "{{ inventory_hostname }} done"
    - name: Runs another command
      ansible.builtin.command: "echo {{ bench_mark }}"
      changed_when: false
"""


class BenchFailed(Exception):
    """A measured run did not do what it measures: no figure may be printed."""


def batches(n: int) -> tuple[int, int]:
    """(first, second) batch: 1, then a tenth of the fleet (200 of 2,000), then the rest."""
    return 1, max(1, n // 10)


def play_text(serial: str | None) -> str:
    head = "- name: Overhead bench\n  hosts: all\n  gather_facts: false\n"
    if serial:
        head += f"  serial: {serial}\n"
    return head + TASKS


def write_inventory(path: Path, n: int) -> list[str]:
    hosts = [f"h{i:05d}" for i in range(n)]
    path.write_text("\n".join(["[fleet]", *hosts, "", "[all:vars]", "ansible_connection=local",
                               f"ansible_python_interpreter={sys.executable}"]) + "\n")
    return hosts


def child_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GDSFLEET_", "ANSIBLE_"))}
    env.update(HOME=str(root), PYTHONPATH=str(REPO), ANSIBLE_HOST_KEY_CHECKING="False")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    if os.environ.get("ANSIBLE_COLLECTIONS_PATH"):
        env["ANSIBLE_COLLECTIONS_PATH"] = os.environ["ANSIBLE_COLLECTIONS_PATH"]
    return env


def measure(argv: list[str], env: dict[str, str], log: Path,
            timeout: float) -> tuple[float, float, float]:
    """(wall s, user s, sys s) of ``argv`` and all it reaped; a non-zero exit raises. When it
    began (``time.time()``) is left in ``STARTED[0]`` for the row's timeline."""
    with log.open("wb") as out:
        STARTED[0] = time.time()
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(log.parent))
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise BenchFailed(f"{log}: no end within {timeout:.0f} s")
            time.sleep(0.05)
        wall = time.monotonic() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        tail = log.read_bytes()[-2000:].decode("utf-8", "replace")
        raise BenchFailed(f"{log}: exit status {rc}; it ends:\n{tail}")
    return wall, ru.ru_utime, ru.ru_stime


STARTED = [0.0]

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
RECAP = re.compile(rb"^(h\d{5})\s+:\s+ok=(\d+)\s.*failed=(\d+)", re.M)


def check_recap(log: Path, hosts: list[str]) -> None:
    """Every host in the recap with ok=3 and failed=0."""
    text = ANSI.sub(b"", log.read_bytes())
    seen = {m.group(1).decode(): (int(m.group(2)), int(m.group(3)))
            for m in RECAP.finditer(text)}
    bad = [h for h in hosts if seen.get(h) != (3, 0)]
    if bad:
        raise BenchFailed(f"{log}: {len(bad)} of {len(hosts)} hosts not ok=3 failed=0 in the "
                          f"recap, e.g. {bad[0]}: {seen.get(bad[0])}")


RUNNER_CHILD = """\
import sys, ansible_runner
r = ansible_runner.run(private_data_dir=sys.argv[1], playbook=sys.argv[2],
                       inventory=sys.argv[3], forks=int(sys.argv[4]), ident="bench")
print("RUNNER", r.status, r.rc)
sys.exit(0 if (r.status, r.rc) == ("successful", 0) else 1)
"""


def run_raw(work: Path, inv: Path, play: Path, forks: int, env: dict[str, str],
            hosts: list[str], timeout: float) -> dict[str, Any]:
    log = work / "raw.log"
    wall, user, sys_ = measure([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                                str(inv), "-f", str(forks), str(play)], env, log, timeout)
    check_recap(log, hosts)
    return {"wall_s": wall, "user_s": user, "sys_s": sys_, "began": STARTED[0]}


def run_runner(work: Path, inv: Path, play: Path, forks: int, env: dict[str, str],
               hosts: list[str], timeout: float) -> dict[str, Any]:
    pdd = work / "runner"
    (pdd / "project").mkdir(parents=True)
    log = work / "runner.log"
    wall, user, sys_ = measure([sys.executable, "-c", RUNNER_CHILD, str(pdd), str(play),
                                str(inv), str(forks)], env, log, timeout)
    check_recap(pdd / "artifacts" / "bench" / "stdout", hosts)
    events = sum(1 for _ in (pdd / "artifacts" / "bench" / "job_events").glob("*.json"))
    if events < len(hosts) * 3 * 2:
        raise BenchFailed(f"{pdd}: {events} event files, fewer than 2 per task and host")
    return {"wall_s": wall, "user_s": user, "sys_s": sys_, "event_files": events,
            "began": STARTED[0]}


def run_rollout(work: Path, inv: Path, play: Path, forks: int, env: dict[str, str],
                hosts: list[str], timeout: float) -> dict[str, Any]:
    from bench.bench_exec_scale import _provisioned_ok
    from provisioner.store import Ledger

    first, second = batches(len(hosts))
    ledger = work / "ledger.db"
    (work / "known_hosts").write_text("")
    log = work / "rollout.log"
    wall, user, sys_ = measure(
        [sys.executable, "-m", "provisioner", "rollout", "-i", str(inv), "--playbook",
         str(play), "--no-verify", "--waves", f"{first},{second},100%", "-f", str(forks),
         "--ledger", str(ledger), "--known-hosts", str(work / "known_hosts"),
         "--ssh-config", "none", "-q",
         "--allow-local-connection"],  # the 2,000 hosts are ansible_connection: local
        env, log, timeout)
    with Ledger.open(ledger) as led:
        runs = led.runs(kind="rollout", limit=1)
        if not runs:
            raise BenchFailed(f"{ledger}: no rollout recorded")
        steps = led.node_steps(runs[0]["id"])
    bad = sorted(h for h in hosts if not _provisioned_ok(steps.get(h)))
    if bad:
        raise BenchFailed(f"{ledger}: {len(bad)} of {len(hosts)} hosts lack a final ok step, "
                          f"e.g. {bad[0]}: {steps.get(bad[0])}")
    return {"wall_s": wall, "user_s": user, "sys_s": sys_, "began": STARTED[0]}


def main_cpu(path: Path, runs: int, began: float | None = None,
             wall: float | None = None) -> dict[str, Any]:
    """User and system CPU of the ansible-playbook main processes of a row (summed over its
    runs), as bench/callbacks/gdsfleet_bench_rusage.py wrote them at each run's stats; and,
    given when the row began and its wall time, its timeline (:func:`timeline`)."""
    try:
        lines = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        lines = []
    if len(lines) != runs:
        raise BenchFailed(f"{path}: {len(lines)} main-process CPU records, expected {runs} "
                          f"(one per ansible-playbook run)")
    out: dict[str, Any] = {"main_user_s": sum(ln["user_s"] for ln in lines),
                           "main_sys_s": sum(ln["sys_s"] for ln in lines)}
    if began is not None and wall is not None:
        out["timeline"] = timeline(path, lines, began, began + wall)
    return out


def timeline(path: Path, records: list[dict[str, Any]], began: float,
             ended: float) -> dict[str, float]:
    """Where a row's wall time went, from its ansible-playbook runs' records: inside the plays
    (each run's first play until its stats, summed), the start until the first play (the
    process's own start, and for the rollout its plan and ledger before the canary's
    ansible-playbook started), the gaps between one run's stats and the next run's first play
    (summed), and the last stats until the process ended."""
    runs = []
    for rec in records:
        plays, stats = rec.get("plays"), rec.get("stats_at")
        if not plays or not isinstance(stats, (int, float)):
            raise BenchFailed(f"{path}: a run's record without its play and stats times")
        runs.append((float(plays[0]), float(stats)))
    runs.sort()
    gaps = [nxt[0] - cur[1] for cur, nxt in zip(runs, runs[1:], strict=False)]
    return {"runs": len(runs), "in_plays_s": sum(b - a for a, b in runs),
            "to_first_play_s": runs[0][0] - began, "between_s": sum(gaps),
            "after_last_s": ended - runs[-1][1]}


def one_size(root: Path, n: int, forks: int, timeout: float, repeat: int = 1,
             turn: int = 0) -> dict[str, Any]:
    """The three rows at ``n`` hosts, ``repeat`` rounds; each round runs the rows in another
    order (raw, runner, provisioner; runner, provisioner, raw; ...), so that a machine's drift
    over the run weighs on every row alike. A row's figures are the medians of its rounds.
    ``turn`` is the first round's order (a round run alone, in a call of its own, takes the
    order its place in the series gives it: see ``--turn`` and ``--merge``)."""
    rounds = [one_round(root / f"r{i}", n, forks, timeout, turn + i) for i in range(repeat)]
    return summarize(rounds, n, forks)


def summarize(rounds: list[dict[str, Any]], n: int, forks: int) -> dict[str, Any]:
    """Each row's medians over ``rounds`` (the raw rounds are kept for ``--merge``)."""
    repeat = len(rounds)
    rows: dict[str, Any] = {}
    for name in ROWS:
        runs = [r["rows"][name] for r in rounds]
        row = {key: statistics.median(run[key] for run in runs)
               for key in ("wall_s", "user_s", "sys_s", "main_user_s", "main_sys_s")}
        row["cpu_s_each"] = [round(run["user_s"] + run["sys_s"], 2) for run in runs]
        if all("timeline" in run for run in runs):
            row["timeline"] = {key: statistics.median(run["timeline"][key] for run in runs)
                               for key in runs[0]["timeline"]}
        row["wall_s_each"] = [round(run["wall_s"], 2) for run in runs]
        # each round's ratio to the raw run of the same round (the rows of one round ran
        # back to back, so a machine's drift between rounds cancels out of these)
        row["wall_x_each"] = [round(run["wall_s"] / r["rows"]["raw"]["wall_s"], 3)
                              for run, r in zip(runs, rounds, strict=True)]
        rows[name] = row
    return {"hosts": n, "forks": forks, "batches": rounds[0]["batches"], "rounds": repeat,
            "rows": rows, "raw_rounds": rounds}


def merge(paths: list[str]) -> list[dict[str, Any]]:
    """The rounds of several ``--json`` files (one size each, e.g. three calls of ``--repeat 1
    --turn 0/1/2`` on a machine whose calls are limited in time) as one series of rounds."""
    by_size: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for path in paths:
        for res in json.loads(Path(path).read_text()):
            if "raw_rounds" not in res:
                raise SystemExit(f"{path}: written by an older bench (no raw_rounds)")
            by_size.setdefault((res["hosts"], res["forks"]), []).extend(res["raw_rounds"])
    return [summarize(rounds, n, forks) for (n, forks), rounds in sorted(by_size.items())]


ROWS = ("raw", "runner", "provisioner")


def one_round(root: Path, n: int, forks: int, timeout: float, turn: int) -> dict[str, Any]:
    work = root / f"n{n}"
    work.mkdir(parents=True)
    inv = work / "hosts.ini"
    hosts = write_inventory(inv, n)
    first, second = batches(n)
    serial_play = work / "serial.yml"
    serial_play.write_text(play_text(f"[{first}, {second}, '100%']"))
    plain_play = work / "play.yml"
    plain_play.write_text(play_text(None))
    env = child_env(root)
    rows: dict[str, Any] = {}
    order = [("raw", run_raw, serial_play), ("runner", run_runner, serial_play),
             ("provisioner", run_rollout, plain_play)]
    order = order[turn % 3:] + order[:turn % 3]
    for name, fn, play in order:
        d = work / name
        d.mkdir()
        print(f"n={n}: {name} ...", file=sys.stderr, flush=True)
        row_env = {**env, "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "bench" / "callbacks"),
                   "GDSFLEET_BENCH_RUSAGE": str(d / "rusage.jsonl")}
        rows[name] = fn(d, inv, play, forks, row_env, hosts, timeout)
        rows[name].update(main_cpu(d / "rusage.jsonl", 3 if name == "provisioner" else 1,
                                   rows[name].get("began"), rows[name]["wall_s"]))
    return {"hosts": n, "forks": forks, "batches": [first, second, n - first - second],
            "rows": rows}


def print_table(res: dict[str, Any]) -> None:
    raw = res["rows"]["raw"]
    raw_cpu = raw["user_s"] + raw["sys_s"]
    print(f"\n{res['hosts']} hosts, forks {res['forks']}, batches {res['batches']}"
          + (f", medians of {res['rounds']} rounds" if res.get("rounds", 1) > 1 else ""))
    print(f"{'run':<12} {'wall s':>8} {'user s':>8} {'sys s':>8} {'cpu s':>8} "
          f"{'wall x':>7} {'cpu x':>7} {'main cpu s':>10} {'main x':>7}")
    raw_main = raw["main_user_s"] + raw["main_sys_s"]
    for name in ROWS:
        r = res["rows"][name]
        cpu = r["user_s"] + r["sys_s"]
        main = r["main_user_s"] + r["main_sys_s"]
        print(f"{name:<12} {r['wall_s']:8.2f} {r['user_s']:8.2f} {r['sys_s']:8.2f} {cpu:8.2f} "
              f"{r['wall_s'] / raw['wall_s']:7.3f} {cpu / raw_cpu:7.3f} {main:10.2f} "
              f"{main / raw_main:7.3f}")
    if all(res["rows"][name].get("timeline") for name in ROWS):
        print(f"{'where the wall time went':<24} {'in plays':>9} {'to first':>9} "
              f"{'between':>8} {'after':>7} {'outside':>8}  (s; medians)")
        for name in ROWS:
            tl = res["rows"][name]["timeline"]
            outside = tl["to_first_play_s"] + tl["between_s"] + tl["after_last_s"]
            print(f"  {name:<22} {tl['in_plays_s']:9.2f} {tl['to_first_play_s']:9.2f} "
                  f"{tl['between_s']:8.2f} {tl['after_last_s']:7.2f} {outside:8.2f}")
    if res.get("rounds", 1) > 1:
        for name in ROWS:
            r = res["rows"][name]
            print(f"  {name:<11} wall s each round: {r['wall_s_each']}; cpu s: {r['cpu_s_each']}")
        for name in ROWS[1:]:
            each = res["rows"][name]["wall_x_each"]
            print(f"  {name:<11} wall x raw of the same round: {each} "
                  f"(median {statistics.median(each):.3f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[500])
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds one run may take before the bench fails")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="rounds of the three rows (order rotated each round); medians printed")
    ap.add_argument("--turn", type=int, default=0, metavar="K",
                    help="the first round's order of the rows (0 raw first, 1 runner first, "
                         "2 provisioner first): a series split over calls keeps its rotation")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="print the table of the rounds of these --json files together "
                         "(runs nothing)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be 1 or more")
    if args.merge:
        merged = merge(args.merge)
        for res in merged:
            print_table(res)
        if args.json:
            Path(args.json).write_text(json.dumps(merged, indent=2) + "\n")
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="gdsfleet-overhead-") as tmp:
        try:
            for n in args.hosts:
                results.append(one_size(Path(tmp) / f"n{n}", n, args.forks, args.timeout,
                                        args.repeat, args.turn))
        except BenchFailed as exc:
            print(f"BENCH FAILED (no figure): {exc}", file=sys.stderr)
            return 1
    for res in results:
        print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
