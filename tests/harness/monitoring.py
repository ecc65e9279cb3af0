"""TEST HARNESS: a real one-node Slurm cluster inside a simulated node, its node_exporter, and a
real Prometheus beside it (tests/molecule/test_slurm_prometheus_lab.py).

Slurm, munge and node_exporter are Debian 12's packages in the node image
(tests/harness/build_node_image.sh): a Slurm GPU node has them before gdsfleet comes. There is no
systemd in the node, so the harness starts the daemons the way their units would. The cluster's
controller runs on the node itself (a one-node cluster). Authentication is real: auth/munge with
a key made here for this cluster (the image carries none). Every daemon listens on 127.0.0.1
only, on ports reserved for this process: CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
bind slurmd and slurmctld to the address the node's name resolves to, which the harness makes
127.0.0.1 in the node's /etc/hosts (a cluster's DNS or hosts file does this on real nodes).

Prometheus is the host's (Debian 12's prometheus package, scripts/setup.sh), on a loopback port
of its own with its data in a temporary directory, never the default 9090.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import run as runmod
from tests.harness.fixtures import SimNode

# Debian's node_exporter reads this directory by default (its --collector.textfile.directory)
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    """``probe()`` until it returns something true; its last value, or a TimeoutError naming
    ``what`` (no fixed sleeps: every wait of the lab test is bounded and polls)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:g}s (last: {value!r})")
        time.sleep(every)


SLURM_CONF = """\
# TEST HARNESS (tests/harness/monitoring.py): a one-node Slurm 22.05 cluster on loopback.
ClusterName=gdsfleetlab
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
MessageTimeout=10
# what gdsfleet's snippet recommends beside it (roles/slurm_gds_health)
SchedulerParameters=nohold_on_prolog_fail
PrologEpilogTimeout=60
NodeName={name} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """slurmctld + slurmd + munged + node_exporter in ``node``, on reserved loopback ports."""

    node: SimNode
    ports: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def exporter(self) -> str:
        return f"127.0.0.1:{self.ports[2]}"

    def start(self) -> None:
        self.ports = [runmod.reserve_ports(1) for _ in range(3)]
        ctld, slurmd, exporter = self.ports
        conf = SLURM_CONF.format(name=self.name, ctld_port=ctld, slurmd_port=slurmd)
        script = f"""set -e
grep -q ' {self.name}$' /etc/hosts || echo '127.0.0.1 {self.name}' >>/etc/hosts
install -d -o munge -g munge -m 0700 /etc/munge
install -d -o munge -g munge -m 0755 /run/munge
dd if=/dev/urandom bs=1024 count=1 status=none >/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
su -s /bin/sh munge -c munged
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
printf '%s' {shlex.quote(conf)} >/etc/slurm/slurm.conf
slurmctld
slurmd
setsid -f prometheus-node-exporter --web.listen-address=127.0.0.1:{exporter} \\
  --collector.disable-defaults --collector.textfile \\
  --collector.textfile.directory={TEXTFILE_DIR} >/var/log/node-exporter.log 2>&1
"""
        self.node.exec(script)
        wait_for("the node idle in sinfo",
                 lambda: self.sh("sinfo -h -N -o %T", check=False).strip() == "idle", 60)

    def release(self) -> None:
        for p in self.ports:
            runmod.release_ports(p)
        self.ports = []

    def sh(self, command: str, *, check: bool = True, timeout: float = 120) -> str:
        return self.node.exec(command, check=check, timeout=timeout).stdout

    def submit(self, tag: str) -> str:
        """A batch job that writes /tmp/job-<id>.out (its proof of having run); its id."""
        out = self.sh(f"sbatch --parsable -J {tag} -o /tmp/job-%j.out "
                      "--wrap 'echo ran $SLURM_JOB_ID on $(hostname)'")
        return out.strip().split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        """``scontrol -o show job`` as a dict of its Key=Value fields."""
        line = self.sh(f"scontrol -o show job {job}", check=False)
        return dict(f.split("=", 1) for f in line.split() if "=" in f)

    def wait_job(self, job: str, state: str, timeout: float = 60) -> dict[str, str]:
        seen: dict[str, str] = {}

        def probe() -> dict[str, str] | None:
            seen.clear()
            seen.update(self.job(job))
            return dict(seen) if seen.get("JobState") == state else None

        try:
            return dict(wait_for(f"job {job} {state}", probe, timeout))
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; the job: {seen}") from None

    def output(self, job: str) -> str:
        return self.sh(f"cat /tmp/job-{job}.out 2>/dev/null || true")

    def ran(self, job: str) -> bool:
        """The job's script ran (its own line in its output; a refused job's output file holds
        only slurmd's word on the prolog)."""
        return f"ran {job} on {self.name}" in self.output(job)

    def reasons(self) -> list[str]:
        """``sinfo -R``: one ``<reason>|<node>`` per drained or down node."""
        return [ln for ln in self.sh("sinfo -R -h -o '%E|%N'", check=False).splitlines() if ln]

    def state(self) -> str:
        return self.sh(f"scontrol -o show node {self.name}").split("State=", 1)[1].split()[0]

    def listening(self) -> list[str]:
        """The local addresses of the cluster's listening sockets (ss, in the host's namespace
        the node shares)."""
        out = self.sh("ss -ltnH", check=False)
        ports = {str(p) for p in self.ports}
        return [f[3] for f in (ln.split() for ln in out.splitlines())
                if len(f) > 3 and f[3].rsplit(":", 1)[-1] in ports]


@dataclass
class Prometheus:
    """The host's Prometheus on a reserved loopback port, scraping ``target`` every second and
    evaluating ``rules`` every second; its data in ``workdir``."""

    workdir: Path
    target: str
    rules: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is missing: `bash scripts/setup.sh --python-only` "
                               "installs Debian's prometheus package")
        self.port = runmod.reserve_ports(1)
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                             "scrape_timeout": "1s"},
                  "rule_files": [str(self.rules)],
                  "scrape_configs": [{"job_name": "node",
                                      "static_configs": [{"targets": [self.target]}]}]}
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        log = (self.workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_for("Prometheus ready", self._ready, 60)

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError("prometheus exited: "
                               + (self.workdir / "prometheus.log").read_text()[-2000:])
        url = f"http://127.0.0.1:{self.port}/-/ready"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
            return bool(r.status == 200)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.port:
            runmod.release_ports(self.port)
            self.port = 0

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}{query}"
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 (loopback)
            doc = json.load(r)
        assert doc.get("status") == "success", doc
        return doc["data"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query (None when it returns nothing)."""
        result = self.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else None

    def alerts(self, name: str, state: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"]
                if a["labels"].get("alertname") == name and a.get("state") == state]


def rules_for_the_lab(shipped: Path, dest: Path) -> Path:
    """The shipped rules with every ``for:`` set to 0s, so that an alert fires on the first
    evaluation that sees its condition (the lab cannot wait minutes); the expressions, labels
    and annotations are the shipped ones (promtool's unit tests hold the ``for:`` durations)."""
    doc = yaml.safe_load(shipped.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    dest.write_text(yaml.safe_dump(doc))
    return dest
