"""Fault injection: a node's words reaching a job through ``provisioner export`` (issue 17, items
3 and 4).

The hostile node is a fake interpreter: an executable named ``python3`` first on PATH, which
``verify --local`` runs for the gather and the I/O test (the node's scripts arrive on stdin and
are never run); it answers with the documents the test gives it. Everything else is the real
code path: ``verify`` records the node in a SQLite ledger, ``export`` reads it back, and the
output is sourced by bash the way a job does (``bash -c 'set -a; . FILE'``).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.verify.model import CheckResult, IoTestResult, NodeReport
from tests.unit import nodefacts as nf

FAKE_PYTHON = """#!{python}
# STAND-IN for a node's python3 (tests/faults/test_export_hostile.py): reads the script sent
# on stdin and ignores it; prints the document the test put beside it.
import os, sys
sys.stdin.read()
name = "iotest.json" if len(sys.argv) > 2 else "gather.json"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)) as fh:
    sys.stdout.write(fh.read() + "\\n")
"""


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GDSFLEET_LEDGER", raising=False)
    monkeypatch.delenv("GDSFLEET_DEBUG_LOG", raising=False)


def fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gather: dict[str, Any],
              iotest: dict[str, Any]) -> None:
    """Put the stand-in ``python3`` first on PATH, answering ``gather`` and ``iotest``."""
    bindir = tmp_path / "node-bin"
    bindir.mkdir()
    exe = bindir / "python3"
    exe.write_text(FAKE_PYTHON.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (bindir / "gather.json").write_text(json.dumps(gather))
    (bindir / "iotest.json").write_text(json.dumps(iotest))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def verify_local(capsys: pytest.CaptureFixture[str], ledger: Path, io_path: str) -> int:
    code, _, _ = cli(capsys, "verify", "--local", "--io-path", io_path, "--ledger", str(ledger),
                     "-q")
    return code


def source(text: str, tmp_path: Path, names: list[str]) -> dict[str, str | None]:
    """What a job sees after ``set -a; . FILE``: each variable's value (None: unset)."""
    f = tmp_path / "job.env"
    f.write_text(text)
    script = "set -a; . \"$1\"; shift; for n; do if [ -n \"${!n+x}\" ]; then " \
             "printf '%s=%s\\0' \"$n\" \"${!n}\"; fi; done"
    res = subprocess.run(["bash", "-c", script, "job", str(f), *names], capture_output=True,
                         cwd=tmp_path, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    seen: dict[str, str | None] = dict.fromkeys(names)
    for item in res.stdout.split(b"\0"):
        if item:
            k, _, v = item.decode().partition("=")
            seen[k] = v
    return seen


# ------------------------------------------------------------- item 3: the node's path echo
def test_mount_echoed_by_the_node_never_runs_and_the_requested_path_is_exported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ran = tmp_path / "ran"
    doc = nf.direct_nvfs_io()
    doc["path"] = f"/mnt/gds`touch {ran}-tick`$(touch {ran}-dollar)\"'"
    fake_node(tmp_path, monkeypatch, nf.gather_doc(), doc)
    ledger = tmp_path / "ledger.sqlite"
    assert verify_local(capsys, ledger, "/mnt/gds") == Exit.OK
    node = socket.gethostname()
    for fmt in ("dotenv", "shell"):
        code, out, err = cli(capsys, "export", "env", "--node", node, "--ledger", str(ledger),
                             "--format", fmt)
        assert code == Exit.OK, err
        env = source(out, tmp_path, ["GDSFLEET_GDS_MOUNT", "KVIKIO_COMPAT_MODE"])
        assert env == {"GDSFLEET_GDS_MOUNT": "/mnt/gds", "KVIKIO_COMPAT_MODE": "OFF"}, fmt
    code, out, _ = cli(capsys, "export", "env", "--node", node, "--ledger", str(ledger),
                       "--format", "json")
    assert json.loads(out)["env"]["GDSFLEET_GDS_MOUNT"] == "/mnt/gds"
    assert not list(tmp_path.glob("ran*")), "a node's backticks or $() ran"


# ------------------------------------------------------------- item 3: every format, hostile
# Values a node or an inventory can put in the ledger, and how each format must treat them:
# printable text round-trips exactly, anything else is refused (left out, exit 1, said).
HOSTILE = {
    "backticks": "/mnt/g`touch {ran}-1`ds",
    "dollar_paren": "/mnt/$(touch {ran}-2)gds",
    "dollar_brace": "/mnt/${{HOME}}/$HOME",
    "double_quote": '/mnt/gds" ; touch {ran}-3 ; "',
    "semicolon_amp": "/mnt/gds; touch {ran}-4 & touch {ran}-5 |",
    "unicode": "/mnt/gdś/データ-ø",
    "spaces_hash": "/mnt/gds fast #not-a-comment",
    "single_quote": "/mnt/gds'; touch {ran}-6; '",
    "backslash": "/mnt/gds\\`touch {ran}-7`\\",
    "newline": "/mnt/gds\nexport INJECTED=1\ntouch {ran}-8",
    "carriage_return": "/mnt/gds\rtouch {ran}-9",
    "nul": "/mnt/gds\0touch {ran}-10",
    "escape_seq": "/mnt/gds\x1b]0;owned\x07",
    "line_separator": "/mnt/gds\u2028touch {ran}-11",
}
UNPRINTABLE = {"newline", "carriage_return", "nul", "escape_seq", "line_separator"}
# dotenv cannot carry these alike for bash, python-dotenv and systemd (docs/cli.md)
DOTENV_REFUSED = UNPRINTABLE | {"single_quote", "backslash"}


def hostile_ledger(tmp_path: Path, value: str) -> Path:
    """A ledger (real API) whose proven node carries ``value`` as its mount and cufile path."""
    path = tmp_path / "ledger.sqlite"
    report = NodeReport(
        name="gpu-01", reachable=True, compliant=True, route="nvfs",
        checks=[CheckResult("io.direct_path", "pass", "direct (proven)", "direct", "ok")],
        io_test=IoTestResult(path_taken="direct", verified=True, bytes=1 << 30, path=value,
                             evidence={"proof": "nvfs_counters"}, reason="direct path proven"),
        facts={"io_path": value, "gpu": {"driver_loaded": True, "count": 1},
               "nvfs": {"loaded": True},
               "cufile": {"present": True, "valid": True, "path": "/" + value.lstrip("/"),
                          "allow_compat_mode": False}},
    ).to_dict()
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, report)
        led.finish_run(run, "done")
    return path


