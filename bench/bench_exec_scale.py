"""Execution-node scale benchmark (not a test): wall time and coordinator CPU of
``provisioner rollout --executor ssh`` over N hosts and K execution nodes.

The execution nodes are stand-ins (tests/harness/loopback_sshd.py): K real OpenSSH sshd on
loopback ports of this machine, each with its own port and known_hosts entry, running this
virtual environment's ansible-runner as ``gdsfleet_exec_runner``. The N hosts are names only
(``ansible_connection: local``): their short playbook (a command, a set_fact, a file written
under a per-host folder) runs on the execution node that their shard went to, with
``--forks-per-exec-node`` forks there. Each run is the rollout CLI itself, as an operator
types it, in a child process::

    python -m provisioner rollout -i TARGETS --playbook PLAY --no-verify --waves all \\
        --executor ssh --exec-inventory EXEC --forks-per-exec-node F --known-hosts KH ...

Measured per run: wall time of that child, and coordinator CPU = user+sys of the child and
of the descendants it waited for (``os.wait4``'s rusage): ansible-runner's transmit and
process in it, and its ssh clients. The workers on the execution nodes run under sshd, not
under the coordinator, so their CPU is not counted. A run fails loudly, with no figure, when
the CLI's exit status is not 0, when a host's ledger step is not ``skipped`` with reason
"provisioned; verification off" and a playbook outcome ok/changed (what ``--no-verify``
records for a host whose playbook ended ok), when a host's file is missing or wrong, or when the
ledger does not show K execution nodes used with every host dispatched once.

Targets (issue 14), where the work is fork-bound, i.e. K execution nodes have K x forks cores:
wall(K=2)/wall(K=1) <= 0.6, wall(K=4)/wall(K=1) <= 0.35, coordinator CPU <= 5 ms per host.
On a machine with fewer cores than that, the execution nodes share the cores and the wall-time
ratios measure the machine, not the design: the table says how many cores there were.

    .venv/bin/python bench/bench_exec_scale.py --hosts 200 --exec-nodes 1 2
    .venv/bin/python bench/bench_exec_scale.py --hosts 200 500 1000 --exec-nodes 1 2 4 \\
        --json exec-scale.json
    .venv/bin/python bench/bench_exec_scale.py --hosts 100 --exec-nodes 1 --extra-tasks 0 30

The last form runs each size twice, with the short playbook and with 30 more ``debug`` tasks,
and prints the coordinator's CPU per extra event: a playbook's events, not its hosts, are what
the coordinator's CPU grows with (two per task and host, a start and a result; site.yml with
its reboot makes about 460 per node, bench_exec_lab.py counts them).

Needs root and OpenSSH's sshd, ssh and ssh-keygen (scripts/setup.sh installs them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness.loopback_sshd import (  # noqa: E402
    LoopbackExecNodes,
    exec_inventory,
    missing_tools,
)

TARGET_K2 = 0.6
TARGET_K4 = 0.35
TARGET_CPU_MS = 5.0
MAX_ERR = 2000  # bytes of the CLI's stderr shown when a run fails

PLAYBOOK = """\
- name: Execution-node scale bench
  hosts: all
  gather_facts: false
  tasks:
    - name: Runs a command
      ansible.builtin.command: "true"
      changed_when: false
    - name: Sets a fact
      ansible.builtin.set_fact:
        bench_mark: "{{ inventory_hostname }} done"
    - name: Writes a small file under the host's own folder
      ansible.builtin.copy:
        content: "{{ bench_mark }}\\n"
        dest: "{{ bench_dir }}/{{ inventory_hostname }}/mark"
        mode: "0600"
"""
# --task-sleep S adds this task: a host's wait on work that is not the execution node's CPU
# (a package download, a driver build, a reboot on the real node), so that the run is bound
# by forks, not by the execution nodes' cores
SLEEP_TASK = """\
    - name: Waits as a real node's work would
      ansible.builtin.command: "sleep {{ bench_sleep }}"
      changed_when: false
