"""``status`` and ``history`` word failures, warnings and drift each in their own words
(issue 30 item 2): a compliant node with a warning is never listed as failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.verify.model import CheckResult
from tests.unit.reportsfleet import compat_report


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "lab.sqlite"
    ok = CheckResult("gpu.driver", "pass", "ok", "ok", "")
    warn = CheckResult("fs.mount.nvme", "warn", "no NVMe mount", "nvme", "mount one")
    fail = CheckResult("cufile.json", "fail", "missing", "present", "install it")
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, compat_report("lab-01", [ok, warn], True))
        led.record_verification(run, compat_report("lab-02", [ok, warn, fail], False))
        led.finish_run(run, "done")
    return path


def _lines(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    assert main(list(argv)) == Exit.OK
    return {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}


def test_status_words_a_warning_as_a_warning(ledger: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rows = _lines(capsys, "status", "--ledger", str(ledger))
    assert "FAILING / WARNINGS / DRIFT" in rows["NODE"]
    assert rows["lab-01"].rstrip().endswith("warning: fs.mount.nvme")
    assert "failing" not in rows["lab-01"]
    assert rows["lab-02"].rstrip().endswith("failing: cufile.json; warning: fs.mount.nvme")


def test_status_json_keeps_warnings_apart(ledger: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["status", "--ledger", str(ledger), "--json"]) == Exit.OK
    nodes = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert nodes["lab-01"]["failing"] == [] and nodes["lab-01"]["warnings"] == ["fs.mount.nvme"]
    assert nodes["lab-02"]["failing"] == ["cufile.json"]


def test_history_words_a_warning_as_a_warning(ledger: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = capsys
    assert main(["history", "lab-01", "--ledger", str(ledger)]) == Exit.OK
    text = out.readouterr().out
    assert "FAILING / WARNINGS / ERROR" in text
    assert text.splitlines()[-1].rstrip().endswith("warning: fs.mount.nvme")
    assert "failing" not in text.splitlines()[-1]


@pytest.mark.parametrize("argv", [
    ["status"], ["history", "lab-01"], ["report", "latest"], ["export", "env", "--node", "lab-01"],
])
def test_an_inventory_that_does_not_exist_is_exit_64(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``-i inventories/lba`` (a typo) fell back to the default ledger with exit 0 (issue 30)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    code = main([*argv, "-i", str(tmp_path / "inventories" / "lba")])
    assert code == Exit.USAGE
    assert "does not exist" in capsys.readouterr().err


def test_a_bad_value_is_one_line_and_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """``verify --parallel x`` printed 11 lines of usage before the error (issue 30)."""
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--parallel", "x"])
    assert exc.value.code == 64  # Exit.USAGE: argparse's 2 is UNREACHABLE here (issue 47)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("provisioner verify: error: argument --parallel")
    assert lines[1] == "(see 'provisioner verify --help' for every option)"


def test_history_of_an_unknown_node_suggests_the_close_one(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``history gdsfleet-lab-1`` could suggest ``gdsfleet-lab-01`` (issue 30)."""
    assert main(["history", "lab-1", "--ledger", str(ledger)]) == Exit.USAGE
    out, err = capsys.readouterr()
    # an error like every other: stderr, the command named (issue 47: it went to stdout)
    assert out == "" and err.startswith("provisioner history: error: no verifications of "
                                        "'lab-1' in ") and "did you mean lab-01" in err


def test_status_names_its_ledger_on_the_first_line(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--ledger", str(ledger)]) == Exit.OK
    assert capsys.readouterr().out.splitlines()[0] == f"ledger {ledger}"


def test_export_env_of_a_node_never_verified_is_an_error(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export env --node gdsfleet-lab-01`` against a ledger that never saw it printed
    ``export KVIKIO_COMPAT_MODE=ON`` with exit 0 (issue 30)."""
    assert main(["export", "env", "--ledger", str(ledger), "--node", "gdsfleet-lab-01"]) \
        == Exit.USAGE
    out, err = capsys.readouterr()
    assert out == "" and "never verified in the ledger" in err and str(ledger) in err
