"""gdsfleet.gds.slurm_gds_health: the role run for real with ansible-playbook against this machine
(connection local, every path under tmp), the role taken from this checkout; scontrol and
gdsfleet-attest are the TEST STAND-INS of tests/unit/slurm_standins/. The installed entry
points are then run as slurmd runs them (no PATH) to show that the settings the role wrote are
the ones the scripts use. The same role against a real slurmctld and slurmd:
tests/molecule/test_slurm_prometheus_lab.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.rolerun import play_role, recap

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
STANDINS = Path(__file__).resolve().parent / "slurm_standins"
CAPTURES = ROOT / "tests" / "fixtures" / "slurm" / "22.05.8"
REGRESSION = "attest.kernel: kernel 6.1.0-18-amd64 -> 6.1.0-21-amd64; fix: provisioner rollout"


def _play(tmp: Path, variables: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    return play_role("slurm_gds_health", tmp, variables, *flags)


_recap = recap


def _vars(tmp: Path, **more: Any) -> dict[str, Any]:
    v: dict[str, Any] = {
        "slurm_gds_health_enabled": True,
        "slurm_gds_health_attest": str(STANDINS / "gdsfleet-attest"),
        "slurm_gds_health_scontrol": str(STANDINS / "scontrol"),
        "slurm_gds_health_libexec_dir": str(tmp / "libexec"),
        "slurm_gds_health_settings_file": str(tmp / "etc" / "slurm-gds-health.conf"),
        "slurm_gds_health_snippet": str(tmp / "slurm" / "gdsfleet-gds-health.conf"),
        "slurm_gds_health_slurm_conf": str(tmp / "slurm" / "slurm.conf"),
        "slurm_gds_health_state_dir": str(tmp / "run"),
        "slurm_gds_health_log_file": str(tmp / "log" / "slurm-gds-health.log"),
    }
    v.update(more)
    return v


def _files(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")
                  if p.is_file() and p.parent != tmp)


@pytest.fixture
def slurm_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "slurm" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=gpu\nSlurmctldHost=ctl01\n# Prolog=/etc/slurm/old-prolog\n"
                    "PrologFlags=Alloc\nNodeName=gpu-node-01 CPUs=64\n")
    return conf


def test_check_mode_changes_nothing_then_install_is_idempotent(tmp_path: Path,
                                                               slurm_conf: Path) -> None:
    before = slurm_conf.read_text()
    variables = _vars(tmp_path)
    res = _play(tmp_path, variables, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert _files(tmp_path) == ["slurm/slurm.conf"]
    res = _play(tmp_path, variables)
    assert res.returncode == 0, res.stdout[-3000:]
    assert _recap(res.stdout)["changed"] > 0
    res = _play(tmp_path, variables)
    assert res.returncode == 0 and _recap(res.stdout)["changed"] == 0, res.stdout[-3000:]
    # slurm.conf is the operator's: without the opt-in it is not touched
    assert slurm_conf.read_text() == before
    for name in ("slurm-gds-health", "slurm-prolog", "slurm-epilog", "slurm-healthcheck"):
        assert oct((tmp_path / "libexec" / name).stat().st_mode & 0o777) == "0o755"
    snippet = (tmp_path / "slurm" / "gdsfleet-gds-health.conf").read_text()
    keys = dict(ln.split("=", 1) for ln in snippet.splitlines()
                if ln and not ln.startswith("#"))
    assert keys == {"Prolog": f"{tmp_path}/libexec/slurm-prolog",
                    "Epilog": f"{tmp_path}/libexec/slurm-epilog",
                    "HealthCheckProgram": f"{tmp_path}/libexec/slurm-healthcheck",
                    "HealthCheckInterval": "300"}
    # the worst case the snippet names: 5 + 2 + 2 + 5 + 2 + 2 s by default
    assert "PrologEpilogTimeout=60" in snippet and "worst case (18 s)" in snippet


def test_the_installed_entry_points_use_the_settings_the_role_wrote(tmp_path: Path) -> None:
    variables = _vars(tmp_path, slurm_gds_health_nodename="gpu-a17",
                      slurm_gds_health_deadline=3)
    assert _play(tmp_path, variables).returncode == 0
    attest, scontrol = tmp_path / "attest-answers", tmp_path / "scontrol-answers"
    attest.mkdir()
    scontrol.mkdir()
    (attest / "rc").write_text("1")
    (attest / "stdout").write_text(REGRESSION + "\n")
    (scontrol / "node.txt").write_text((CAPTURES / "scontrol-show-node-idle.txt").read_text())
    env = {"SLURM_JOB_ID": "99", "SLURMD_NODENAME": "gpu-node-01",
           "STANDIN_ATTEST_DIR": str(attest), "STANDIN_SCONTROL_DIR": str(scontrol)}
    res = subprocess.run([str(tmp_path / "libexec" / "slurm-prolog")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 1, res.stderr
    assert (attest / "calls").read_text() == "--deadline 3 --job 99 --job-start\n"
    calls = (scontrol / "calls").read_text().split("--\n")[0].splitlines()
    assert calls == ["update", "nodename=gpu-a17", "state=drain", f"reason=gdsfleet: {REGRESSION}"]
    assert (tmp_path / "run" / "job-99.start").is_file()
    assert "job 99 refused on gpu-a17" in (tmp_path / "log" / "slurm-gds-health.log").read_text()
    (attest / "rc").write_text("70")
    res = subprocess.run([str(tmp_path / "libexec" / "slurm-healthcheck")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0


def test_include_is_opt_in_idempotent_and_shown_by_check_diff(tmp_path: Path,
                                                              slurm_conf: Path) -> None:
    variables = _vars(tmp_path, slurm_gds_health_slurm_conf_include=True)
    before = slurm_conf.read_text()
    res = _play(tmp_path, variables, "--check", "--diff")
    assert res.returncode == 0, res.stdout[-3000:]
    assert f"+Include {tmp_path}/slurm/gdsfleet-gds-health.conf" in res.stdout
    assert slurm_conf.read_text() == before
    assert _play(tmp_path, variables).returncode == 0
    assert slurm_conf.read_text() == before + f"Include {tmp_path}/slurm/gdsfleet-gds-health.conf\n"
    res = _play(tmp_path, variables)
    assert res.returncode == 0 and _recap(res.stdout)["changed"] == 0, res.stdout[-3000:]


def test_include_refused_when_slurm_conf_sets_the_same_parameters(tmp_path: Path,
                                                                  slurm_conf: Path) -> None:
    """Slurm's keys are case-insensitive and may have spaces around `=`: each line is named."""
    lines = ["Prolog=/etc/slurm/prolog.sh", "  healthcheckprogram = /usr/sbin/nhc",
             "HealthCheckInterval=60"]
    slurm_conf.write_text(slurm_conf.read_text() + "\n".join(lines) + "\n")
    before = slurm_conf.read_text()
    res = _play(tmp_path, _vars(tmp_path, slurm_gds_health_slurm_conf_include=True))
    assert res.returncode != 0
    assert "already sets what the snippet sets" in res.stdout
    assert all(line.strip() in res.stdout for line in lines), res.stdout[-2000:]
    assert "PrologFlags=Alloc" not in res.stdout.split("already sets")[1].split("Slurm takes")[0]
    assert "Nothing in slurm.conf was changed" in res.stdout
    assert slurm_conf.read_text() == before


