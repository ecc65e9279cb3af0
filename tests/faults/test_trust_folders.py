"""Issue 45, item 1: the runner folder and the ledger's folder are the caller's alone.

The runner folder is ``<ledger dir>/runner``: the prestart gate script
(``.gdsfleet-gate-*.sh``, run by ansible-playbook), the guard wrapper, ``events.jsonl``,
``env/extravars-*`` and ``artifacts/`` live there. Before the fix a ledger in a folder anyone
can write (``/tmp``) let another local user create ``runner`` first: a folder owned by
``nobody``, mode 0777, was used as it was (the gate script could be swapped and ran as root), and
a planted ``events.jsonl -> /root/victim.txt`` made the rollout append to root's file.

Now (as OpenSSH's StrictModes): a runner or ledger folder not owned by the caller, or writable
by group or others, or a link, is refused (exit 64) before any file is written in it, naming
the folder and the fix; both are created 0700; files in them are opened with ``O_NOFOLLOW``.
Cases that give a folder to another user need root (``os.chown``) and skip without it.
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.fsutil import UnsafeFolderError, open_private, owned_dir

PLAYBOOK = """\
- name: Stand-in site playbook (trust folder tests)
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives a folder to another user")


def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    inv = tmp_path / "inv" / "hosts"
    inv.parent.mkdir()
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"node{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in range(1, 3)))
    pb = tmp_path / "site.yml"
    pb.write_text(PLAYBOOK)
    return {"inv": inv, "pb": pb, "tmp": tmp_path}


def _rollout(fleet: dict[str, Path], ledger: Path, *extra: str) -> int:
    return main(["rollout", "-i", str(fleet["inv"]), "--ledger", str(ledger),
                 "--playbook", str(fleet["pb"]), "--no-verify", "--plain",
                 "--allow-local-connection", *extra])


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ------------------------------------------------------------ the runner folder
@needs_root
def test_a_runner_folder_of_another_user_is_refused_before_anything_is_written(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 0, and the gate script, events.jsonl and artifacts/ were written into the
    ``nobody``-owned 0777 folder."""
    home = fleet["tmp"] / "ledgers"
    home.mkdir(mode=0o700)
    runner = home / "runner"
    runner.mkdir()
    os.chown(runner, _nobody(), _nobody())
    runner.chmod(0o777)
    rc = _rollout(fleet, home / "ledger.sqlite")
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    assert str(runner) in err and "not by you" in err
    assert "chown" in err or "remove" in err  # the fix
    assert _tree(runner) == []  # nothing written in it
    assert not (home / "ledger.sqlite").exists()  # nor beside it: refused first
    assert stat.S_IMODE(runner.stat().st_mode) == 0o777  # and left as it was


@needs_root
def test_a_ledger_folder_of_another_user_is_refused(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The ``/tmp/runner`` case one level up: a ledger folder owned by ``nobody``, 0777."""
    shared = fleet["tmp"] / "shared"
    shared.mkdir()
    os.chown(shared, _nobody(), _nobody())
    shared.chmod(0o777)
    rc = _rollout(fleet, shared / "ledger.sqlite")
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    assert str(shared) in err
    assert _tree(shared) == []


@pytest.mark.parametrize("which", ["ledger", "runner"])
def test_a_folder_group_or_others_can_write_is_refused(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str], which: str) -> None:
    home = fleet["tmp"] / "ledgers"
    home.mkdir(mode=0o700)
    target = home if which == "ledger" else home / "runner"
    target.mkdir(exist_ok=True)
    target.chmod(0o770)
    rc = _rollout(fleet, home / "ledger.sqlite")
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    assert str(target) in err and "writable by group" in err and "chmod go-w" in err
    assert _tree(target) == []


