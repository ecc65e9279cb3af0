"""The compliance ledger, on SQLite (temp file) and on a real PostgreSQL.

PostgreSQL: ``GDSFLEET_TEST_PG_URL`` names a server to use; otherwise a throw-away cluster is
created with the Debian ``postgresql`` package's initdb/pg_ctl (scripts/setup.sh installs it)
on a free loopback port, as the ``postgres`` user when running as root, and removed after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from provisioner.errors import LedgerError
from provisioner.store import (
    ENV_LEDGER,
    Ledger,
    default_ledger,
    display_url,
    fleet_id,
    resolve_ledger,
)
from tests.harness import pg as pgmod


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    try:
        with pgmod.cluster() as url:
            yield url
    except pgmod.NoPostgres as exc:
        pytest.skip(str(exc))


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    if request.param == "sqlite":
        led = Ledger.open(tmp_path / "sub" / "ledger.sqlite")
    else:
        url = request.getfixturevalue("pg_url")
        led = Ledger.open(url)
        # a fresh schema per test: drop and recreate the tables
        from provisioner.store import metadata

        with led._write() as conn:
            for t in ("verifications", "check_results", "step_events"):
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}")
            metadata.drop_all(conn)
        led.close()
        led = Ledger.open(url)
    try:
        yield led
    finally:
        led.close()


def report(name: str, compliant: bool = True, route: str = "nvfs", fails: tuple[str, ...] = (),
           warns: tuple[str, ...] = (), reachable: bool = True) -> dict[str, Any]:
    checks = [{"id": "driver.open", "status": "pass", "expected": "open",
               "observed": "open", "message": ""}]
    checks += [{"id": f, "status": "fail", "expected": "x", "observed": "y",
                "message": f"{f} failed"} for f in fails]
    checks += [{"id": w, "status": "warn", "expected": "x", "observed": "y",
                "message": "warned"} for w in warns]
    return {
        "name": name, "reachable": reachable, "compliant": compliant and reachable,
        "route": route if reachable else "unknown", "error": None if reachable else "refused",
        "checks": checks if reachable else [],
        "io_test": {"path_taken": "direct" if compliant else "failed"},
        "facts": {"kernel": "6.1.0"}, "raw": {"gdscheck -p": "GDS release version: 1.14"},
    }


def test_records_parsed_and_raw_and_history(ledger: Ledger) -> None:
    run = ledger.start_run("verify", "/inv/lab", {"parallel": 8})
    vid = ledger.record_verification(run, report("gpu-01"), step="verified")
    hist = ledger.history("gpu-01")
    assert [h["id"] for h in hist] == [vid]
    h = hist[0]
    assert h["compliant"] and h["route"] == "nvfs" and h["path_taken"] == "direct"
    assert h["checks"][0]["id"] == "driver.open"
    assert "raw" not in h["report"]  # raw outputs live beside the parsed report
    assert ledger.raw_for(vid) == {"gdscheck -p": "GDS release version: 1.14"}
    assert ledger.node_steps(run)["gpu-01"]["step"] == "verified"
    ledger.finish_run(run, "compliant")
    r = ledger.get_run(run)
    assert r is not None and r["status"] == "compliant" and r["finished_at"]
    assert r["args"] == {"parallel": 8}


def test_latest_and_drift(ledger: Ledger) -> None:
    r1 = ledger.start_run("verify", "/f")
    for n in ("a", "b", "c", "d", "e"):
        ledger.record_verification(r1, report(n))
    ledger.record_verification(r1, report("never", compliant=False, fails=("nvfs.loaded",)))
    ledger.finish_run(r1, "not_compliant")
    r2 = ledger.start_run("verify", "/f")
    ledger.record_verification(r2, report("a"))  # unchanged
    ledger.record_verification(r2, report("b", compliant=False, fails=("nvfs.loaded",)))
    ledger.record_verification(r2, report("c", route="p2pdma"))
    ledger.record_verification(r2, report("d", warns=("iommu.mode",)))
    ledger.record_verification(r2, report("e", reachable=False))
    ledger.record_verification(r2, report("never", compliant=False, fails=("nvfs.loaded",)))
    latest = {x["node"]: x for x in ledger.latest()}
    assert sorted(latest) == ["a", "b", "c", "d", "e", "never"]
    assert all(x["run_id"] == r2 for x in latest.values())
    assert latest["a"]["drift"] == []
    assert latest["never"]["drift"] == []  # never compliant: not compliant, but not drift
    assert latest["b"]["drift"][0].startswith("compliance lost")
    assert "+nvfs.loaded" in latest["b"]["drift"][1]
    assert latest["c"]["drift"] == ["route changed: nvfs -> p2pdma"]
    assert latest["d"]["drift"] == ["failing/warning checks changed: +iommu.mode"]
    assert latest["e"]["drift"][0].startswith("unreachable")
    assert {d["node"] for d in ledger.drift()} == {"b", "c", "d", "e"}
    # b recovers: compliant again and like its last compliant record -> no drift
    r3 = ledger.start_run("verify", "/f")
    ledger.record_verification(r3, report("b"))
    b = ledger.latest_for("b")
    assert b is not None and b["drift"] == [] and b["baseline"]["run_id"] == r1
    assert [h["compliant"] for h in ledger.history("b", limit=10)] == [True, False, True]
    assert len(ledger.history("b", limit=2)) == 2


def test_history_is_append_only(ledger: Ledger) -> None:
    run = ledger.start_run("verify", "/f")
    ledger.record_verification(run, report("a"))
    ledger.set_step(run, "a", "compliant")
    for stmt in ("UPDATE verifications SET compliant = false", "DELETE FROM verifications",
                 "DELETE FROM check_results", "DELETE FROM step_events"):
        with pytest.raises(LedgerError, match="append-only"), ledger._write() as conn:
            conn.execute(text(stmt))
    assert len(ledger.history("a")) == 1


def test_verification_and_step_commit_together(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "/f")
    with pytest.raises(LedgerError):
        ledger.record_verification(run, report("a"), step="no-such-step")
    assert ledger.history("a") == []  # the failed step rolled the verification back
    ledger.record_verification(run, report("a"), step="compliant", wave=2, detail={"k": 1})
    assert ledger.node_steps(run) == {
        "a": {"step": "compliant", "wave": 2, "updated_at": ledger.node_steps(run)["a"][
            "updated_at"], "detail": {"k": 1}}
    }


def test_steps_upsert_and_events(ledger: Ledger) -> None:
    run = ledger.start_run("rollout", "/inv/prod", {"waves": [1, "20%"]})
    ledger.set_step(run, "gpu-01", "pending", wave=0)
    ledger.set_step(run, "gpu-01", "provisioning", wave=0)
    ledger.set_step(run, "gpu-01", "reboot_pending", detail={"reason": "nvidia-fs"})
    steps = ledger.node_steps(run)
    assert steps["gpu-01"]["step"] == "reboot_pending"
    assert steps["gpu-01"]["wave"] == 0  # wave kept when not given
    assert steps["gpu-01"]["detail"] == {"reason": "nvidia-fs"}
    assert [e["step"] for e in ledger.step_events(run, "gpu-01")] == [
        "pending", "provisioning", "reboot_pending"]
    assert ledger.last_unfinished_run("rollout", "/inv/prod") == run
    assert ledger.last_unfinished_run("rollout", "/inv/other") is None
    assert ledger.last_unfinished_run("verify", "/inv/prod") is None
    ledger.finish_run(run, "done")
    assert ledger.last_unfinished_run("rollout", "/inv/prod") is None
    with pytest.raises(LedgerError):
        ledger.finish_run("nope", "done")


def test_set_steps_writes_a_batch_in_one_transaction(ledger: Ledger) -> None:
    """A batch of hosts moving together: one upsert and one event each, new and known nodes
    alike, the wave kept where none is given; a bad step writes none of the batch."""
    run = ledger.start_run("rollout", "/inv/prod")
    ledger.set_step(run, "gpu-01", "pending", wave=1)
    ledger.set_steps(run, [("gpu-01", "provisioning", 1, {"action": "provision"}),
                           ("gpu-02", "provisioning", 1, None)])
    ledger.set_steps(run, [("gpu-01", "skipped", None, {"reason": "r1"}),
                           ("gpu-02", "failed", None, {"reason": "r2"})])
    steps = ledger.node_steps(run)
    assert {n: (s["step"], s["wave"], s["detail"]) for n, s in steps.items()} == {
        "gpu-01": ("skipped", 1, {"reason": "r1"}), "gpu-02": ("failed", 1, {"reason": "r2"})}
    assert [e["step"] for e in ledger.step_events(run, "gpu-01")] == [
        "pending", "provisioning", "skipped"]
    assert [e["step"] for e in ledger.step_events(run, "gpu-02")] == ["provisioning", "failed"]
    with pytest.raises(LedgerError, match="unknown step"):
        ledger.set_steps(run, [("gpu-01", "compliant", 2, None), ("gpu-02", "nope", 2, None)])
    assert ledger.node_steps(run)["gpu-01"]["step"] == "skipped"
    ledger.set_steps(run, [])
    # waves given and kept in one batch: each row its own
    ledger.set_steps(run, [("gpu-01", "pending", 3, None), ("gpu-02", "pending", None, None),
                           ("gpu-03", "pending", None, None)])
    assert {n: s["wave"] for n, s in ledger.node_steps(run).items()} == {
        "gpu-01": 3, "gpu-02": 1, "gpu-03": None}


def test_concurrent_writers(ledger: Ledger) -> None:
    run = ledger.start_run("verify", "/f")
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def work(i: int) -> None:
        try:
            barrier.wait()
            for j in range(5):
                ledger.record_verification(run, report(f"n{i:02d}", fails=() if j % 2 else
                                                       ("x",), compliant=bool(j % 2)),
                                           step="verifying", wave=i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(ledger.latest()) == 16
    assert len(ledger.history("n07", limit=100)) == 5
    assert len(ledger.step_events(run)) == 80


def test_sqlite_pragmas_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "/f")
        led.record_verification(run, report("a"))
        with led.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 10_000
    with Ledger.open(str(path)) as led:  # reopen: schema kept, data kept
        assert [x["node"] for x in led.latest()] == ["a"]


def test_open_errors_hide_passwords(tmp_path: Path) -> None:
    url = "postgresql+psycopg://gds:s3cret@127.0.0.1:1/ledger?connect_timeout=1"
    with pytest.raises(LedgerError) as ei:
        Ledger.open(url)
    assert "s3cret" not in str(ei.value)
    assert "***" in str(ei.value)
    assert display_url(url).startswith("postgresql+psycopg://gds:***@127.0.0.1:1/")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LedgerError, match="cannot open the ledger"):
        Ledger.open(blocker / "sub" / "ledger.sqlite")


def test_ledger_location_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "inventories" / "lab" / "group_vars").mkdir(parents=True)
    (repo / "inventories" / "prod").mkdir(parents=True)
    monkeypatch.delenv(ENV_LEDGER, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    lab = repo / "inventories" / "lab"
    assert default_ledger(lab) == str(repo / ".lab" / "ledger.sqlite")
    assert default_ledger(lab / "hosts.yml") == str(repo / ".lab" / "ledger.sqlite")
    assert default_ledger(repo / "inventories" / "prod") == str(
        tmp_path / "state" / "gdsfleet" / "ledger.sqlite")
    assert resolve_ledger(None, lab) == str(repo / ".lab" / "ledger.sqlite")
    monkeypatch.setenv(ENV_LEDGER, "/env/ledger.sqlite")
    assert resolve_ledger(None, lab) == "/env/ledger.sqlite"
    assert resolve_ledger("/cli.sqlite", lab) == "/cli.sqlite"
    monkeypatch.chdir(repo)
    assert fleet_id("inventories/lab") == str(lab)


def test_unknown_run_kind_refused(ledger: Ledger) -> None:
    with pytest.raises(LedgerError):
        ledger.start_run("deploy", "/f")


def test_pg_cluster_fixture_is_real(pg_url: str) -> None:
    """Guard: the PostgreSQL variant really talks to PostgreSQL."""
    with Ledger.open(pg_url) as led:
        assert led.engine.dialect.name == "postgresql"
        with led.engine.connect() as conn:
            assert "PostgreSQL" in str(conn.exec_driver_sql("select version()").scalar())
    time.sleep(0)
