"""attest back into the ledger (issue 44 item 6): ``status --attest`` records what each node's
attest said and the job proofs it kept; plain ``status`` shows a regression since the latest
verification as drift, offline; ``history`` lists the job proofs; the rollout's plan provisions a
regressed node instead of skipping it as already compliant."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.rollout.planner import Action, node_action, plan_waves
from provisioner.rollout.state import latest_states
from provisioner.store import Ledger
from provisioner.store.queries import attest_drift
from tests.unit.test_store import ledger, pg_url, report  # noqa: F401 - the fixtures

REGRESSED = {"schema": "gdsfleet.attest/1", "node": "a", "status": "regressed",
             "verified_at": 1.0, "checked_at": time.time(), "simulated": False,
             "regressions": [{"id": "attest.nvfs.loaded", "expected": "loaded",
                              "observed": "not loaded", "fix": "modprobe"}], "job": None}
JOB = {"id": "77", "since": 1.0, "until": time.time(), "pid": None, "scope": "node",
       "baseline": 1.0, "nvfs": {"rw_stats": True, "read_bytes": 0, "write_bytes": 1 << 30,
                                 "reset": False},
       "cufile_stats": None, "cufile_log": None,
       "bytes": {"nvfs": 1 << 30, "p2pdma": None, "compat": None}, "verdict": "direct",
       "why": "the I/O measured took the direct path"}



@pytest.fixture(autouse=True)
def _real_record_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runners write into simulated node trees, never this machine: the record's real
    path (tests/conftest.py moves it for tests that verify this machine)."""
    monkeypatch.delenv("GDSFLEET_ATTEST_RECORD", raising=False)

def _verified(led: Ledger, *nodes: str) -> None:
    run = led.start_run("verify", "/inv/lab")
    for n in nodes:
        led.record_verification(run, report(n))
    led.finish_run(run, "compliant")


def test_attestations_and_job_proofs_are_recorded_once(ledger: Ledger) -> None:  # noqa: F811
    _verified(ledger, "a")
    assert ledger.record_attestation("a", REGRESSED, jobs=[JOB, JOB]) == 1
    assert ledger.record_attestation("a", REGRESSED, jobs=[JOB]) == 0  # pulled again: kept once
    latest = ledger.latest_attestations()
    assert latest["a"]["status"] == "regressed"
    assert latest["a"]["detail"]["regressions"][0]["id"] == "attest.nvfs.loaded"
    (job,) = ledger.job_proofs("a")
    assert job["job"] == "77" and job["status"] == "direct"
    assert job["detail"]["bytes"]["nvfs"] == 1 << 30
    assert set(ledger.newest_job_proofs()) == {"a"}


def test_an_unanswered_node_is_an_error_not_a_verdict(ledger: Ledger) -> None:  # noqa: F811
    ledger.record_attestation("b", None, error="b: connection refused")
    row = ledger.latest_attestations()["b"]
    assert row["status"] == "error" and row["detail"]["error"] == "b: connection refused"
    assert attest_drift("2000-01-01T00:00:00.000000Z", row) is None


def test_attestations_are_append_only(tmp_path: Path) -> None:
    led = Ledger.open(tmp_path / "l.sqlite")
    led.record_attestation("a", REGRESSED)
    led.close()
    con = sqlite3.connect(tmp_path / "l.sqlite")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        con.execute("DELETE FROM attestations")
    con.close()


