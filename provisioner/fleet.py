"""Run one function per node in parallel, with bounded concurrency and per-host results.

Modelled on fabric's ``GroupResult``: every node gets a :class:`HostResult` (its value or its
error); one node's failure never aborts the others. The caller decides what a failure means
(verify: exit codes; rollout: a failure budget), usually after the whole batch finished.

``on_result`` is called in the *calling* thread as each node finishes, in completion order, so
progress displays and ledger writes need no locking of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

from provisioner.errors import ProvisionerError, UsageError

N = TypeVar("N")
T = TypeVar("T")

DEFAULT_PARALLEL = 32


@dataclass(frozen=True)
class HostResult(Generic[T]):
    """What one node's call returned (``value``) or raised (``error``)."""

    name: str
    value: T | None = None
    error: BaseException | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class FleetResult(Generic[T]):
    """Per-host results, in the order the nodes were given."""

    results: tuple[HostResult[T], ...]
    cancelled: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[HostResult[T]]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, name: str) -> HostResult[T]:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def succeeded(self) -> dict[str, T | None]:
        return {r.name: r.value for r in self.results if r.ok}

    @property
    def failed(self) -> dict[str, BaseException]:
        return {r.name: r.error for r in self.results if r.error is not None}

    def raise_on_failure(self) -> None:
        """Raise :class:`FleetError` naming every failed host (after all of them ran)."""
        if self.failed:
            raise FleetError(self.failed)


class FleetError(ProvisionerError):
    """Some hosts of a parallel step failed; ``errors`` maps host name to its error."""

    def __init__(self, errors: dict[str, BaseException]) -> None:
        self.errors = errors
        lines = [f"{len(errors)} node(s) failed:"]
        lines += [f"  {name}: {err}" for name, err in sorted(errors.items())]
        super().__init__("\n".join(lines))


def run_parallel(
    nodes: Sequence[N],
    fn: Callable[[N], T],
    *,
    parallel: int = DEFAULT_PARALLEL,
    name: Callable[[N], str] | None = None,
    on_result: Callable[[HostResult[T]], None] | None = None,
    stop: threading.Event | None = None,
) -> FleetResult[T]:
    """Call ``fn(node)`` for every node, at most ``parallel`` at a time.

    Exceptions raised by ``fn`` (``Exception`` subclasses) become that host's error. When
    ``stop`` is set, nodes not started yet are not started (listed in ``cancelled``); running
    ones finish. KeyboardInterrupt cancels the nodes not started and re-raises once the running
    ones returned.
    """
    if parallel < 1:
        raise UsageError(f"--parallel must be at least 1 (got {parallel})")
    key = name or (lambda n: str(getattr(n, "name", n)))
    names = [key(n) for n in nodes]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise UsageError(f"duplicate node names: {', '.join(dupes)}")
    results: dict[str, HostResult[T]] = {}
    cancelled: list[str] = []
    if not nodes:
        return FleetResult(())

    def call(node: N, host: str) -> HostResult[T]:
        if stop is not None and stop.is_set():
            raise _NotStarted(host)
        t0 = time.monotonic()
        try:
            return HostResult(host, fn(node), None, time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - one host's error must not stop the others
            return HostResult(host, None, exc, time.monotonic() - t0)

    workers = min(parallel, len(nodes))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet")
    pending: dict[Future[HostResult[T]], str] = {}
    try:
        for node, host in zip(nodes, names, strict=True):
            pending[pool.submit(call, node, host)] = host
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                host = pending.pop(fut)
                if fut.cancelled():
                    cancelled.append(host)
                    continue
                try:
                    res = fut.result()
                except _NotStarted:
                    cancelled.append(host)
                    continue
                results[host] = res
                if on_result is not None:
                    on_result(res)
    except BaseException:
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    ordered = tuple(results[h] for h in names if h in results)
    return FleetResult(ordered, tuple(h for h in names if h in set(cancelled)))


class _NotStarted(Exception):
    pass


__all__ = ["DEFAULT_PARALLEL", "FleetError", "FleetResult", "HostResult", "run_parallel"]