"""

# --extra-tasks N adds N of these: each is two more events per host (its start and its result)
# through the worker's stream, ansible-runner's Processor, gdsfleet's handler and events.jsonl,
# and no module to run on the execution node (Ansible still forks there per task and host);
# the coordinator's CPU per event is the difference
# in its CPU over the difference in events between two runs that differ only in N
EXTRA_TASK = """\
    - name: Extra task {i}
      ansible.builtin.debug:
        msg: "{{{{ inventory_hostname }}}} {i}"
"""


def playbook_text(sleep: float, extra: int) -> str:
    return (PLAYBOOK + (SLEEP_TASK if sleep else "")
            + "".join(EXTRA_TASK.format(i=i) for i in range(extra)))


class BenchFailed(Exception):
    """A measured run did not do what it measures: no figure may be printed."""


def host_names(n: int) -> list[str]:
    return [f"h{i:05d}" for i in range(n)]


def write_targets(path: Path, hosts: list[str], out_dir: Path, sleep: float = 0.0) -> None:
    lines = ["[fleet]", *hosts, "", "[all:vars]", "ansible_connection=local",
             f"ansible_python_interpreter={sys.executable}", f"bench_dir={out_dir}",
             f"bench_sleep={sleep:g}"]
    path.write_text("\n".join(lines) + "\n")
    for h in hosts:
        (out_dir / h).mkdir(parents=True)


def rollout_argv(root: Path, targets: Path, exec_inv: Path, ledger: Path,
                 forks: int, play: str = "play.yml") -> list[str]:
    return [sys.executable, "-m", "provisioner", "rollout", "-i", str(targets),
            "--playbook", str(root / play), "--no-verify", "--waves", "all",
            "--ledger", str(ledger), "--known-hosts", str(root / "known_hosts"),
            "--ssh-config", "none", "-q", "--executor", "ssh",
            "--exec-inventory", str(exec_inv), "--forks-per-exec-node", str(forks),
            "--allow-local-connection"]  # the targets are ansible_connection: local


def run_coordinator(argv: list[str], env: dict[str, str], log: Path,
                    timeout: float) -> tuple[int, float, float, float]:
    """(exit status, wall s, user s, sys s) of the coordinator child and what it reaped."""
    with log.open("wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, cwd=str(REPO))
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise BenchFailed(f"{' '.join(argv[3:5])}: no end within {timeout:.0f} s")
            time.sleep(0.05)
        wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    return proc.returncode, wall, ru.ru_utime, ru.ru_stime


def _provisioned_ok(step: dict[str, Any] | None) -> bool:
    """--no-verify's final ok: step ``skipped`` because verification is off, after a
    playbook whose outcome for the host was ok (provisioner/rollout/engine.py)."""
    detail = (step or {}).get("detail") or {}
    return (step is not None and step.get("step") == "skipped"
            and detail.get("reason") == "provisioned; verification off"
            and isinstance(detail.get("outcome"), dict)
            and detail["outcome"].get("status") in ("ok", "changed"))


def check_run(ledger: Path, hosts: list[str], out_dir: Path, k: int) -> dict[str, Any]:
    """Every host compliant, its file written, each dispatched once, K execution nodes."""
    from provisioner.store import Ledger

    with Ledger.open(ledger) as led:
        runs = led.runs(kind="rollout", limit=1)
        if not runs:
            raise BenchFailed(f"{ledger}: no rollout recorded")
        run_id = runs[0]["id"]
        steps = led.node_steps(run_id)
        rows = led.dispatches(run_id)
    bad = sorted(h for h in hosts if not _provisioned_ok(steps.get(h)))
    if bad:
        shown = {h: steps.get(h) for h in bad[:3]}
        raise BenchFailed(f"{len(bad)} of {len(hosts)} hosts lack a final ok result: {shown}")
    wrong = [h for h in hosts
             if not (out_dir / h / "mark").is_file()
             or (out_dir / h / "mark").read_text() != f"{h} done\n"]
    if wrong:
        raise BenchFailed(f"{len(wrong)} hosts lack their file, e.g. {wrong[0]}")
    sent = sorted(h for r in rows for h in r["hosts"])
    if sent != sorted(hosts) or any(r["state"] != "done" for r in rows):
        raise BenchFailed(f"dispatches do not cover each host once, all done: "
                          f"{[(r['exec_node'], r['state'], len(r['hosts'])) for r in rows]}")
    used = {r["exec_node"] for r in rows}
    if len(used) != k:
        raise BenchFailed(f"{len(used)} execution nodes used, {k} given")
    spans = [(_ts(r["created_at"]), _ts(r["updated_at"])) for r in rows]
    return {"waves": len({r["wave"] for r in rows}), "dispatches": len(rows),
            "largest_shard": max(len(r["hosts"]) for r in rows),
            # from the ledger's dispatch rows: each shard's time from its record to its end,
            # and the time from the first shard's record to the last shard's end
            "shard_s": [round(b - a, 1) for a, b in spans],
            "dispatch_span_s": round(max(b for _, b in spans) - min(a for a, _ in spans), 1)}


def _ts(text: str) -> float:
    from datetime import datetime, timezone

    t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def count_events(work: Path) -> int:
    """Events the coordinator took in: the lines of each playbook run's slim events.jsonl
    (``runner/artifacts/<ident>/``; the rollout's host-event log, also named events.jsonl,
    has a line per host result only and is not counted)."""
    total = 0
    for path in work.rglob("artifacts/*/events.jsonl"):
        with path.open("rb") as fh:
            total += sum(1 for _ in fh)
    return total


def one_run(root: Path, nodes: LoopbackExecNodes, n: int, k: int, forks: int,
            timeout: float, sleep: float = 0.0, extra: int = 0) -> dict[str, Any]:
    tag = f"n{n}-k{k}" + (f"-e{extra}" if extra else "")
    work = root / tag
    out_dir = work / "hosts"
    out_dir.mkdir(parents=True)
    hosts = host_names(n)
    targets = work / "targets.ini"
    write_targets(targets, hosts, out_dir, sleep)
    exec_inv = exec_inventory(root, nodes.ports[:k], name=f"exec-{tag}.ini")
    ledger = work / "ledger.sqlite"
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith(("GDSFLEET_", "ANSIBLE_"))}
    env.update(HOME=str(root), ANSIBLE_COLLECTIONS_PATH=str(root / "collections"),
               PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    log = work / "stderr.txt"
    play = f"play-e{extra}.yml"
    if not (root / play).exists():
        (root / play).write_text(playbook_text(sleep, extra))
    rc, wall, user, sys_ = run_coordinator(
        rollout_argv(root, targets, exec_inv, ledger, forks, play), env, log, timeout)
    if rc != 0:
        err = log.read_bytes()[-MAX_ERR:].decode("utf-8", "replace")
        raise BenchFailed(f"{tag}: rollout exit status {rc}; its stderr ends:\n{err}")
    shape = check_run(ledger, hosts, out_dir, k)
    events = count_events(work)
    if events < n * 2 * (3 + extra + (1 if sleep else 0)):  # a start and a result per task
        # and host
        raise BenchFailed(f"{tag}: events.jsonl holds {events} events, fewer than the tasks make")
    cpu = user + sys_
    return {"hosts": n, "exec_nodes": k, "forks_per_exec_node": forks, "task_sleep_s": sleep,
            "extra_tasks": extra, "events": events, "wall_s": round(wall, 2),
            "coordinator_user_s": round(user, 3), "coordinator_sys_s": round(sys_, 3),
            "coordinator_cpu_s": round(cpu, 3),
            "coordinator_cpu_ms_per_host": round(cpu * 1000 / n, 2), **shape}


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n, extra in sorted({(r["hosts"], r.get("extra_tasks", 0)) for r in results}):
        by_k = {r["exec_nodes"]: r for r in results
                if (r["hosts"], r.get("extra_tasks", 0)) == (n, extra)}
        if 1 not in by_k:
            continue
        for k, target in ((2, TARGET_K2), (4, TARGET_K4)):
            if k in by_k:
                ratio = by_k[k]["wall_s"] / by_k[1]["wall_s"]
                out.append({"hosts": n, "extra_tasks": extra, "k": k,
                            "wall_ratio": round(ratio, 3), "target": target,
                            "met": ratio <= target})
    return out


def marginal_cpu(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per K, coordinator CPU per extra host between the smallest and largest host counts:
    the per-host cost without the fixed start-up (imports, execution-node checks)."""
    out = []
    for k, extra in sorted({(r["exec_nodes"], r.get("extra_tasks", 0)) for r in results}):
        runs = sorted((r for r in results
                       if (r["exec_nodes"], r.get("extra_tasks", 0)) == (k, extra)),
                      key=lambda r: r["hosts"])
        if len(runs) >= 2 and runs[-1]["hosts"] > runs[0]["hosts"]:
            lo, hi = runs[0], runs[-1]
            ms = ((hi["coordinator_cpu_s"] - lo["coordinator_cpu_s"]) * 1000
                  / (hi["hosts"] - lo["hosts"]))
            out.append({"k": k, "extra_tasks": extra, "from_hosts": lo["hosts"],
                        "to_hosts": hi["hosts"], "ms_per_extra_host": round(ms, 2)})
    return out


