"""attest benchmark (not a test): does ``gdsfleet-attest`` answer in well under a second?

The baseline, run in the same script on the same node: the gather of ``provisioner verify
--local`` (provisioner/remote/gather.py as verify sends it, bundled: every fact verify reads,
``gdscheck -p`` included where the node has it, no I/O test). Both are run the way a node runs
them, as a fresh ``python3`` process each time (interpreter start included), N times each;
printed: the median wall time, the median CPU time of the child (user + system), and the ratio
gather / attest. Where:

* ``host``: this machine's own root (no nvidia-fs here: attest finds no record and says so,
  exit 1, after reading every fact it compares; the gather runs the real commands);
* ``tree``: a conformance profile's simulated node tree (tests/conformance/simnode.py,
  SYNTHETIC) with a record written first (attest exits 0); the gather through the conformance
  shim (tests/conformance/shim.py), which adds its own cost: the ratio is a lower bound;
* ``lab`` (``--where lab``, podman): one SIMULATED lab node (a container of the node image with
  the stand-in nvfs stack installed and /mnt/gds mounted, as bench/bench_verify.py does), the
  node-side attest copied into it as the role installs it, its record written by verify's own
  node side; both timed inside the container (no ``podman exec`` in the figures).

    .venv/bin/python bench/bench_attest.py                 # host and tree, 20 runs each
    .venv/bin/python bench/bench_attest.py --where lab      # one lab node (a few minutes)

A run whose exit status is not the expected one stops the benchmark with the reason: a failed
run measures nothing. Figures taken on a loaded machine are slower: the ratios hold better.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODULES = ("attest.py", "attest_state.py", "attest_compare.py", "attest_counters.py",
           "cufile_json.py")

# Runs in the measured environment's python3 (stdlib only): each case N times as a child,
# wall time and the child's CPU (getrusage of the children) per run; medians out as JSON.
TIMER = r"""
import json, resource, statistics, subprocess, sys, time
cases = json.loads(sys.argv[1])
out = []
for c in cases:
    walls, cpus, codes = [], [], set()
    for _ in range(c["n"]):
        stdin = open(c["stdin"], "rb") if c.get("stdin") else subprocess.DEVNULL
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(c["argv"], stdin=stdin, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        codes.add(p.returncode)
        if stdin is not subprocess.DEVNULL:
            stdin.close()
    out.append({"name": c["name"], "wall": statistics.median(walls),
                "cpu": statistics.median(cpus), "max": max(walls), "codes": sorted(codes),
                "err": p.stderr[-300:].decode("utf-8", "replace")})
print(json.dumps(out))
"""


def _gather_file(work: Path) -> Path:
    from provisioner.remote import load_script

    path = work / "gather.py"
    path.write_bytes(load_script("gather.py"))
    return path


def _cases(python: str, lib: str, gather: list[str], stdin: str | None, n: int,
           root: list[str], want_attest: int) -> list[dict[str, Any]]:
    attest = [python, "-I", "-S", f"{lib}/attest.py", *root]
    return [
        {"name": "gdsfleet-attest", "argv": attest, "n": n, "want": [want_attest]},
        {"name": "gdsfleet-attest --json --textfile", "n": n, "want": [want_attest],
         "argv": [*attest, "--json", "--textfile", "/tmp/gdsfleet-bench-attest.prom"]},
        {"name": "verify --local's gather (baseline)", "argv": gather, "stdin": stdin,
         "n": max(3, n // 4), "want": [0]},
    ]


def _check(results: list[dict[str, Any]], cases: list[dict[str, Any]], where: str) -> None:
    for r, c in zip(results, cases, strict=True):
        if r["codes"] != c["want"]:
            raise SystemExit(f"{where}: {r['name']} exited {r['codes']}, not {c['want']}: "
                             f"{r['err']}")


def _print(where: str, results: list[dict[str, Any]]) -> None:
    base = results[-1]
    print(f"\n{where}")
    print(f"  {'what':38} {'median wall':>12} {'median CPU':>11} {'max wall':>9}  "
          "gather / this (wall)")
    for r in results:
        ratio = base["wall"] / r["wall"] if r["wall"] else float("inf")
        print(f"  {r['name']:38} {r['wall'] * 1000:9.1f} ms {r['cpu'] * 1000:8.1f} ms "
              f"{r['max'] * 1000:6.0f} ms  {ratio:6.1f}x")


def run_local(where: str, n: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-attest-"))
    try:
        lib = str(REPO / "plugins" / "module_utils")
        gather = _gather_file(work)
        if where == "host":
            record = work / "no-record.json"
            cases = _cases(sys.executable, lib, [sys.executable, str(gather)], None, n,
                           ["--record", str(record)], 1)
        else:
            from tests.unit import attestnode as an

            tree = work / "node"
            an.build(tree)
            an.write_record(tree, simulated=True)
            shim = REPO / "tests" / "conformance" / "shim.py"
            cases = _cases(sys.executable, lib, [sys.executable, str(shim), str(tree)],
                           str(gather), n, ["--root", str(tree)], 0)
        proc = subprocess.run([sys.executable, "-c", TIMER, json.dumps(cases)],
                              capture_output=True, text=True, timeout=1800, check=True)
        results = json.loads(proc.stdout)
        _check(results, cases, where)
        label = {"host": f"this machine's root ({os.uname().release}; no nvidia-fs, no record: "
                         "attest exit 1)",
                 "tree": "a simulated node tree (host-ubuntu2404-nvfs-local, SYNTHETIC; "
                         "attest exit 0; gather through the shim)"}[where]
        _print(label, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_lab(n: int) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from bench_verify import PROVISION, _env, _free_port_base

    from tests.harness import lab as labmod

    work = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-attest-lab-"))
    lab = labmod.Lab(work / "lab", prefix=f"gdsfleet-ba-{secrets.token_hex(2)}",
                     port_base=_free_port_base(1))
    env = _env()
    print("SIMULATED lab: bringing up 1 node ...", flush=True)
    try:
        (node,) = lab.up(1)

        def sh(script: str, stdin: bytes | None = None, timeout: int = 900) -> str:
            p = subprocess.run(["podman", "exec", "-i", node.name, "bash", "-c", script],
                               input=stdin, capture_output=True, env=env, timeout=timeout,
                               check=False)
            if p.returncode != 0:
                raise SystemExit(f"{node.name}: {script[:60]!r} failed: "
                                 f"{p.stderr[-1500:].decode('utf-8', 'replace')}")
            return p.stdout.decode("utf-8", "replace")

        port = os.environ.get("GDSFLEET_REPO_PORT", "8470")
        sh(f"REPO_PORT={port} bash -s", PROVISION.encode())
        lib = "/usr/local/lib/gdsfleet/attest"
        sh(f"mkdir -p {lib}")
        for name in MODULES:
            sh(f"cat > {lib}/{name}", (REPO / "plugins" / "module_utils" / name).read_bytes())
        from provisioner.remote import load_script

        request = {"mode": "record", "node": node.name, "verdict": {
            "compliant": True, "route": "nvfs", "path_taken": "direct", "simulated": True,
            "mount_path": "/mnt/gds"}}
        answer = json.loads(sh(f"python3 - {shlex.quote(json.dumps(request))}",
                               load_script("attest_node.py")).strip().splitlines()[-1])
        if not answer.get("written"):
            raise SystemExit(f"{node.name}: the record was not written: {answer}")
        sh("cat > /tmp/gather.py", load_script("gather.py"))
        cases = _cases("python3", lib, ["python3", "/tmp/gather.py"], None, n, [], 0)
        sh("cat > /tmp/gdsfleet-timer.py", TIMER.encode())
        out = sh(f"python3 /tmp/gdsfleet-timer.py {shlex.quote(json.dumps(cases))}")
        results = json.loads(out.strip().splitlines()[-1])
        _check(results, cases, "lab")
        _print(f"a SIMULATED lab node ({node.name}: stand-in nvfs stack, /mnt/gds mounted, "
               "record written by verify's node side; attest exit 0)", results)
    finally:
        lab.down()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", default="host,tree", help="host, tree, lab (default host,tree)")
    ap.add_argument("--runs", type=int, default=20, help="runs of attest per place (default 20)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"attest vs verify --local's gather; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}", flush=True)
    for where in [w.strip() for w in args.where.split(",") if w.strip()]:
        if where == "lab":
            run_lab(args.runs)
        elif where in ("host", "tree"):
            run_local(where, args.runs)
        else:
            raise SystemExit(f"--where {where!r}: host, tree or lab")
    print(f"\n(benchmark ran {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
