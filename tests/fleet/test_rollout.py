"""``provisioner rollout`` against SIMULATED fleets (containers with stand-in hardware).

One module, fleets reused where the issue allows (the lab_fleet factory keeps one fleet per
module and replaces it when asked for another shape), in this order:

* 5 nodes (waves 1, 3, rest = 1): plan, a clean rollout to full compliance (canary + ramp), a
  reconcile re-run that only verifies, lab.sh's follow-up commands run as printed (one ledger
  named by all, the same answers), the README's "On real nodes" block run in its order
  (plan, rollout, verify, status, report, export, testinfra, one node's plain
  ansible-playbook), kill -9 of the
  orchestrator in the middle of a wave then the same command (finished nodes are not
  re-provisioned: shown from the ledger and the playbook events), an unreachable node, and
  bad input refused before anything runs. Five is the fewest that keeps what these tests
  prove: the canary alone, a wave of several nodes provisioned by one playbook run at once
  (3), then a last wave for the rest (``100%``) after a health gate over the 4 nodes rolled
  before it, and a kill -9 that catches two nodes mid-wave after a finished canary. The 8
  nodes it had until 2026-11-27 added three host-plays of site.yml (each with a reboot and
  an I/O test), three nodes to every later verification and testinfra run, and no
  assertion (the suite is CPU-bound on 2 cores: docs/testing.md, "Speed").
* 2 nodes: a canary that fails (nothing else touched), and two rollouts at once.
* 4 nodes: a wave over its failure budget because two nodes' package install fails
  (SIM_DKMS_BUILD=fail: the nvidia-fs DKMS build fails in the package's postinst): stops, the
  rest untouched, reasons recorded.

Healthy nodes use the p2pdma profile/route (no MOFED/DOCA step, the shortest play); the
package-install failures use the nvfs route. Verification runs with a 16 MiB I/O test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.exitcodes import Exit
from provisioner.store import Ledger

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
IO = "16M"
HEALTHY = {"gds_route": "p2pdma"}
BIG = 5  # the shared fleet: waves 1,3,100% give the canary, a wave of 3 and the last node

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def repo_vars(private_repo: Any) -> dict[str, str]:
    """The role variables for the stand-in repository on this module's private server."""
    return dict(private_repo.group_vars())


@pytest.fixture(scope="module")
def collections(private_collections: Path) -> Path:
    """The collection built from this checkout into a private path (no race with others)."""
    return private_collections


