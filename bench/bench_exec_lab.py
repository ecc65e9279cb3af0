"""Execution nodes against the simulated lab (not a test): ``site.yml`` on 8 lab nodes through
one execution node, then through two (issue 14's "8 lab nodes, one execution node vs two").

Everything is the test harness's, run as an operator would run the rollout: 8 SIMULATED lab
nodes (podman containers of the lab image, tests/harness/lab.py, under a state folder and
name prefix of this benchmark's own, with the stand-in repository served on the lab's port),
and 2 execution nodes (containers of the image the exec-node playbook prepares,
tests/harness/execnode.py). Per configuration the lab nodes are made fresh (not timed), then
the rollout CLI runs in a child process, timed::

    provisioner rollout -i LAB --no-verify --waves 100% --allow-reboot --ledger L \\
        --executor ssh --exec-inventory EXEC_K --known-hosts KH --forks-per-exec-node F

with EXEC_K naming the first K execution nodes. ``--executor local --max-parallel F`` runs
too, as
the baseline the other two are divided by, and as a check that the execution nodes add no
failure: every run must exit 0 with every node's playbook ok or changed, else no figure.

What it can show on a small machine: the lab nodes, the execution nodes and the coordinator
share its cores, so when the nodes' own work (apt, dpkg, the simulated DKMS build) is the
wall, a second execution node buys little; the figure says how many cores there were.

    .venv/bin/python bench/bench_exec_lab.py                # F=4, K = 1 and 2, local
    .venv/bin/python bench/bench_exec_lab.py --json F.json --forks 2

Needs what the container tests need (podman, runc, the node image; scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_exec_scale import count_events  # noqa: E402
from tests.harness import execnode  # noqa: E402
from tests.harness import lab as labmod  # noqa: E402
from tests.harness import run as runmod  # noqa: E402

NODES = 8


def _env(collections: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GDSFLEET_LEDGER"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "tests" / "harness" / "containers.conf")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return env


def build_collection(tmp: Path) -> tuple[Path, Path]:
    """This checkout's collection: its tarball, and a collections path with it installed."""
    galaxy = str(Path(sys.executable).with_name("ansible-galaxy"))
    subprocess.run([galaxy, "collection", "build", "--force", "--output-path",
                    str(tmp / "build"), str(REPO)], check=True, capture_output=True)
    tarball = next((tmp / "build").glob("gdsfleet-gds-*.tar.gz"))
    collections = tmp / "collections"
    subprocess.run([galaxy, "collection", "install", "--force", "--offline", "--no-deps",
                    "-p", str(collections), str(tarball)], check=True, capture_output=True)
    return tarball, collections


def rollout(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, int, float]:
    """(wall s, exit status, CPU s of the coordinator and of the descendants it reaped: with
    the local executor ansible-playbook and its forks too, with ssh its ssh clients only)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                              timeout=3600, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, proc.returncode, cpu


def outcomes(report: Path) -> list[str]:
    doc = json.loads(report.read_text())
    return [str((n.get("outcome") or {}).get("status")) for n in doc["nodes"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forks", type=int, default=4,
                    help="forks per execution node, and the local baseline's --max-parallel "
                         "(default 4)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-execlab-"))
    token = f"bx{os.getpid()}"
    tarball, collections = build_collection(tmp)
    env = _env(collections)
    base = runmod.reserve_ports(NODES, start=24000, end=29000) - 1
    lab = labmod.Lab(tmp / "lab", prefix=f"gdsfleet-bench-{token}", port_base=base)
    repo_url = f"http://127.0.0.1:{labmod.repo_port()}"
    ex: execnode.ExecNodes | None = None
    results: list[dict[str, Any]] = []
    try:
        image = execnode.exec_image(tarball, collections, repo_url, token)
        ex = execnode.ExecNodes(tmp / "exec", image, token)
        (tmp / "exec").mkdir()
        ex.up(2, tarball)
        configs = [("local", 0), ("ssh", 1), ("ssh", 2)]
        for executor, k in configs:
            lab.down(stop_repo_server=False)
            # fresh nodes of the p2pdma profile (serves the repository when none does)
            nodes = lab.up(NODES, default_profile="p2pdma")
            inventory = lab.inventory(tmp / "lab-inventory.yml", nodes, {"gds_route": "p2pdma"})
            if k:
                ex.trust(lab.key, lab.known_hosts)
            name = executor if not k else f"ssh-k{k}"
            # a ledger folder per run: its runner/ (beside the ledger) then holds only this
            # run's playbook artifacts, whose events.jsonl lines are counted
            (tmp / name).mkdir()
            report, ledger = tmp / f"{name}.json", tmp / name / "ledger.sqlite"
            argv_ = [str(Path(sys.executable).with_name("provisioner")), "rollout",
                     "-i", str(inventory), "--no-verify", "--waves", "100%", "--plain",
                     "--allow-reboot",
                     "--ledger", str(ledger), "--json", str(report)]
            if k:
                exec_inv = execnode.write_exec_inventory(tmp / f"exec-k{k}.ini",
                                                         ex.nodes[:k], ex.key)
                kh = execnode.write_known_hosts(tmp / f"exec-k{k}.kh", ex.nodes[:k])
                argv_ += ["--executor", "ssh", "--exec-inventory", str(exec_inv),
                          "--known-hosts", str(kh), "--forks-per-exec-node", str(args.forks)]
            else:
                argv_ += ["--max-parallel", str(args.forks)]
            wall, rc, cpu = rollout(argv_, env, tmp / f"{name}.log")
            events = count_events(tmp / name)
            got = outcomes(report) if report.exists() else []
            ok = rc == 0 and len(got) == NODES and all(s in ("ok", "changed") for s in got)
            if not ok:
                tail = (tmp / f"{name}.log").read_text()[-3000:]
                print(f"{name}: exit {rc}, outcomes {got}: NO FIGURE\n{tail}", file=sys.stderr)
                return 1
            results.append({"config": name, "exec_nodes": k, "wall_s": round(wall, 1),
                            "cpu_s": round(cpu, 2), "events": events})
            print(f"{name}: {wall:.1f} s, {cpu:.2f} CPU-s, {events} events", flush=True)
    finally:
        if ex is not None:
            ex.down()
        lab.down(stop_repo_server=False)
        runmod.release_ports(base + 1, NODES)
    local = results[0]["wall_s"]
    cores = os.cpu_count() or 0
    print(f"\nsite.yml (p2pdma) on {NODES} SIMULATED lab nodes, {args.forks} forks per "
          f"executor, {cores} cores, {platform.machine()}:")
    print("| executor | wall s | / local | coordinator CPU s | events (per node) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['config']} | {r['wall_s']:.1f} | {r['wall_s'] / local:.2f} | "
              f"{r['cpu_s']:.2f} | {r['events']} ({r['events'] / NODES:.0f}) |")
    print("coordinator CPU: with the local executor ansible-playbook and its forks count too; "
          "with ssh only the coordinator and its ssh clients")
    k1 = next(r["wall_s"] for r in results if r["exec_nodes"] == 1)
    k2 = next(r["wall_s"] for r in results if r["exec_nodes"] == 2)
    print(f"K=2 / K=1: {k2 / k1:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"nodes": NODES, "forks": args.forks, "cores": cores, "results": results,
             "k2_over_k1": round(k2 / k1, 3)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
