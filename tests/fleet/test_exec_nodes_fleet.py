"""``provisioner rollout --executor ssh`` with execution nodes as podman containers against a
SIMULATED lab fleet (issue 14, "Tests (this machine, loopback only)").

The execution nodes are containers of the lab node image prepared by ``gdsfleet.gds.exec_node``
(tests/harness/execnode.py: the prepared image is cached per machine, only this checkout's
collection is installed fresh); they reach the lab nodes on their 127.0.0.1 ports (host
network) with the lab's key and known_hosts, put at the paths the target inventory names. One
module, one set of two execution nodes and one fleet, in this order:

* equivalence: ``site.yml`` with ``--executor local`` on half of the fleet and ``--executor ssh``
  on the other half: the same per-node ledger outcome and report (run ids, times and executor
  fields normalised, nodes by their index);
* ``podman kill`` of an execution node mid-wave (tests/fleet/playbooks/exec_fault.yml, a short
  play that takes the node lock as site.yml does and logs its interval on the node): no failure
  budget spent, the dispatch ``lost`` then ``redispatched``, every host ends with a final
  result, no two intervals overlap on any node; with a secret canary through ``-e``,
  ``-e @FILE`` and the ledger URL (a SQLite path, given by GDSFLEET_LEDGER): in no file on the
  surviving execution node after the run and in no ``/proc/*/cmdline`` sampled during it (this
  machine's /proc: the coordinator's children, the execution nodes' and the lab nodes'
  processes), but the coordinator's own command line, which the operator typed;
* a partition of an execution node mid-wave: the second execution node lives in a network
  namespace of its own, joined to this machine's loopback by a relay the test owns
  (tests/harness/netrelay.py), and the cut is a DROP rule on that namespace's lo, so every
  connection of the node, to the coordinator and to the lab nodes, stalls while the node runs
  on: the coordinator cannot fence it and sends the hosts again only after the shard's
  deadline; the cut node's work on the lab nodes runs to its end; no overlap (skipped
  without root, nsenter and iptables);
* ``kill -9`` of the coordinator mid-wave, then the same command: the earlier dispatches are
  fenced before anything is sent, and the resumed play waits on each node for the fenced
  play's work still running there (no overlap);
* bad input seen only with real execution nodes (an execution node without ansible-runner, one
  with another collection): refused before any change, one line with the fix.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from tests.harness import netrelay
from tests.harness.execnode import ExecNodes, exec_nodes  # noqa: F401 - the fixture

pytestmark = [pytest.mark.fleet, pytest.mark.container, pytest.mark.execnodes]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
FAULT_PLAY = Path(__file__).parent / "playbooks" / "exec_fault.yml"
HALF = 8  # lab nodes per executor in the equivalence test (issue 14: 8; the fleet has 16)
HEALTHY = {"gds_route": "p2pdma"}
INTERVALS = "/var/log/gdsfleet-test-intervals.log"
CANARY = "gdsfleet-canary-e1b7d40c"  # -e
CANARY_FILE = "gdsfleet-filecanary-9a3f61"  # -e @FILE
CANARY_LEDGER = "gdsfleet-ledgercanary-5c08e2"  # in the ledger's path (GDSFLEET_LEDGER)
CANARIES = (CANARY, CANARY_FILE, CANARY_LEDGER)


def _env(collections: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GDSFLEET_LEDGER"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(ROOT / "tests" / "harness" / "containers.conf")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n"
            f"{proc.stderr[-6000:]}")


def _wait(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        val = pred()
        if val:
            return val
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Env:
    fleet: Any
    ex: ExecNodes
    collections: Path
    tmp: Path
    names: list[str]

    def sub_inventory(self, name: str, hosts: list[str]) -> Path:
        """The fleet's inventory limited to ``hosts``."""
        data = yaml.safe_load(self.fleet.inventory.read_text())
        group = data["all"]["children"]["gpu_nodes"]
        group["hosts"] = {h: v for h, v in group["hosts"].items() if h in hosts}
        path = self.tmp / name
        path.write_text(yaml.safe_dump(data, sort_keys=True))
        return path

    def ssh_args(self) -> list[str]:
        return ["--executor", "ssh", "--exec-inventory", str(self.ex.inventory),
                "--known-hosts", str(self.ex.known_hosts)]

    def argv(self, inventory: Path, *args: str) -> list[str]:
        return [str(VENV_BIN / "provisioner"), "rollout", "-i", str(inventory), *args]

    def run(self, inventory: Path, *args: str, timeout: float = 900,
            **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(inventory, *args), capture_output=True, text=True,
                              env=_env(self.collections, **env), cwd=ROOT, timeout=timeout,
                              check=False)

    def start(self, inventory: Path, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(inventory, *args), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                env=_env(self.collections, **env), cwd=ROOT)

    def intervals_of(self, name: str) -> list[tuple[str, float, float | None]]:
        """(token, start, end or None) of each play from ``name``'s interval log."""
        text = self.fleet.exec(name, f"cat {INTERVALS} 2>/dev/null; true").stdout
        spans: dict[str, list[float | None]] = {}
        for line in text.splitlines():
            kind, token, at = line.split()
            spans.setdefault(token, [None, None])[0 if kind == "start" else 1] = float(at)
        return [(t, s[0], s[1]) for t, s in spans.items() if s[0] is not None]

    def intervals(self) -> dict[str, list[tuple[str, float, float | None]]]:
        return {name: self.intervals_of(name) for name in self.names}

    def clear_intervals(self) -> None:
        for name in self.names:
            self.fleet.exec(name, f"rm -f {INTERVALS}")


