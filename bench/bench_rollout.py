"""Rollout benchmarks (not a test): prints figures, each against a baseline run in this script.

1. Overhead: ``provisioner rollout --no-verify`` over 8 fresh simulated nodes vs raw
   ``ansible-playbook playbooks/site.yml`` with the equivalent ``serial`` batches on 8 other
   fresh nodes, twice: with Ansible's defaults (what an operator runs) and with the rollout's
   own SSH settings (pipelining, connection reuse; target ratio <= 1.10).
2. Reconcile: a re-run of ``provisioner rollout`` over the compliant fleet vs the first rollout
   with verification (target <= 0.25), each with SSH pipelining and connection reuse (the
   default) and with ``--no-pipelining``, on fresh fleets of their own, run at the same time
   and printed side by side.
3. Scale: planning 10,000 nodes (waves + actions from a ledger holding 10,000 latest records)
   and writing 10,000 node results to the ledger (targets < 1 s and < 5 s); the time ansible-core
   takes to load a 10,000-host inventory is printed beside it.
4. Plan of a large inventory: ``provisioner plan -i F`` of a 10,000-host YAML inventory as a
   whole process vs ``ansible-inventory -i F --list`` of the same file (median of a few runs
   each; target ratio <= 1.2).

    .venv/bin/python bench/bench_rollout.py            # all three (brings fleets up and down)
    .venv/bin/python bench/bench_rollout.py --only 3 --only 4   # no containers

Parts 1 and 2 run on the SIMULATED lab fleet (tests/harness): containers with stand-in
hardware and packages, so the absolute times say nothing about real nodes; the ratios say how
much the orchestrator adds on top of Ansible. Each fleet is brought up with what its playbooks
need: the stand-in repository served on a port of its own and the stand-in distribution
archive configured on every node (as scripts/lab.sh does).

Every measured command must succeed: a run that fails (a rollout or playbook exiting non-zero,
say at the canary) stops the benchmark with a message naming its log, exit status 1, and no
figure for that part (a ratio of two failed runs measures nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WAVES = "1,5,100%"  # 8 nodes -> batches 1, 5, 2
SERIAL = [1, 5, 2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".lab" / "collections"))
    env.setdefault("CONTAINERS_CONF", str(REPO / "tests" / "harness" / "containers.conf"))
    return env


LOGS = Path(tempfile.gettempdir()) / "gdsfleet-bench-rollout-logs"


class BenchFailed(Exception):
    """A measured run failed: the benchmark stops, and prints no figure for it."""


def _timed(cmd: list[str], name: str, **kw: Any) -> tuple[float, int]:
    """Run ``cmd``; its output goes to LOGS/<name>.log. A non-zero exit raises BenchFailed
    (with the log's last lines): a failed run is never timed as if it had worked."""
    LOGS.mkdir(exist_ok=True)
    log = LOGS / f"{name}.log"
    t0 = time.perf_counter()
    kw.setdefault("env", _env())
    with open(log, "w") as fh:
        p = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                           text=True, check=False, **kw)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise BenchFailed(f"{name} exited {p.returncode} after {dt:.0f}s (log {log}): "
                          f"{' | '.join(tail)}")
    return dt, p.returncode


def repo_vars(base: str) -> dict[str, str]:
    """The role variables that point the collection at the stand-in repository at ``base``."""
    return {
        "cuda_repo_base_url": f"{base}/cuda/repos",
        "mofed_doca_repo_base_url": f"{base}/doca",
        "mofed_mlnx_ofed_tarball": f"{base}/mlnx_ofed/"
                                   "MLNX_OFED_LINUX-23.10-2.1.3.1-debian12.1-x86_64.tgz",
        "verify_runtime_index_url": f"{base}/pypi/simple",
    }


