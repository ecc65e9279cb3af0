"""Verification benchmark (not a test): ``provisioner verify`` vs an equivalent Ansible ad-hoc run.

For each fleet size N (default 1, 8, 32) on the SIMULATED lab (tests/harness: containers with
stand-in hardware and packages, sshd on loopback), in the same run:

* ``provisioner verify -i INV --parallel N --io-size SIZE`` (one SSH connection per node: the
  gather script with gdscheck, then the kvikio I/O test), as a subprocess, wall time;
* ``ansible all -i INV -f N -m ansible.builtin.shell -a '<the same gather script> ;
  <the same I/O test>'``: the same remote commands at the same parallelism (forks), wall time.

Printed: wall times, verify(N)/verify(1) (target <= 3.0 at N=32), ansible/verify (target
>= 5.0). Absolute times say nothing about real nodes (every container shares this machine's
cores, so node-side work grows with N); the ratios say what the orchestrator adds.

Second part (``--light``, on by default): the same fleets, both tools running the same *light*
read-only command (a few /proc and /sys reads, ~10 ms of node CPU) - the provisioner through
its own transport (inventory, bounded parallel pool, one paramiko connection per node: the code
path of ``verify``), Ansible through ``-m shell``. With node-side work this small, the figures
show what each orchestrator itself costs as N grows.

Third part (controller cost, on by default; ``--controller-only`` runs it alone on 8 bare
nodes): what the controller itself spends. Its CPU seconds (user + system of the provisioner
process, from getrusage) per node verified in the first part, and, for the light command at
1, 8, 32 and 64 inventory hosts, the wall time and the controller's CPU per host. The hosts
beyond the fleet's size are more inventory names for the same simulated nodes (round robin,
at most 8 connections per node's sshd at once): on a 2-core machine the nodes' own work
cannot scale, the controller's cost per host is what this part shows.

    .venv/bin/python bench/bench_verify.py                    # 1, 8, 32 nodes
    .venv/bin/python bench/bench_verify.py --controller-only  # controller cost alone (8 nodes)
    .venv/bin/python bench/bench_verify.py --sizes 1,8 --io-size 1M --repeat 1

Every measured run must do what it measures: ``provisioner verify`` of provisioned nodes must
find every node compliant (of bare nodes: every node reached, no error), and every ansible and
transport run must succeed; otherwise the benchmark stops with the reason and a non-zero exit
status, and prints no figure (the time of a failed run measures nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Installs the stand-in nvfs stack (TEST STAND-IN packages of the harness repository) and mounts
# the node's GDS filesystem: the same steps as tests/fleet/test_verify_fleet.py for a compliant
# nvfs node.
PROVISION = r"""
set -eu
cat > /etc/apt/sources.list.d/gdsfleet-test.list <<LIST
deb [trusted=yes] http://127.0.0.1:${REPO_PORT}/cuda/repos/debian12/x86_64/ /
deb [trusted=yes] http://127.0.0.1:${REPO_PORT}/doca/3.1.0/debian12/x86_64/ /
LIST
APT="-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/gdsfleet-test.list
 -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 -o Acquire::Retries=3"
apt-get $APT update -qq >/dev/null 2>&1
DEBIAN_FRONTEND=noninteractive apt-get $APT install -y -qq --no-install-recommends \
  dkms "linux-headers-$(uname -r)" nvidia-gds-12-9 doca-ofed mlnx-nvme-dkms >/dev/null 2>&1
dkms autoinstall >/dev/null 2>&1 || true
modprobe nvidia_fs
mkdir -p /etc/modules-load.d && echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf
python3 - <<'PY'
import json, re
text = re.sub(r"(?m)^\s*//.*$", "", open("/etc/cufile.json").read())
cfg = json.loads(re.sub(r",(\s*[}\]])", r"\1", text))
cfg.setdefault("properties", {})["allow_compat_mode"] = False
json.dump(cfg, open("/etc/cufile.json", "w"), indent=2)
PY
mkdir -p /mnt/gds
mountpoint -q /mnt/gds || { mkfs.xfs -q -f /dev/nvme0n1 && mount -o noatime /dev/nvme0n1 /mnt/gds; }
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("CONTAINERS_CONF", str(REPO / "tests" / "harness" / "containers.conf"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".lab" / "collections"))
    env["ANSIBLE_DEPRECATION_WARNINGS"] = "False"
    env.pop("GDSFLEET_LEDGER", None)
    return env


