"""`verify` runs the I/O test with the interpreter that the role gdsfleet.gds.verify_runtime
recorded in its fact file, falls back to the node's python3 without one, and says clearly when
the verification runtime (kvikio + cupy) is missing and which role installs it. SYNTHETIC
documents (tests/unit/nodefacts.py shapes) and the real remote scripts run here, where neither
kvikio nor cupy is installed."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

import tests.unit.nodefacts as nf
from provisioner.remote import load_script
from provisioner.verify import CommandResult, IoTestOptions, Policy, verify_node
from provisioner.verify.facts import build_facts, verify_runtime_facts
from provisioner.verify.iotest import (
    RUNTIME_FACT_FILE,
    RUNTIME_ROLE,
    choose_interpreter,
    command,
    run_io_test,
)

FACT = {"schema": 1, "managed_by": "gdsfleet.gds.verify_runtime",
        "python": "/opt/gdsfleet/venv/bin/python", "venv": "/opt/gdsfleet/venv",
        "cuda_major": 12, "source": "index", "kvikio_package": "kvikio-cu12",
        "kvikio_version": "26.10.0", "cupy_package": "cupy-cuda12x", "cupy_version": "14.2.0"}


def fact_item(content: str | None) -> dict[str, Any]:
    if content is None:
        return {"kind": "file", "path": RUNTIME_FACT_FILE, "rc": None, "out": "",
                "err": "missing"}
    return {"kind": "file", "path": RUNTIME_FACT_FILE, "rc": 0, "out": content, "err": ""}


# ---------------------------------------------------------------------------- fact file parse
def test_fact_file_parsed() -> None:
    rt = verify_runtime_facts(fact_item(json.dumps(FACT)))
    assert rt["present"] and rt["error"] is None
    assert rt["python"] == "/opt/gdsfleet/venv/bin/python"
    assert (rt["kvikio_version"], rt["cupy_version"], rt["cuda_major"]) == ("26.10.0", "14.2.0", 12)


def test_fact_file_missing_is_not_an_error() -> None:
    rt = verify_runtime_facts(fact_item(None))
    assert rt["present"] is False and rt["python"] is None and rt["error"] is None


@pytest.mark.parametrize("content, why", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**FACT, "python": "venv/bin/python"}), "no absolute interpreter"),
    (json.dumps({**FACT, "python": "/opt/x; rm -rf /"}), "no absolute interpreter"),
])
def test_fact_file_unusable(content: str, why: str) -> None:
    rt = verify_runtime_facts(fact_item(content))
    assert rt["python"] is None
    assert why in rt["error"]


def test_gather_reads_the_fact_file_path() -> None:
    assert RUNTIME_FACT_FILE.encode() in load_script("gather.py")
    doc = nf.gather_doc(route="nvfs")
    doc["items"]["verify_runtime"] = fact_item(json.dumps(FACT))
    assert build_facts(doc)["verify_runtime"]["python"] == FACT["python"]


# ---------------------------------------------------------------------------- interpreter choice
def test_interpreter_from_the_fact_file() -> None:
    interp = choose_interpreter(verify_runtime_facts(fact_item(json.dumps(FACT))))
    assert (interp.python, interp.source) == ("/opt/gdsfleet/venv/bin/python", "fact_file")
    cmd = command(IoTestOptions(), "/mnt/gds", interp.python)
    assert shlex.split(cmd)[:2] == ["/opt/gdsfleet/venv/bin/python", "-"]


@pytest.mark.parametrize("content", [None, "{not json"])
def test_interpreter_falls_back_to_python3(content: str | None) -> None:
    interp = choose_interpreter(verify_runtime_facts(fact_item(content)))
    assert (interp.python, interp.source) == ("python3", "fallback")
    assert RUNTIME_FACT_FILE in interp.note
    assert command(IoTestOptions(), "/mnt/gds").startswith("python3 - ")


# ---------------------------------------------------------------------------- runtime missing
class LocalShell:
    """Runs the commands on this machine (no kvikio, no cupy), the node's python3 being this
    interpreter; records the commands."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, cmd: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        import subprocess

        self.calls.append(cmd)
        if cmd.startswith("python3 -"):
            cmd = shlex.quote(sys.executable) + cmd[len("python3"):]
        proc = subprocess.run(cmd, shell=True, input=stdin, capture_output=True,  # noqa: S602
                              timeout=timeout, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""})
        return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(), 0.1)


