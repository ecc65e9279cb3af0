"""Issue 44, done when: a REAL slurmctld + slurmd and a REAL Prometheus act on gdsfleet-attest.

One simulated node (one container): GDS set up from the stand-in packages as an operator would
(apt, modprobe, a mounted XFS "NVMe", cufile.json without compat mode), the verification runtime
by its role, then `provisioner verify` over SSH proves it and writes its record. Slurm 22.05
(slurmctld, slurmd, munge) and node_exporter are Debian 12's, in the node image; the harness
starts them (tests/harness/monitoring.py). gdsfleet.gds.attest and gdsfleet.gds.slurm_gds_health
(the collection as built) are then applied to the running cluster over SSH, the Include into
slurm.conf and `scontrol reconfigure` by the role itself. Prometheus (Debian 12's) runs on the
host on a loopback port of its own, scraping the node's node_exporter every second, with the
collection's alert rules (their `for:` set to 0s, tests/harness/monitoring.rules_for_the_lab).

The scenario: a job runs on the compliant node and its proof is kept; `rmmod nvidia_fs` (the node
image's stand-in) and the next job is refused by the prolog, which drains the node (`sinfo -R`
shows attest's first line) and Prometheus fires GdsfleetNodeRegressed; `modprobe nvidia_fs` and
slurmd's health check resumes the node, the next job runs (the refused one is back in the queue,
eligible again after Slurm's requeue delay). Finally attest itself broken: a job runs and nothing
is drained. Every wait polls with a bound, no fixed sleep.

The health check's interval is an hour while the regression is made, so that the job's prolog,
not the periodic check, is what meets it (slurmd runs the check on its own schedule); for the fix
the test sets it to 2 s in the snippet and runs `scontrol reconfigure`, as an operator would.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from gds_collection import ansible_env

from tests.harness.fixtures import SimNode, StandinRepo
from tests.harness.monitoring import (
    TEXTFILE_DIR,
    Prometheus,
    SlurmCluster,
    rules_for_the_lab,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
RULES = ROOT / "monitoring" / "prometheus" / "gdsfleet.rules.yml"
TEXTFILE = f"{TEXTFILE_DIR}/gdsfleet_attest.prom"
SNIPPET = "/etc/slurm/gdsfleet-gds-health.conf"
SCRIPT_LOG = "/var/log/gdsfleet/slurm-gds-health.log"


@dataclass
class Lab:
    node: SimNode
    cluster: SlurmCluster
    prom: Prometheus
    timings: dict[str, float]


def _prepare_gds(node: SimNode, repo: StandinRepo) -> None:
    """The node's GDS stack from the stand-in packages, as tests/unit/test_iotest_simnode.py
    sets it up (the roles that install it have their own tests)."""
    node.install_repo(repo)
    node.apt_install("dkms", "linux-headers-$(uname -r)", "doca-ofed", "mlnx-nvme-dkms",
                     "nvidia-gds-12-9")
    node.exec("modprobe nvidia_fs && mkdir -p /etc/modules-load.d "
              "&& echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf"
              " && mkfs.xfs -q -f /dev/nvme0n1 && mkdir -p /mnt/gds && mount /dev/nvme0n1 /mnt/gds"
              " && sed -i -E 's/(\"allow_compat_mode\"[[:space:]]*:[[:space:]]*)true/\\1false/'"
              " /etc/cufile.json")
    node.install_verify_runtime(repo)


def _inventory(node: SimNode, path: Path, variables: dict[str, Any]) -> Path:
    host = dict(node.ansible_host_vars(), gdsfleet_simulated=True)
    path.write_text(yaml.safe_dump({"all": {"vars": variables, "children": {
        "gpu_nodes": {"hosts": {node.name: host}}}}}))
    return path


def _apply_roles(node: SimNode, tmp: Path) -> None:
    """gdsfleet.gds.attest and gdsfleet.gds.slurm_gds_health on the running cluster."""
    inv = _inventory(node, tmp / "hosts.yml", {
        "attest_enabled": True,
        "slurm_gds_health_enabled": True,
        "slurm_gds_health_slurm_conf_include": True,
        "slurm_gds_health_reconfigure": True,
        "slurm_gds_health_textfile": TEXTFILE,
        "slurm_gds_health_healthcheck_interval": 3600,
    })
    play = tmp / "slurm.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "gpu_nodes", "gather_facts": False,
        "roles": ["gdsfleet.gds.attest", "gdsfleet.gds.slurm_gds_health"]}]))
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(play)],
                         env=ansible_env(ANSIBLE_PIPELINING="1"), capture_output=True,
                         text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "RUNNING HANDLER [gdsfleet.gds.slurm_gds_health : Reconfigure Slurm]" in res.stdout


def _verify(node: SimNode, tmp: Path) -> dict[str, Any]:
    """`provisioner verify` over SSH: proves the node and writes its record for attest."""
    inv = _inventory(node, tmp / "verify-hosts.yml", {})
    out = tmp / "verify.json"
    res = subprocess.run([str(VENV_BIN / "provisioner"), "verify", "-i", str(inv),
                          "--io-size", "16M", "--no-ledger", "--json", str(out),
                          "--known-hosts", str(node.known_hosts)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def lab(module_sim_node: Callable[..., SimNode], standin_repo: StandinRepo,
        installed_collection: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("slurm-prom")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    node = module_sim_node("nvfs", nvme=True, ssh=True)
    _prepare_gds(node, standin_repo)
    timings["gds"] = time.monotonic() - t0
    cluster = SlurmCluster(node)
    prom = Prometheus(tmp, "", rules_for_the_lab(RULES, tmp / "gdsfleet.rules.yml"))
    try:
        t = time.monotonic()
        cluster.start()
        timings["slurm"] = time.monotonic() - t
        t = time.monotonic()
        _apply_roles(node, tmp)
        timings["roles"] = time.monotonic() - t
        t = time.monotonic()
        doc = _verify(node, tmp)
        assert doc["nodes"][0]["compliant"] is True, doc["nodes"][0].get("checks")
        timings["verify"] = time.monotonic() - t
        prom.target = cluster.exporter
        prom.start()
        print("lab setup timings (s):", {k: round(v, 1) for k, v in timings.items()})
        yield Lab(node, cluster, prom, timings)
    finally:
        prom.stop()
        cluster.release()


def _log(lab: Lab) -> str:
    return lab.node.exec(f"cat {SCRIPT_LOG} 2>/dev/null || true").stdout


def test_daemons_listen_on_loopback_only(lab: Lab) -> None:
    addrs = lab.cluster.listening()
    assert len(addrs) == 3, addrs  # slurmctld, slurmd, node_exporter
    assert all(a.startswith("127.0.0.1:") for a in addrs), addrs


def test_slurm_and_prometheus_act_on_a_regression_and_its_fix(lab: Lab) -> None:
    """The scenario of the module docstring, on the module's one node.

    Slow: four real Slurm jobs (each through its prolog and epilog), a drain and a resume by
    slurmd's health check, and Prometheus scraping and evaluating every second until the alert
    fires and resolves; the node's setup (GDS stack, verification runtime, verify, the two
    roles) is the module fixture's."""
    c, prom = lab.cluster, lab.prom
    t0 = time.monotonic()
    # ---- compliant: the job runs, its proof is kept, Prometheus sees attest ok
    first = c.submit("compliant")
    c.wait_job(first, "COMPLETED")
    assert c.ran(first)
    proofs = [json.loads(ln) for ln in lab.node.read("/var/lib/gdsfleet/attest-jobs.jsonl")
              .splitlines()]
    assert [p["id"] for p in proofs] == [first]
    assert f"epilog info: job {first}: " in _log(lab)
    wait_for("gdsfleet_attest_ok == 1 scraped",
             lambda: prom.value(f'gdsfleet_attest_ok{{instance="{c.exporter}"}}') == 1, 30)
    assert prom.alerts("GdsfleetNodeRegressed", "firing") == []

    # ---- the regression: nvidia-fs unloaded; the next job is refused and the node drained
    lab.node.exec("rmmod nvidia_fs")
    refused = c.submit("refused")
    reasons = wait_for("a drain reason in sinfo -R", c.reasons, 60)
    assert len(reasons) == 1 and reasons[0].startswith("gdsfleet: attest.nvfs.loaded: ") \
        and reasons[0].endswith(f"|{c.name}"), reasons
    assert "DRAIN" in c.state()
    job = wait_for("the refused job requeued", lambda: (
        j if int((j := c.job(refused)).get("Restarts", "0")) >= 1 else None), 60)
    assert job["JobState"] == "PENDING" and not c.ran(refused), c.output(refused)
    log = _log(lab)
    assert f"job {refused} refused on {c.name}: attest.nvfs.loaded" in log
    assert "prolog failed status=1:0" in c.sh("cat /var/log/slurm/slurmd.log")
    # ---- Prometheus: the alert fires, naming the check
    firing = wait_for("GdsfleetNodeRegressed firing", lambda: prom.alerts("GdsfleetNodeRegressed"),
                      30)
    assert [(a["labels"]["check"], a["labels"]["instance"], a["labels"]["severity"])
            for a in firing] == [("attest.nvfs.loaded", c.exporter, "critical")]
    assert prom.value(f'gdsfleet_attest_ok{{instance="{c.exporter}"}}') == 0

    # ---- the fix: nvidia-fs back; slurmd's health check resumes the node, the job runs
    lab.node.exec("modprobe nvidia_fs")
    c.sh(f"sed -i 's/^HealthCheckInterval=.*/HealthCheckInterval=2/' {SNIPPET}"
         " && scontrol reconfigure")
    wait_for("the node back in service", lambda: c.reasons() == [] and "DRAIN" not in c.state(),
             60)
    assert f"resumed {c.name}: GDS is as verified again" in _log(lab)
    after = c.submit("after-fix")
    c.wait_job(after, "COMPLETED")
    assert c.ran(after)
    # the refused job waits in the queue: Slurm makes a requeued job eligible again 120 s
    # after the requeue (seen on 22.05.8), on any node; the lab does not wait for it
    job = c.job(refused)
    assert (job["JobState"], job["Reason"]) == ("PENDING", "BeginTime"), job
    assert "Error running slurm prolog: 1" in c.output(refused)
    c.sh(f"scancel {refused}")
    wait_for("the alert resolved",
             lambda: prom.value(f'gdsfleet_attest_ok{{instance="{c.exporter}"}}') == 1
             and not prom.alerts("GdsfleetNodeRegressed"), 30)

    # ---- gdsfleet's own error (attest's installation broken): the job runs, nothing drained
    lib = "/usr/local/lib/gdsfleet/attest/attest_state.py"
    lab.node.exec(f"mv {lib} /root/attest_state.py.away")
    try:
        third = c.submit("attest-broken")
        c.wait_job(third, "COMPLETED")
        assert c.ran(third) and c.reasons() == []
        assert "NOT draining (gdsfleet never drains a node for an error of its own)" in _log(lab)
    finally:
        lab.node.exec(f"mv /root/attest_state.py.away {lib}")
    lab.timings["scenario"] = time.monotonic() - t0
    print("lab timings (s):", {k: round(v, 1) for k, v in lab.timings.items()})