def _free_port_base(n: int) -> int:
    for _ in range(200):
        base = 25000 + 100 * secrets.randbelow(40)
        try:
            for i in range(1, n + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
    raise RuntimeError("no free block of loopback ports")


def ansible_command(io_size: int) -> str:
    """The same remote work as one ``provisioner verify`` of a node, as one shell command."""
    from provisioner.remote import load_script
    from provisioner.verify.iotest import SCRIPT, command
    from provisioner.verify.model import IoTestOptions
    from provisioner.verify.node import GATHER_COMMAND, GATHER_SCRIPT

    gather = load_script(GATHER_SCRIPT).decode()
    iotest = load_script(SCRIPT).decode()
    io_cmd = command(IoTestOptions(size_bytes=io_size), "/mnt/gds")
    return (f"{GATHER_COMMAND} <<'GDSFLEET_GATHER' >/dev/null\n{gather}\nGDSFLEET_GATHER\n"
            f"{io_cmd} <<'GDSFLEET_IOTEST'\n{iotest}\nGDSFLEET_IOTEST\n")


LIGHT = ("cat /proc/driver/nvidia/version /sys/module/nvme_core/parameters/multipath "
         "/proc/driver/nvidia-fs/stats 2>/dev/null; grep -c nvfs /proc/kallsyms; "
         "findmnt -n -o FSTYPE,OPTIONS /mnt/gds || true")


def transport_probe(inventory: str, parallel: int, command: str) -> int:
    """``provisioner``'s transport alone: what ``verify`` does around the node-side work."""
    from provisioner.fleet import run_parallel
    from provisioner.inventory import load_inventory
    from provisioner.ssh import SSHSettings, runner_factory

    cpu0, t0 = time.process_time(), time.perf_counter()
    nodes = load_inventory(inventory).nodes
    make = runner_factory(SSHSettings(ssh_config=None))

    def one(node: Any) -> int:
        with make(node) as r:
            return r.run(command, timeout=60).exit_status

    res = run_parallel(nodes, one, parallel=parallel)
    # the controller's work from the inventory on (interpreter start and imports left out)
    print(f"PROBE cpu_s={time.process_time() - cpu0:.4f} wall_s={time.perf_counter() - t0:.4f}")
    bad = {h.name: h.error or h.value for h in res if h.error or h.value}
    if bad:
        print(bad, file=sys.stderr)
    return 1 if bad else 0


# CPU seconds (user + system) of the last process timed() ran, from getrusage
LAST_CPU_S: list[float] = [0.0]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``cmd``; its wall time, and its CPU time (with its own children) in LAST_CPU_S."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True,
                          check=False, timeout=1800)
    dt = time.perf_counter() - t0
    LAST_CPU_S[0] = _children_cpu() - cpu0
    return dt, proc


CONTROLLER_SIZES = (1, 8, 32, 64)
MAX_PER_NODE = 8  # connections at once to one simulated node's sshd (MaxStartups 10 by default)