def marginal_event_cpu(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hosts and K, coordinator CPU per extra event between the runs with the fewest and
    the most --extra-tasks: what each event costs it, the start and the hosts left out."""
    out = []
    for n, k in sorted({(r["hosts"], r["exec_nodes"]) for r in results}):
        runs = sorted((r for r in results if (r["hosts"], r["exec_nodes"]) == (n, k)),
                      key=lambda r: r.get("events", 0))
        lo, hi = runs[0], runs[-1]
        if len(runs) >= 2 and hi.get("events", 0) > lo.get("events", 0):
            us = ((hi["coordinator_cpu_s"] - lo["coordinator_cpu_s"]) * 1e6
                  / (hi["events"] - lo["events"]))
            out.append({"hosts": n, "k": k, "from_events": lo["events"],
                        "to_events": hi["events"], "us_per_extra_event": round(us, 1)})
    return out


def table(results: list[dict[str, Any]], rat: list[dict[str, Any]], cores: int) -> str:
    first = results[0] if results else {}
    lines = [f"cores: {cores}; forks per execution node: "
             f"{first.get('forks_per_exec_node', '-')}; task sleep: "
             f"{first.get('task_sleep_s', 0):g} s",
             f"{'hosts':>6} {'K':>2} {'extra':>5} {'events':>7} {'wall s':>8} "
             f"{'coord CPU s':>12} {'ms/host':>8} {'shards':>6} {'waves':>5} {'span s':>7}  "
             f"shard s"]
    for r in results:
        lines.append(f"{r['hosts']:>6} {r['exec_nodes']:>2} {r.get('extra_tasks', 0):>5} "
                     f"{r.get('events', 0):>7} {r['wall_s']:>8.2f} "
                     f"{r['coordinator_cpu_s']:>12.3f} {r['coordinator_cpu_ms_per_host']:>8.2f} "
                     f"{r['dispatches']:>6} {r['waves']:>5} {r['dispatch_span_s']:>7.1f}  "
                     f"{' '.join(f'{x:g}' for x in r['shard_s'])}")
    for q in rat:
        extra = f" with {q['extra_tasks']} extra tasks" if q.get("extra_tasks") else ""
        lines.append(f"hosts {q['hosts']}{extra}: wall(K={q['k']})/wall(K=1) = "
                     f"{q['wall_ratio']:.3f} "
                     f"(target <= {q['target']}, {'met' if q['met'] else 'NOT met'})")
    worst = max((r["coordinator_cpu_ms_per_host"] for r in results), default=0.0)
    lines.append(f"coordinator CPU per host, worst run: {worst:.2f} ms (target <= "
                 f"{TARGET_CPU_MS}, {'met' if worst <= TARGET_CPU_MS else 'NOT met'})")
    for e in marginal_event_cpu(results):
        lines.append(f"hosts {e['hosts']} K={e['k']}: coordinator CPU per extra event "
                     f"({e['from_events']} -> {e['to_events']} events): "
                     f"{e['us_per_extra_event']:.1f} us")
    for m in marginal_cpu(results):
        extra = f" with {m['extra_tasks']} extra tasks" if m.get("extra_tasks") else ""
        lines.append(f"K={m['k']}{extra}: coordinator CPU per extra host ({m['from_hosts']} -> "
                     f"{m['to_hosts']} hosts): {m['ms_per_extra_host']:.2f} ms")
    if results and not any(r["task_sleep_s"] for r in results):
        lines.append(f"note: the execution nodes are daemons of this one machine and, without "
                     f"--task-sleep, the playbook is CPU work on its {cores} cores, which K>1 "
                     f"shares: these ratios measure the machine, not fork-bound scaling")
    return "\n".join(lines)


def write_json(path: Path, results: list[dict[str, Any]], cores: int, complete: bool) -> None:
    from ansible.release import __version__ as core
    from ansible_runner.__main__ import VERSION as runner

    doc = {"complete": complete,
           "machine": {"cores": cores, "python": platform.python_version(),
                       "system": f"{platform.system()} {platform.release()}",
                       "ansible_core": core, "ansible_runner": runner},
           "runs": results, "ratios": ratios(results), "marginal_cpu": marginal_cpu(results),
           "marginal_event_cpu": marginal_event_cpu(results),
           "targets": {"k2": TARGET_K2, "k4": TARGET_K4, "cpu_ms_per_host": TARGET_CPU_MS}}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[200, 500, 1000])
    ap.add_argument("--exec-nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--forks-per-exec-node", type=int, default=20)
    ap.add_argument("--task-sleep", type=float, default=0.0, metavar="S",
                    help="add a task that waits S seconds per host (default 0: none): the "
                         "fork-bound case, where a host waits on work elsewhere")
    ap.add_argument("--extra-tasks", type=int, nargs="+", default=[0], metavar="N",
                    help="run each size with N more debug tasks (default 0; several values: "
                         "the coordinator's CPU per extra event between the fewest and most)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds one rollout may take before the bench fails (default 1800)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    if (any(n < 1 or n > 100_000 for n in args.hosts)
            or any(k < 1 or k > 64 for k in args.exec_nodes)
            or not 1 <= args.forks_per_exec_node <= 500
            or not 0 <= args.task_sleep <= 600
            or any(not 0 <= e <= 500 for e in args.extra_tasks)):
        print("bench_exec_scale: --hosts 1..100000, --exec-nodes 1..64, "
              "--forks-per-exec-node 1..500, --task-sleep 0..600, --extra-tasks 0..500",
              file=sys.stderr)
        return 64
    lacking = missing_tools()
    if lacking:
        print(f"bench_exec_scale: this machine lacks {', '.join(lacking)}; install OpenSSH "
              f"(scripts/setup.sh) and run as root", file=sys.stderr)
        return 69
    cores = os.cpu_count() or 1
    results: list[dict[str, Any]] = []
    # The coordinators run with PYTHONDONTWRITEBYTECODE (each run starts alike) and import the
    # provisioner from this tree: its bytecode is made once here, as an install makes it, or
    # every run would compile it again and count that as coordinator CPU.
    import compileall

    compileall.compile_dir(str(REPO / "provisioner"), quiet=1)
    try:
        with tempfile.TemporaryDirectory(prefix="gdsfleet-execscale-") as tmp:
            root = Path(tmp)
            with LoopbackExecNodes(root, count=max(args.exec_nodes),
                                   max_startups=200) as nodes:
                for n, k, extra in itertools.product(args.hosts, args.exec_nodes,
                                                     args.extra_tasks):
                    r = one_run(root, nodes, n, k, args.forks_per_exec_node, args.timeout,
                                args.task_sleep, extra)
                    print(f"# hosts {n} K={k} extra tasks {extra}: {r['events']} events, "
                          f"{r['wall_s']:.2f} s wall, "
                          f"{r['coordinator_cpu_ms_per_host']:.2f} ms coordinator CPU "
                          f"per host", file=sys.stderr, flush=True)
                    results.append(r)
                    if args.json:  # a machine taken away mid-way still leaves these
                        write_json(Path(args.json), results, cores, complete=False)
    except BenchFailed as exc:
        if args.json:
            Path(args.json).unlink(missing_ok=True)
        print(f"bench_exec_scale FAILED (no figure): {exc}", file=sys.stderr)
        return 1
    print(table(results, ratios(results), cores))
    if args.json:
        write_json(Path(args.json), results, cores, complete=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
