"""gdsfleet.gds.attest: the node-side attest installed for real with ansible-playbook against
this machine (connection local, every path under tmp), the role taken from this checkout; the
entry point it installs run against a simulated node tree (tests/unit/attestnode.py), the unit
files read by ``systemd-analyze verify`` (the lab has no systemd as PID 1)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit import attestnode as an
from tests.unit.rolerun import play_role, recap

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def _play(tmp: Path, variables: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    return play_role("attest", tmp, variables, *flags)


_recap = recap


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("attest-role")
    variables = {
        "attest_lib_dir": str(tmp / "lib"),
        "attest_entry_point": str(tmp / "sbin" / "gdsfleet-attest"),
        "attest_python": sys.executable,
        "attest_timer_enabled": True,
        "attest_textfile": str(tmp / "textfile" / "gdsfleet_attest.prom"),
        "attest_unit_dir": str(tmp / "units"),
    }
    (tmp / "sbin").mkdir()
    return {"tmp": tmp, "vars": variables}


def test_check_mode_changes_nothing_then_install_is_idempotent(node: dict[str, Any]) -> None:
    """Slow: three ansible-playbook runs of the role on this machine (check, install, again)."""
    tmp, variables = node["tmp"], node["vars"]
    res = _play(tmp, variables, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert not (tmp / "lib").exists() and not (tmp / "units").exists()
    res = _play(tmp, variables)
    assert res.returncode == 0, res.stdout[-3000:]
    assert _recap(res.stdout)["changed"] > 0
    res = _play(tmp, variables)
    assert res.returncode == 0 and _recap(res.stdout)["changed"] == 0, res.stdout[-3000:]
    assert sorted(p.name for p in (tmp / "lib").iterdir()) == [
        "__pycache__", "attest.py", "attest_compare.py", "attest_counters.py", "attest_state.py",
        "cufile_json.py"]
    for p in (tmp / "lib").glob("*.py"):  # the collection's files, as they are
        assert p.read_bytes() == (ROOT / "plugins" / "module_utils" / p.name).read_bytes()
    # byte-compiled at install: a user who may not write there still starts from the cache
    assert len(list((tmp / "lib" / "__pycache__").glob("attest*.pyc"))) == 4
    entry = tmp / "sbin" / "gdsfleet-attest"
    assert oct(entry.stat().st_mode & 0o777) == "0o755"


def test_the_entry_point_attests_a_node(node: dict[str, Any], tmp_path: Path) -> None:
    entry = node["tmp"] / "sbin" / "gdsfleet-attest"
    if not entry.exists():
        assert _play(node["tmp"], node["vars"]).returncode == 0
    an.build(tmp_path)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(entry), "--root", str(tmp_path), *argv], capture_output=True,
                              text=True, timeout=60, check=False,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/nonexistent"})

    res = run()
    assert res.returncode == 1 and res.stdout.startswith("attest.unverified: ")
    an.write_record(tmp_path)
    res = run("--json")
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "ok", res.stderr
    res = run("--no-such-option")
    assert res.returncode == 70 and "unrecognized arguments" in res.stderr


def test_the_timer_writes_the_textfile(node: dict[str, Any], tmp_path: Path) -> None:
    tmp = node["tmp"]
    if not (tmp / "units").is_dir():
        assert _play(tmp, node["vars"]).returncode == 0
    service = (tmp / "units" / "gdsfleet-attest.service").read_text()
    line = next(ln for ln in service.splitlines() if ln.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert argv[0] == node["vars"]["attest_entry_point"] and "--textfile" in argv
    an.build(tmp_path)
    an.write_record(tmp_path)
    (tmp / "textfile").mkdir(exist_ok=True)
    res = subprocess.run([*argv, "--root", str(tmp_path)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    prom = Path(node["vars"]["attest_textfile"])
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["gdsfleet_attest_ok"].samples[0].value == 1
    timer = (tmp / "units" / "gdsfleet-attest.timer").read_text()
    assert "OnCalendar=*:*:00" in timer and "WantedBy=timers.target" in timer


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
def test_systemd_accepts_the_units(node: dict[str, Any]) -> None:
    units = node["tmp"] / "units"
    if not units.is_dir():
        assert _play(node["tmp"], node["vars"]).returncode == 0
    res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                          str(units / "gdsfleet-attest.service"),
                          str(units / "gdsfleet-attest.timer")],
                         capture_output=True, text=True, timeout=60, check=False)
    ours = [ln for ln in (res.stdout + res.stderr).splitlines() if "gdsfleet-attest" in ln
            and "Command " not in ln]  # the entry point under tmp, not on this machine's path
    assert ours == [], ours


def test_disabled_removes_it_all(node: dict[str, Any]) -> None:
    tmp = node["tmp"]
    if not (tmp / "units").is_dir():
        assert _play(tmp, node["vars"]).returncode == 0
    prom = Path(node["vars"]["attest_textfile"])
    prom.parent.mkdir(parents=True, exist_ok=True)
    prom.touch()
    res = _play(tmp, dict(node["vars"], attest_enabled=False))
    assert res.returncode == 0, res.stdout[-3000:]
    assert not (tmp / "lib").exists() and not (tmp / "sbin" / "gdsfleet-attest").exists()
    assert sorted(p.name for p in (tmp / "units").iterdir()) == [] and not prom.exists()
