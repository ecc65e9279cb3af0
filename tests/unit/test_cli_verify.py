"""``provisioner verify/status/history`` end to end, with the node verification replaced.

``verify_node`` is replaced by a stand-in that runs a real command through the runner it is
given (so the transport is exercised: LocalRunner, or SSH to a test sshd on loopback) and turns
its output into a report. The real verification core has its own tests; the simulated fleet
test (tests/fleet/test_verify_fleet.py) runs both together.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import provisioner.verify as verify_pkg
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.verify.model import CheckResult, IoTestResult, NodeReport
from tests.harness.loopback_sshd import SSHD, Sshd, free_port, keygen

# Per-test directory for the fake nodes' state files (set by the fake_core fixture), so that
# pytest sessions sharing a machine never read each other's state.
_FAKE_DIR: list[Path] = []


def fake_state(name: str) -> Path:
    return _FAKE_DIR[-1] / f"gdsfleet-fake-{name}"


def fake_verify_node(runner: Any, name: str, policy: Any, io: Any) -> NodeReport:
    res = runner.run("echo state=$(cat \"$GDSFLEET_FAKE_STATE\" 2>/dev/null || echo ok)",
                     timeout=10, env={"GDSFLEET_FAKE_STATE": str(fake_state(name))})
    state = res.stdout.strip().split("=", 1)[1]
    if state == "boom":
        raise RuntimeError("a bug in a check")
    ok = state == "ok"
    return NodeReport(
        name=name, reachable=True, compliant=ok, route="nvfs",
        checks=[CheckResult("nvfs.module.loaded", "pass" if ok else "fail", "loaded", state,
                            "" if ok else "load nvidia_fs")],
        io_test=IoTestResult(path_taken="direct" if ok else "failed", verified=ok),
        raw={"probe": res.stdout}, started_at="2026-11-22T00:00:00Z", duration_s=res.duration_s,
    )


@pytest.fixture
def fake_core(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(verify_pkg, "verify_node", fake_verify_node)
    state = tmp_path / "fake-state"
    state.mkdir()
    _FAKE_DIR.append(state)
    yield
    _FAKE_DIR.remove(state)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify"], "say which nodes"),
        (["verify", "--local", "-i", "inventories/lab"], "exclude each other"),
        (["verify", "--limit", "gpu*"], "add -i INVENTORY"),
        (["verify", "--local", "--parallel", "0"], "--parallel must be at least 1"),
        (["verify", "--local", "--io-size", "lots"], "--io-size"),
        (["verify", "--local", "--io-size", "64K"], "cannot prove the direct path"),
        (["verify", "--local", "--ledger", "x.sqlite", "--no-ledger"], "exclude each other"),
        (["verify", "-i", "/nonexistent/inventory"], "does not exist"),
        (["history", "n1", "--limit", "0"], "--limit must be at least 1"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == Exit.USAGE
    assert message in capsys.readouterr().err


def test_argparse_errors_exit_64() -> None:
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "verify", "--parallel", "x"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode in (Exit.USAGE, 2)  # argparse's own exit code is documented as 2
    assert "invalid int value" in proc.stderr


def test_local_writes_reports_and_ledger(fake_core: None, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.sqlite"
    rc = main(["verify", "--local", "--ledger", str(ledger), "--json", str(tmp_path / "r.json"),
               "--junit", str(tmp_path / "r.xml")])
    out = capsys.readouterr()
    assert rc == Exit.OK, out.err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema_version"] == 1 and doc["run_id"] and doc["started_at"]
    assert doc["summary"]["compliant"] == 1
    node = doc["nodes"][0]
    assert node["raw"]["probe"] == "state=ok\n"  # the command really ran through LocalRunner
    root = ET.parse(tmp_path / "r.xml").getroot()  # noqa: S314 - our own output
    assert root.find("testsuite/testcase").get("name") == "nvfs.module.loaded"  # type: ignore[union-attr]
    assert "COMPLIANT" in out.out and str(ledger) in out.out
    assert out.out.splitlines()[0] == f"ledger {ledger}"  # the first line, as every command's
    with Ledger.open(ledger) as led:
        latest = led.latest()
        assert [x["node"] for x in latest] == [node["name"]]
        assert led.raw_for(latest[0]["id"]) == {"probe": "state=ok\n"}
        assert led.get_run(doc["run_id"])["status"] == "compliant"  # type: ignore[index]


def test_json_to_stdout_is_pure_json(fake_core: None, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--local", "--no-ledger", "--json", "-"]) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["ledger"] is None and len(doc["nodes"]) == 1


def test_no_ledger_says_so_first(fake_core: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--local", "--no-ledger"]) == Exit.OK
    assert capsys.readouterr().out.splitlines()[0].startswith("ledger: none (--no-ledger")


def test_ledger_from_environment(fake_core: None, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GDSFLEET_LEDGER", str(tmp_path / "env.sqlite"))
    assert main(["verify", "--local", "-q"]) == Exit.OK
    with Ledger.open(tmp_path / "env.sqlite") as led:
        assert len(led.latest()) == 1


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(SSHD).exists():
        pytest.skip("needs OpenSSH's sshd")
    root = tmp_path_factory.mktemp("cli-sshd")
    keygen(root / "host_key")
    keygen(root / "client_key")
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    d = Sshd(root, root / "host_key")
    d.start()
    pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{d.port} {pub[0]} {pub[1]}\n")
    try:
        yield {"root": root, "port": d.port}
    finally:
        d.stop()


def _inventory(path: Path, sshd: dict[str, Any], nodes: dict[str, int]) -> Path:
    root = sshd["root"]
    lines = ["all:", "  vars:", "    ansible_user: root",
             f"    ansible_ssh_private_key_file: {root}/client_key",
             f"    ansible_ssh_common_args: -o UserKnownHostsFile={root}/known_hosts",
             "  children:", "    gpu_nodes:", "      hosts:"]
    for name, port in nodes.items():
        lines += [f"        {name}:", "          ansible_host: 127.0.0.1",
                  f"          ansible_port: {port}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_inventory_over_ssh_mixed_outcomes(fake_core: None, sshd: dict[str, Any],
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    closed = free_port()
    inv = _inventory(tmp_path / "hosts.yml", sshd, {
        "gpu-01": sshd["port"], "gpu-02": sshd["port"], "gpu-03": closed})
    fake_state("gpu-02").write_text("not-loaded")
    ledger = tmp_path / "l.sqlite"
    rc = main(["verify", "-i", str(inv), "--ledger", str(ledger), "--retries", "0",
               "--ssh-config", "none", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    assert rc == Exit.UNREACHABLE, out.err
    doc = json.loads((tmp_path / "r.json").read_text())
    by = {n["name"]: n for n in doc["nodes"]}
    assert by["gpu-01"]["compliant"] is True
    assert by["gpu-02"]["compliant"] is False and by["gpu-02"]["reachable"] is True
    assert by["gpu-03"]["reachable"] is False
    assert "connection refused" in by["gpu-03"]["error"]
    assert "UNREACHABLE" in out.out and "[3/3]" in out.err

    # --limit narrows the run; without the unreachable node the exit code is NOT_COMPLIANT
    rc = main(["verify", "-i", str(inv), "--limit", "gpu-01:gpu-02", "--ledger", str(ledger), "-q",
               "--ssh-config", "none"])
    assert rc == Exit.NOT_COMPLIANT
    fake_state("gpu-02").unlink()
    assert main(["verify", "-i", str(inv), "--limit", "gpu-02", "--ledger", str(ledger), "-q",
                 "--ssh-config", "none"]) == Exit.OK
    capsys.readouterr()

    # status: latest per node; gpu-02 recovered, gpu-03 never reached -> no drift
    assert main(["status", "--ledger", str(ledger), "--json"]) == Exit.OK
    status = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert status["gpu-02"]["result"] == "COMPLIANT" and status["gpu-02"]["drift"] == []
    assert status["gpu-03"]["result"] == "UNREACHABLE"

    # gpu-01 breaks: drift, and --fail-on-drift turns it into exit 1
    fake_state("gpu-01").write_text("not-loaded")
    assert main(["verify", "-i", str(inv), "-l", "gpu-01", "--ledger", str(ledger), "-q",
                 "--ssh-config", "none"]) == Exit.NOT_COMPLIANT
    capsys.readouterr()
    assert main(["status", "--ledger", str(ledger), "--fail-on-drift"]) == Exit.NOT_COMPLIANT
    table = capsys.readouterr().out
    line = next(ln for ln in table.splitlines() if "gpu-01" in ln)
    assert line.startswith("!") and "compliance lost" in line

    assert main(["history", "gpu-02", "--ledger", str(ledger), "--json"]) == Exit.OK
    hist = json.loads(capsys.readouterr().out)["history"]
    assert [h["compliant"] for h in hist] == [True, False, False]
    assert main(["history", "gpu-02", "--ledger", str(ledger), "-n", "1"]) == Exit.OK
    assert "COMPLIANT" in capsys.readouterr().out


def test_internal_error_on_one_node_does_not_stop_the_others(
    fake_core: None, sshd: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path / "hosts.yml", sshd, {"gpu-01": sshd["port"],
                                                    "gpu-02": sshd["port"]})
    fake_state("gpu-01").write_text("boom")
    rc = main(["verify", "-i", str(inv), "--no-ledger", "--ssh-config", "none",
               "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert rc == Exit.INTERNAL
    assert "internal error on gpu-01" in err and "a bug in a check" in err
    by = {n["name"]: n for n in json.loads((tmp_path / "r.json").read_text())["nodes"]}
    assert by["gpu-02"]["compliant"] is True
    assert by["gpu-01"]["internal_error"] is True
