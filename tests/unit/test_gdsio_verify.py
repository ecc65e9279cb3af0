"""verify --gdsio: the controller's judgement on real gdsio captures, the node script driving the
gdsio stand-in (with a fake simulation core, no container), the report, the policy and the CLI."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from provisioner.errors import UsageError
from provisioner.verify import GdsioOptions, IoTestOptions, NodeReport, Policy, verify_node
from provisioner.verify import gdsio as gd
from provisioner.verify.model import CommandResult, IoTestResult
from tests.unit import nodefacts as nf
from tests.unit.fixture_loader import load
from tests.unit.test_checks_report_schema import node_schema

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = dict(load("gdsio"))
GPUD_READ = CAPTURES["nvidia-forum_cuda-12.2_gpud-read"]["text"]  # 6.622534 GiB/s
CPU_READ = CAPTURES["nvidia-forum_cuda-12.2_cpuonly-read"]["text"]  # 6.478798 GiB/s
OPTS = GdsioOptions(io_type="read", size_bytes=100 << 30, io_size_bytes=1 << 20, workers=4)


def doc(gds: dict[str, Any], cpu: dict[str, Any], **extra: Any) -> dict[str, Any]:
    base = {"gdsfleet_gdsio": 1, "status": "ran", "file": "/mnt/gds/.gdsfleet-gdsio-x.bin",
            "file_removed": True,
            "runs": [dict(gds, transfer="gds", xfer_type=0), dict(cpu, transfer="cpu",
                                                                   xfer_type=1)]}
    base.update(extra)
    return base


def ok(text: str) -> dict[str, Any]:
    return {"rc": 0, "stdout": text, "stderr": "", "error": None}


def test_ratio_from_real_captures_and_the_floor() -> None:
    result, check = gd.evaluate(doc(ok(GPUD_READ), ok(CPU_READ)), OPTS, None)
    assert result is not None and check.id == "gdsio.ratio"
    assert [(r.transfer, r.xfer_type, r.throughput_gibps, r.ops) for r in result.runs] == [
        ("gds", 0, 6.622534, 102380), ("cpu", 1, 6.478798, 102400)]
    assert result.ratio == round(6.622534 / 6.478798, 3) == 1.022
    assert check.status == "pass" and "1.022" in check.observed
    assert gd.evaluate(doc(ok(GPUD_READ), ok(CPU_READ)), OPTS, 1.0)[1].status == "pass"
    result, check = gd.evaluate(doc(ok(GPUD_READ), ok(CPU_READ)), OPTS, 1.5)
    assert check.status == "fail" and "floor 1.5" in check.message
    assert result is not None and result.min_ratio == 1.5
    assert result.to_dict()["runs"][0]["duration_s"] == 15.097011


def test_a_refused_gds_run_has_no_ratio() -> None:
    refused = {"rc": 1, "stdout": "file register error: GPUDirect Storage not supported on "
               "current file filename:/mnt/gds/x\n", "stderr": "", "error": None}
    result, check = gd.evaluate(doc(refused, ok(CPU_READ)), OPTS, None)
    assert result is not None and result.ratio is None
    assert [r.transfer for r in result.runs] == ["cpu"]
    assert check.status == "warn" and "file register error" in check.message
    assert gd.evaluate(doc(refused, ok(CPU_READ)), OPTS, 1.2)[1].status == "fail"


def test_compat_note_when_the_io_test_found_no_direct_path() -> None:
    _, check = gd.evaluate(doc(ok(GPUD_READ), ok(CPU_READ)), OPTS, None,
                           io_test=IoTestResult(path_taken="compat"))
    assert "XferType: GPUD also in compat mode" in check.message


def test_skipped_when_gds_tools_are_absent() -> None:
    skipped = {"gdsfleet_gdsio": 1, "status": "skipped", "reason": "gdsio not found (...)"}
    result, check = gd.evaluate(skipped, OPTS, 1.2)
    assert result is None and check.status == "skip" and "gdsio not found" in check.message


def test_effective_size_follows_the_io_test_and_stays_whole() -> None:
    assert gd.effective(GdsioOptions(), 64 << 20).size_bytes == 64 << 20
    assert gd.effective(GdsioOptions(), 1 << 30).size_bytes == 128 << 20
    small = gd.effective(GdsioOptions(size_bytes=(1 << 20) + 4096, io_size_bytes=1 << 20), 0)
    assert (small.size_bytes, small.io_size_bytes) == (1 << 20, 1 << 20)


# --------------------------------------------------------------- node script + stand-in
FAKE_SIM = '''
import os
def gpus(): return [{"bdf": "0000:41:00.0", "uuid": "GPU-0"}]
def cufile_log_driver_open(): pass
def cufile_log_handle(route, why): pass
def direct_route(path): return (os.environ.get("FAKE_ROUTE") or None), "fake"
def cufile_settings():
    return {"allow_compat_mode": os.environ.get("FAKE_COMPAT", "1") == "1",
            "max_direct_io_size_kb": 16384}
def record_direct_io(*args): pass
'''


@pytest.fixture
def node_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """provisioner/remote/gdsio.py with gdsio = the harness's stand-in over a fake sim core."""
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "gdsfleet_sim.py").write_text(FAKE_SIM)
    wrapper = tmp_path / "gdsio"
    standin = ROOT / "tests/harness/standin_repo/payload/gdsio"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'sim'} exec {sys.executable} "
                       f"{standin} \"$@\"\n")
    wrapper.chmod(0o755)
    spec = importlib.util.spec_from_file_location("gdsio_node_script",
                                                  ROOT / "provisioner/remote/gdsio.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "FIXED", str(wrapper))
    (tmp_path / "mnt").mkdir()

    def run(opts: GdsioOptions, **env: str) -> dict[str, Any]:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        python, dash, arg = shlex.split(gd.command(opts, str(tmp_path / "mnt")))
        assert (python, dash) == ("python3", "-")
        monkeypatch.setattr(sys, "argv", ["-", arg])
        out: list[str] = []
        monkeypatch.setattr(mod, "emit", lambda d: out.append(json.dumps(d)) or 0)
        mod.main()
        return dict(json.loads(out[0]))

    run.dir = tmp_path / "mnt"  # type: ignore[attr-defined]
    return run


def test_node_script_runs_both_transfers_and_removes_the_file(node_script: Any) -> None:
    opts = GdsioOptions(io_type="write", size_bytes=8 << 20, io_size_bytes=1 << 20, workers=2)
    d = node_script(opts, FAKE_ROUTE="nvfs")
    assert d["status"] == "ran" and d["file_removed"] is True
    assert list(node_script.dir.iterdir()) == []
    assert [r["argv"][-4:] for r in d["runs"]] == [["-x", "0", "-I", "1"], ["-x", "1", "-I", "1"]]
    assert d["runs"][0]["argv"][1:11] == ["-f", d["file"], "-d", "0", "-w", "2", "-s", "8M",
                                          "-i", "1M"]
    result, check = gd.evaluate(d, opts, 1e6)
    assert result is not None and [r.transfer for r in result.runs] == ["gds", "cpu"]
    assert result.ratio is not None and check.status == "fail"
    lines = [r["stdout"] for r in d["runs"]]
    assert lines[0].startswith("IoType: WRITE XferType: GPUD Threads: 2 DataSetSize: 8192/8192"
                               "(KiB) IOSize: 1024(KiB) Throughput: ")
    assert "XferType: CPUONLY" in lines[1]


def test_node_script_read_and_refused_direct(node_script: Any) -> None:
    opts = GdsioOptions(io_type="read", size_bytes=4 << 20, io_size_bytes=1 << 20, workers=1)
    d = node_script(opts, FAKE_ROUTE="", FAKE_COMPAT="0")
    assert d["runs"][0]["rc"] == 1 and "file register error" in d["runs"][0]["stdout"]
    assert "IoType: READ XferType: CPUONLY" in d["runs"][1]["stdout"]
    assert d["file_removed"] is True


def test_node_script_refuses_what_does_not_fit(node_script: Any) -> None:
    d = node_script(GdsioOptions(size_bytes=1 << 50))
    assert d["status"] == "skipped" and "--gdsio-size" in d["reason"] and d["file"] is None


# --------------------------------------------------------------- verify_node and the report
class Runner:
    def __init__(self, gdsio_doc: dict[str, Any]) -> None:
        self.gdsio_doc = gdsio_doc
        self.commands: list[str] = []

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.commands.append(command)
        if command == "python3 -":
            return CommandResult(0, json.dumps(nf.gather_doc(route="nvfs")) + "\n", "", 0.1)
        if stdin and b"gdsfleet_gdsio" in stdin:
            return CommandResult(0, json.dumps(self.gdsio_doc) + "\n", "", 1.0)
        return CommandResult(0, json.dumps(nf.direct_nvfs_io()) + "\n", "", 1.0)


def test_verify_node_reports_gdsio_and_the_floor_decides_compliance() -> None:
    io = IoTestOptions(size_bytes=64 << 20, gdsio=GdsioOptions(io_type="read"))
    runner = Runner(doc(ok(GPUD_READ), ok(CPU_READ)))
    report = verify_node(runner, "n1", Policy(), io)
    assert report.compliant and report.check("gdsio.ratio").status == "pass"  # type: ignore[union-attr]
    assert '"size_bytes": 67108864' in runner.commands[-1]
    data = json.loads(json.dumps(report.to_dict()))
    jsonschema.validate(data, node_schema())
    assert data["gdsio"]["ratio"] == 1.022 and data["gdsio"]["io_type"] == "read"
    assert NodeReport.from_dict(data).to_dict() == data
    floored = verify_node(Runner(doc(ok(GPUD_READ), ok(CPU_READ))), "n1",
                          Policy(gdsio_min_ratio=2.0), io)
    assert not floored.compliant
    assert floored.check("gdsio.ratio").status == "fail"  # type: ignore[union-attr]
    plain = verify_node(Runner({}), "n1", Policy(), IoTestOptions())
    assert plain.gdsio is None and plain.check("gdsio.ratio") is None
    assert plain.to_dict()["gdsio"] is None


def test_policy_floor_key() -> None:
    assert Policy.from_dict({"gdsio_min_ratio": 1.2}).gdsio_min_ratio == 1.2
    assert Policy.from_dict({"gdsio_min_ratio": None}).gdsio_min_ratio is None
    with pytest.raises(UsageError, match="gdsio_min_ratio"):
        Policy.from_dict({"gdsio_min_ratio": 0})
    with pytest.raises(UsageError, match="did you mean 'gdsio_min_ratio'"):
        Policy.from_dict({"gdsio_min_ratios": 1})


def test_cli_options() -> None:
    import argparse

    from provisioner.commands import verify as cmd

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)

    def opts(*argv: str) -> Any:
        return cmd._policy_and_io(p.parse_args(["--local", *argv]))[1].gdsio

    assert opts() is None
    g = opts("--gdsio", "--gdsio-size", "32M", "--gdsio-io-size", "256K", "--gdsio-workers", "2",
             "--gdsio-io-type", "read")
    assert (g.size_bytes, g.io_size_bytes, g.workers, g.io_type) == (32 << 20, 256 << 10, 2,
                                                                     "read")
    assert opts("--gdsio").size_bytes is None
    with pytest.raises(UsageError, match="add --gdsio"):
        opts("--gdsio-size", "32M")
    with pytest.raises(UsageError, match="multiple of 4 KiB"):
        opts("--gdsio", "--gdsio-io-size", "1000")
    with pytest.raises(UsageError, match="--gdsio-workers"):
        opts("--gdsio", "--gdsio-workers", "0")
