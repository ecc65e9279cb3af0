"""The benchmarks fail loudly: a measured run that failed stops the benchmark, exit status
non-zero, and no figure is printed (issue 16: "ratio 1.099" came from two runs that both failed
at the canary). No container, no playbook: the measured commands are faked as failing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_rollout_part1_that_failed_at_the_canary_prints_no_ratio(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = _load("bench_rollout")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")

    @contextmanager
    def fleet(*_a: Any, **_k: Any) -> Iterator[Path]:
        yield inv

    ran: list[list[str]] = []
    real_run = subprocess.run

    def fake_run(cmd: Any, *a: Any, **kw: Any) -> Any:
        words = [str(c) for c in cmd]
        if any("install_collection.sh" in w for w in words):
            return subprocess.CompletedProcess(cmd, 0)
        if any("ansible-playbook" in w for w in words) or "rollout" in words:
            ran.append(words)
            out = kw.get("stdout")
            if out is not None and hasattr(out, "write"):
                out.write("fatal: [n1]: FAILED! => No package matching "
                          "'linux-headers-6.1.0-test' is available\n")
            return subprocess.CompletedProcess(cmd, 2 if "rollout" not in words else 3)
        return real_run(cmd, *a, **kw)

    monkeypatch.setattr(mod, "fresh_fleet", fleet)
    monkeypatch.setattr(mod, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["bench_rollout.py", "--only", "1"])
    rc = mod.main()
    out, err = capsys.readouterr()
    assert ran, "the measured command never ran"
    assert rc != 0
    assert "ratio" not in out and "ratio" not in err
    assert "FAILED" in err and "linux-headers" in err


def test_bench_rollout_fleets_use_their_own_distribution_archive(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each fleet brings up what its playbooks need: every node's stand-in distribution
    archive points at the benchmark's own repository server; without the archive it stops."""
    mod = _load("bench_rollout")
    from tests.harness import lab as labmod

    class FakeLab:
        downs = 0

        def __init__(self, *_a: Any, **_k: Any) -> None:
            pass

        def up(self, n: int, _profiles: Any) -> list[Any]:
            return [SimpleNamespace(name=f"node{i}") for i in range(1, n + 1)]

        def inventory(self, path: Path, *_a: Any) -> Path:
            return path

        def down(self, **_k: Any) -> None:
            FakeLab.downs += 1

    @contextmanager
    def repo() -> Iterator[str]:
        yield "http://127.0.0.1:1"

    calls: list[tuple[str, str | None]] = []
    built = [True]

    def configure(container: str, base: str | None = None) -> bool:
        calls.append((container, base))
        return built[0]

    monkeypatch.setattr(labmod, "Lab", FakeLab)
    monkeypatch.setattr(labmod, "configure_distro_archive", configure)
    monkeypatch.setattr(mod, "private_repo", repo)
    with mod.fresh_fleet(2, None):
        pass
    assert calls == [("node1", "http://127.0.0.1:1"), ("node2", "http://127.0.0.1:1")]
    built[0] = False
    with pytest.raises(mod.BenchFailed, match="distribution archive"), mod.fresh_fleet(2, None):
        pass
    assert FakeLab.downs == 2  # torn down either way