def aliased_inventory(lab: Any, path: Path, nodes: list[Any], n: int) -> Path:
    """An inventory of ``n`` host names spread round robin over ``nodes`` (same address and
    port for the aliases of one node: ``verify``'s transport accepts that, rollout does not)."""
    import yaml

    base = lab.inventory(path.with_name("base-" + path.name), nodes)
    doc = yaml.safe_load(base.read_text())
    real = doc["all"]["children"]["gpu_nodes"]["hosts"]
    names = list(real)
    doc["all"]["children"]["gpu_nodes"]["hosts"] = {
        f"h{i:03d}-{names[i % len(names)]}": dict(real[names[i % len(names)]]) for i in range(n)
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def controller_cost(lab: Any, nodes: list[Any], work: Path, repeat: int,
                    sizes: tuple[int, ...] = CONTROLLER_SIZES) -> list[tuple[float, ...]]:
    """(hosts, process wall s, process CPU s, wall s and CPU s from the inventory load on) of
    the light command through verify's transport."""
    rows = []
    for n in sizes:
        spread = nodes[:max(1, min(len(nodes), n))]
        if n > MAX_PER_NODE * len(spread):
            print(f"  skipping {n} hosts: more than {MAX_PER_NODE} per node on "
                  f"{len(spread)} node(s)", flush=True)
            continue
        inv = aliased_inventory(lab, work / f"inv-cc-{n}" / "hosts.yml", spread, n)
        walls, cpus, work_cpus, work_walls = [], [], [], []
        for _ in range(max(1, repeat)):
            dt, proc = timed([sys.executable, str(Path(__file__).resolve()),
                              "--transport-probe", str(inv), str(n)])
            if proc.returncode != 0:
                raise SystemExit(f"transport probe failed: {proc.stderr[-1500:]}")
            walls.append(dt)
            cpus.append(LAST_CPU_S[0])
            probe = dict(kv.split("=") for line in proc.stdout.splitlines()
                         if line.startswith("PROBE ") for kv in line.split()[1:])
            work_cpus.append(float(probe["cpu_s"]))
            work_walls.append(float(probe["wall_s"]))
        # provisioner verify itself on the same hosts: gather, parse, checks, report (on bare
        # nodes the I/O test's command still runs, and finds no GDS mount to test: two
        # commands per node, as on any node)
        v_walls, v_cpus = [], []
        for _ in range(max(1, repeat)):
            dt, _doc = run_verify(inv, n, "1M", work / f"verify-cc-{n}.json", compliant=False)
            v_walls.append(dt)
            v_cpus.append(LAST_CPU_S[0])
        rows.append((n, statistics.median(walls), statistics.median(cpus),
                     statistics.median(work_walls), statistics.median(work_cpus),
                     statistics.median(v_walls), statistics.median(v_cpus)))
        print(f"  controller cost: {n:>3} hosts on {len(spread)} node(s): process wall "
              f"{rows[-1][1]:6.2f} s, CPU {rows[-1][2]:6.2f} s; from the inventory on: wall "
              f"{rows[-1][3]:6.2f} s, CPU {rows[-1][4]:6.2f} s ({rows[-1][4] / n:.3f} s per "
              f"host); verify wall {rows[-1][5]:6.2f} s, CPU {rows[-1][6]:6.2f} s", flush=True)
    return rows


def print_controller_cost(cc: list[tuple[float, ...]],
                          verify_rows: list[tuple[int, float, float, float]]) -> None:
    print()
    print("controller cost (the provisioner process itself: user + system CPU, getrusage):")
    if verify_rows:
        print(f"{'nodes':>5}  {'verify wall s':>13}  {'controller CPU s':>16}  "
              f"{'CPU s per node verified':>23}")
        for n, wall, cpu, _ in verify_rows:
            print(f"{n:>5}  {wall:13.2f}  {cpu:16.2f}  {cpu / n:23.3f}")
    if cc:
        print("light command; 'process': the whole python process (start and imports, ~1 s, "
              "included); 'work': from the inventory load to the last result")
        print("(the work of 1 host includes loading ansible-core for the inventory; 'each "
              "more host': (work CPU(N) - work CPU(1)) / (N - 1))")
        print(f"{'hosts':>5}  {'process wall s':>14}  {'process CPU s':>13}  {'work wall s':>11}  "
              f"{'work CPU s':>10}  {'CPU s each more host':>20}  {'work wall(N)/(1)':>16}")
        for n, wall, cpu, wwall, wcpu, *_ in cc:
            more = f"{(wcpu - cc[0][4]) / (n - 1):20.4f}" if n > 1 else f"{'-':>20}"
            print(f"{int(n):>5}  {wall:14.2f}  {cpu:13.2f}  {wwall:11.2f}  {wcpu:10.2f}  "
                  f"{more}  {wwall / cc[0][3]:16.2f}")
        if len(cc[0]) > 5:
            print_verify_cost([(int(r[0]), r[5], r[6]) for r in cc])


TARGET_MS_PER_NODE = 20.0  # issue 14: controller CPU per verified node


def verify_cost_figures(rows: list[tuple[int, float, float]]) -> dict[str, float]:
    """From (hosts, verify wall s, controller CPU s) rows: 'marginal', the CPU seconds each
    more node costs (least-squares slope over the rows of 8 hosts and more, else over all),
    and 'fixed', what the process costs whatever the fleet (interpreter, imports, ansible-core
    for the inventory, argument parsing): the fit's intercept."""
    pts = [(n, cpu) for n, _w, cpu in rows if n >= 8] or [(n, cpu) for n, _w, cpu in rows]
    if len(pts) < 2:
        return {}
    mx = statistics.fmean(n for n, _ in pts)
    my = statistics.fmean(c for _, c in pts)
    slope = (sum((n - mx) * (c - my) for n, c in pts)
             / sum((n - mx) ** 2 for n, _ in pts))
    return {"marginal": slope, "fixed": my - slope * mx}


def print_verify_cost(rows: list[tuple[int, float, float]]) -> None:
    """The figure issue 14 asks for: controller CPU per verified node, each more node, and
    the fixed start apart."""
    print("provisioner verify of the same hosts (bare nodes: gather, parse, checks, "
          "report; the I/O test's command finds no GDS mount), whole process:")
    print(f"{'hosts':>5}  {'verify wall s':>13}  {'controller CPU s':>16}  "
          f"{'CPU ms per node verified':>24}  {'CPU ms each more node':>21}")
    first = rows[0]
    for n, vwall, vcpu in rows:
        more = (f"{1e3 * (vcpu - first[2]) / (n - first[0]):21.1f}" if n > first[0]
                else f"{'-':>21}")
        print(f"{n:>5}  {vwall:13.2f}  {vcpu:16.2f}  {1e3 * vcpu / n:24.1f}  {more}")
    fig = verify_cost_figures(rows)
    if fig:
        m, f = fig["marginal"], fig["fixed"]
        print(f"fixed start (interpreter, imports, ansible-core, the fit's intercept): "
              f"{f:.2f} CPU-s; each more node (slope over 8+ hosts): {1e3 * m:.1f} CPU-ms")
        print(f"10,000 nodes: {f:.2f} + 10,000 x {1e3 * m:.1f} ms = "
              f"{(f + 10_000 * m) / 60:.1f} CPU-minutes ({1e3 * (f / 10_000 + m):.1f} ms per "
              f"node verified); target <= {TARGET_MS_PER_NODE:.0f} ms per node -> "
              f"{'MET' if 1e3 * m <= TARGET_MS_PER_NODE else 'MISSED'}")


def run_verify(inv: Path, n: int, io: str, out: Path, *,
               compliant: bool) -> tuple[float, dict[str, Any]]:
    """``provisioner verify`` of the ``n`` hosts of ``inv``: wall time and its report. It must
    have worked: every node compliant when ``compliant`` (provisioned nodes), else (bare
    nodes, not compliant by design) every node reached and verified without error."""
    dt, proc = timed([sys.executable, "-m", "provisioner.cli", "verify", "-i", str(inv),
                      "--parallel", str(n), "--io-size", io, "--no-ledger", "-q",
                      "--ssh-config", "none", "--json", str(out)])
    if proc.returncode not in ((0,) if compliant else (0, 1)):
        raise SystemExit(f"bench_verify: FAILED, no figure: provisioner verify of {n} node(s) "
                         f"exited {proc.returncode}"
                         + (" (not every node compliant)" if proc.returncode == 1 else "")
                         + f": {proc.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    s = doc.get("summary") or {}
    if s.get("total") != n or s.get("unreachable") or s.get("errors") or (
            compliant and s.get("compliant") != n):
        raise SystemExit(f"bench_verify: FAILED, no figure: provisioner verify of {n} node(s) "
                         f"did not verify them all: {s}")
    return dt, doc


def run_ansible(inv: Path, n: int, cmd: str) -> float:
    dt, proc = timed([str(REPO / ".venv" / "bin" / "ansible"), "all", "-i", str(inv), "-f",
                      str(n), "-m", "ansible.builtin.shell", "-a", cmd, "-o"])
    if proc.returncode != 0:
        raise SystemExit(f"ansible exited {proc.returncode}: {proc.stdout[-1500:]}"
                         f"{proc.stderr[-1500:]}")
    return dt


def main(argv: list[str] | None = None) -> int:
    from provisioner.verify.policy import parse_size
    from tests.harness import lab as labmod

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32", help="fleet sizes (default 1,8,32)")
    ap.add_argument("--io-size", default="4M", help="I/O test size per node (default 4M)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per size; the median is kept")
    ap.add_argument("--no-provision", action="store_true",
                    help="verify bare nodes (no stand-in GDS stack: the I/O test finds no mount)")
    ap.add_argument("--keep", action="store_true", help="leave the fleet running")
    ap.add_argument("--no-light", dest="light", action="store_false",
                    help="skip the light-command comparison")
    ap.add_argument("--no-controller-cost", dest="controller_cost", action="store_false",
                    help="skip the controller-cost part")
    ap.add_argument("--no-ansible", dest="ansible", action="store_false",
                    help="skip the Ansible ad-hoc comparison (verify's own figures only)")
    ap.add_argument("--controller-only", action="store_true",
                    help="only the controller-cost part, on 8 bare simulated nodes")
    ap.add_argument("--transport-probe", nargs=2, metavar=("INVENTORY", "N"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.transport_probe:
        return transport_probe(args.transport_probe[0], int(args.transport_probe[1]), LIGHT)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    io_bytes = parse_size(args.io_size)
    biggest = sizes[-1]
    if args.controller_only:
        return controller_only(args.repeat)

    work = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-verify-"))
    lab = labmod.Lab(work / "lab", prefix=f"gdsfleet-bv-{secrets.token_hex(2)}",
                     port_base=_free_port_base(biggest))
    print(f"SIMULATED lab: bringing up {biggest} node(s) (containers on this machine, "
          f"{os.cpu_count()} cores) ...", flush=True)
    t0 = time.perf_counter()
    try:
        nodes = lab.up(biggest)
        print(f"  up in {time.perf_counter() - t0:.0f} s", flush=True)
        if not args.no_provision:
            t1 = time.perf_counter()
            port = os.environ.get("GDSFLEET_REPO_PORT", "8470")

            def provision(node: Any) -> None:
                p = subprocess.run(["podman", "exec", "-i", node.name, "bash", "-c",
                                    f"REPO_PORT={port} bash -s"], input=PROVISION, text=True,
                                   capture_output=True, env=_env(), check=False, timeout=900)
                if p.returncode != 0:
                    raise SystemExit(f"{node.name}: provisioning failed: {p.stderr[-1500:]}")

            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(provision, nodes))
            # kvikio + cupy for the I/O test, through their role (the image has none)
            from tests.harness.fixtures import StandinRepo, run_verify_runtime_role

            base = f"http://127.0.0.1:{port}"
            # only its base URL is used (by keyword: the dataclass grew a field once, and the
            # positional call broke this benchmark before it measured anything)
            repo = StandinRepo(directory=labmod.lab_dir() / "standin-repo", base_url=base,
                               cuda_url="", cuda_key_url="", doca_url="", doca_key_url="",
                               mlnx_ofed_tarball_url="", mlnx_ofed_tarball_checksum="",
                               cuda_key=Path(), doca_key=Path())
            run_verify_runtime_role(str(lab.inventory(work / "inv-runtime" / "hosts.yml",
                                                      nodes)), repo)
            print(f"  stand-in GDS stack installed in {time.perf_counter() - t1:.0f} s",
                  flush=True)
        cmd = ansible_command(io_bytes)
        rows = []
        light: list[tuple[int, float, float]] = []
        v_cpu: list[tuple[int, float, float, float]] = []
        cc: list[tuple[float, ...]] = []
        for n in sizes:
            inv = lab.inventory(work / f"inv-{n}" / "hosts.yml", nodes[:n])
            v_times, a_times, cpu_times = [], [], []
            doc: dict[str, Any] = {}
            for _ in range(max(1, args.repeat)):
                dt, doc = run_verify(inv, n, args.io_size, work / f"verify-{n}.json",
                                     compliant=not args.no_provision)
                v_times.append(dt)
                cpu_times.append(LAST_CPU_S[0])
                if args.ansible:
                    a_times.append(run_ansible(inv, n, cmd))
            s = doc["summary"]
            v = statistics.median(v_times)
            a = statistics.median(a_times) if a_times else float("nan")
            rows.append((n, v, a, s))
            v_cpu.append((n, v, statistics.median(cpu_times), 0.0))
            print(f"  N={n:<3} verify {v:6.2f} s   ansible ad-hoc {a:6.2f} s   "
                  f"({s['compliant']}/{s['total']} compliant, {s['unreachable']} unreachable; "
                  f"runs: verify {', '.join(f'{x:.2f}' for x in v_times)}; ansible "
                  f"{', '.join(f'{x:.2f}' for x in a_times)})", flush=True)
            if args.light:
                lt_p, lt_a = [], []
                for _ in range(max(1, args.repeat)):
                    dt, proc = timed([sys.executable, str(Path(__file__).resolve()),
                                      "--transport-probe", str(inv), str(n)])
                    if proc.returncode != 0:
                        raise SystemExit(f"transport probe failed: {proc.stderr[-1500:]}")
                    lt_p.append(dt)
                    lt_a.append(run_ansible(inv, n, LIGHT))
                light.append((n, statistics.median(lt_p), statistics.median(lt_a)))
                print(f"        light command: provisioner transport {light[-1][1]:6.2f} s   "
                      f"ansible ad-hoc {light[-1][2]:6.2f} s", flush=True)
        if args.controller_cost:
            cc = controller_cost(lab, nodes[:MAX_PER_NODE], work, args.repeat)
    finally:
        if not args.keep:
            lab.down()
    base = rows[0][1]
    print()
    print(f"{'nodes':>5}  {'verify s':>9}  {'ansible s':>9}  {'verify(N)/verify(1)':>19}  "
          f"{'ansible/verify':>14}")
    for n, v, a, _ in rows:
        print(f"{n:>5}  {v:9.2f}  {a:9.2f}  {v / base:19.2f}  {a / v:14.2f}")
    n, v, a, _ = rows[-1]
    print()
    print(f"target: verify of {n} nodes within 3x of 1 node: {v / base:.2f}x "
          f"-> {'MET' if v / base <= 3.0 else 'MISSED'}")
    if args.ansible:
        print(f"target: >= 5x faster than ansible ad-hoc at {n} nodes: {a / v:.2f}x "
              f"-> {'MET' if a / v >= 5.0 else 'MISSED'}")
    if light:
        lb = light[0][1]
        print()
        print("light command (same few reads on every node; orchestrator cost):")
        print(f"{'nodes':>5}  {'provisioner s':>13}  {'ansible s':>9}  {'prov(N)/prov(1)':>15}  "
              f"{'ansible/prov':>12}")
        for n, p_, a_ in light:
            print(f"{n:>5}  {p_:13.2f}  {a_:9.2f}  {p_ / lb:15.2f}  {a_ / p_:12.2f}")
    print(f"(io-size {args.io_size}, median of {args.repeat}, parallel = forks = N; "
          f"ansible command: {shlex.quote(cmd[:60])}...)")
    print_controller_cost(cc, v_cpu)
    return 0


def controller_only(repeat: int) -> int:
    """The controller-cost part alone, on 8 bare simulated nodes (no GDS stack needed)."""
    from tests.harness import lab as labmod

    work = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-verify-"))
    lab = labmod.Lab(work / "lab", prefix=f"gdsfleet-bv-{secrets.token_hex(2)}",
                     port_base=_free_port_base(MAX_PER_NODE))
    print(f"SIMULATED lab: bringing up {MAX_PER_NODE} bare node(s) ({os.cpu_count()} cores) ...",
          flush=True)
    try:
        nodes = lab.up(MAX_PER_NODE)
        load0 = os.getloadavg()
        cc = controller_cost(lab, nodes, work, repeat)
        load1 = os.getloadavg()
    finally:
        lab.down()
    print_controller_cost(cc, [])
    print(f"(light command through verify's transport, parallel = hosts, median of {repeat}; "
          f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end, on "
          f"{os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