def _assert_no_overlap(spans: dict[str, list[tuple[str, float, float | None]]]) -> None:
    for node, items in spans.items():
        assert all(end is not None for _, _, end in items), (node, items)  # every play ended
        ordered = sorted(items, key=lambda x: x[1])
        for (t1, _s1, e1), (t2, s2, _e2) in zip(ordered, ordered[1:], strict=False):
            assert e1 is not None and e1 <= s2, f"{node}: {t1} until {e1} overlaps {t2} from {s2}"


@pytest.fixture(scope="module")
def env(lab_fleet: Any, exec_nodes: Callable[..., ExecNodes],  # noqa: F811
        private_collections: Path, private_repo: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Env:
    # the second execution node in a network namespace of its own (so it can be partitioned),
    # where the machine allows it
    ex = exec_nodes(2, isolated=0 if netrelay.unavailable() else 1)
    fleet = lab_fleet(2 * HALF, dict.fromkeys(range(1, 2 * HALF + 1), "p2pdma"),
                      group_vars=HEALTHY | dict(private_repo.group_vars()))
    # the nodes' key and host keys at the paths the target inventory names, as an operator
    # gives them to an execution node
    ex.trust(fleet.lab.key, fleet.lab.known_hosts)
    # what an isolated execution node must reach: the lab nodes' sshd and the repository
    hosts = yaml.safe_load(fleet.inventory.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    ex.reach([int(v["ansible_port"]) for v in hosts.values()]
             + [int(private_repo.base_url.rsplit(":", 1)[1].split("/", 1)[0])])
    return Env(fleet, ex, private_collections, tmp_path_factory.mktemp("execfleet"),
               list(fleet.names))


# ------------------------------------------------------------------------ normalising reports
_VOLATILE = re.compile(r"(^|_)(at|time|times|started|finished|duration|duration_s|seconds|"
                       r"elapsed|id|run_id|run|token|executor|dispatch|dispatches|path|file|"
                       r"ledger|since|updated|inventory)($|_)")


def _normal(value: Any, names: dict[str, str]) -> Any:
    """The report with node names as indexes and run ids, times, paths and executor fields
    dropped."""
    if isinstance(value, dict):
        return {names.get(k, k): _normal(v, names) for k, v in value.items()
                if not _VOLATILE.search(str(k))}
    if isinstance(value, list):
        return [_normal(v, names) for v in value]
    if isinstance(value, str):
        for name, idx in names.items():
            value = value.replace(name, idx)
        return value
    if isinstance(value, float):
        return None  # measured figures
    return value


def _ledger_outcome(ledger: Path, names: dict[str, str]) -> dict[str, Any]:
    with Ledger.open(ledger) as led:
        run = led.runs(kind="rollout", limit=1)[0]
        steps = led.node_steps(run["id"])
        latest = {r["node"]: r for r in led.latest()}
    return {names[n]: {"step": s["step"], "wave": s["wave"],
                       "compliant": latest[n]["compliant"] if n in latest else None,
                       "path_taken": latest[n].get("path_taken") if n in latest else None}
            for n, s in steps.items()}


def test_site_yml_same_outcome_with_local_and_ssh_executors(env: Env) -> None:
    """Slow: two rollouts of site.yml (HALF nodes each, reboots and verification), one
    through the execution nodes."""
    a_hosts, b_hosts = env.names[:HALF], env.names[HALF:]
    common = ["--waves", "1,100%", "--io-size", "16M", "--allow-reboot", "--plain"]
    results = {}
    for kind, hosts, extra in (("local", a_hosts, []), ("ssh", b_hosts, env.ssh_args())):
        inv = env.sub_inventory(f"{kind}.yml", hosts)
        ledger, report = env.tmp / f"{kind}.sqlite", env.tmp / f"{kind}.json"
        t0 = time.monotonic()
        proc = env.run(inv, "--ledger", str(ledger), "--json", str(report), *common, *extra)
        took = time.monotonic() - t0
        assert proc.returncode == Exit.OK, f"{kind}: {_explain(proc)}"
        names = {h: f"node{i}" for i, h in enumerate(hosts)}
        doc = json.loads(report.read_text())
        results[kind] = {"report": _normal(doc, names), "ledger": _ledger_outcome(ledger, names),
                         "took": took, "raw": doc}
    local, ssh = results["local"], results["ssh"]
    print(f"\nsite.yml rollouts of {HALF} nodes: local {local['took']:.0f} s, "
          f"ssh {ssh['took']:.0f} s")
    assert local["ledger"] == ssh["ledger"]
    assert set(v["step"] for v in ssh["ledger"].values()) == {"compliant"}
    assert local["report"] == ssh["report"]
    # the ssh run went through the execution nodes: one dispatch per shard, all done
    with Ledger.open(env.tmp / "ssh.sqlite") as led:
        rows = led.dispatches(ssh["raw"]["run_id"])
    assert rows and {r["state"] for r in rows} == {"done"}, rows
    # every host went through them (site.yml, then the reboot playbook for those that need one)
    assert sorted({h for r in rows for h in r["hosts"]}) == sorted(b_hosts)
    assert {r["exec_node"] for r in rows} <= {n.name for n in env.ex.nodes}


# ------------------------------------------------------------------------------ bad input
def _refused(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == Exit.USAGE, _explain(proc)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one line, with the fix
    return lines[0]


def test_unready_execution_nodes_are_refused_before_any_change(env: Env) -> None:
    """Container-side bad input (the exec inventory's own errors are unit-tested with loopback
    sshd): an execution node without ansible-runner, and one whose installed collection is
    another build of the same version, are refused before any change with the fix; the fix
    the message names (gdsfleet.gds.exec_node) really makes the second one ready."""
    from tests.harness import execnode

    env.clear_intervals()
    inv = env.sub_inventory("badinput.yml", env.names[:2])
    ledger = env.tmp / "badinput.sqlite"
    common = ["--playbook", str(FAULT_PLAY), "--no-verify", "--waves", "all",
              "--ledger", str(ledger), "-e", "test_api_token=x", "-e", "test_file_token=y"]
    # 1. no ansible-runner where the exec inventory says
    no_runner = env.tmp / "exec-no-runner.ini"
    no_runner.write_text(env.ex.inventory.read_text().replace(
        f"gdsfleet_exec_runner={execnode.RUNNER}",
        "gdsfleet_exec_runner=/opt/missing-venv/bin/ansible-runner"))
    line = _refused(env.run(inv, *common, "--executor", "ssh", "--exec-inventory",
                            str(no_runner), "--known-hosts", str(env.ex.known_hosts)))
    assert "ansible-runner (/opt/missing-venv/bin/ansible-runner) did not run" in line, line
    assert "exec_node.yml" in line, line
    # 2. exec2's collection: the same version, another build (its MANIFEST.json differs)
    manifest = f"{execnode.COLLECTIONS}/ansible_collections/gdsfleet/gds/MANIFEST.json"
    env.ex.exec("exec2", f"echo >> {manifest}")
    line = _refused(env.run(inv, *common, *env.ssh_args()))
    assert "exec2: gdsfleet.gds MANIFEST.json sha256" in line and "exec1" not in line, line
    assert "exec_node.yml" in line, line
    if ledger.exists():  # nothing was changed: no run, no dispatch, no play
        with Ledger.open(ledger) as led:
            assert led.runs(kind="rollout", limit=5) == []
    assert all(not spans for spans in env.intervals().values())
    # the fix the message names: gdsfleet.gds.exec_node with the controller's collection
    execnode.run_exec_node_playbook(env.ex.inventory, env.ex.known_hosts,
                                    env.ex.tarball, env.collections,
                                    execnode.dependency_tarballs(), limit="exec2")
    check = subprocess.run(
        [str(VENV_BIN / "provisioner"), "exec-nodes", "check", "--exec-inventory",
         str(env.ex.inventory), "--known-hosts", str(env.ex.known_hosts)],
        capture_output=True, text=True, env=_env(env.collections), cwd=ROOT, timeout=300,
        check=False)
    assert check.returncode == 0, _explain(check)


# -------------------------------------------------------------------------- fault scenarios
class CmdlineSampler(threading.Thread):
    """Samples every /proc/*/cmdline of this machine (the coordinator's children, and through
    the shared kernel the execution nodes' and the lab nodes' processes) until stopped; records
    the canaries it finds, but in ``skip`` (the coordinator, whose command line the operator
    typed)."""

    def __init__(self, skip: int) -> None:
        super().__init__(daemon=True)
        self.skip = skip
        self.stop = threading.Event()
        self.hits: list[tuple[int, bytes]] = []
        self.rounds = 0
        self.saw: set[str] = set()  # which kinds of process were sampled

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == self.skip:
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        raw = fh.read(1 << 16)
                except OSError:
                    continue
                for word in (b"ansible-runner", b"ansible-playbook", b"worker"):
                    if word in raw:
                        self.saw.add(word.decode())
                if any(c.encode() in raw for c in CANARIES):
                    self.hits.append((int(entry), raw[:400]))
            self.rounds += 1
            self.stop.wait(0.25)


def _fault_args(env: Env, report: Path, *extra: str) -> list[str]:
    secrets = env.tmp / "secrets.yml"
    secrets.write_text(f"test_file_token: {CANARY_FILE}\n")
    return ["--playbook", str(FAULT_PLAY), "--no-verify", "--waves", "all",
            "--max-failures", "0", "--playbook-timeout", "40", "--connect-timeout", "5",
            "--plain", "--json", str(report), "-e", f"test_api_token={CANARY}",
            "-e", f"@{secrets}", "-e", "test_sleep=5", *env.ssh_args(), *extra]


def _running_run(ledger: Path) -> tuple[str, list[dict[str, Any]]] | None:
    if not ledger.exists():
        return None
    try:
        with Ledger.open(ledger) as led:
            runs = led.runs(kind="rollout", limit=1)
            if not runs:
                return None
            rows = led.dispatches(runs[0]["id"])
    except Exception:  # the coordinator is creating it
        return None
    return runs[0]["id"], rows


def _started_on(env: Env, hosts: list[str]) -> bool:
    """The shard's play has begun: its start line on the first of ``hosts`` (a shard's hosts
    run at once; one look keeps the polling cheap)."""
    return bool(hosts) and bool(env.intervals_of(sorted(hosts)[0]))


def test_killed_execution_node_mid_wave_is_redispatched_and_leaks_no_secret(env: Env) -> None:
    """Slow: waits out the killed execution node's deadline (the shard's playbook timeout,
    40 s, plus margins) before its hosts are sent again, as the design says."""
    env.clear_intervals()
    ledger = env.tmp / f"ledger-{CANARY_LEDGER}.sqlite"  # the ledger URL, by GDSFLEET_LEDGER
    report = env.tmp / "killed.json"
    proc = env.start(env.fleet.inventory, *_fault_args(env, report), GDSFLEET_LEDGER=str(ledger))
    sampler = CmdlineSampler(proc.pid)
    sampler.start()
    try:
        name, lost_hosts = _wait(lambda: _victim(env, ledger), 180,
                                 "a running shard whose play began")
        env.ex.kill(name)
        killed_at = time.time()
        out, _ = proc.communicate(timeout=600)
    finally:
        sampler.stop.set()
        sampler.join(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    doc = _succeeded_spending_no_budget(proc.returncode, out, report)
    run_id = doc["run_id"]
    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
        steps = led.node_steps(run_id)
    assert set(steps) == set(env.names) and all(
        s["step"] not in ("lost", "interrupted", "pending", "failed") for s in steps.values()
    ), steps
    dead, again = _sent_again_after_its_deadline(rows, name, lost_hosts)
    assert "awaiting-deadline" in dead["detail"]["history"], dead
    _assert_no_overlap(env.intervals())
    # the canaries: sampled on both sides during the run, in no command line
    assert sampler.rounds > 20 and {"ansible-runner", "ansible-playbook"} <= sampler.saw
    assert sampler.hits == [], sampler.hits
    # ... and in no file of the surviving execution node after it
    for n in env.ex.nodes:
        if n.name != name:
            assert _canary_files(env, n.name) == [], n.name
    print(f"\nexec node {name} killed {killed_at:.0f}; redispatched at {again['created_at']}")
    # the killed node, started again, still holds the job folder its dead worker left (extra
    # vars included): its next job removes it (the coordinator test below checks that)
    env.ex.restart(name)
    assert any(f.endswith("/env/extravars") for f in _canary_files(env, name))


def _victim(env: Env, ledger: Path, only: str | None = None
            ) -> tuple[str, list[str]] | None:
    """An execution node (``only`` that one, when given) with a running shard whose play has
    begun, and the shard's hosts."""
    got = _running_run(ledger)
    for row in (got[1] if got else []):
        if only is not None and row["exec_node"] != only:
            continue
        if row["state"] == "running" and _started_on(env, row["hosts"]):
            return row["exec_node"], list(row["hosts"])
    return None


def test_partitioned_execution_node_waits_out_its_deadline(env: Env) -> None:
    """Slow: a partition (every packet to and from one execution node's sshd port dropped;
    the node runs on and still reaches the lab nodes). The coordinator cannot fence it, so it
    sends the shard's hosts again only after the shard's deadline, which the worker side
    enforces too; the partitioned node's play really ran on, and no two plays overlap."""
    isolated = [n.name for n in env.ex.nodes if n.isolated]
    if not isolated:
        pytest.skip(f"no execution node in a namespace of its own: {netrelay.unavailable()}")
    env.clear_intervals()
    ledger = env.tmp / "partition.sqlite"
    report = env.tmp / "partition.json"
    proc = env.start(env.fleet.inventory, *_fault_args(env, report, "--ledger", str(ledger),
                                                       "-e", "test_sleep=15"))
    try:
        name, cut_hosts = _wait(lambda: _victim(env, ledger, isolated[0]), 180,
                                "a running shard of the isolated node whose play began")
        with env.ex.partitioned(name):
            cut_at = time.time()
            out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    doc = _succeeded_spending_no_budget(proc.returncode, out, report)
    with Ledger.open(ledger) as led:
        rows = led.dispatches(doc["run_id"])
    cut, again = _sent_again_after_its_deadline(rows, name, cut_hosts)
    # not fenced: the node could not be reached
    assert "fenced" not in cut["detail"]["history"], cut
    # the partitioned node's play ran on past the cut: its end lines came after it
    spans = env.intervals()
    for host in cut_hosts:
        ends = [end for token, _s, end in spans[host] if token == cut["token"]]
        assert ends and ends[0] is not None and ends[0] > cut_at, (host, spans[host], cut_at)
    _assert_no_overlap(spans)
    print(f"\npartitioned {name} at {cut_at:.0f}; deadline {cut['deadline']}; sent again "
          f"{again['created_at']}")


def _node_side(env: Env) -> str:
    """What the lab nodes and the execution nodes hold, for a failure's message: each lab
    node's lock log and processes, each execution node's processes."""
    out = []
    for name in env.names:
        ps = env.fleet.exec(name, "ps -eo pid,ppid,etimes,args | cut -c1-160; true").stdout
        out.append(f"--- {name}\n{json.dumps(_lock_log(env, name))[-1500:]}\n{ps}")
    for n in env.ex.nodes:
        ps = env.ex.exec(n.name, "ps -eo pid,ppid,etimes,args | cut -c1-160; true",
                         check=False).stdout
        out.append(f"--- {n.name}\n{ps}")
    return "\n".join(out)


def _lock_log(env: Env, name: str) -> list[dict[str, Any]]:
    """The node lock's log on lab node ``name`` (gdsfleet.gds.node_lock's default path)."""
    text = env.fleet.exec(name, "cat /run/gdsfleet/site-lock.log 2>/dev/null; true").stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _succeeded_spending_no_budget(rc: int, out: str, report: Path) -> dict[str, Any]:
    """The rollout's report, after checking that it exited 0 with every host's playbook ok or
    changed and no failure budget spent."""
    assert rc == Exit.OK, out[-6000:]
    doc: dict[str, Any] = json.loads(report.read_text())
    assert doc["status"] == "succeeded", doc
    assert [(w["failures"], w["lost"], w["passed"]) for w in doc["waves"]] == [(0, 0, True)]
    assert all(n["outcome"]["status"] in ("ok", "changed") for n in doc["nodes"]), doc["nodes"]
    return doc


def _sent_again_after_its_deadline(rows: list[dict[str, Any]], name: str, hosts: list[str]
                                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dispatch of execution node ``name`` that was lost, its deadline waited for (the
    node could not be reached), and sent once to another execution node only after that
    deadline, which ran ``hosts`` to the end: (the lost row, the row that sent them again)."""
    dead = [r for r in rows if r["exec_node"] == name and r["detail"].get("redispatched_to")]
    assert len(dead) == 1, rows
    hist = dead[0]["detail"]["history"]
    assert hist[:3] == ["dispatching", "running", "lost"] and hist[-1] == "redispatched", hist
    assert "deadline-passed" in hist, hist
    again = [r for r in rows if r["detail"].get("redispatch_of") == dead[0]["id"]]
    assert len(again) == 1 and again[0]["exec_node"] != name and again[0]["state"] == "done"
    assert sorted(again[0]["hosts"]) == sorted(hosts)
    assert dead[0]["deadline"] and again[0]["created_at"][:19] >= dead[0]["deadline"][:19], (
        dead, again)
    return dead[0], again[0]


def _canary_files(env: Env, name: str) -> list[str]:
    """The files on execution node ``name`` that hold a canary."""
    found = env.ex.exec(name, "grep -rlsF -e " + " -e ".join(CANARIES) +
                        " / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev; true",
                        timeout=300).stdout
    return found.split()


def test_coordinator_killed_mid_wave_then_the_same_command_fences_first(env: Env) -> None:
    """Slow: one rollout of the short play killed with SIGKILL, then the same command."""
    env.clear_intervals()
    ledger = env.tmp / "coordinator.sqlite"
    report = env.tmp / "coordinator.json"
    # work long enough (12 s) that the resumed play finds some of it still running
    args = _fault_args(env, report, "--ledger", str(ledger), "-e", "test_sleep=12")
    proc = env.start(env.fleet.inventory, *args)
    try:
        def begun() -> bool:
            got = _running_run(ledger)
            rows = got[1] if got else []
            return bool(rows) and all(r["state"] == "running" for r in rows) and any(
                _started_on(env, r["hosts"]) for r in rows)

        _wait(begun, 180, "every shard running and a play begun")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got = _running_run(ledger)
    assert got is not None
    run_id, before = got
    assert before and all(r["state"] == "running" for r in before)
    again = env.run(env.fleet.inventory, *args)
    assert again.returncode == Exit.OK, _explain(again)
    doc = json.loads(report.read_text())
    assert doc["run_id"] == run_id and doc["resumed"], doc
    with Ledger.open(ledger) as led:
        rows = led.dispatches(run_id)
    old = [r for r in rows if r["id"] in {b["id"] for b in before}]
    new = [r for r in rows if r["id"] not in {b["id"] for b in before}]
    # every dispatch of the dead coordinator was fenced (or waited out) before anything new
    for r in old:
        assert r["detail"].get("resumed_by_coordinator"), r
        assert r["state"] in ("fenced", "deadline-passed"), r
    if not (new and all(r["state"] == "done" for r in new)):
        print(_node_side(env))
    assert new and all(r["state"] == "done" for r in new), new
    assert min(r["created_at"] for r in new) >= max(r["updated_at"] for r in old), (old, new)
    # nothing of any job is left on the execution nodes, the one killed earlier included
    for n in env.ex.nodes:
        assert _canary_files(env, n.name) == [], n.name
    # The fence kills the dead coordinator's processes on the execution nodes, not the module
    # its play was running on a target node. Before: that module finished by itself while the
    # resumed play (the same run takes the node lock over) began, and the two intervals
    # overlapped (seen by 57 ms and by 320 ms). Now the takeover waits for the fenced play's
    # processes on the node (they carry its token through the play's environment).
    _assert_no_overlap(env.intervals())
    waited = [e for name in env.names for e in _lock_log(env, name)
              if e.get("event") == "takeover" and e.get("token", "").startswith(run_id + ".")
              and e.get("waited_for")]
    assert waited, "no takeover found the fenced play's work still running on its node"
    assert all(not e.get("stopped") for e in waited), waited  # waited for, not cut