def test_bench_verify_with_nodes_not_compliant_prints_no_figure(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = _load("bench_verify")
    from tests.harness import fixtures as fixmod
    from tests.harness import lab as labmod

    class FakeLab:
        def __init__(self, *_a: Any, **_k: Any) -> None:
            pass

        def up(self, n: int) -> list[Any]:
            return [SimpleNamespace(name=f"node{i}") for i in range(1, n + 1)]

        def inventory(self, path: Path, *_a: Any) -> Path:
            return path

        def down(self, **_k: Any) -> None:
            pass

    def fake_timed(cmd: list[str]) -> tuple[float, Any]:
        if "verify" in cmd:  # the I/O test failed everywhere: verify exits 1
            out = Path(cmd[cmd.index("--json") + 1])
            out.write_text(json.dumps({"summary": {
                "total": 1, "compliant": 0, "not_compliant": 1, "unreachable": 0,
                "errors": 0}}))
            return 2.0, subprocess.CompletedProcess(cmd, 1, "", "io_test failed")
        return 1.0, subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(labmod, "Lab", FakeLab)
    monkeypatch.setattr(fixmod, "run_verify_runtime_role", lambda *_a, **_k: None)
    monkeypatch.setattr(mod, "timed", fake_timed)
    monkeypatch.setattr(mod.subprocess, "run",
                        lambda cmd, *a, **k: subprocess.CompletedProcess(cmd, 0, "", ""))
    with pytest.raises(SystemExit) as exc:
        mod.main(["--sizes", "1", "--repeat", "1", "--no-light", "--no-controller-cost"])
    assert exc.value.code not in (0, None)
    assert "FAILED" in str(exc.value.code)
    out = capsys.readouterr().out
    assert "verify(N)/verify(1)" not in out and "target:" not in out


def test_bench_overhead_prints_no_row_when_a_run_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """issue 31: a failed raw run stops bench_overhead before any table is printed."""
    mod = _load("bench_overhead")

    def failing(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> Any:
        log.write_text("PLAY RECAP\nh00000 : ok=1 changed=0 unreachable=0 failed=1\n")
        raise mod.BenchFailed(f"{log}: exit status 2")

    monkeypatch.setattr(mod, "measure", failing)
    assert mod.main(["--hosts", "3", "--forks", "2"]) == 1
    out = capsys.readouterr()
    assert "wall s" not in out.out and "BENCH FAILED" in out.err


def test_bench_overhead_recap_check_wants_every_host_ok_3(tmp_path: Path) -> None:
    """A recap that shows a host failed (or missing) is a failed run, exit status 0 or not."""
    mod = _load("bench_overhead")
    log = tmp_path / "raw.log"
    log.write_text("h00000 : ok=3 changed=0 unreachable=0 failed=0 skipped=0\n"
                   "\x1b[0;31mh00001\x1b[0m : ok=1 changed=0 unreachable=0 failed=1 skipped=0\n")
    with pytest.raises(mod.BenchFailed):
        mod.check_recap(log, ["h00000", "h00001"])
    with pytest.raises(mod.BenchFailed):
        mod.check_recap(log, ["h00000", "h00002"])
    mod.check_recap(log, ["h00000"])


def test_bench_overhead_repeat_rotates_the_rows_and_prints_medians(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeat: each round runs the rows in another order; a row's figure is its median."""
    mod = _load("bench_overhead")
    calls: list[str] = []
    walls = {"raw": iter([10.0, 30.0, 20.0]), "runner": iter([11.0, 12.0, 13.0]),
             "provisioner": iter([22.0, 21.0, 99.0])}

    def fake(name: str) -> Any:
        def run(*a: Any) -> dict[str, float]:
            calls.append(name)
            # each ansible-playbook run's main-process record (bench/callbacks/), one per wave
            with open(a[4]["GDSFLEET_BENCH_RUSAGE"], "a") as fh:
                fh.write('{"pid": 1, "user_s": 0.5, "sys_s": 0.25}\n'
                         * (3 if name == "provisioner" else 1))
            return {"wall_s": next(walls[name]), "user_s": 1.0, "sys_s": 1.0}
        return run

    for name, fn in (("raw", "run_raw"), ("runner", "run_runner"),
                     ("provisioner", "run_rollout")):
        monkeypatch.setattr(mod, fn, fake(name))
    assert mod.main(["--hosts", "3", "--forks", "2", "--repeat", "3"]) == 0
    assert calls == ["raw", "runner", "provisioner", "runner", "provisioner", "raw",
                     "provisioner", "raw", "runner"]
    out = capsys.readouterr().out
    assert "medians of 3 rounds" in out
    raw_line = next(ln for ln in out.splitlines() if ln.startswith("raw "))
    prov_line = next(ln for ln in out.splitlines() if ln.startswith("provisioner "))
    assert raw_line.split()[1] == "20.00" and prov_line.split()[1] == "22.00"
    assert prov_line.split()[5] == "1.100"  # 22 / 20: medians, not means (99 is an outlier)
    # and each round's ratio to its own raw run: 22/10, 21/30, 99/20
    assert "wall x raw of the same round: [2.2, 0.7, 4.95] (median 2.200)" in out


def test_bench_overhead_rounds_split_over_calls_merge_into_the_same_series(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--turn K --json per call, then --merge: the same rotation and the same medians as one
    --repeat 3 (a GPU machine's call is limited to 10 minutes; one 2,000-host round takes 7)."""
    mod = _load("bench_overhead")

    def install() -> list[str]:
        calls: list[str] = []
        walls = {"raw": iter([10.0, 30.0, 20.0]), "runner": iter([11.0, 12.0, 13.0]),
                 "provisioner": iter([22.0, 21.0, 99.0])}

        def fake(name: str) -> Any:
            def run(*a: Any) -> dict[str, float]:
                calls.append(name)
                with open(a[4]["GDSFLEET_BENCH_RUSAGE"], "a") as fh:
                    fh.write('{"pid": 1, "user_s": 0.5, "sys_s": 0.25}\n'
                             * (3 if name == "provisioner" else 1))
                return {"wall_s": next(walls[name]), "user_s": 1.0, "sys_s": 1.0}
            return run

        for name, fn in (("raw", "run_raw"), ("runner", "run_runner"),
                         ("provisioner", "run_rollout")):
            monkeypatch.setattr(mod, fn, fake(name))
        return calls

    calls = install()
    assert mod.main(["--hosts", "3", "--forks", "2", "--repeat", "3"]) == 0
    whole = capsys.readouterr().out
    split = install()
    files = []
    for turn in range(3):
        files.append(str(tmp_path / f"r{turn}.json"))
        assert mod.main(["--hosts", "3", "--forks", "2", "--turn", str(turn),
                         "--json", files[-1]]) == 0
    capsys.readouterr()
    assert split == calls  # the same order of the rows, round by round
    assert mod.main(["--merge", *files]) == 0
    merged = capsys.readouterr().out
    assert "medians of 3 rounds" in merged
    assert merged == whole


def test_bench_overhead_fails_a_row_without_its_main_process_records(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The main-process CPU column needs each ansible-playbook run's record (a wave's run that
    never reached its stats wrote none): a row short of them prints no figure."""
    mod = _load("bench_overhead")

    def run(*a: Any) -> dict[str, float]:
        with open(a[4]["GDSFLEET_BENCH_RUSAGE"], "a") as fh:
            fh.write('{"pid": 1, "user_s": 0.5, "sys_s": 0.25}\n')  # one record, 3 runs
        return {"wall_s": 1.0, "user_s": 1.0, "sys_s": 1.0}

    for fn in ("run_raw", "run_runner", "run_rollout"):
        monkeypatch.setattr(mod, fn, run)
    assert mod.main(["--hosts", "3", "--forks", "2"]) == 1
    out = capsys.readouterr()
    assert "wall s" not in out.out
    assert "1 main-process CPU records, expected 3" in out.err


def test_bench_overhead_splits_each_rows_wall_time_inside_and_outside_its_plays(
        tmp_path: Path) -> None:
    """Each run's record gives its first play and its stats: inside the plays is the sum of
    the runs' play-to-stats spans, outside the rest (to the first play, between the runs,
    after the last); a record without these times is a failed run, not a figure."""
    mod = _load("bench_overhead")
    path = tmp_path / "rusage.jsonl"
    recs = [{"pid": 1, "user_s": 1.0, "sys_s": 0.5, "plays": [102.0], "stats_at": 104.0},
            {"pid": 2, "user_s": 2.0, "sys_s": 0.5, "plays": [104.5, 105.0], "stats_at": 110.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in reversed(recs)))
    out = mod.main_cpu(path, 2, began=100.0, wall=10.75)
    assert out["main_user_s"] == 3.0 and out["main_sys_s"] == 1.0
    assert out["timeline"] == {"runs": 2, "in_plays_s": 7.5, "to_first_play_s": 2.0,
                               "between_s": 0.5, "after_last_s": 0.75}
    path.write_text(json.dumps({"pid": 1, "user_s": 1.0, "sys_s": 0.5}) + "\n")
    with pytest.raises(mod.BenchFailed, match="without its play and stats times"):
        mod.main_cpu(path, 1, began=100.0, wall=5.0)
