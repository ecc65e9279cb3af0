"""provisioner.fleet.run_parallel: what ``verify`` (and the rollout) rely on for N nodes."""

from __future__ import annotations

import threading
import time

import pytest

from provisioner.errors import UsageError
from provisioner.fleet import FleetError, HostResult, run_parallel


def test_bounded_concurrency_and_order() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(n: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return n * n

    res = run_parallel(list(range(20)), work, parallel=4, name=str)
    assert peak == 4
    assert [r.name for r in res] == [str(i) for i in range(20)]  # input order kept
    assert [r.value for r in res] == [i * i for i in range(20)]


def test_one_failure_never_stops_the_others() -> None:
    def work(n: int) -> int:
        if n == 3:
            raise RuntimeError("node 3 broke")
        time.sleep(0.01)
        return n

    res = run_parallel(list(range(8)), work, parallel=3, name=lambda n: f"gpu-{n}")
    assert set(res.failed) == {"gpu-3"}
    assert len(res.succeeded) == 7
    assert str(res["gpu-3"].error) == "node 3 broke"
    with pytest.raises(FleetError, match="gpu-3: node 3 broke"):
        res.raise_on_failure()


def test_on_result_runs_in_the_calling_thread() -> None:
    seen: list[tuple[str, bool]] = []
    main = threading.get_ident()

    def record(r: HostResult[int]) -> None:
        seen.append((r.name, threading.get_ident() == main))

    run_parallel(list(range(6)), lambda n: n, parallel=3, name=str, on_result=record)
    assert sorted(seen) == [(str(i), True) for i in range(6)]


def test_stop_event_skips_nodes_not_started() -> None:
    stop = threading.Event()

    def work(n: int) -> int:
        if n == 0:
            stop.set()
        time.sleep(0.05)
        return n

    res = run_parallel(list(range(10)), work, parallel=1, name=str, stop=stop)
    assert [r.name for r in res] == ["0"]
    assert res.cancelled == tuple(str(i) for i in range(1, 10))


def test_refuses_bad_input() -> None:
    with pytest.raises(UsageError):
        run_parallel([1], lambda n: n, parallel=0)
    with pytest.raises(UsageError, match="duplicate"):
        run_parallel(["a", "a"], lambda n: n, name=str)
    assert len(run_parallel([], lambda n: n)) == 0


def test_interrupt_cancels_pending_and_propagates() -> None:
    started: list[int] = []

    def work(n: int) -> int:
        started.append(n)
        time.sleep(0.05)
        return n

    def interrupt(r: HostResult[int]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_parallel(list(range(50)), work, parallel=2, name=str, on_result=interrupt)
    assert len(started) < 50