def test_no_fact_file_and_no_kvikio_says_which_role_installs_it(tmp_path: Path) -> None:
    runner = LocalShell()
    opts = IoTestOptions(size_bytes=1 << 20, path=str(tmp_path), timeout_s=60)
    result, raw = run_io_test(runner, opts, str(tmp_path), runtime=verify_runtime_facts(
        fact_item(None)))
    assert runner.calls[0].startswith("python3 - ")
    assert result.path_taken == "skipped"
    assert result.reason.startswith("verification runtime missing: cupy is not importable")
    assert RUNTIME_ROLE in result.reason and "site.yml" in result.reason
    assert f"no {RUNTIME_FACT_FILE}" in result.reason
    assert result.evidence["interpreter"]["source"] == "fallback"


def test_fact_file_interpreter_that_does_not_exist(tmp_path: Path) -> None:
    runner = LocalShell()
    gone = str(tmp_path / "venv" / "bin" / "python")
    opts = IoTestOptions(size_bytes=1 << 20, path=str(tmp_path), timeout_s=60)
    result, _ = run_io_test(runner, opts, str(tmp_path),
                            runtime=verify_runtime_facts(fact_item(json.dumps(
                                {**FACT, "python": gone}))))
    assert shlex.split(runner.calls[0])[0] == gone
    assert result.path_taken == "skipped"
    assert result.reason.startswith(f"verification runtime missing: {gone} cannot run")
    assert RUNTIME_ROLE in result.reason and RUNTIME_FACT_FILE in result.reason


def test_fact_file_interpreter_without_kvikio(tmp_path: Path) -> None:
    """A venv (this interpreter) that has neither cupy nor kvikio: the fact file's interpreter
    is used and the reason names it."""
    runner = LocalShell()
    opts = IoTestOptions(size_bytes=1 << 20, path=str(tmp_path), timeout_s=60)
    result, _ = run_io_test(runner, opts, str(tmp_path), runtime=verify_runtime_facts(
        fact_item(json.dumps({**FACT, "python": sys.executable}))))
    assert shlex.split(runner.calls[0])[0] == sys.executable
    assert "verification runtime missing: cupy is not importable with" in result.reason
    assert f"the interpreter {sys.executable} named in {RUNTIME_FACT_FILE}" in result.reason


def test_the_report_of_a_node_without_the_runtime(tmp_path: Path) -> None:
    """verify_node end to end (gather document canned, I/O test script real): the node is not
    compliant and io.direct_path carries the message."""

    class Runner(LocalShell):
        def run(self, cmd: str, *, timeout: float, stdin: bytes | None = None,
                env: dict[str, str] | None = None) -> CommandResult:
            if stdin and b"gdsfleet_gather" in stdin and cmd == "python3 -":
                self.calls.append(cmd)
                return CommandResult(0, json.dumps(nf.gather_doc(route="nvfs")) + "\n", "", 0.1)
            return super().run(cmd, timeout=timeout, stdin=stdin, env=env)

    report = verify_node(Runner(), "gpu-01", Policy.default(),
                         IoTestOptions(size_bytes=1 << 20, path=str(tmp_path), timeout_s=60))
    assert not report.compliant
    check = next(c for c in report.checks if c.id == "io.direct_path")
    assert check.status == "fail"
    assert "verification runtime missing" in check.message
    assert RUNTIME_ROLE in check.message