@contextmanager
def private_repo() -> Iterator[str]:
    """Serve the stand-in repository (.lab/standin-repo) on a free loopback port of our own, so
    nobody else's harness stopping the shared server on 8470 can disturb a measurement; yields
    its base URL."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                             "--directory", str(REPO / ".lab" / "standin-repo"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def fresh_fleet(nodes: int, route: str | None, tag: str = "ro",
                port_base: int = 26400) -> Iterator[Path]:
    """A fresh simulated fleet of its own (never the operator's lab); yields its inventory.

    Built with the harness's Lab (tests/harness/lab.py) under a private name prefix, state
    directory and port range, with a private repository server whose stand-in distribution
    archive every node uses (``configure_distro_archive``, as scripts/lab.sh; without it the
    roles find no ``linux-headers-<kernel>``), and torn down afterwards.
    """
    from tests.harness import lab as labmod

    os.environ.setdefault("CONTAINERS_CONF", str(REPO / "tests" / "harness" / "containers.conf"))
    state = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-rollout-"))
    lab = labmod.Lab(state, prefix=f"gdsfleet-bench-{tag}", port_base=port_base)
    profiles = {str(i): route for i in range(1, nodes + 1)} if route else {}
    try:
        lab_nodes = lab.up(nodes, profiles)  # also builds the stand-in repository (cached)
        with private_repo() as base:
            for node in lab_nodes:
                if not labmod.configure_distro_archive(node.name, base):
                    raise BenchFailed(
                        "the stand-in repository has no distribution archive "
                        "(.lab/standin-repo/debian): build it with "
                        "bash tests/harness/standin_repo/build.sh, then run the benchmark again")
            group_vars: dict[str, Any] = repo_vars(base)
            if route:
                group_vars["gds_route"] = route
            yield lab.inventory(state / "inventory" / "hosts.yml", lab_nodes, group_vars)
    finally:
        lab.down(stop_repo_server=False)


def serial_playbook(tmp: Path) -> Path:
    """playbooks/site.yml with ``serial: [1, 5, 2]`` added to its play (the raw baseline)."""
    import yaml

    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    for play in plays:
        play["serial"] = SERIAL
        play["max_fail_percentage"] = 0
    out = tmp / "site_serial.yml"
    out.write_text(yaml.safe_dump(plays, sort_keys=False))
    return out


# this checkout's provisioner (the console script may import another installed copy)
PROV = [sys.executable, "-m", "provisioner.cli"]


def part1_overhead(nodes: int, route: str | None) -> dict[str, float]:
    """Three fresh fleets, one after the other, the same batches: raw ``ansible-playbook`` as
    an operator runs it (Ansible's defaults: no pipelining, ControlPersist 60 s), raw
    ``ansible-playbook`` with the rollout's SSH settings (pipelining, connection reuse), and
    ``provisioner rollout --no-verify`` (pipelining on, its default). The first ratio says what
    an operator gains or pays by switching; the second what the orchestrator itself adds."""
    from provisioner.rollout.ansible_env import connection_env

    ansible = str(REPO / ".venv" / "bin" / "ansible-playbook")
    defaults = {k: v for k, v in _env().items()
                if not k.startswith(("ANSIBLE_PIPELINING", "ANSIBLE_SSH_"))}
    with tempfile.TemporaryDirectory() as tmp:
        pb = serial_playbook(Path(tmp))
        with fresh_fleet(nodes, route) as inv:
            raw_def, _ = _timed([ansible, "-i", str(inv), str(pb), "-f", "10"],
                                "raw-ansible-playbook-defaults", env=defaults)
        with fresh_fleet(nodes, route) as inv:
            raw, _ = _timed([ansible, "-i", str(inv), str(pb), "-f", "10"],
                            "raw-ansible-playbook-pipelined",
                            env={**defaults, **connection_env()})
        with fresh_fleet(nodes, route) as inv:
            ledger = Path(tmp) / "ledger.sqlite"
            roll, _ = _timed([*PROV, "rollout", "-i", str(inv), "--ledger", str(ledger),
                              "--waves", WAVES, "--no-verify", "--plain",
                              "--max-parallel", "10"], "rollout-no-verify")
    return {"raw_ansible_defaults_s": raw_def, "raw_ansible_pipelined_s": raw,
            "rollout_no_verify_s": roll, "ratio_vs_defaults": roll / raw_def,
            "ratio": roll / raw}


def part2_reconcile(nodes: int, io_size: str, route: str | None,
                    pipelining: bool = True) -> dict[str, float]:
    tag = "" if pipelining else "-no-pipelining"
    fleet = ("rp", 26500) if pipelining else ("rn", 26600)  # both may run at once
    with tempfile.TemporaryDirectory() as tmp, fresh_fleet(nodes, route, *fleet) as inv:
        ledger = Path(tmp) / "ledger.sqlite"
        args = [*PROV, "rollout", "-i", str(inv), "--ledger", str(ledger), "--waves", WAVES,
                "--plain", "--max-parallel", "10", "--io-size", io_size,
                # both routes need a reboot before they verify (DOCA's nvme; p2pdma's options)
                "--allow-reboot"] + ([] if pipelining else ["--no-pipelining"])
        env = {k: v for k, v in _env().items()  # the option decides, not this shell
               if k not in ("ANSIBLE_PIPELINING", "ANSIBLE_SSH_PIPELINING", "ANSIBLE_SSH_ARGS")}
        first, rc1 = _timed(args, f"rollout-first{tag}", env=env)
        again, rc2 = _timed(args, f"rollout-reconcile{tag}", env=env)
    return {"first_rollout_s": first, "reconcile_s": again, "ratio": again / first,
            "rc_first": rc1, "rc_reconcile": rc2}


def print_reconcile_table(rows: dict[str, dict[str, float]], nodes: int, io_size: str) -> None:
    on, off = rows.get("pipelining"), rows.get("no_pipelining")
    print(f"[2] {nodes} fresh simulated nodes per column, waves {WAVES}, --allow-reboot, "
          f"io {io_size}:")
    print(f"    {'':<28}{'pipelining + reuse':>20}{'--no-pipelining':>17}{'on/off':>8}")
    for key, label in (("first_rollout_s", "first rollout (verify) s"),
                       ("reconcile_s", "reconcile re-run s")):
        a = on[key] if on else float("nan")
        b = off[key] if off else float("nan")
        print(f"    {label:<28}{a:>20.1f}{b:>17.1f}{a / b:>8.2f}")
    for name, r in (("pipelining + reuse", on), ("--no-pipelining", off)):
        if r:
            print(f"    {name}: reconcile/first {r['ratio']:.3f} (target <= 0.25); exit codes "
                  f"{int(r['rc_first'])}, {int(r['rc_reconcile'])}")


def _report(name: str, i: int) -> dict[str, Any]:
    checks = [{"id": f"check.{k}", "status": "pass", "expected": "x", "observed": "x",
               "message": "ok"} for k in range(24)]
    return {"name": name, "reachable": True, "compliant": True, "route": "nvfs",
            "error": None, "started_at": "", "duration_s": 1.0, "checks": checks,
            "io_test": {"path_taken": "direct", "write_gbps": 1.0, "read_gbps": 1.0,
                        "bytes": 16 << 20, "verified": True},
            "facts": {"reboot": {"required": False, "reasons": []}},
            "raw": {"nvfs_stats": "GDS Version: 1.14\n" * 8}}


def part3_scale(n: int = 10_000) -> dict[str, float]:
    from provisioner.inventory import load_inventory
    from provisioner.rollout.planner import plan_waves
    from provisioner.rollout.state import ResultWriter, latest_states, seed_pending
    from provisioner.store import Ledger

    names = [f"gpu-{i:05d}" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp) / "hosts"
        inv.write_text("[gpu_nodes]\n" + "".join(
            f"{h} ansible_host=127.0.{(i // 250) % 250}.{1 + i % 250}\n"
            for i, h in enumerate(names)))
        t0 = time.perf_counter()
        inventory = load_inventory(inv, None)
        load_s = time.perf_counter() - t0

        ledger = Ledger.open(Path(tmp) / "ledger.sqlite")
        run_id = ledger.start_run("rollout", "bench", {})
        # write 10,000 node results the way the engine does: each node's verification, checks
        # and step together, group-committed (provisioner.rollout.state.ResultWriter)
        t0 = time.perf_counter()
        writer = ResultWriter(ledger, run_id)
        for i, h in enumerate(names):
            writer.add(_report(h, i), "compliant", 2, {"reason": "verified"})
        writer.flush()
        write_s = time.perf_counter() - t0
        # the same through Ledger.record_verification, one transaction per node (reference)
        t0 = time.perf_counter()
        for i, h in enumerate(names[:1000]):
            ledger.record_verification(run_id, _report(h, i), step="compliant", wave=2,
                                       detail={"reason": "verified"})
        single_s = (time.perf_counter() - t0) * n / 1000

        # plan: latest state of 10,000 nodes from the ledger + waves + actions + pending rows
        t0 = time.perf_counter()
        latest = latest_states(ledger)
        plan = plan_waves(inventory.names(), "1,5,20%,100%", latest=latest)
        plan_s = time.perf_counter() - t0
        run2 = ledger.start_run("rollout", "bench2", {"plan": plan.to_dict()})
        t0 = time.perf_counter()
        seed_pending(ledger, run2, plan)
        seed_s = time.perf_counter() - t0
        ledger.close()
    return {"nodes": n, "inventory_load_s": load_s, "plan_s": plan_s,
            "seed_pending_s": seed_s, "write_results_s": write_s,
            "write_one_per_txn_s_extrapolated": single_s,
            "verify_only": plan.counts()["verify"]}


def yaml_inventory(path: Path, n: int) -> Path:
    """A YAML inventory of ``n`` hosts in gpu_nodes, distinct addresses, one group var."""
    import yaml

    hosts = {f"gpu-{i:05d}": {"ansible_host": f"10.{i // 62500}.{(i // 250) % 250}.{1 + i % 250}"}
             for i in range(n)}
    doc = {"all": {"vars": {"ansible_user": "root"},
                   "children": {"gpu_nodes": {"hosts": hosts, "vars": {"gds_route": "nvfs"}}}}}
    path.write_text(yaml.safe_dump(doc))
    return path


def part4_plan_vs_inventory(n: int = 10_000, runs: int = 3) -> dict[str, Any]:
    """``provisioner plan -i F`` vs ``ansible-inventory -i F --list``, whole processes,
    alternated, median of ``runs`` each."""
    import statistics

    with tempfile.TemporaryDirectory() as tmp:
        inv = yaml_inventory(Path(tmp) / "hosts.yml", n)
        ledger = Path(tmp) / "ledger.sqlite"  # not there: plan creates nothing
        env = {**_env(), "ANSIBLE_DEPRECATION_WARNINGS": "False"}
        ai, plan = [], []
        for _ in range(runs):
            dt, rc = _timed([str(REPO / ".venv" / "bin" / "ansible-inventory"), "-i", str(inv),
                             "--list"], "ansible-inventory-list", env=env)
            ai.append(dt)  # rc is 0: a failed run raised BenchFailed
            dt, rc = _timed([*PROV, "plan", "-i", str(inv), "--ledger", str(ledger)],
                            "plan-10000", env=env)
            plan.append(dt)
    a, p = statistics.median(ai), statistics.median(plan)
    return {"nodes": n, "ansible_inventory_list_s": a, "plan_s": p, "ratio": p / a,
            "runs_ansible_inventory": ai, "runs_plan": plan}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BenchFailed as exc:
        sys.stdout.flush()
        sys.stderr.write(f"bench_rollout: FAILED, no figure: {exc}\n")
        return 1


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["1", "2", "3", "4"], action="append")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--io-size", default="16M")
    ap.add_argument("--route", choices=["nvfs", "p2pdma"], default=None,
                    help="node profile and gds_route of the fleets (default: the lab's)")
    ap.add_argument("--columns", choices=["both", "on", "off"], default="both",
                    help="part 2: with SSH pipelining and reuse (on), --no-pipelining (off), "
                         "or both at once (default)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    parts = set(args.only or ["1", "2", "3", "4"])
    if parts & {"1", "2"}:  # the roles by FQCN from this checkout (.lab/collections)
        subprocess.run(["bash", str(REPO / "scripts" / "install_collection.sh")], cwd=REPO,
                       env=_env(), check=True, stdout=subprocess.DEVNULL)
    out: dict[str, Any] = {}
    if "3" in parts:
        r = part3_scale()
        out["scale"] = r
        print(f"[3] {r['nodes']} nodes: plan {r['plan_s']:.3f}s (target < 1 s; + pending rows "
              f"{r['seed_pending_s']:.3f}s), write {r['nodes']} node results "
              f"{r['write_results_s']:.2f}s (target < 5 s; one transaction per node would take "
              f"~{r['write_one_per_txn_s_extrapolated']:.1f}s); ansible-core inventory load "
              f"{r['inventory_load_s']:.2f}s (not part of planning)", flush=True)
    if "4" in parts:
        r = part4_plan_vs_inventory()
        out["plan_vs_inventory"] = r
        print(f"[4] {r['nodes']}-host YAML inventory, whole processes, median of "
              f"{len(r['runs_plan'])}: provisioner plan {r['plan_s']:.2f}s, ansible-inventory "
              f"--list {r['ansible_inventory_list_s']:.2f}s: ratio {r['ratio']:.2f} "
              f"(target <= 1.2; runs: plan "
              f"{', '.join(f'{x:.2f}' for x in r['runs_plan'])}; ansible-inventory "
              f"{', '.join(f'{x:.2f}' for x in r['runs_ansible_inventory'])})", flush=True)
    if "1" in parts:
        r = part1_overhead(args.nodes, args.route)
        out["overhead"] = r
        print(f"[1] {args.nodes} fresh simulated nodes ({args.route or 'lab route'}), batches "
              f"{SERIAL}: raw ansible-playbook with Ansible's defaults "
              f"{r['raw_ansible_defaults_s']:.1f}s, raw ansible-playbook pipelined "
              f"{r['raw_ansible_pipelined_s']:.1f}s, provisioner rollout --no-verify "
              f"{r['rollout_no_verify_s']:.1f}s: ratio vs defaults "
              f"{r['ratio_vs_defaults']:.3f}, vs pipelined {r['ratio']:.3f} "
              f"(target <= 1.10 vs pipelined)", flush=True)
    if "2" in parts:
        rows: dict[str, dict[str, float]] = {}
        columns = {"on": [("pipelining", True)], "off": [("no_pipelining", False)],
                   "both": [("pipelining", True), ("no_pipelining", False)]}[args.columns]

        def column(key: str, on: bool) -> None:
            rows[key] = part2_reconcile(args.nodes, args.io_size, args.route, pipelining=on)
            r = rows[key]
            print(f"    ({key}: first {r['first_rollout_s']:.1f}s, reconcile "
                  f"{r['reconcile_s']:.1f}s)", flush=True)

        # both columns at the same time, on fleets of their own: they share whatever else
        # loads the machine, instead of one column getting a quiet hour and the other a busy one
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(columns)) as pool:
            for fut in [pool.submit(column, key, on) for key, on in columns]:
                fut.result()
        out["reconcile"] = rows
        print_reconcile_table(rows, args.nodes, args.io_size)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
