"""The Slurm Prolog, Epilog and HealthCheckProgram of roles/slurm_gds_health, run for real (bash)
against TEST STAND-INS of gdsfleet-attest and scontrol (tests/unit/slurm_standins/, answers set
per test; scontrol's are captures of Slurm 22.05.8, tests/fixtures/slurm/). The environment is
what slurmd gives these scripts (no PATH; SLURM_JOB_ID and SLURMD_NODENAME; facts in
tests/fixtures/slurm/README.md). The lab test with a real slurmctld and slurmd is
tests/molecule/test_slurm_prometheus_lab.py."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "slurm_gds_health" / "files" / "slurm-gds-health.sh"
STANDINS = Path(__file__).resolve().parent / "slurm_standins"
CAPTURES = ROOT / "tests" / "fixtures" / "slurm" / "22.05.8"
NODE = "gpu-node-01"
REGRESSION = ("attest.nvfs.loaded: nvidia-fs loaded, expected yes -> observed no; "
              "fix: modprobe nvidia_fs, or provisioner rollout")


@dataclass
class Node:
    tmp: Path
    attest: Path
    scontrol: Path
    conf: Path

    def settings(self, **extra: str) -> None:
        lines = {"ATTEST": str(STANDINS / "gdsfleet-attest"),
                 "SCONTROL": str(STANDINS / "scontrol"),
                 "STATE_DIR": str(self.tmp / "state"),
                 "LOG_FILE": str(self.tmp / "log" / "slurm-gds-health.log"),
                 "DEADLINE": "2", "GRACE": "1", "SCONTROL_TIMEOUT": "2"}
        lines.update(extra)
        self.conf.write_text("# written by the test\n"
                             + "".join(f"{k}={v}\n" for k, v in lines.items()))

    def answer(self, rc: int, stdout: str = "", *, sleep: float | None = None,
               stderr: str = "") -> None:
        (self.attest / "rc").write_text(str(rc))
        (self.attest / "stdout").write_text(stdout)
        (self.attest / "stderr").write_text(stderr)
        if sleep is not None:
            (self.attest / "sleep").write_text(str(sleep))

    def node_is(self, capture: str, rc: int = 0) -> None:
        (self.scontrol / "node.txt").write_text((CAPTURES / capture).read_text())
        (self.scontrol / "node.rc").write_text(str(rc))

    def run(self, context: str, *, job: str | None = "4711",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        # slurmd's environment for these scripts: no PATH at all
        e = {"SLURMD_NODENAME": NODE, "SLURM_SCRIPT_CONTEXT": f"{context}_slurmd",
             "STANDIN_ATTEST_DIR": str(self.attest),
             "STANDIN_SCONTROL_DIR": str(self.scontrol),
             "GDSFLEET_SLURM_HEALTH_CONF": str(self.conf)}
        if job is not None:
            e["SLURM_JOB_ID"] = job
        e.update(env or {})
        return subprocess.run(["/bin/bash", str(SCRIPT), context], env=e, capture_output=True,
                              text=True, timeout=60, check=False)

    def attest_calls(self) -> list[str]:
        f = self.attest / "calls"
        return f.read_text().splitlines() if f.exists() else []

    def scontrol_calls(self) -> list[list[str]]:
        f = self.scontrol / "calls"
        if not f.exists():
            return []
        calls: list[list[str]] = []
        cur: list[str] = []
        for line in f.read_text().splitlines():
            if line == "--":
                calls.append(cur)
                cur = []
            else:
                cur.append(line)
        return calls

    def updates(self) -> list[list[str]]:
        return [c for c in self.scontrol_calls() if c and c[0] == "update"]

    def log(self) -> str:
        f = self.tmp / "log" / "slurm-gds-health.log"
        return f.read_text() if f.exists() else ""


def _node(tmp: Path) -> Node:
    n = Node(tmp, tmp / "attest", tmp / "scontrol", tmp / "slurm-gds-health.conf")
    n.attest.mkdir()
    n.scontrol.mkdir()
    n.settings()
    n.node_is("scontrol-show-node-idle.txt")
    return n


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return _node(tmp_path)


# ------------------------------------------------------------------ prolog
def test_prolog_lets_the_job_run_on_a_node_as_verified(node: Node) -> None:
    node.answer(0, "ok: nothing regressed since the verify of 2026-11-29T06:00:00Z\n")
    res = node.run("prolog")
    assert res.returncode == 0, res.stderr
    assert node.updates() == []
    # attest judges the node and stores the job's counter baseline in one run
    assert node.attest_calls() == ["--deadline 2 --job 4711 --job-start"]
    # the job's start for the epilog's --since
    start = int((node.tmp / "state" / "job-4711.start").read_text())
    assert abs(start - time.time()) < 30


def test_prolog_refuses_the_job_and_drains_with_attests_first_line(node: Node) -> None:
    node.answer(1, REGRESSION + "\nattest.kernel: kernel 6.1.0-18 -> 6.1.0-21; fix: rollout\n")
    res = node.run("prolog")
    assert res.returncode == 1
    assert node.updates() == [["update", f"nodename={NODE}", "state=drain",
                               f"reason=gdsfleet: {REGRESSION[:160]}"]]
    assert "GDS regressed since its verify" in res.stderr
    assert "refused" in node.log() and "drained gpu-node-01" in node.log()


def test_prolog_node_name_from_the_settings_over_slurmd(node: Node) -> None:
    node.settings(NODENAME="gpu-a17")
    node.answer(1, REGRESSION + "\n")
    assert node.run("prolog").returncode == 1
    assert node.updates()[0][1] == "nodename=gpu-a17"


@pytest.mark.parametrize(("rc", "stderr", "said"), [
    (70, "attest: cannot read /proc/driver/nvidia-fs/version: EIO\n",
     "gdsfleet-attest failed (exit 70): attest: cannot read"),
    (2, "usage: gdsfleet-attest ...\n", "gdsfleet-attest failed (exit 2)"),
    (139, "", "gdsfleet-attest failed (exit 139)"),
])
def test_prolog_never_drains_for_attests_own_failure(node: Node, rc: int, stderr: str,
                                                     said: str) -> None:
    node.answer(rc, REGRESSION + "\n", stderr=stderr)
    res = node.run("prolog")
    assert res.returncode == 0
    assert node.updates() == []
    assert said in node.log()
    assert "NOT draining" in node.log() and "the job runs" in node.log()


def test_prolog_bounded_when_attest_hangs(node: Node) -> None:
    node.answer(1, REGRESSION + "\n", sleep=30)
    t0 = time.monotonic()
    res = node.run("prolog")
    took = time.monotonic() - t0
    assert res.returncode == 0 and node.updates() == []
    assert took < 2 + 1 + 2 + 5, took  # DEADLINE + GRACE + timeout's -k 2, and slack for load
    assert "did not answer within 3s" in node.log()


def test_prolog_attest_missing(node: Node) -> None:
    node.settings(ATTEST=str(node.tmp / "no-such-attest"))
    res = node.run("prolog")
    assert res.returncode == 0 and node.updates() == []
    assert "no-such-attest is missing or not executable" in node.log()


def test_prolog_refuses_even_when_scontrol_cannot_drain(node: Node) -> None:
    """attest is sure the node regressed: the job is refused; Slurm drains the node itself
    for a failed prolog (with a reason of its own), so the node still stops taking jobs."""
    node.answer(1, REGRESSION + "\n")
    (node.scontrol / "update.rc").write_text("1")
    (node.scontrol / "update.out").write_text("slurm_update error: Invalid user id\n")
    res = node.run("prolog")
    assert res.returncode == 1
    assert "could not drain gpu-node-01 (scontrol: slurm_update error: Invalid user id)" \
        in node.log()


def test_prolog_observe_mode_reports_without_draining(node: Node) -> None:
    node.settings(MODE="observe")
    node.answer(1, REGRESSION + "\n")
    res = node.run("prolog")
    assert res.returncode == 0 and node.updates() == []
    assert "MODE=observe: not draining, the job runs" in node.log()


def test_a_crash_of_the_scripts_own_logic_never_fails_the_prolog(node: Node) -> None:
    """The logic is killed mid-way (SIGKILL from the stand-in, as a bug or the OOM killer
    would): the guard turns it into exit 0 and says so."""
    node.answer(1, REGRESSION + "\n")
    (node.attest / "kill-caller").write_text("")
    res = node.run("prolog")
    assert res.returncode == 0 and node.updates() == []
    assert "internal error (exit 137); NOT draining" in node.log()


def test_unreadable_or_odd_settings_fall_back_safely(node: Node) -> None:
    node.conf.write_text(f"ATTEST={STANDINS / 'gdsfleet-attest'}\n"
                         f"SCONTROL={STANDINS / 'scontrol'}\n"
                         f"LOG_FILE={node.tmp / 'log' / 'slurm-gds-health.log'}\n"
                         f"STATE_DIR={node.tmp / 'state'}\n"
                         "DEADLINE=$(touch /tmp/pwned)\nMODE=drain-everything\nFOO=1\n")
    node.answer(1, REGRESSION + "\n")
    res = node.run("prolog")
    log = node.log()
    assert "DEADLINE=$(touch /tmp/pwned) is not a number: DEADLINE keeps 5" in log
    assert "unknown setting 'FOO' ignored" in log
    # an unknown MODE is taken as observe: a typo never drains a fleet
    assert "MODE=drain-everything is neither enforce nor observe" in log
    assert res.returncode == 0 and node.updates() == []
    assert node.attest_calls() == ["--deadline 5 --job 4711 --job-start"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.text(min_size=0, max_size=600), rest=st.text(max_size=50))
def test_drain_reason_is_bounded_printable_whatever_attest_prints(
        tmp_path_factory: pytest.TempPathFactory, first: str, rest: str) -> None:
    node = _node(tmp_path_factory.mktemp("p"))
    node.answer(1, first + "\n" + rest)
    res = node.run("prolog")
    assert res.returncode == 1
    [update] = node.updates()
    reason = update[3]
    assert reason.startswith("reason=gdsfleet: ")
    text = reason.removeprefix("reason=gdsfleet: ")
    assert len(text) <= 160
    assert all(" " <= ch <= "~" for ch in text)
    if not first.strip():
        assert text == "attest reported a regression (no detail)" or text.strip() == ""


# ------------------------------------------------------------------ healthcheck
def test_healthcheck_drains_a_regressed_node_in_service(node: Node) -> None:
    node.answer(1, REGRESSION + "\n")
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == [["update", f"nodename={NODE}", "state=drain",
                               f"reason=gdsfleet: {REGRESSION[:160]}"]]


@pytest.mark.parametrize("capture", ["scontrol-show-node-idle-drain-admin.txt",
                                     "scontrol-show-node-idle-drain-gdsfleet.txt",
                                     "scontrol-show-node-down-drain-gdsfleet.txt"])
def test_healthcheck_leaves_a_drained_node_and_its_reason(node: Node, capture: str) -> None:
    node.answer(1, REGRESSION + "\n")
    node.node_is(capture)
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == []


@pytest.mark.parametrize("capture", ["scontrol-show-node-idle-drain-gdsfleet.txt",
                                     "scontrol-show-node-allocated-drain-gdsfleet.txt"])
def test_healthcheck_resumes_a_node_gdsfleet_drained_once_it_is_fixed(node: Node,
                                                                      capture: str) -> None:
    node.answer(0, "ok: nothing regressed\n")
    node.node_is(capture)
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == [["update", f"nodename={NODE}", "state=resume"]]
    assert "resumed gpu-node-01: GDS is as verified again (was: gdsfleet: attest." in node.log()


@pytest.mark.parametrize("capture", ["scontrol-show-node-idle-drain-admin.txt",
                                     "scontrol-show-node-down-drain-gdsfleet.txt",
                                     "scontrol-show-node-idle.txt"])
def test_healthcheck_never_resumes_what_gdsfleet_did_not_drain(node: Node, capture: str) -> None:
    node.answer(0, "ok: nothing regressed\n")
    node.node_is(capture)
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == []


def test_healthcheck_resume_can_be_turned_off(node: Node) -> None:
    node.settings(RESUME="false")
    node.answer(0, "ok\n")
    node.node_is("scontrol-show-node-idle-drain-gdsfleet.txt")
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == []


@pytest.mark.parametrize("rc", [70, 124])
def test_healthcheck_on_attests_failure_neither_drains_nor_resumes(node: Node, rc: int) -> None:
    node.answer(rc, "")
    node.node_is("scontrol-show-node-idle-drain-gdsfleet.txt")
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.scontrol_calls() == []
    assert "neither drained nor resumed" in node.log()


def test_healthcheck_node_unknown_to_slurm_changes_nothing(node: Node) -> None:
    node.answer(1, REGRESSION + "\n")
    node.node_is("scontrol-show-node-notfound.txt", rc=1)
    assert node.run("healthcheck", job=None).returncode == 0
    assert node.updates() == []
    assert "scontrol did not say the node's state" in node.log()


# ------------------------------------------------------------------ epilog
JOB_LINE = "job 4711: direct: nvfs 1024 MiB, p2pdma 0 MiB, compat 0 MiB; nvidia-fs counters moved"


def _stamp(node: Node, job: str = "4711", value: str = "1795933500\n") -> Path:
    (node.tmp / "state").mkdir(exist_ok=True)
    f = node.tmp / "state" / f"job-{job}.start"
    f.write_text(value)
    return f


def test_epilog_has_attest_keep_the_proof_since_the_prologs_stamp(node: Node) -> None:
    stamp = _stamp(node)
    node.answer(0, "ok: gpu-node-01 as verified at 2026-11-29T06:00:00Z (kernel 6.1.0-18)\n"
                + JOB_LINE + "\n")
    assert node.run("epilog").returncode == 0
    assert node.attest_calls() == ["--deadline 2 --job 4711 --since 1795933500"]
    assert not stamp.exists()
    assert f"epilog info: {JOB_LINE}" in node.log()
    assert node.updates() == []


def test_epilog_on_a_regressed_node_keeps_the_proof_and_drains_nothing(node: Node) -> None:
    _stamp(node)
    node.answer(1, REGRESSION + "\n" + JOB_LINE.replace("direct", "compat") + "\n")
    assert node.run("epilog").returncode == 0
    assert node.updates() == []
    assert "job 4711: compat:" in node.log()


def test_epilog_without_a_stamp_asks_slurm_for_the_start(node: Node) -> None:
    (node.scontrol / "job.txt").write_text((CAPTURES / "scontrol-show-job-running.txt").read_text())
    node.answer(0, JOB_LINE + "\n")
    assert node.run("epilog", env={"TZ": "UTC"}).returncode == 0
    # StartTime=2026-11-29T06:30:36 of the capture, in the node's time zone (UTC here)
    assert node.attest_calls() == ["--deadline 2 --job 4711 --since 1795933836"]


@pytest.mark.parametrize("stamp", ["", "yesterday", "17959335001795933500"])
def test_epilog_with_neither_stamp_nor_slurm_lets_attest_use_its_baseline(node: Node,
                                                                          stamp: str) -> None:
    _stamp(node, value=stamp)
    (node.scontrol / "job.txt").write_text("JobId=4711 JobName=wrap StartTime=Unknown\n")
    node.answer(0, JOB_LINE + "\n")
    assert node.run("epilog").returncode == 0
    assert node.attest_calls() == ["--deadline 2 --job 4711"]
    assert "no start time" in node.log()


@pytest.mark.parametrize("rc", [70, 137, 2])
def test_epilog_never_fails_whatever_attest_does(node: Node, rc: int) -> None:
    _stamp(node)
    node.answer(rc, JOB_LINE + "\n", stderr="gdsfleet-attest: deadline of 2s hit\n")
    res = node.run("epilog")
    assert res.returncode == 0 and node.updates() == []
    assert "the job's GDS proof was not kept" in node.log()


def test_epilog_without_a_job_id(node: Node) -> None:
    assert node.run("epilog", job=None).returncode == 0
    assert node.attest_calls() == []
    assert "no SLURM_JOB_ID" in node.log()


def test_every_attest_run_writes_the_textfile(node: Node) -> None:
    node.settings(TEXTFILE="/var/lib/node_exporter/textfile_collector/gdsfleet-attest.prom")
    node.answer(0, "ok\n")
    _stamp(node)
    for context in ("prolog", "epilog", "healthcheck"):
        assert node.run(context).returncode == 0
    tf = "--textfile /var/lib/node_exporter/textfile_collector/gdsfleet-attest.prom"
    calls = node.attest_calls()
    assert len(calls) == 3 and all(tf in c for c in calls), calls


def test_the_scripts_log_is_bounded(node: Node) -> None:
    node.settings(LOG_MAX_BYTES="1000")
    node.answer(70, "", stderr="gdsfleet-attest: cannot judge the node: EIO\n")
    for _ in range(12):
        assert node.run("healthcheck", job=None).returncode == 0
    log = node.tmp / "log" / "slurm-gds-health.log"
    old = Path(str(log) + ".1")
    assert log.stat().st_size <= 1000 and 0 < old.stat().st_size <= 1000
    assert all("neither drained nor resumed" in ln for ln in
               old.read_text().splitlines() + log.read_text().splitlines())


def test_usage_error_is_not_a_refusal(node: Node) -> None:
    res = node.run("preamble")
    assert res.returncode == 0
    assert "usage: slurm-gds-health prolog|epilog|healthcheck" in node.log()
