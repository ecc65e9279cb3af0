"""The remote scripts run for real (subprocess on this machine, which has no GPU, no kvikio and
no nvidia-fs) and verify_node turns their output into a report without crashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.remote import load_script
from provisioner.verify import (
    CommandResult,
    IoTestOptions,
    NodeReport,
    Policy,
    verify_node,
)
from provisioner.verify.iotest import command as iotest_command


class SubprocessRunner:
    """CommandRunner over a local shell (what a transport does over SSH), recording calls."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.calls: list[str] = []
        self.env = env

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.calls.append(command)
        # the node's python3 is this interpreter here
        command = command.replace("python3 -", f"{sys.executable} -", 1)
        t0 = time.monotonic()
        full_env = dict(os.environ)
        full_env.update(self.env or {})
        full_env.update(env or {})
        proc = subprocess.run(command, shell=True, input=stdin, capture_output=True,  # noqa: S602
                              timeout=timeout, env=full_env)
        return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(),
                             time.monotonic() - t0)


def test_gather_script_prints_one_json_document() -> None:
    proc = subprocess.run([sys.executable, "-"], input=load_script("gather.py"),
                          capture_output=True, timeout=120, check=True)
    doc = json.loads(proc.stdout)
    assert doc["gdsfleet_gather"] == 1
    items = doc["items"]
    for key in ("os_release", "kernel_release", "nvidia_version", "nvfs_stats", "kallsyms",
                "cmdline", "mounts", "cufile_json", "gdscheck", "packages", "lsblk"):
        assert key in items, key
        assert set(items[key]) >= {"rc", "out", "err"}
    # this machine has no NVIDIA driver and no gdscheck: reported as missing, not crashing
    assert items["nvidia_version"]["rc"] is None
    assert items["kernel_release"]["out"] == os.uname().release


def test_gather_honours_cufile_env_path(tmp_path: Path) -> None:
    cfg = tmp_path / "cufile.json"
    cfg.write_text('{ // comment\n "properties": {"allow_compat_mode": false,},}\n')
    env = dict(os.environ, CUFILE_ENV_PATH_JSON=str(cfg))
    proc = subprocess.run([sys.executable, "-"], input=load_script("gather.py"),
                          capture_output=True, timeout=120, check=True, env=env)
    item = json.loads(proc.stdout)["items"]["cufile_json"]
    assert item["path"] == str(cfg)
    assert item["env_override"] is True
    assert "allow_compat_mode" in item["out"]


def test_iotest_script_skips_without_cupy_and_removes_nothing_else(tmp_path: Path) -> None:
    opts = IoTestOptions(size_bytes=10000, path=str(tmp_path), timeout_s=60)
    runner = SubprocessRunner(env={"PYTHONPATH": ""})
    res = runner.run(iotest_command(opts, str(tmp_path)), timeout=120,
                     stdin=load_script("iotest.py"))
    assert res.exit_status == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "skipped"
    assert "not importable" in doc["reason"]
    assert doc["size_bytes"] == 12288  # rounded up to 4 KiB
    assert doc["attempts"][0]["env"]["KVIKIO_COMPAT_MODE"] == "OFF"
    assert doc["file_removed"] is True
    assert list(tmp_path.iterdir()) == []


def test_iotest_script_skips_when_directory_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    opts = IoTestOptions(size_bytes=4096, path=str(missing))
    res = SubprocessRunner().run(iotest_command(opts, str(missing)), timeout=60,
                                 stdin=load_script("iotest.py"))
    doc = json.loads(res.stdout)
    assert doc["status"] == "skipped"
    assert "does not exist" in doc["reason"]


def test_verify_node_on_this_machine_reports_skip_with_reason(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    report = verify_node(runner, "local", Policy.default(),
                         IoTestOptions(size_bytes=8192, path=str(tmp_path), timeout_s=60))
    assert report.reachable is True
    assert report.compliant is False
    assert report.error is None, report.raw.get("traceback")
    assert report.route == "none"
    assert report.io_test.path_taken == "skipped"
    assert "not importable" in report.io_test.reason
    ids = {c.id: c for c in report.checks}
    assert ids["gpu.present"].status == "fail"
    assert ids["io.direct_path"].status == "fail"
    assert runner.calls[0] == "python3 -"
    assert len(runner.calls) == 2  # one gather round trip + one I/O test
    # the report survives a JSON round trip
    again = NodeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.to_dict() == report.to_dict()


@pytest.mark.parametrize("exit_status", [127, 1])
def test_verify_node_without_python_on_node(exit_status: int) -> None:
    class NoPython:
        def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
                env: dict[str, str] | None = None) -> CommandResult:
            return CommandResult(exit_status, "", "sh: python3: not found", 0.01)

    report = verify_node(NoPython(), "n1", Policy.default(), IoTestOptions())
    assert report.reachable and not report.compliant
    assert report.checks[0].id == "node.gather"
    assert report.checks[0].status == "fail"
    assert report.error