def test_a_ledger_from_before_gets_the_table_and_its_triggers(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    Ledger.open(path).close()
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER attestations_no_update")
    con.execute("DROP TRIGGER attestations_no_delete")
    con.execute("DROP TABLE attestations")
    con.commit()
    con.close()
    from provisioner.store import open_read_only

    with open_read_only(str(path)) as ro:  # read-only: does without it
        assert ro.latest_attestations() == {} and ro.job_proofs("a") == []
    Ledger.open(path).close()  # a writer adds it, with its triggers
    con = sqlite3.connect(path)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    assert {"attestations_no_update", "attestations_no_delete"} <= names


def test_drift_only_when_attested_after_the_verification() -> None:
    row = {"status": "regressed", "at": "2026-11-29T10:00:00.000000Z",
           "detail": {"regressions": [{"id": "attest.kernel"}]}}
    assert attest_drift("2026-11-29T09:00:00.000000Z", row) == {
        "status": "regressed", "at": row["at"], "regressions": ["attest.kernel"]}
    assert attest_drift("2026-11-29T11:00:00.000000Z", row) is None  # verified since
    assert attest_drift("2026-11-29T09:00:00.000000Z", {**row, "status": "ok"}) is None


def test_a_regressed_node_is_provisioned_not_skipped(tmp_path: Path) -> None:
    led = Ledger.open(tmp_path / "l.sqlite")
    _verified(led, "a", "b")
    led.record_attestation("a", REGRESSED)
    states = latest_states(led)
    assert states["a"]["attest"]["regressions"] == ["attest.nvfs.loaded"]
    assert "attest" not in states["b"]
    action, why = node_action("a", states)
    assert action is Action.PROVISION and why.startswith("regressed since verified "
                                                         "(attest.nvfs.loaded; attest at ")
    assert node_action("b", states)[0] is Action.VERIFY
    plan = plan_waves(["b", "a"], "1,100%", latest=states)
    assert plan.waves[0].nodes[0].name == "a"  # the canary is the node that will change
    # verified again afterwards: compliant, the old regression no longer counts
    _verified(led, "a")
    assert node_action("a", latest_states(led))[0] is Action.VERIFY
    led.close()


def _status(ledger_path: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(["status", "--ledger", str(ledger_path), *argv])
    return code, capsys.readouterr()


def test_status_shows_a_regression_as_drift_offline(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.sqlite"
    led = Ledger.open(path)
    _verified(led, "a", "b")
    led.record_attestation("a", REGRESSED)
    led.record_attestation("b", {**REGRESSED, "status": "ok", "regressions": []})
    led.close()
    code, cap = _status(path, capsys=capsys)
    line = next(ln for ln in cap.out.splitlines() if ln.startswith("!"))
    assert code == 0 and " a " in line
    assert "drift: regressed since verified: attest.nvfs.loaded (attest " in line
    assert "1 drifted" in cap.out
    assert _status(path, "--fail-on-drift", capsys=capsys)[0] == 1
    code, cap = _status(path, "--json", capsys=capsys)
    rows = {r["node"]: r for r in json.loads(cap.out)["nodes"]}
    assert rows["a"]["attest"]["status"] == "regressed"
    assert rows["a"]["attest"]["regressions"] == ["attest.nvfs.loaded"]
    assert rows["b"]["attest"]["status"] == "ok" and rows["b"]["drift"] == []


def test_status_limit_needs_attest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Ledger.open(tmp_path / "l.sqlite").close()
    code, cap = _status(tmp_path / "l.sqlite", "--limit", "a", capsys=capsys)
    assert code == 64 and "add --attest" in cap.err


def test_history_lists_the_job_proofs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.sqlite"
    led = Ledger.open(path)
    _verified(led, "a")
    led.record_attestation("a", REGRESSED, jobs=[JOB, {**JOB, "id": "78", "until": JOB["until"]
                                                        + 5, "verdict": "compat",
                                                        "bytes": {"nvfs": 0, "p2pdma": None,
                                                                  "compat": 256 << 20}}])
    led.close()
    assert main(["history", "a", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 newest job proof(s) (whole-node nvidia-fs counters: exact for exclusive jobs)" in out
    lines = out.splitlines()
    j78 = next(ln for ln in lines if ln.startswith("78 "))
    j77 = next(ln for ln in lines if ln.startswith("77 "))
    assert "compat" in j78 and "256 MiB" in j78 and "1024 MiB" in j77
    assert lines.index(j78) < lines.index(j77)  # newest first
    assert main(["history", "a", "--ledger", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [j["job"] for j in doc["jobs"]] == ["78", "77"]


def test_status_attest_asks_the_nodes_and_records_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two simulated nodes behind stand-in runners (the bundled attest runs on each tree): one
    as verified, one whose nvidia-fs went away; a third refuses the connection."""
    import provisioner.ssh
    from provisioner.errors import ConnectError
    from provisioner.verify import attest_record
    from tests.unit import attestnode as an
    from tests.unit.test_attest_verify import TreeRunner, _doc

    trees = {}
    for name in ("n1", "n2"):
        trees[name] = tmp_path / name
        m = an.build(trees[name])
        attest_record.publish(TreeRunner(trees[name]), name, _doc(m))
        an.put(trees[name], "/proc/driver/nvidia-fs/stats", "IO stats: Enabled\n")
    an.unlink_tree(trees["n2"] / "sys/module/nvidia_fs")
    an.put(trees["n1"], "/var/lib/gdsfleet/attest-jobs.jsonl", json.dumps(JOB) + "\n")

    class Runner(TreeRunner):
        def connect(self) -> None:
            if self.root.name == "n3":
                raise ConnectError("n3 (root@127.0.0.3:22): connection refused")

        def close(self) -> None:
            pass

    monkeypatch.setattr(provisioner.ssh, "runner_factory",
                        lambda settings: lambda node: Runner(tmp_path / node.name))
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nn1 ansible_host=127.0.0.1\nn2 ansible_host=127.0.0.2\n"
                   "n3 ansible_host=127.0.0.3\n")
    path = tmp_path / "l.sqlite"
    led = Ledger.open(path)
    _verified(led, "n1", "n2", "n3")
    led.close()
    code = main(["status", "-i", str(inv), "--ledger", str(path), "--attest"])
    cap = capsys.readouterr()
    assert code == 2 and "1 node(s) not asked: n3: n3 (root@127.0.0.3:22): connection refused" \
        in cap.err
    line = next(ln for ln in cap.out.splitlines() if " n2 " in ln)
    assert line.startswith("!") and "regressed since verified: attest.nvfs.loaded" in line
    assert not next(ln for ln in cap.out.splitlines() if " n1 " in ln).startswith("!")
    led = Ledger.open(path)
    got = led.latest_attestations()
    assert {n: r["status"] for n, r in got.items()} == {"n1": "ok", "n2": "regressed",
                                                         "n3": "error"}
    assert [j["job"] for j in led.job_proofs("n1")] == ["77"]
    led.close()
    # plain status afterwards: the same drift, without connecting
    monkeypatch.setattr(provisioner.ssh, "runner_factory", None)
    assert main(["status", "--ledger", str(path)]) == 0
    assert "regressed since verified: attest.nvfs.loaded" in capsys.readouterr().out