@pytest.mark.parametrize("fmt", ["shell", "dotenv", "json"])
def test_every_export_format_quotes_hostile_values_for_its_consumer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    ran = tmp_path / "ran"
    names = ["GDSFLEET_GDS_MOUNT", "CUFILE_ENV_PATH_JSON", "KVIKIO_COMPAT_MODE", "INJECTED"]
    for case, template in HOSTILE.items():
        value = template.format(ran=ran)
        sub = tmp_path / case
        sub.mkdir()
        ledger = hostile_ledger(sub, value)
        code, out, err = cli(capsys, "export", "env", "--node", "gpu-01", "--ledger",
                             str(ledger), "--format", fmt)
        refused = case in (DOTENV_REFUSED if fmt == "dotenv" else UNPRINTABLE)
        if fmt == "json":
            got = json.loads(out)["env"]
            env = {n: got.get(n) for n in names}
        else:
            env = source(out, sub, names)
        assert env["KVIKIO_COMPAT_MODE"] == "OFF", case
        assert env["INJECTED"] is None, case
        if refused:
            assert code == Exit.NOT_COMPLIANT, case
            assert env["GDSFLEET_GDS_MOUNT"] is None and env["CUFILE_ENV_PATH_JSON"] is None
            assert "GDSFLEET_GDS_MOUNT not exported" in err, case
            # stderr stays one line per message, with no raw control characters
            assert not any(ord(c) < 32 and c != "\n" for c in err), case
            assert "\u2028" not in err and "\x1b" not in err, case
        else:
            assert code == Exit.OK, (case, err)
            assert env["GDSFLEET_GDS_MOUNT"] == value, case
            assert env["CUFILE_ENV_PATH_JSON"] == "/" + value.lstrip("/"), case
    assert not list(tmp_path.glob("ran*")), "a hostile value ran when the output was sourced"