def test_include_refused_without_a_slurm_conf(tmp_path: Path) -> None:
    res = _play(tmp_path, _vars(tmp_path, slurm_gds_health_slurm_conf_include=True))
    assert res.returncode != 0
    assert "is not a file on this host" in res.stdout


def test_links_into_globbed_prolog_and_epilog_directories(tmp_path: Path) -> None:
    (tmp_path / "prolog.d").mkdir()
    (tmp_path / "epilog.d").mkdir()
    variables = _vars(tmp_path, slurm_gds_health_prolog_dir=str(tmp_path / "prolog.d"),
                      slurm_gds_health_epilog_dir=str(tmp_path / "epilog.d"))
    res = _play(tmp_path, variables, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert list((tmp_path / "prolog.d").iterdir()) == []
    assert _play(tmp_path, variables).returncode == 0
    link = tmp_path / "prolog.d" / "90-gdsfleet-gds-health"
    assert os.readlink(link) == str(tmp_path / "libexec" / "slurm-prolog")
    assert os.readlink(tmp_path / "epilog.d" / "90-gdsfleet-gds-health") == \
        str(tmp_path / "libexec" / "slurm-epilog")


def test_refuses_a_node_without_scontrol_or_attest(tmp_path: Path) -> None:
    res = _play(tmp_path, _vars(tmp_path, slurm_gds_health_scontrol=str(tmp_path / "none")))
    assert res.returncode != 0 and "it is no Slurm node" in res.stdout
    res = _play(tmp_path, _vars(tmp_path, slurm_gds_health_attest=str(tmp_path / "none")))
    assert res.returncode != 0 and "install gdsfleet's attest first" in res.stdout
    assert not (tmp_path / "libexec").exists()


@pytest.mark.parametrize(("variables", "said"), [
    ({"slurm_gds_health_mode": "drain"}, "value of slurm_gds_health_mode must be one of"),
    ({"slurm_gds_health_scontrol_timeout": 60}, "the scontrol timeout"),
    ({"slurm_gds_health_nodename": "node; rm -rf /"}, "a Slurm node name"),
])
def test_bad_input_is_refused_before_any_change(tmp_path: Path, variables: dict[str, Any],
                                                said: str) -> None:
    res = _play(tmp_path, _vars(tmp_path, **variables))
    assert res.returncode != 0
    assert said in res.stdout
    assert _files(tmp_path) == []


def test_disable_refuses_while_slurm_conf_runs_the_scripts_then_removes(tmp_path: Path,
                                                                       slurm_conf: Path) -> None:
    variables = _vars(tmp_path, slurm_gds_health_slurm_conf_include=True)
    assert _play(tmp_path, variables).returncode == 0
    (tmp_path / "log").mkdir(exist_ok=True)
    (tmp_path / "log" / "slurm-gds-health.log").write_text("2026-11-29T06:00:00Z the log\n")
    # the operator also copied a line of the snippet into slurm.conf
    slurm_conf.write_text(slurm_conf.read_text() + f"Epilog={tmp_path}/libexec/slurm-epilog\n")
    off = dict(variables, slurm_gds_health_enabled=False)
    res = _play(tmp_path, off)
    assert res.returncode != 0
    assert (f"still runs gdsfleet's Slurm scripts: Epilog={tmp_path}/libexec/slurm-epilog"
            in res.stdout)
    assert (tmp_path / "libexec" / "slurm-prolog").exists()
    slurm_conf.write_text(slurm_conf.read_text().replace(
        f"Epilog={tmp_path}/libexec/slurm-epilog\n", ""))
    res = _play(tmp_path, off, "--check")
    assert res.returncode == 0 and (tmp_path / "libexec" / "slurm-prolog").exists()
    res = _play(tmp_path, off)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "Include" not in slurm_conf.read_text()
    assert not (tmp_path / "libexec" / "slurm-gds-health").exists()
    assert not (tmp_path / "slurm" / "gdsfleet-gds-health.conf").exists()
    # the log is evidence: it stays
    log = tmp_path / "log" / "slurm-gds-health.log"
    assert log.read_text() == "2026-11-29T06:00:00Z the log\n"
    res = _play(tmp_path, off)
    assert res.returncode == 0 and _recap(res.stdout)["changed"] == 0


def test_every_variable_is_in_argument_specs_and_the_docs() -> None:
    defaults = set(yaml.safe_load((ROOT / "roles/slurm_gds_health/defaults/main.yml").read_text()))
    spec = yaml.safe_load((ROOT / "roles/slurm_gds_health/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(options) == defaults
    assert all(str(o.get("description") or "").strip() for o in options.values())
    doc = (ROOT / "docs/roles.md").read_text()
    assert sorted(v for v in defaults if f"`{v}`" not in doc) == []
