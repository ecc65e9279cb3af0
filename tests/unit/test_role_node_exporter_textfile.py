"""gdsfleet.gds.node_exporter_textfile: the node-side exporter, run for real with
ansible-playbook against this machine (connection local, every path under tmp), the role taken
from this checkout. The lab has no systemd as PID 1, so the unit files are checked by
``systemd-analyze verify`` and the service's ExecStart is run by hand: it must write a textfile
that prometheus_client's parser reads, and a second run must carry the node's drift metric.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.rolerun import play_role, recap

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def _play(tmp: Path, variables: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    return play_role("node_exporter_textfile", tmp, variables, *flags)


_recap = recap


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("textfile")
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "provisioner"
    # TEST STAND-IN for the gdsfleet wheel's console script in the node's venv (the role
    # installs the wheel with pip; here node_exporter_textfile_install is false): this
    # checkout's provisioner under the test interpreter.
    script.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec "
                      f"{shlex.quote(sys.executable)} -c 'import sys; from provisioner.cli "
                      f"import main; sys.exit(main())' \"$@\"\n")
    script.chmod(0o755)
    variables = {
        "node_exporter_textfile_enabled": True,
        "node_exporter_textfile_install": False,
        "node_exporter_textfile_venv": str(venv),
        "node_exporter_textfile_dir": str(tmp / "textfile"),
        "node_exporter_textfile_ledger": str(tmp / "state" / "node-ledger.sqlite"),
        "node_exporter_textfile_unit_dir": str(tmp / "units"),
        "node_exporter_textfile_io_size": "4M",
        "node_exporter_textfile_io_path": str(tmp / "no-gds-here"),
    }
    return {"tmp": tmp, "vars": variables}


def test_check_mode_changes_nothing_then_install_is_idempotent(node: dict[str, Any]) -> None:
    tmp, variables = node["tmp"], node["vars"]
    res = _play(tmp, variables, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert not (tmp / "units").exists() and not (tmp / "textfile").exists()
    res = _play(tmp, variables)
    assert res.returncode == 0, res.stdout[-3000:]
    assert _recap(res.stdout)["changed"] > 0
    res = _play(tmp, variables)
    assert res.returncode == 0 and _recap(res.stdout)["changed"] == 0, res.stdout[-3000:]
    timer = (tmp / "units" / "gdsfleet-textfile.timer").read_text()
    assert "OnCalendar=hourly" in timer and "WantedBy=timers.target" in timer
    assert oct((tmp / "units" / "gdsfleet-textfile.service").stat().st_mode & 0o777) == "0o644"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
def test_systemd_accepts_the_units(node: dict[str, Any]) -> None:
    units = node["tmp"] / "units"
    res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                          str(units / "gdsfleet-textfile.service"),
                          str(units / "gdsfleet-textfile.timer")],
                         capture_output=True, text=True, timeout=60, check=False)
    # systemd-analyze needs no running systemd for this; anything it says about our units fails
    ours = [ln for ln in (res.stdout + res.stderr).splitlines() if "gdsfleet-textfile" in ln]
    assert ours == [], ours


def _exec_start(node: dict[str, Any]) -> list[str]:
    service = (node["tmp"] / "units" / "gdsfleet-textfile.service").read_text()
    line = next(ln for ln in service.splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_exec_start_by_hand_writes_the_textfile_and_drift(node: dict[str, Any]) -> None:
    argv = _exec_start(node)
    assert argv[1:4] == ["verify", "--local", "--quiet"] and "--prom-textfile" in argv
    service = (node["tmp"] / "units" / "gdsfleet-textfile.service").read_text()
    allowed = {0, *map(int, service.split("SuccessExitStatus=")[1].split("\n")[0].split())}
    for _ in range(2):  # the second run has the first in the node's ledger
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode in allowed, res.stderr[-2000:]
    prom = Path(node["vars"]["node_exporter_textfile_dir"]) / "gdsfleet.prom"
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["gdsfleet_node_reachable"].samples[0].value == 1
    assert "gdsfleet_node_drift" in fams and "gdsfleet_check_status" in fams
    assert Path(node["vars"]["node_exporter_textfile_ledger"]).is_file()


def test_disabled_removes_units_and_the_stale_textfile(node: dict[str, Any]) -> None:
    tmp, variables = node["tmp"], dict(node["vars"], node_exporter_textfile_enabled=False)
    if not (tmp / "units").is_dir():  # run alone: install the units first, as the tests above do
        assert _play(tmp, node["vars"]).returncode == 0
    assert any((tmp / "units").iterdir())
    prom = Path(variables["node_exporter_textfile_dir"]) / "gdsfleet.prom"
    prom.parent.mkdir(parents=True, exist_ok=True)
    prom.touch()
    res = _play(tmp, variables)
    assert res.returncode == 0, res.stdout[-3000:]
    assert sorted(p.name for p in (tmp / "units").iterdir()) == []
    assert not prom.exists()
