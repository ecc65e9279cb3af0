"""bench/bench_event_ingest.py: it replays the recorded stream through the real handler and
fails loudly, with no figure, when the handler loses events (issue 14, event ingest)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_event_ingest.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_event_ingest", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_replayed_events_are_the_recorded_stream_with_fresh_ids_and_bounded_hosts() -> None:
    import json

    mod = _load()
    tpl = mod.templates()
    events = [json.loads(t) for t in mod.lines(3 * len(tpl), 16, tpl)]
    assert len(events) == 3 * len(tpl)
    assert len({e["uuid"] for e in events}) == len(events)
    assert [e["counter"] for e in events] == list(range(1, len(events) + 1))
    hosts = {e["event_data"]["host"] for e in events if "host" in e["event_data"]}
    assert hosts == {f"n{i:06d}" for i in range(16)}  # 3 cycles x 8 hosts over 16 names
    assert [e["event"] for e in events[:len(tpl)]] == [
        e["event"] for e in json.loads(mod.FIXTURE.read_text())]


def test_a_run_whose_events_file_lacks_lines_prints_no_figure(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.rollout import runner

    mod = _load()
    assert mod.main(["--events", "2000", "--hosts", "16"]) in (0, 2)
    assert "| 2,000 |" in capsys.readouterr().out
    real = runner.EventLog.__call__

    def drops(self: Any, line: Any) -> None:
        if line.get("counter") != 7:
            real(self, line)

    monkeypatch.setattr(runner.EventLog, "__call__", drops)
    assert mod.main(["--events", "2000", "--hosts", "16"]) == 1
    cap = capsys.readouterr()
    assert "FAILED: events.jsonl has 1999 lines for 2000 events" in cap.err
    assert "events/s" not in cap.out
