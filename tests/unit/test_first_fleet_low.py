"""The small things a new user met on the way from the lab to a real fleet (issue 47, Low):
each one here, on today's words and code (the others have tests of their own:
test_cli_usage_errors.py for the command line, test_status_wording.py for ``history``,
test_simulation_mark_everywhere.py for ``export``, test_incomplete_runs.py for verify's Ctrl-C,
test_readme_real_nodes.py for ``.[infra]``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.commands import COMMANDS
from provisioner.exitcodes import Exit
from provisioner.store import Ledger

ROOT = Path(__file__).resolve().parents[2]
CLI = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
TESTING = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ status in a checkout
@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder shaped like a checkout after lab.sh: inventories/lab and .lab/ledger.sqlite
    with a record; the default ledger (XDG_STATE_HOME) another one."""
    (tmp_path / "inventories" / "lab").mkdir(parents=True)
    (tmp_path / ".lab").mkdir()
    with Ledger.open(tmp_path / ".lab" / "ledger.sqlite") as led:
        run = led.start_run("verify", "lab")
        led.record_verification(run, {"name": "gdsfleet-lab-01", "reachable": True,
                                      "compliant": True, "checks": []})
        led.finish_run(run, "compliant")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    return tmp_path


def test_status_without_i_in_a_checkout_names_the_labs_ledger(
        checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == Exit.LEDGER  # the default ledger does not exist
    err = capsys.readouterr().err
    assert "run `provisioner verify` first" in err
    assert "this checkout's lab keeps its ledger in .lab/ledger.sqlite: pass -i inventories/lab" \
        in err, err
    # the default ledger exists, another one: it is read, and a note says which is the lab's
    with Ledger.open(checkout / "state" / "gdsfleet" / "ledger.sqlite") as led:
        led.finish_run(led.start_run("verify", "other"), "compliant")
    assert main(["status"]) == Exit.OK
    err = capsys.readouterr().err
    assert err.startswith("provisioner status: note: read ") and "-i inventories/lab" in err
    # with -i (or --ledger) no note: the command was told which ledger
    assert main(["status", "-i", "inventories/lab"]) == Exit.OK
    out, err = capsys.readouterr()
    assert "note:" not in err and "gdsfleet-lab-01" in out


# ------------------------------------------------------------------ docs agree with the tool
def test_the_io_size_range_is_the_tools() -> None:
    from provisioner.validate import MAX_IO_SIZE, MIN_IO_SIZE

    def words(n: int) -> str:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if n % size == 0:
                return f"{n // size} {unit}"
        return str(n)

    row = next(ln for ln in CLI.splitlines() if ln.startswith("| `--io-size SIZE`"))
    assert f"{words(MIN_IO_SIZE)} to {words(MAX_IO_SIZE)}" in row, row
    assert f"I/O sizes outside {words(MIN_IO_SIZE)}..{words(MAX_IO_SIZE)}" in CLI
    assert "4 KiB to 32 GiB" not in CLI and "4 KiB..32 GiB" not in CLI
    assert main(["verify", "--local", "--io-size", "64K", "--no-ledger"]) == Exit.USAGE


def test_the_command_table_names_every_command() -> None:
    table = CLI.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"^\| `([a-z-]+)", table, re.M))
    assert set(COMMANDS) <= named, set(COMMANDS) - named


def test_every_count_of_the_conformance_profiles_is_the_trees() -> None:
    n = len(list((ROOT / "tests" / "conformance" / "profiles").glob("*.yml")))
    checks = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    found = {doc: re.findall(r"\b(\d+) node profiles\b", text)
             for doc, text in (("README.md", README), ("docs/testing.md", TESTING),
                               ("docs/checks.md", checks))}
    for doc, counts in found.items():
        assert counts and all(int(c) == n for c in counts), (doc, counts, n)


def test_the_lab_docs_say_why_every_node_warns_fs_mount_nvme() -> None:
    for text in (TESTING, README):
        para = next(p for p in text.split("\n\n") if "fs.mount.nvme" in p and "loop" in p)
        assert "/dev/loop0" in para


# ------------------------------------------------------------------ the lock
def test_the_lock_message_names_the_command_and_wait_lock(tmp_path: Path) -> None:
    from provisioner.errors import LockHeld
    from provisioner.rollout.lock import fleet_lock

    ledger = str(tmp_path / "l.sqlite")
    with fleet_lock(ledger, "/srv/inventories/prod"), pytest.raises(LockHeld) as exc:
        fleet_lock(ledger, "/srv/inventories/prod").acquire()
    text = str(exc.value)
    assert "running `provisioner rollout -i /srv/inventories/prod`" in text
    assert "--wait-lock SECONDS" in text


# ------------------------------------------------------------------ redaction of a path
def test_a_ledger_path_ending_in_a_secret_word_masks_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``status --ledger /etc/passwd`` said ``ledger /etc/passwd: *** failed``: "passwd:"
    read as a secret's name."""
    fake = tmp_path / "passwd"
    fake.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert main(["status", "--ledger", str(fake)]) == Exit.LEDGER
    err = capsys.readouterr().err
    assert "***" not in err and f"read failed on the ledger {fake}" in err, err


# ------------------------------------------------------------------ a non-root user
def test_a_guide_for_a_non_root_user_and_the_example_shows_become() -> None:
    guide = ROOT / "docs" / "non-root.md"
    text = guide.read_text(encoding="utf-8")
    for needed in ("NOPASSWD", "ansible_become_password", "--no-pipelining",
                   "rw_stats_enabled", "--io-path", "not writable by this user"):
        assert needed in text, needed
    assert "docs/non-root.md" in README
    example = (ROOT / "inventories" / "example" / "hosts.yml").read_text(encoding="utf-8")
    assert "ansible_become: true" in example and "docs/non-root.md" in example
    # every playbook the guide says becomes root does
    for name in ("site", "reboot", "kernel_update", "verify", "preflight", "gpu_operator"):
        play = (ROOT / "playbooks" / f"{name}.yml").read_text(encoding="utf-8")
        assert "become: true" in play, name
