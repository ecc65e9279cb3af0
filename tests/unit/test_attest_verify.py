"""``verify`` leaves the record ``attest`` reads (issue 44): the bundled node side
(provisioner/remote/attest_node.py) run as it is sent, against simulated node trees; the use
case writes it by default; a write that fails is said, never fatal."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.verify import attest_record, nfd
from provisioner.verify.model import CommandResult
from tests.unit import attestnode as an


@pytest.fixture(autouse=True)
def _real_record_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runners write into simulated node trees, never this machine: the record's real
    path (tests/conftest.py moves it for tests that verify this machine)."""
    monkeypatch.delenv("GDSFLEET_ATTEST_RECORD", raising=False)

class TreeRunner:
    """TEST STAND-IN for a node's runner: runs the command's python3 with the bundled script on
    stdin, the request given ``root`` = the simulated tree (what the node reads as /)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.commands: list[str] = []

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.commands.append(command)
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
        request = json.loads(words[words.index("-") + 1])
        request["root"] = str(self.root)
        proc = subprocess.run([sys.executable, "-", json.dumps(request)], input=stdin,
                              capture_output=True, timeout=timeout, check=False)
        return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(), 0.1)


def _doc(m: dict[str, Any], *, compliant: bool = True) -> dict[str, Any]:
    return {"name": "gds-07", "compliant": compliant, "route": "nvfs", "reachable": True,
            "io_test": {"path_taken": "direct" if compliant else "compat", "path": "/mnt/gds"},
            "facts": {"kernel": {"release": m["kernel"]},
                      "nvfs": {"loaded": bool(m["nvfs"]), "module_version": m["nvfs"]}},
            "checks": [] if compliant else [{"id": "io.direct_path", "status": "fail"}]}


def test_the_command_runs_as_root_or_through_sudo() -> None:
    cmd = attest_record.command({"mode": "record"})
    assert cmd.startswith('if [ "$(id -u)" = 0 ]; then python3 - ')
    assert "else sudo -n python3 - " in cmd


def test_verify_writes_the_record_attest_reads(tmp_path: Path) -> None:
    m = an.build(tmp_path)
    got = attest_record.publish(TreeRunner(tmp_path), "gds-07", _doc(m), simulated=True)
    assert got == {"path": "/var/lib/gdsfleet/verified.json", "written": True, "error": None,
                   "compliant": True, "changed": []}
    rec = json.loads((tmp_path / "var/lib/gdsfleet/verified.json").read_text())
    assert rec["node"] == "gds-07" and rec["simulated"] is True and rec["route"] == "nvfs"
    assert rec["mount_path"] == "/mnt/gds" and rec["path_taken"] == "direct"
    code, out, _ = an.attest(tmp_path)
    assert code == 0 and out.startswith("ok: gds-07 as verified at ")
    an.unlink_tree(tmp_path / "sys/module/nvidia_fs")
    assert an.attest(tmp_path)[0] == 1


def test_a_failed_verification_replaces_a_compliant_record(tmp_path: Path) -> None:
    m = an.build(tmp_path)
    runner = TreeRunner(tmp_path)
    attest_record.publish(runner, "gds-07", _doc(m))
    assert an.attest(tmp_path)[0] == 0
    attest_record.publish(runner, "gds-07", _doc(m, compliant=False))
    code, out, _ = an.attest(tmp_path)
    assert code == 1 and "NOT compliant at" in out and "(failing: io.direct_path)" in out


def test_state_changed_while_verified_is_never_recorded_compliant(tmp_path: Path) -> None:
    m = an.build(tmp_path)
    doc = _doc(m)
    doc["facts"]["kernel"]["release"] = "6.8.0-1-generic"  # what the gather saw
    got = attest_record.publish(TreeRunner(tmp_path), "gds-07", doc)
    assert got["written"] and got["compliant"] is False
    assert got["changed"] == ["kernel 6.8.0-1-generic -> 6.8.0-60-generic"]
    code, out, _ = an.attest(tmp_path)
    assert code == 1 and "attest.record.changed" in out


def test_labels_in_the_record_are_verifys_nfd_labels(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    m = an.build(tmp_path)
    doc = _doc(m)
    attest_record.publish(TreeRunner(tmp_path), "gds-07", doc)
    rec = json.loads((tmp_path / "var/lib/gdsfleet/verified.json").read_text())
    at = datetime.fromtimestamp(rec["verified_at"], timezone.utc)
    want = nfd.labels(doc, at)
    # the second of verify's label and the node's clock may differ by one: compare the rest
    want.pop(f"{nfd.LABEL_NS}/verified-at")
    got = dict(rec["labels"])
    got.pop(f"{nfd.LABEL_NS}/verified-at")
    assert got == want
    feat = tmp_path / "features"
    an.attest(tmp_path, "--nfd", str(feat))
    lines = [ln for ln in feat.read_text().splitlines() if not ln.startswith("#")]
    assert {ln.split("=")[0] for ln in lines} == set(rec["labels"])
    from provisioner.commands.attest import modules

    assert modules()["attest"].NFD_NS == nfd.LABEL_NS
    assert f"{nfd.FEATURES_DIR}/{nfd.FILE_NAME}" == modules()["attest"].NFD_FILE


class RefusingRunner:
    """TEST STAND-IN: a node where the SSH user is not root and sudo wants a password."""

    def run(self, command: str, **_: Any) -> CommandResult:
        return CommandResult(1, "", "sudo: a password is required\n", 0.01)


def test_a_record_that_cannot_be_written_is_said() -> None:
    got = attest_record.publish(RefusingRunner(), "n", {"compliant": True})
    assert got["written"] is False
    assert got["error"].startswith("sudo: a password is required (the record needs root")


def test_verify_one_writes_it_unless_asked_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    import provisioner.verify
    from provisioner.verify.model import NodeReport
    from provisioner.verify.usecase import NodeRequest, verify_one

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(provisioner.verify, "verify_node", lambda r, name, p, io: NodeReport(
        name=name, reachable=True, compliant=True, route="nvfs"))
    monkeypatch.setattr(attest_record, "publish", lambda runner, name, doc, simulated=False: (
        calls.append((name, simulated)) or {"written": True}))
    doc = verify_one(object(), "n1", "policy", "io", simulated=True)
    assert doc["attest_record"] == {"written": True} and calls == [("n1", True)]
    doc = verify_one(object(), "n2", "policy", "io", attest_record=False)
    assert "attest_record" not in doc and len(calls) == 1
    req = NodeRequest.for_node("h", "h", "io", attest_record=False)
    assert req.options() == {"attest_record": False}


def test_the_operator_can_move_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = an.build(tmp_path)
    monkeypatch.setenv(attest_record.ENV_RECORD, "/srv/gds/verified.json")
    got = attest_record.publish(TreeRunner(tmp_path), "gds-07", _doc(m))
    assert got["written"] and got["path"] == "/srv/gds/verified.json"
    assert an.attest(tmp_path, "--record", "/srv/gds/verified.json")[0] == 0