def test_a_world_writable_sticky_ledger_folder_is_refused(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``--ledger /tmp/ledger.sqlite``: anyone can create ``/tmp/runner`` first."""
    tmp = fleet["tmp"] / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    rc = _rollout(fleet, tmp / "ledger.sqlite")
    assert rc == Exit.USAGE
    assert "writable by group or others" in capsys.readouterr().err
    assert _tree(tmp) == []


def test_a_runner_folder_that_is_a_link_is_refused(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    home = fleet["tmp"] / "ledgers"
    home.mkdir(mode=0o700)
    elsewhere = fleet["tmp"] / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (home / "runner").symlink_to(elsewhere)
    rc = _rollout(fleet, home / "ledger.sqlite")
    assert rc == Exit.USAGE
    assert "symbolic link" in capsys.readouterr().err
    assert _tree(elsewhere) == []


def test_a_planted_events_link_is_not_followed(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 0 and ``victim.txt`` had the rollout's event lines appended."""
    home = fleet["tmp"] / "ledgers"
    runner = home / "runner"
    runner.mkdir(parents=True, mode=0o700)
    home.chmod(0o700)
    victim = fleet["tmp"] / "victim.txt"
    victim.write_text("root's file\n")
    (runner / "events.jsonl").symlink_to(victim)
    rc = _rollout(fleet, home / "ledger.sqlite")
    err = capsys.readouterr().err
    assert victim.read_text() == "root's file\n"
    assert rc == Exit.USAGE, err
    assert str(runner / "events.jsonl") in err and "symbolic link" in err


def test_a_planted_link_in_the_artifacts_is_refused(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the start-up scrub rewrote ``command`` files through a linked artifacts
    folder (``artifacts/old -> elsewhere``)."""
    home = fleet["tmp"] / "ledgers"
    (home / "runner" / "artifacts").mkdir(parents=True, mode=0o700)
    for d in (home, home / "runner"):
        d.chmod(0o700)
    elsewhere = fleet["tmp"] / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "command").write_text('{"env": {"X_PASSWORD": "keep-me-as-i-am"}}')
    (home / "runner" / "artifacts" / "old").symlink_to(elsewhere)
    rc = _rollout(fleet, home / "ledger.sqlite")
    assert rc == Exit.USAGE
    assert "keep-me-as-i-am" in (elsewhere / "command").read_text()
    assert "artifacts/old" in capsys.readouterr().err


def test_the_usual_paths_still_work_and_are_created_private(fleet: dict[str, Path]) -> None:
    home = fleet["tmp"] / "new" / "ledgers"  # two folders that do not exist yet
    assert _rollout(fleet, home / "ledger.sqlite") == Exit.OK
    for d in (home.parent, home, home / "runner"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert (home / "runner" / "events.jsonl").is_file()
    # and again: the folders it made itself pass its own check
    assert _rollout(fleet, home / "ledger.sqlite") == Exit.OK


def test_the_default_ledger_folder_stays_private(
        fleet: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    state = fleet["tmp"] / "state"
    (state / "gdsfleet").mkdir(parents=True)
    (state / "gdsfleet").chmod(0o755)  # an older version made it so
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    rc = main(["rollout", "-i", str(fleet["inv"]), "--playbook", str(fleet["pb"]),
               "--no-verify", "--plain", "--allow-local-connection"])
    assert rc == Exit.OK
    for d in (state / "gdsfleet", state / "gdsfleet" / "runner"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


# ------------------------------------------------------------ verify writes there too
@needs_root
def test_verify_refuses_a_ledger_folder_of_another_user(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shared = fleet["tmp"] / "shared"
    shared.mkdir()
    os.chown(shared, _nobody(), _nobody())
    shared.chmod(0o777)
    rc = main(["verify", "-i", str(fleet["inv"]), "--ledger", str(shared / "ledger.sqlite")])
    err = capsys.readouterr().err
    assert rc == Exit.USAGE, err
    assert str(shared) in err
    assert _tree(shared) == []


# ------------------------------------------------------------ the primitives
def test_owned_dir_checks_the_folders_above(tmp_path: Path) -> None:
    """An ancestor someone else could rename (group-writable, no sticky bit) is refused; a
    sticky one (/tmp) is not: its entries belong to whoever made them."""
    wide = tmp_path / "wide"
    wide.mkdir()
    wide.chmod(0o777)
    with pytest.raises(UnsafeFolderError, match="wide"):
        owned_dir(wide / "mine" / "runner")
    assert not (wide / "mine").exists()
    wide.chmod(0o1777)
    made = owned_dir(wide / "mine" / "runner")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_open_private_never_follows_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x")
    (tmp_path / "log").symlink_to(victim)
    with pytest.raises(OSError):
        open_private(tmp_path / "log")
    assert victim.read_text() == "x"


# ------------------------------------------------------------ the project state folder
def test_the_debug_log_never_follows_a_planted_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the traceback was appended to the link's target (a root command run with
    another user's ``XDG_STATE_HOME`` appended to any file that user pointed at)."""
    from provisioner.debuglog import write_traceback

    state = tmp_path / "state"
    (state / "gdsfleet").mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("x\n")
    (state / "gdsfleet" / "debug.log").symlink_to(victim)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        assert write_traceback("test", exc) is None  # not written, and the caller says so
    assert victim.read_text() == "x\n"


@needs_root
def test_a_host_key_is_not_added_in_a_state_folder_of_another_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import paramiko

    from provisioner.errors import HostKeyError
    from provisioner.ssh import add_known_host

    state = tmp_path / "state"
    (state / "gdsfleet").mkdir(parents=True)
    os.chown(state / "gdsfleet", _nobody(), _nobody())
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    key = paramiko.ECDSAKey.generate()
    with pytest.raises(HostKeyError, match="not by you"):
        add_known_host(str(state / "gdsfleet" / "known_hosts"), "node01", key)
    assert _tree(state / "gdsfleet") == []