def test_deepspeed_block_and_its_stderr_stay_json_and_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = hostile_ledger(tmp_path, "/mnt/gds")
    hostile = "gpu-02\x1b]0;owned\x07\nexport X=`id`"
    code, out, err = cli(capsys, "export", "deepspeed", "--ledger", str(ledger), "--node",
                         "gpu-01", "--node", hostile, "--per-node")
    assert code == Exit.OK
    doc = json.loads(out)
    assert doc["nodes"]["gpu-01"]["aio"]["use_gds"] is True
    assert doc["nodes"][hostile]["aio"]["use_gds"] is False  # round-trips, as data
    # the ledger line, then the hostile node's one line
    assert err.splitlines()[0] == f"ledger {ledger}"
    assert len(err.splitlines()) == 2 and "\x1b" not in err and "never verified" in err


# ------------------------------------------------------------- item 4: proof vs. facts
def test_counter_proof_from_a_node_without_gpu_or_nvidia_fs_is_refused_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The gather says: no GPU driver, no GPU, no nvidia-fs, no GDS stack (route none). The I/O
    document says: the direct attempt worked and the nvidia-fs counters moved by its 1 GiB."""
    gather = nf.gather_doc(driver=None, gpus=0, nvfs_loaded=False, patched_nvme=False,
                           cufile="", gdscheck_nvme=None, packages="")
    for key in ("gdscheck", "libcufile", "cufile_json", "nvfs_stats", "nvfs_version"):
        gather["items"][key] = {"rc": None, "out": "", "err": "missing"}
    io = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats(mmap=3),
                   after=nf.stats(writes=1024, reads=1024, mmap=4))
    fake_node(tmp_path, monkeypatch, gather, io)
    ledger = tmp_path / "ledger.sqlite"
    assert verify_local(capsys, ledger, "/mnt/gds") == Exit.NOT_COMPLIANT
    node = socket.gethostname()

    with Ledger.open(ledger, read_only=True) as led:
        rec = led.latest_for(node)
    assert rec is not None and rec["route"] == "none" and rec["compliant"] is False
    check = next(c for c in rec["checks"] if c["id"] == "io.direct_path")
    assert check["status"] == "fail" and "contradicts the facts" in check["message"]

    code, out, err = cli(capsys, "export", "env", "--node", node, "--ledger", str(ledger))
    env = source(out, tmp_path, ["KVIKIO_COMPAT_MODE", "CUFILE_ALLOW_COMPAT_MODE"])
    assert env["KVIKIO_COMPAT_MODE"] == "ON" and env["CUFILE_ALLOW_COMPAT_MODE"] is None
    assert "nvidia-fs not loaded" in err and "no NVIDIA GPU" in err
    code, out, err = cli(capsys, "export", "deepspeed", "--node", node, "--ledger", str(ledger))
    assert json.loads(out)["aio"]["use_gds"] is False
    assert "contradicts the facts gathered in the same verification" in err
    code, out, _ = cli(capsys, "status", "--ledger", str(ledger), "--json")
    (row,) = json.loads(out)["nodes"]
    assert row["result"] == "NOT COMPLIANT"


def test_a_ledger_record_whose_proof_its_own_facts_contradict_is_not_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record written before the rule existed (compliant, counter proof, facts saying no
    nvidia-fs and no GPU): export and status apply today's rule to it."""
    path = tmp_path / "ledger.sqlite"
    report = NodeReport(
        name="gpu-01", reachable=True, compliant=True, route="none",
        checks=[CheckResult("io.direct_path", "pass", "direct (proven)", "direct", "ok")],
        io_test=IoTestResult(path_taken="direct", verified=True, bytes=1 << 30,
                             path="/mnt/gds", evidence={"proof": "nvfs_counters"},
                             reason="direct path proven"),
        facts={"io_path": "/mnt/gds", "gpu": {"driver_loaded": False, "count": 0},
               "nvfs": {"loaded": False}},
    ).to_dict()
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, report)
        led.finish_run(run, "done")
    code, out, err = cli(capsys, "export", "env", "--node", "gpu-01", "--ledger", str(path),
                         "--format", "dotenv")
    assert source(out, tmp_path, ["KVIKIO_COMPAT_MODE"]) == {"KVIKIO_COMPAT_MODE": "ON"}
    assert "KVIKIO_COMPAT_MODE=ON" in err and "nvidia-fs not loaded" in err
    code, out, _ = cli(capsys, "status", "--ledger", str(path), "--json")
    (row,) = json.loads(out)["nodes"]
    assert row["result"] == "NOT COMPLIANT" and "io.direct_path" in row["failing"]
