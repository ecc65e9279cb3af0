"""Every command that reads or writes a ledger names it on its first line, in one wording
(provisioner.store.location.ledger_line; issue 30 item 1): ``status``, ``history``,
``report``, ``plan`` and ``verify``; with ``--json -`` the document names it and the line goes
to stderr, so stdout stays pure JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.store.location import ledger_line
from provisioner.verify.model import CheckResult
from tests.unit.reportsfleet import compat_report


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "fleet-a.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(
            run, compat_report("lab-01", [CheckResult("gpu.driver", "pass", "ok", "ok", "")]))
        led.finish_run(run, "compliant")
    return path


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"lab-{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in (1, 2)))
    return inv


def test_the_line_hides_a_password_and_escapes() -> None:
    assert ledger_line("/x/l.sqlite") == "ledger /x/l.sqlite"
    line = ledger_line("postgresql+psycopg://ops:s3cret@db/gds")
    assert "s3cret" not in line and line.startswith("ledger postgresql+psycopg://ops:")
    assert "\x1b" not in ledger_line("/tmp/\x1b[31mred.sqlite")
    assert ledger_line(None).startswith("ledger: none")


@pytest.mark.parametrize("argv", [
    ["status"], ["history", "lab-01"], ["report", "latest"],
    ["report", "latest", "--html", "{tmp}/r.html"],
])
def test_reading_commands_name_the_ledger_first(
        argv: list[str], ledger: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*argv, "--ledger", str(ledger)]) == Exit.OK
    assert capsys.readouterr().out.splitlines()[0] == f"ledger {ledger}"


def test_plan_names_the_ledger_first_and_never_breaks_its_last_line(
        ledger: Path, inventory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-i", str(inventory), "--ledger", str(ledger),
                 "--allow-local-connection"]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"ledger {ledger}"
    # issue 30 item 9: the count line broke before "nothing was changed"
    assert lines[-1] == "1 to provision, 1 to verify only; nothing was changed"


def test_plan_json_to_stdout_names_the_ledger_in_the_document(
        ledger: Path, inventory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-i", str(inventory), "--ledger", str(ledger), "--json", "-",
                 "--allow-local-connection"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ledger"] == str(ledger)
    assert err.splitlines()[0] == f"ledger {ledger}"


def test_report_json_to_stdout_stays_json(ledger: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "latest", "--ledger", str(ledger), "--json", "-"]) == Exit.OK
    out, err = capsys.readouterr()
    json.loads(out)
    assert err.splitlines()[0] == f"ledger {ledger}"
