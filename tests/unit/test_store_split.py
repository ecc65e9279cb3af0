"""The ledger package's rooms: the read-only queries cannot write, the read-only commands open
the query side only, and no module of the package passes 600 lines (issue 16)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import insert, text

from provisioner.errors import LedgerError
from provisioner.store import Ledger, runs
from tests.unit.test_store import ledger, pg_url  # noqa: F401 - both backends' fixtures

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "provisioner" / "store"

# What a module that only reads must never name: SQLAlchemy's DML constructs, the ledger's
# write transaction, raw SQL (which could be anything), and an explicit transaction.
_WRITE_NAMES = {"insert", "update", "delete", "_write", "_writer", "exec_driver_sql",
                "begin", "create_all", "drop_all", "migrate", "text"}


def test_queries_module_names_no_write() -> None:
    source = (STORE / "queries.py").read_text(encoding="utf-8")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names} & _WRITE_NAMES
        elif isinstance(node, ast.Name) and node.id in _WRITE_NAMES:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in _WRITE_NAMES:
            found.add(node.attr)
    assert not found, f"provisioner/store/queries.py names {sorted(found)}"


def test_read_transaction_refuses_writes_and_writer_still_writes(ledger: Ledger) -> None:  # noqa: F811
    run = ledger.start_run("verify", "/f")
    row = {"id": "x-1", "kind": "verify", "fleet": "/f", "started_at": "t", "status": "running",
           "args_json": "{}"}
    with pytest.raises(LedgerError, match="read failed"), ledger._read() as conn:
        conn.execute(insert(runs).values(**row))
    with pytest.raises(LedgerError, match="read failed"), ledger._read() as conn:
        conn.execute(text("DELETE FROM node_steps"))
    assert ledger.get_run("x-1") is None
    # the pooled connection a reader had is a writer again in the next write transaction
    for _ in range(3):
        ledger.finish_run(run, "ok")
        assert [r["status"] for r in ledger.runs()] == ["ok"]


def test_read_only_commands_open_the_query_side_only() -> None:
    from provisioner.commands import export, history, plan, report, status
    from provisioner.reports import cli as reports_cli
    from provisioner.store.queries import LedgerQueries

    for write in ("start_run", "finish_run", "record_verification", "set_step",
                  "record_dispatch", "update_dispatch"):
        assert not hasattr(LedgerQueries, write)
        assert hasattr(Ledger, write)
    for mod in (export, history, plan, report, status, reports_cli):
        tree = ast.parse(Path(str(mod.__file__)).read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and (n.module or "").startswith("provisioner.store") for a in n.names}
        assert "Ledger" not in names, mod.__name__
        assert names & {"LedgerQueries", "open_read_only"}, mod.__name__


def test_open_read_only_is_the_query_side(tmp_path: Path) -> None:
    from provisioner.store import open_read_only
    from provisioner.store.queries import LedgerQueries

    path = tmp_path / "l.sqlite"
    with Ledger.open(str(path)) as led:
        led.start_run("verify", "/f")
    with open_read_only(str(path)) as ro:
        assert type(ro) is LedgerQueries and not hasattr(ro, "set_step")
        assert len(ro.runs(kind="verify", limit=5)) == 1


def test_store_modules_stay_under_600_lines() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in STORE.glob("*.py")}
    assert {"schema.py", "engine.py", "writes.py", "queries.py"} <= set(sizes)
    assert max(sizes.values()) <= 600, sizes
