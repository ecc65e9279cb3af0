"""attest's per-job proof (issue 44 item 2): the nvidia-fs counters' delta from the prolog's
baseline, cuFile's per-process stats (``gds_stats``) and cuFile's log; the parsers on real
captures (tests/fixtures/attest/README.md, tests/fixtures/nvfs_stats/, tests/fixtures/h100/) and
on what Hypothesis makes up."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.commands.attest import modules
from tests.unit import attestnode as an
from tests.unit import nodefacts as nf

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CTR = modules()["attest_counters"]
MIB = 1 << 20


def test_gds_stats_real_capture() -> None:
    text = (FIX / "attest" / "gds_stats-v3_nvidia-benchmarking-guide.txt").read_text()
    got = CTR.parse_gds_stats(text)
    assert got["version"] == 3 and got["read_mib"] == 78193 and got["write_mib"] == 0
    assert got["read_errors"] == 0 and got["write_errors"] == 0
    assert [g["gpu"] for g in got["gpus"]] == ["0", "1", "2", "3", "15"]
    assert got["gpus"][2]["read"] == {"n": 78193, "posix": 0, "MiB": 78193, "err": 0}
    assert got["ops"] == 78193 and got["posix_ops"] == 0


@pytest.mark.parametrize("path", sorted((FIX / "nvfs_stats").glob("*.yml")), ids=lambda p: p.stem)
def test_nvfs_counters_agree_with_verifys_parser(path: Path) -> None:
    from provisioner.verify.parsers import nvfs_stats

    doc = yaml.safe_load(path.read_text())
    text = "\n".join(doc["output"]) + "\n"
    mine, theirs = CTR.parse_nvfs_stats(text), nvfs_stats.parse(text)
    assert mine["rw_stats"] == theirs.io_stats_enabled
    for key, (line, field) in {"read_mib": ("reads", "readMiB"),
                               "write_mib": ("writes", "writeMiB")}.items():
        want = theirs.get(line, field)
        assert mine[key] == (None if want is None else int(want)), key


def test_log_patterns_are_verifys() -> None:
    from provisioner.verify.parsers import cufile_log

    def pats(ps: tuple[object, ...]) -> list[tuple[str, int]]:
        return [(p.pattern, p.flags) for p in ps]  # type: ignore[attr-defined]

    assert pats(CTR.COMPAT_PATTERNS) == pats(cufile_log.COMPAT_PATTERNS)
    assert pats(CTR.NVFS_IO_PATTERNS) == pats(cufile_log.NVFS_IO_PATTERNS)
    assert pats(CTR.BLOCKER_PATTERNS) == pats(cufile_log.BLOCKER_PATTERNS)
    assert (CTR.P2P_RE.pattern, CTR.P2P_RE.flags) == (cufile_log._P2P_RE.pattern,
                                                       cufile_log._P2P_RE.flags)


def test_real_h100_logs_say_compat() -> None:
    for name in ("cufile_off_allowcompat_info.log", "cufile_off_nocompat_trace.log"):
        got = CTR.scan_log_text((FIX / "h100" / name).read_text(errors="replace"), None)
        assert got["nvfs"] == 0 and got["p2pdma"] == 0, name
        assert got["compat"] or got["blockers"], (name, got)
    # the lines are from 22-11-2026: a job that started later sees none of them
    got = CTR.scan_log_text((FIX / "h100" / "cufile_off_allowcompat_info.log").read_text(),
                            time.mktime((2026, 11, 23, 0, 0, 0, 0, 0, -1)))
    assert got == {"compat": 0, "nvfs": 0, "p2pdma": 0, "blockers": []}


@settings(deadline=None)
@given(text=st.text(max_size=600))
def test_parsers_take_any_text(text: str) -> None:
    CTR.parse_gds_stats(text)
    CTR.parse_nvfs_stats(text)
    CTR.scan_log_text(text, 0.0)


@settings(deadline=None)
@given(gpus=st.lists(st.tuples(*[st.integers(0, 10**9)] * 6), min_size=1, max_size=16))
def test_gds_stats_per_gpu_sums(gpus: list[tuple[int, ...]]) -> None:
    """Lines in the layout of the real capture, with made-up counts: the sums come back."""
    lines = ["cuFile STATS VERSION : 4", "GLOBAL STATS:", "Total Read Size (MiB): 7"]
    for i, (rn, rp, rm, wn, wp, wm) in enumerate(gpus):
        lines.append(f"GPU {i} Read: bw=0 util(%)=0 n={rn} posix={rp} unalign=0 r_sparse=0 "
                     f"r_inline=0 err=0 MiB={rm} Write: bw=1.5 util(%)=0 n={wn} posix={wp} "
                     f"unalign=0 err=0 MiB={wm} BufRegister: n=9 err=0 free=0 MiB=9")
    got = CTR.parse_gds_stats("\n".join(lines))
    assert got["ops"] == sum(g[0] + g[3] for g in gpus)
    assert got["posix_ops"] == sum(g[1] + g[4] for g in gpus)
    assert [g["write"]["MiB"] for g in got["gpus"]] == [g[5] for g in gpus]


# --- the job on a simulated node --------------------------------------------------------------

@pytest.fixture
def node(tmp_path: Path) -> Path:
    an.build(tmp_path)
    an.put(tmp_path, "/proc/driver/nvidia-fs/stats", nf.stats_io(write_mib=100, read_mib=50))
    an.write_record(tmp_path)
    return tmp_path


def _job(root: Path, *argv: str) -> tuple[int, dict]:
    code, out, err = an.attest(root, "--json", *argv)
    assert not err, err
    return code, json.loads(out)


def test_prolog_baseline_then_epilog_delta(node: Path) -> None:
    code, doc = _job(node, "--job", "4242", "--job-start")
    assert code == 0 and doc["status"] == "ok" and doc["job"] is None
    base = node / "run/gdsfleet/jobs/4242.json"
    assert stat.S_IMODE(base.stat().st_mode) == 0o600
    an.put(node, "/proc/driver/nvidia-fs/stats", nf.stats_io(write_mib=1124, read_mib=562))
    code, doc = _job(node, "--job", "4242", "--since", str(time.time() - 60))
    job = doc["job"]
    assert code == 0 and job["id"] == "4242" and job["scope"] == "node"
    assert job["nvfs"] == {"rw_stats": True, "read_bytes": 512 * MIB, "write_bytes": 1024 * MIB,
                           "reset": False}
    assert job["bytes"] == {"nvfs": 1536 * MIB, "p2pdma": None, "compat": None}
    assert job["verdict"] == "direct" and isinstance(job["baseline"], float)
    assert not base.exists()  # the epilog consumed it
    kept = (node / "var/lib/gdsfleet/attest-jobs.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in kept] == ["4242"]


def test_the_job_line_without_json(node: Path) -> None:
    an.attest(node, "--job", "7", "--job-start")
    an.put(node, "/proc/driver/nvidia-fs/stats", nf.stats_io(write_mib=164, read_mib=50))
    code, out, _ = an.attest(node, "--job", "7", "--since", "0")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("ok: ")
    assert lines[1] == ("job 7: direct: nvfs 64 MiB, p2pdma ?, compat ?; the I/O measured took "
                        "the direct path")


def test_counters_reset_during_the_job(node: Path) -> None:
    an.attest(node, "--job", "8", "--job-start")
    an.put(node, "/proc/driver/nvidia-fs/stats", nf.stats_io(write_mib=1, read_mib=1))
    job = _job(node, "--job", "8", "--since", "0")[1]["job"]
    assert job["nvfs"]["reset"] is True and job["bytes"]["nvfs"] is None


def test_without_rw_stats_nothing_is_measured_and_it_says_why(node: Path) -> None:
    an.put(node, "/proc/driver/nvidia-fs/stats", nf.stats(io="Disabled"))
    an.attest(node, "--job", "9", "--job-start")
    job = _job(node, "--job", "9", "--since", "0")[1]["job"]
    assert job["verdict"] == "unknown"
    assert "rw_stats_enabled=1" in job["why"] and "--pid" in job["why"]
    assert "logging.dir" in job["why"]


def test_no_baseline_is_said(node: Path) -> None:
    job = _job(node, "--job", "10", "--since", "0")[1]["job"]
    assert job["baseline"] is None and job["bytes"]["nvfs"] is None


def test_a_hostile_baseline_counts_nothing(node: Path) -> None:
    an.put(node, "/run/gdsfleet/jobs/11.json", '{"job": "11", "at": 1, "read_mib": -5}')
    assert _job(node, "--job", "11", "--since", "0")[1]["job"]["baseline"] is None
    target = node / "run/gdsfleet/jobs/12.json"
    target.symlink_to(node / "etc/cufile.json")
    assert _job(node, "--job", "12", "--since", "0")[1]["job"]["baseline"] is None


def _gds_stats(root: Path, text: str) -> None:
    tool = root / "usr/local/cuda/gds/tools/gds_stats"
    tool.parent.mkdir(parents=True, exist_ok=True)
    # TEST STAND-IN for NVIDIA's gds_stats: prints a fixed text for any -p PID
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + text + "\nEOF\n")
    tool.chmod(0o755)


def test_pid_stats_direct(node: Path) -> None:
    _gds_stats(node, (FIX / "attest" / "gds_stats-v3_nvidia-benchmarking-guide.txt").read_text())
    job = _job(node, "--job", "13", "--since", "0", "--pid", str(os.getpid()))[1]["job"]
    assert job["cufile_stats"] == {"read_bytes": 78193 * MIB, "write_bytes": 0, "ops": 78193,
                                   "posix_ops": 0, "error": None}
    assert job["verdict"] == "direct" and job["pid"] == os.getpid()


def test_pid_stats_compat(node: Path) -> None:
    """Forced compat: every cuFile I/O counted as POSIX (posix= equal to n=)."""
    _gds_stats(node, "cuFile STATS VERSION : 4\nGLOBAL STATS:\nTotal Read Size (MiB): 0\n"
                     "Total Write Size (MiB): 256\nPER_GPU STATS:\nGPU 0 Read: bw=0 util(%)=0 "
                     "n=0 posix=0 unalign=0 err=0 MiB=0 Write: bw=0 util(%)=0 n=256 posix=256 "
                     "unalign=0 err=0 MiB=256 BufRegister: n=0 err=0 free=0 MiB=0")
    job = _job(node, "--job", "14", "--since", "0", "--pid", "1")[1]["job"]
    assert job["verdict"] == "compat" and job["bytes"]["compat"] == 256 * MIB
    prom = node / "x.prom"
    an.attest(node, "--textfile", str(prom))
    assert 'gdsfleet_nvfs_bytes_total{path="compat",op="write"} 268435456' in prom.read_text()


def test_pid_stats_unavailable(node: Path) -> None:
    _gds_stats(node, "")
    job = _job(node, "--job", "15", "--since", "0", "--pid", "1")[1]["job"]
    assert "profile.cufile_stats" in job["cufile_stats"]["error"]


def test_cufile_log_since_the_job_started(node: Path) -> None:
    path = node / "etc/cufile.json"
    doc = json.loads(path.read_text().replace("// rendered by gdsfleet.gds.cufile", ""))
    doc["logging"]["dir"] = "/var/log/cufile"
    path.write_text(json.dumps(doc))
    an.write_record(node)
    stamp = time.strftime("%d-%m-%Y %H:%M:%S", time.localtime())
    an.put(node, "/var/log/cufile/cufile_4711_2026-11-29.log",
           f" {stamp}:100 [pid=4711 tid=4711] NOTICE  cufio:285 cuFileHandleRegister GDS not "
           "supported or disabled by config, using cuFile posix read/write with compat mode "
           "enabled\n")
    job = _job(node, "--job", "16", "--since", str(time.time() - 30))[1]["job"]
    assert job["cufile_log"]["files"] == 1 and job["cufile_log"]["compat"] == 1
    assert job["verdict"] == "compat"


def test_job_log_is_bounded(node: Path) -> None:
    for i in range(CTR.JOBS_LOG_MAX_LINES + 5):
        CTR.append_job(modules()["attest_state"].Node(str(node)), {"id": str(i)})
    lines = (node / "var/lib/gdsfleet/attest-jobs.jsonl").read_text().splitlines()
    assert len(lines) == CTR.JOBS_LOG_MAX_LINES and json.loads(lines[-1])["id"] == "504"