def _env(collections: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(ROOT / "tests" / "harness" / "containers.conf")
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Ctl:
    """Runs the provisioner against one fleet with one ledger and one events log."""

    def __init__(self, inventory: Path, tmp: Path, collections: Path) -> None:
        self.inventory = inventory
        self.ledger = tmp / "ledger.sqlite"
        self.events = tmp / "events.jsonl"
        self.tmp = tmp
        self.collections = collections

    def argv(self, command: str, *args: str) -> list[str]:
        base = [str(VENV_BIN / "provisioner"), command, "-i", str(self.inventory),
                "--ledger", str(self.ledger)]
        if command == "rollout":
            # p2pdma nodes need a reboot before their module options (multipath=N,
            # NVreg_RegistryDwords) are in effect, as on real nodes: let the rollout reboot
            base += ["--io-size", IO, "--events-log", str(self.events), "--plain",
                     "--allow-reboot"]
        return base + list(args)

    def run(self, command: str, *args: str, timeout: float = 900
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(command, *args), capture_output=True, text=True,
                              env=_env(self.collections), cwd=ROOT, timeout=timeout,
                              check=False)

    def start(self, command: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(command, *args), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                env=_env(self.collections), cwd=ROOT)

    def open(self) -> Ledger:
        return Ledger.open(self.ledger)

    def runs(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        with self.open() as led:
            return led.runs(kind="rollout", limit=100)

    def steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        with self.open() as led:
            return led.node_steps(run_id)

    def events_of(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(x) for x in self.events.read_text().splitlines() if x.strip()]


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n" \
           f"{proc.stderr[-6000:]}"


def _wait(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        val = pred()
        if val:
            return val
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# ============================================================================ 5 nodes
@pytest.fixture(scope="module")
def big(lab_fleet: Any, collections: Path, repo_vars: dict[str, str],
        tmp_path_factory: pytest.TempPathFactory) -> Any:
    fleet = lab_fleet(BIG, dict.fromkeys(range(1, BIG + 1), "p2pdma"),
                      group_vars=HEALTHY | repo_vars)
    ctl = Ctl(fleet.inventory, tmp_path_factory.mktemp("big"), collections)
    # where lab.sh keeps it, relative to a checkout-shaped folder (the follow-ups test)
    ctl.ledger = ctl.tmp / ".lab" / "ledger.sqlite"
    ctl.ledger.parent.mkdir()
    ctl.fleet = fleet  # type: ignore[attr-defined]
    ctl.timings = {}  # type: ignore[attr-defined]
    return ctl


def test_plan_prints_waves_and_changes_nothing(big: Ctl) -> None:
    proc = big.run("plan", "--waves", "1,3,100%", "--json", "-")
    assert proc.returncode == 0, _explain(proc)
    doc = json.loads(proc.stdout)
    assert [len(w["nodes"]) for w in doc["waves"]] == [1, 3, BIG - 4]
    assert {n["action"] for w in doc["waves"] for n in w["nodes"]} == {"provision"}
    assert not big.ledger.exists()


def test_clean_rollout_to_full_compliance(big: Ctl) -> None:
    report = big.tmp / "first.json"
    t0 = time.monotonic()
    # three waves of site.yml with a reboot each: about 5 min a wave on 2 cores loaded by the
    # other workers, ansible-lint and ansible-test sanity (measured 23:39-23:54 for two waves
    # and most of the third on such a run); the bound is a hang's, not a timing
    proc = big.run("rollout", "--waves", "1,3,100%", "--json", str(report),
                   "--junit", str(big.tmp / "first.xml"), timeout=1800)
    big.timings["first"] = time.monotonic() - t0  # type: ignore[attr-defined]
    assert proc.returncode == Exit.OK, _explain(proc)
    doc = json.loads(report.read_text())
    assert doc["status"] == "succeeded"
    assert [w["size"] for w in doc["waves"]] == [1, 3, BIG - 4]
    assert all(w["passed"] for w in doc["waves"])
    assert {n["step"] for n in doc["nodes"]} == {"compliant"}
    names = set(big.fleet.names)  # type: ignore[attr-defined]
    steps = big.steps(doc["run_id"])
    assert {n: s["step"] for n, s in steps.items()} == dict.fromkeys(names, "compliant")
    with big.open() as led:
        latest = {r["node"]: r for r in led.latest()}
    assert set(latest) == names
    assert all(r["compliant"] and r["path_taken"] == "direct" for r in latest.values())
    # one playbook run per wave; the canary ran alone, before everybody else
    outcomes = [e for e in big.events_of() if e["event"].startswith("outcome:")]
    by_wave: dict[int, set[str]] = {}
    for e in outcomes:
        by_wave.setdefault(e["wave"], set()).add(e["host"])
    assert [len(by_wave[w]) for w in sorted(by_wave)] == [1, 3, BIG - 4]
    canary = doc["plan"]["waves"][0]["nodes"][0]["name"]
    assert by_wave[0] == {canary}
    # health gates ran before waves 1 and 2 (cheap re-verification of the rolled nodes)
    assert "gate health: pass: before wave 1: 1/1" in proc.stderr
    assert "gate health: pass: before wave 2: 4/4" in proc.stderr


def test_reconcile_rerun_only_verifies(big: Ctl) -> None:
    before = len(big.events_of())
    report = big.tmp / "again.json"
    t0 = time.monotonic()
    proc = big.run("rollout", "--waves", "1,3,100%", "--json", str(report))
    took = time.monotonic() - t0
    assert proc.returncode == Exit.OK, _explain(proc)
    doc = json.loads(report.read_text())
    assert {n["action"] for n in doc["nodes"]} == {"verify"}
    assert not any(n["provisioned"] for n in doc["nodes"])
    assert len(big.events_of()) == before  # no playbook ran at all
    first = big.timings.get("first")  # type: ignore[attr-defined]
    if first:  # generous bound here; bench/bench_rollout.py measures the real ratio
        assert took < 0.5 * first, (took, first)


def _lab_shaped(source: Path, work: Path) -> Path:
    """``work`` shaped like a checkout after lab.sh: this fleet's inventory as
    ``inventories/lab`` with the lab's own ``connection.yml`` (key and known_hosts under
    ``.lab/ssh/``, found through ``{{ inventory_dir }}/../../.lab``), and ``.venv``."""
    data = yaml.safe_load(source.read_text())
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    ssh = work / ".lab" / "ssh"
    ssh.mkdir(parents=True)
    for hv in hosts.values():
        key = Path(hv.pop("ansible_ssh_private_key_file"))
        known = hv.pop("ansible_ssh_common_args").split("UserKnownHostsFile=")[1].split()[0]
        (ssh / "id_ed25519").write_bytes(key.read_bytes())
        (ssh / "id_ed25519").chmod(0o600)
        (ssh / "known_hosts").write_text(Path(known).read_text())
    inv = work / "inventories" / "lab"
    (inv / "group_vars" / "all").mkdir(parents=True)
    conn = ROOT / "inventories" / "lab" / "group_vars" / "all" / "connection.yml"
    (inv / "group_vars" / "all" / "connection.yml").write_text(conn.read_text())
    (inv / "hosts.yml").write_text(yaml.safe_dump(data))
    (work / ".venv").symlink_to(ROOT / ".venv")
    return inv


def _lab_work(big: Ctl) -> Path:
    """big's folder shaped like a checkout after lab.sh (once): its ledger is the rollout's."""
    if not (big.tmp / "inventories" / "lab").is_dir():
        _lab_shaped(big.inventory, big.tmp)
    return big.tmp


def test_lab_followups_and_readme_commands_agree_on_one_ledger(big: Ctl) -> None:
    """After the rollout, the follow-up commands lab.sh prints (tests/harness/lab_followups.py,
    the block lab.sh prints), run as printed from a checkout-shaped folder (inventories/lab
    holding this fleet with the lab's connection settings, .lab/ledger.sqlite its ledger,
    .venv), each name the same ledger on their first line and agree: every node compliant,
    simulated, the direct path usable (issue 30: the bare commands read another ledger than
    the lab's)."""
    import shlex

    from tests.harness import lab_followups

    work = _lab_work(big)
    names = sorted(big.fleet.names)  # type: ignore[attr-defined]
    first = names[0]
    shown = f"ledger {big.ledger.resolve()}"
    env = _env(big.collections)
    # a command that does not name the lab's inventory would read this (empty) default ledger
    env["XDG_STATE_HOME"] = str(work / "state")
    env.pop("GDSFLEET_LEDGER", None)
    block = lab_followups.render(0, node=first)
    cmds = lab_followups.followups(node=first)
    assert cmds[-1][1] == lab_followups.TEARDOWN  # not run here: it would stop the lab

    def run(cmd: str) -> subprocess.CompletedProcess[str]:
        assert f"{cmd}\n" in block  # exactly as printed
        proc = subprocess.run(shlex.split(cmd), capture_output=True, text=True, env=env,
                              cwd=work, timeout=900, check=False)
        assert proc.returncode == 0, f"{cmd}\n{_explain(proc)}"
        return proc

    out = {c.split()[1]: run(c) for _, c in cmds[:-1]}
    # every command's first line names the one ledger (rollout's progress goes to stderr)
    assert out["rollout"].stderr.splitlines()[0] == shown, _explain(out["rollout"])
    for cmd in ("verify", "status", "history", "report"):
        assert out[cmd].stdout.splitlines()[0] == shown, _explain(out[cmd])
    env_lines = out["export"].stdout.splitlines()
    # a lab node is marked simulated wherever it is named (issue 47)
    assert env_lines[0].startswith(f"# gdsfleet: {first}: SIMULATED node "), env_lines[0]
    assert "direct path proven at " in env_lines[0], env_lines[0]
    assert env_lines[0].endswith(f"; {shown}")
    # and they agree: the reconcile only verified, every node compliant and simulated
    n = len(names)
    assert n == BIG
    assert f"{n} node(s): {n} compliant" in out["verify"].stdout
    status = out["status"].stdout.splitlines()
    assert status[1].startswith(f"SIMULATED: {n} of {n} node(s)")
    rows = [ln for ln in status if ln.split()[:1] and ln.split()[0] in names]
    assert len(rows) == n and all(" COMPLIANT " in r and "SIMULATED" in r for r in rows)
    history = out["history"].stdout.splitlines()  # ledger, title, header, newest record
    assert "RESULT" in history[2] and " COMPLIANT " in history[3], history
    page = (work / ".lab" / "fleet.html").read_text()
    assert f"SIMULATED: {n} of {n} node(s)" in page
    assert f'id="count-compliant"><b>{n}</b>' in page
    assert "export KVIKIO_COMPAT_MODE=OFF" in out["export"].stdout


# what the README's block runs that this fleet cannot: said, never silently left out
_NOT_HERE = {
    "pip install .": "this environment is that install (the editable .venv the tests run in)",
    "pip install '.[infra]'": "the .venv holds pytest and testinfra already "
                              "(tests/unit/test_readme_real_nodes.py checks the extra)",
    "ansible-galaxy collection build": "the fixture private_collections built this checkout's "
                                       "collection and installed it, as the line does",
    "ansible-galaxy collection install gdsfleet-gds-*.tar.gz": "as above",
    "provisioner exec-nodes check": "needs execution nodes: tests/fleet/test_exec_nodes_fleet.py "
                                    "(bash scripts/test.sh --exec-nodes)",
    "provisioner rollout -i inventories/example --executor ssh": "as above",
}


def test_readme_real_node_block_in_order(big: Ctl) -> None:
    """The README's "On real nodes" block, every command in its order, as written, with the
    lab's inventory for the example's (this fleet shaped as inventories/lab, its ledger
    .lab/ledger.sqlite, after the clean rollout above): plan, rollout (a reconcile: every node
    verified, none changed), verify with its reports, status, report, export, the testinfra
    checks, then the plain ansible-playbook alternative on one node (issue 47 item 2). The lines
    this fleet cannot run are named in _NOT_HERE with where they are tested.

    Slow: a reconcile and a verify of the 5 nodes, the testinfra checks (it replaces the test
    that ran only those, 75 s), and site.yml on one converged node."""
    import shlex

    from tests.unit.test_readme_real_nodes import blocks, readme_block

    work = _lab_work(big)
    names = sorted(big.fleet.names)  # type: ignore[attr-defined]
    shown = f"ledger {big.ledger.resolve()}"
    env = _env(big.collections)
    env["XDG_STATE_HOME"] = str(work / "state")
    env.pop("GDSFLEET_LEDGER", None)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env['PATH']}"
    ran: list[str] = []
    for cmd in [*readme_block(), *blocks()[1]]:
        if any(cmd.startswith(k) for k in _NOT_HERE):
            continue
        words = shlex.split(cmd.replace("inventories/example", "inventories/lab")
                            .replace("--limit gpu-01", f"--limit {names[0]}"))
        cwd = work
        if words[0] == "pytest":  # from the checkout, whose tests/infra it runs
            words = [str(VENV_BIN / "python"), "-m", "pytest", *words[1:], "-p",
                     "no:cacheprovider", "-q"]
            words = [w.replace("--ansible-inventory=inventories/lab",
                               f"--ansible-inventory={work / 'inventories' / 'lab'}")
                     for w in words]
            cwd = ROOT
        proc = subprocess.run(words, capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=1200, check=False)
        assert proc.returncode == 0, f"{cmd}\n{_explain(proc)}"
        # the lab's key path is templated ({{ inventory_dir }}): testinfra must resolve it
        assert "Could not resolve hostname" not in proc.stdout + proc.stderr
        ran.append(words[0] if words[0] != "provisioner" else f"provisioner {words[1]}")
        if words[0] == "provisioner":
            first = (proc.stderr if words[1] in ("rollout",) or " deepspeed" in cmd
                     else proc.stdout).splitlines()[0]
            assert first == shown, f"{cmd}\n{_explain(proc)}"  # one ledger for all
        if words[:2] == ["provisioner", "rollout"]:
            assert "already compliant" in proc.stderr  # a reconcile: nothing changed
        if " deepspeed " in cmd:
            assert json.loads(proc.stdout)["aio"]["use_gds"] is True
    assert ran == ["provisioner plan", "provisioner rollout", "provisioner verify",
                   "provisioner status", "provisioner report", "provisioner export",
                   str(VENV_BIN / "python"), "ansible-playbook"], ran
    report = json.loads((work / "report.json").read_text())
    assert report["summary"]["compliant"] == len(names) == BIG
    assert (work / "report.xml").is_file() and (work / "fleet.html").is_file()


def test_kill_9_mid_wave_then_resume(big: Ctl) -> None:
    # the canary and two nodes caught mid-wave (two test "several" as well as three did, for
    # one host-play of site.yml less in the killed run and in the resumed one)
    names = big.fleet.names[:3]  # type: ignore[attr-defined]
    args = ("--force", "--limit", ":".join(names), "--waves", "1,100%")
    runs_before = {r["id"] for r in big.runs()}
    proc = big.start("rollout", *args)
    try:
        def wave1_provisioning() -> dict[str, str] | None:
            new = [r for r in big.runs() if r["id"] not in runs_before]
            if not new:
                return None
            st = {n: s["step"] for n, s in big.steps(new[0]["id"]).items()}
            if sum(1 for s in st.values() if s == "compliant") == 1 and \
                    "provisioning" in st.values():
                return st
            return None

        _wait(wave1_provisioning, 600, "the canary done and wave 1 provisioning")

        def wave1_at_work() -> bool:
            # inside wave 1's playbook run: a task done on each of its two nodes, by this
            # process (the events log), not a fixed wait after their step was written
            text = big.events.read_text() if big.events.exists() else ""
            # complete lines only (the running rollout appends as this reads)
            lines = text[:text.rfind("\n") + 1].splitlines()
            mine = [e for e in (json.loads(x) for x in lines if x.strip())
                    if e["pid"] == proc.pid and e["wave"] == 1]
            hosts = {e["host"] for e in mine if e["event"] == "start"}
            done = {e["host"] for e in mine if e["event"].startswith("runner_on_")}
            return len(hosts) == 2 and hosts <= done

        _wait(wave1_at_work, 600, "a task done on each node of wave 1")
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate()[0]
    assert proc.returncode == -signal.SIGKILL, out
    (run,) = [r for r in big.runs() if r["id"] not in runs_before]
    assert run["finished_at"] is None  # killed: the run is unfinished
    steps = {n: s["step"] for n, s in big.steps(run["id"]).items()}
    finished = {n for n, s in steps.items() if s == "compliant"}
    caught = {n for n, s in steps.items() if s in ("provisioning", "verifying")}
    assert len(finished) == 1 and len(caught) == 2, steps
    killed_pid = proc.pid

    again = big.run("rollout", *args)
    assert again.returncode == Exit.OK, _explain(again)
    assert "resuming" in again.stderr
    runs = [r for r in big.runs() if r["id"] not in runs_before]
    assert [r["id"] for r in runs] == [run["id"]] and runs[0]["status"] == "succeeded"
    with big.open() as led:
        for n in finished:  # the ledger: provisioned once, by the killed process
            ev = [e["step"] for e in led.step_events(run["id"], n)]
            assert ev.count("provisioning") == 1, (n, ev)
        for n in caught:
            assert led.node_steps(run["id"])[n]["step"] == "compliant"
    # the playbook events: the resumed process never ran a playbook on the finished node, and
    # its first playbook run was the nodes caught mid-step
    events = [e for e in big.events_of() if e["run"] == run["id"]]
    resumed = [e for e in events if e["pid"] != killed_pid]
    assert resumed and not {e["host"] for e in resumed} & finished
    assert {e["host"] for e in resumed if e["event"] == "start"} == caught
    assert {e["host"] for e in events if e["pid"] == killed_pid and e["event"] == "start"} \
        == set(names)


def test_bad_input_is_refused_before_anything_runs(big: Ctl, tmp_path: Path) -> None:
    runs_before = len(big.runs())
    events_before = len(big.events_of())
    good = yaml.safe_load(big.inventory.read_text())

    def inventory(mutate: Callable[[dict[str, Any]], None]) -> Path:
        data = json.loads(json.dumps(good))
        mutate(data)
        path = tmp_path / f"inv{len(list(tmp_path.iterdir()))}" / "hosts.yml"
        path.parent.mkdir()
        path.write_text(yaml.safe_dump(data))
        return path

    hosts = good["all"]["children"]["gpu_nodes"]["hosts"]
    first = sorted(hosts)[0]

    def meta_host(d: dict[str, Any]) -> None:
        h = d["all"]["children"]["gpu_nodes"]["hosts"]
        h["gpu;reboot"] = h.pop(first)

    def meta_var(d: dict[str, Any]) -> None:
        d["all"]["children"]["gpu_nodes"]["hosts"][first]["gds_route"] = "$(reboot)"

    def meta_addr(d: dict[str, Any]) -> None:
        d["all"]["children"]["gpu_nodes"]["hosts"][first]["ansible_host"] = "127.0.0.1;id"

    malformed = tmp_path / "broken" / "hosts.yml"
    malformed.parent.mkdir()
    malformed.write_text("all:\n  children:\n    gpu_nodes:\n      hosts: [\n")
    cases: list[tuple[list[str], str]] = [
        (["-i", str(malformed)], "cannot be parsed"),
        (["--limit", "no-such-node"], "matches no host"),
        (["--waves", "1,five,100%"], "--waves"),
        (["--waves", "0,100%"], "must be above 0"),
        (["-i", str(inventory(meta_host))], "not a valid host name"),
        (["-i", str(inventory(meta_var))], "command substitution"),
        (["-i", str(inventory(meta_addr))], "ansible_host"),
        (["--max-failures", "lots"], "--max-failures"),
        (["--confirm"], "no terminal"),
    ]
    for extra, message in cases:
        argv = big.argv("rollout", *extra)
        if extra[0] == "-i":  # replace the fleet's inventory
            i = argv.index("-i")
            del argv[i:i + 2]
        proc = subprocess.run(argv, capture_output=True, text=True, env=_env(big.collections),
                              cwd=ROOT, timeout=120, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == Exit.USAGE, (extra, _explain(proc))
        assert message in proc.stderr, (extra, proc.stderr)
    assert len(big.runs()) == runs_before
    assert len(big.events_of()) == events_before


def test_unreachable_node(big: Ctl) -> None:
    victim = big.fleet.names[-1]  # type: ignore[attr-defined]
    big.fleet.exec(victim, "kill $(cat /run/sshd.pid) || pkill -x sshd")  # type: ignore[attr-defined]
    report = big.tmp / "unreachable.json"
    proc = big.run("rollout", "--waves", "1,3,100%", "--max-failures", "1",
                   "--connect-timeout", "3", "--json", str(report))
    assert proc.returncode == Exit.UNREACHABLE, _explain(proc)
    doc = json.loads(report.read_text())
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes[victim]["step"] == "failed" and nodes[victim]["failure"] == "unreachable"
    assert nodes[victim]["outcome"]["status"] == "unreachable"
    assert {n["step"] for name, n in nodes.items() if name != victim} == {"compliant"}
    steps = big.steps(doc["run_id"])
    assert steps[victim]["detail"]["failure"] == "unreachable"


# ============================================================================ 2 nodes
@pytest.fixture
def pair(lab_fleet: Any, collections: Path, repo_vars: dict[str, str], tmp_path: Path) -> Ctl:
    # node 1 has no GPU: preflight refuses it (a fast, real failure for the canary)
    fleet = lab_fleet(2, {1: "nogpu", 2: "p2pdma"}, group_vars=HEALTHY | repo_vars)
    ctl = Ctl(fleet.inventory, tmp_path, collections)
    ctl.fleet = fleet  # type: ignore[attr-defined]
    return ctl


def test_canary_failure_stops_everything(pair: Ctl) -> None:
    canary, other = pair.fleet.names  # type: ignore[attr-defined]
    report = pair.tmp / "r.json"
    proc = pair.run("rollout", "--waves", "1,100%", "--json", str(report))
    assert proc.returncode == Exit.ABORTED, _explain(proc)
    doc = json.loads(report.read_text())
    assert "canary failed" in doc["message"]
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes[canary]["step"] == "failed" and nodes[canary]["outcome"]["failed_task"]
    assert nodes[other]["step"] == "pending"
    assert pair.steps(doc["run_id"])[other]["step"] == "pending"
    assert other not in {e["host"] for e in pair.events_of()}  # nothing else touched
    assert pair.runs()[0]["status"] == "aborted"


def test_two_rollouts_at_once(pair: Ctl) -> None:
    _canary, healthy = pair.fleet.names  # type: ignore[attr-defined]
    first = pair.start("rollout", "--limit", healthy)
    try:
        _wait(lambda: pair.runs() and "provisioning" in
              {s["step"] for s in pair.steps(pair.runs()[0]["id"]).values()},
              300, "the first rollout provisioning")
        second = pair.run("rollout", "--limit", healthy, timeout=120)
        assert second.returncode == Exit.LOCKED, _explain(second)
        assert f"pid {first.pid}" in second.stderr
        assert "another rollout holds the lock" in second.stderr
        assert len(pair.runs()) == 1  # the second started nothing
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()


# ============================================================================ 4 nodes
def test_wave_over_budget_after_package_install_failures(
    lab_fleet: Any, collections: Path, repo_vars: dict[str, str], tmp_path: Path
) -> None:
    dkms_fail = {"profile": "nvfs", "env": {"SIM_DKMS_BUILD": "fail"}}
    fleet = lab_fleet(4, {1: "p2pdma", 2: dkms_fail, 3: dkms_fail, 4: "p2pdma"},
                      group_vars=HEALTHY | repo_vars)
    inv = yaml.safe_load(fleet.inventory.read_text())
    hosts = inv["all"]["children"]["gpu_nodes"]["hosts"]
    for name in fleet.names[1:3]:  # the nvfs route's nvidia-fs-dkms for the two DKMS nodes
        hosts[name]["gds_route"] = "nvfs"
        hosts[name]["mofed_flavor"] = "none"  # straight to nvidia-fs (CUDA repository)
    fleet.inventory.write_text(yaml.safe_dump(inv))
    ctl = Ctl(fleet.inventory, tmp_path, collections)
    report = tmp_path / "r.json"
    proc = ctl.run("rollout", "--waves", "1,2,100%", "--max-failures", "1", "--json",
                   str(report))
    assert proc.returncode == Exit.ABORTED, _explain(proc)
    doc = json.loads(report.read_text())
    assert "over its failure budget" in doc["message"]
    nodes = {n["name"]: n for n in doc["nodes"]}
    n1, n2, n3, n4 = fleet.names
    assert nodes[n1]["step"] == "compliant"
    for n in (n2, n3):  # the reasons: the failed task and its message, in the ledger too
        assert nodes[n]["step"] == "failed" and nodes[n]["failure"] == "failed"
        out = nodes[n]["outcome"]
        assert out["status"] == "failed" and "nvidia-fs" in out["failed_task"], out
        assert out["message"], out
        detail = ctl.steps(doc["run_id"])[n]["detail"]
        assert detail["outcome"]["failed_task"] == out["failed_task"]
        assert n in doc["message"]
    assert nodes[n4]["step"] == "pending"
    assert n4 not in {e["host"] for e in ctl.events_of()}
    assert doc["waves"][1]["failed"] == 2 and doc["waves"][1]["allowed_failures"] == 1
