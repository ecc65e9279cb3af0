"""verify_node end to end over a scripted runner (canned SYNTHETIC node documents), and every kind
of NodeReport validated against the JSON Schema published in docs/report-schema.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from provisioner.errors import ConnectError
from provisioner.verify import (
    CommandResult,
    IoTestOptions,
    NodeReport,
    Policy,
    unreachable_report,
    verify_node,
)
from tests.unit import nodefacts as nf

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


def node_schema() -> dict[str, Any]:
    text = DOC.read_text()
    section = text.split("## JSON Schema of the node object", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block
    schema: dict[str, Any] = json.loads(block.group(1))
    return schema


class ScriptedRunner:
    """Answers the gather command and the I/O test command with canned documents."""

    def __init__(self, gather: dict[str, Any] | None, io: dict[str, Any] | None = None,
                 *, fail_io: Exception | None = None) -> None:
        self.gather = gather
        self.io = io
        self.fail_io = fail_io
        self.calls: list[tuple[str, float, bytes | None]] = []

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.calls.append((command, timeout, stdin))
        if command == "python3 -":
            return CommandResult(0, json.dumps(self.gather) + "\n", "", 0.2)
        if self.fail_io:
            raise self.fail_io
        return CommandResult(0, "some library chatter\n" + json.dumps(self.io) + "\n", "", 1.0)


def test_verify_node_compliant_nvfs_and_schema() -> None:
    runner = ScriptedRunner(nf.gather_doc(route="nvfs"), nf.direct_nvfs_io())
    report = verify_node(runner, "gpu-01", Policy.default(), IoTestOptions())
    assert report.compliant, [c for c in report.checks if c.status == "fail"]
    assert report.route == "nvfs"
    assert report.io_test.path_taken == "direct"
    # one gather round trip, then the I/O test on the NVMe mount found in the facts
    assert [c[0].split(" ")[:2] for c in runner.calls] == [["python3", "-"], ["python3", "-"]]
    io_cmd = runner.calls[1][0]
    assert '"path": "/mnt/gds"' in io_cmd and '"size_bytes": 1073741824' in io_cmd
    assert runner.calls[0][2] and b"gdsfleet_gather" in runner.calls[0][2]
    assert runner.calls[1][2] and b"KVIKIO_COMPAT_MODE" in runner.calls[1][2]
    assert "NVMe               : nvfs, compat" in report.raw["gdscheck"]
    assert "gdsfleet_iotest" in report.raw["io_test"]
    data = json.loads(json.dumps(report.to_dict()))
    jsonschema.validate(data, node_schema())
    assert NodeReport.from_dict(data).to_dict() == data


def test_policy_size_and_explicit_path_reach_the_node() -> None:
    runner = ScriptedRunner(nf.gather_doc(route="p2pdma"), nf.direct_p2pdma_io())
    verify_node(runner, "n", Policy(io_test_size=64 << 20), IoTestOptions(path="/data/gds"))
    cmd = runner.calls[1][0]
    assert '"size_bytes": 67108864' in cmd and '"path": "/data/gds"' in cmd
    runner = ScriptedRunner(nf.gather_doc(), nf.direct_nvfs_io())
    verify_node(runner, "n", Policy(io_test_size=64 << 20), IoTestOptions(size_bytes=8 << 20))
    assert '"size_bytes": 8388608' in runner.calls[1][0]  # the caller's size wins


def test_io_disabled_makes_one_round_trip() -> None:
    runner = ScriptedRunner(nf.gather_doc())
    report = verify_node(runner, "n", Policy.default(), IoTestOptions(enabled=False))
    assert len(runner.calls) == 1
    assert report.io_test.path_taken == "skipped"
    assert not report.compliant
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), node_schema())


def test_connect_error_propagates_and_unreachable_report_validates() -> None:
    runner = ScriptedRunner(nf.gather_doc(), fail_io=ConnectError("connection reset"))
    with pytest.raises(ConnectError):
        verify_node(runner, "n", Policy.default(), IoTestOptions())
    report = unreachable_report("gpu-09", ConnectError("gpu-09: connection refused"))
    assert not report.reachable and not report.compliant
    assert report.route == "unknown"
    assert report.checks[0].id == "node.reachable"
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), node_schema())


def test_odd_gather_values_do_not_crash() -> None:
    odd = nf.gather_doc()
    odd["items"]["nvfs_module"] = {"rc": 0, "out": "[1, 2]", "err": ""}
    odd["items"]["mounts"] = {"rc": 0, "out": 12345, "err": ""}
    odd["items"]["lsblk"] = {"rc": 0, "out": "not json", "err": ""}
    report = verify_node(ScriptedRunner(odd, nf.direct_nvfs_io()), "n", Policy.default(),
                         IoTestOptions())
    assert report.error is None
    assert {c.id: c.status for c in report.checks}["fs.mount.present"] == "fail"


def test_internal_error_is_a_report_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.verify import checks

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setattr(checks, "evaluate", boom)
    report = verify_node(ScriptedRunner(nf.gather_doc(), nf.direct_nvfs_io()), "n",
                         Policy.default(), IoTestOptions())
    assert report.reachable and not report.compliant
    assert report.checks[0].id == "node.verify"
    assert report.error and "traceback" in report.raw
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), node_schema())


def test_io_script_without_json_is_a_failed_test() -> None:
    class Garbage(ScriptedRunner):
        def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
                env: dict[str, str] | None = None) -> CommandResult:
            if command == "python3 -":
                return super().run(command, timeout=timeout, stdin=stdin)
            return CommandResult(139, "", "Segmentation fault (core dumped)", 0.5)

    report = verify_node(Garbage(nf.gather_doc()), "n", Policy.default(), IoTestOptions())
    assert report.io_test.path_taken == "failed"
    assert "Segmentation fault" in report.io_test.reason
    assert {c.id: c.status for c in report.checks}["io.direct_path"] == "fail"
