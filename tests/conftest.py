"""Shared pytest configuration: loads the test harness fixtures (simulated nodes, stand-in
repository, lab fleets) from tests/harness/fixtures.py, and watches test durations.

Slow tests say why (docs/testing.md, "Slow tests"): a test whose call takes more than
SLOW_SECONDS has a docstring with a line starting ``Slow:`` that says what the time buys (e.g.
``Slow: two simulated reboots and a full rollout of one node``), or is in the table of the
slowest tests in docs/testing.md, which says why. The end of the run lists the tests over the
limit without either (a warning, not a failure: timings on loaded CI machines vary).
``GDSFLEET_TEST_DURATIONS=<file>`` also appends every test phase's duration there as JSON lines
(nodeid, phase, seconds, worker), as each test finishes, whatever the xdist worker, with the
phase's CPU-seconds (``cpu``: user + sys of the worker and of the child processes it reaped in
the phase; a simulated node's own processes are podman's, not counted): on a CPU-bound run the
CPU, not the seconds, says what a test costs everyone else.
"""

from __future__ import annotations

import inspect
import json
import os
import resource
from collections.abc import Generator
from pathlib import Path

import pytest

pytest_plugins = ["tests.harness.fixtures"]

# Property tests (Hypothesis): derandomized, so CI and the fast lane run the same bounded set of
# examples every time (a failure is reproducible); GDSFLEET_FUZZ_EXAMPLES=N runs N per
# test and GDSFLEET_FUZZ_RANDOM=1 a fresh random set (docs/testing.md, "Fuzzing").
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "gdsfleet",
        derandomize=not os.environ.get("GDSFLEET_FUZZ_RANDOM"),
        max_examples=int(os.environ.get("GDSFLEET_FUZZ_EXAMPLES", "60")),
        deadline=None,  # two loaded cores: a timing check would fail by chance
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    settings.load_profile("gdsfleet")
except ImportError:  # pragma: no cover - requirements/ci.txt installs it
    pass

SLOW_SECONDS = float(os.environ.get("GDSFLEET_SLOW_SECONDS", "60"))  # env: for its own test
_UNEXPLAINED = "gdsfleet-slow-without-reason"
TESTING_DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"
_documented: set[str] | None = None


@pytest.fixture(autouse=True)
def _attest_record_off_this_machine(request: pytest.FixtureRequest,
                                    monkeypatch: pytest.MonkeyPatch,
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    """``verify`` writes the node's record for attest (issue 44); a test that verifies THIS
    machine (``--local``, loopback SSH) must not leave one in its /var/lib/gdsfleet: such tests
    (no container, fleet or molecule marker) get a temporary place through the operator's own
    knob, GDSFLEET_ATTEST_RECORD (subprocesses inherit it). Lab nodes keep the real path."""
    if any(request.node.get_closest_marker(m) for m in ("container", "fleet", "molecule")):
        return
    monkeypatch.setenv("GDSFLEET_ATTEST_RECORD",
                       str(tmp_path_factory.getbasetemp() / "attest-record" / "verified.json"))


def documented_slow_tests() -> set[str]:
    """Node ids (without parameters) in docs/testing.md's table of the slowest tests."""
    global _documented
    if _documented is None:
        try:
            text = TESTING_DOC.read_text()
        except OSError:
            text = ""
        _documented = {
            cell.strip().strip("`").split("[", 1)[0]
            for line in text.splitlines() if line.startswith("| ")
            for cell in line.split("|") if cell.strip().startswith("`tests/")}
    return _documented


def slow_reason(obj: object) -> str | None:
    """The ``Slow:`` line of a test's docstring (None without one)."""
    for line in (inspect.getdoc(obj) or "").splitlines():
        if line.strip().lower().startswith("slow:"):
            return line.strip()[5:].strip() or None
    return None


_CPU_SPENT = pytest.StashKey[float]()


def _cpu_s() -> float:
    own, reaped = (resource.getrusage(who)
                   for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _cpu_of_phase(item: pytest.Item) -> Generator[None, object, object]:
    start = _cpu_s()
    try:
        return (yield)
    finally:
        item.stash[_CPU_SPENT] = _cpu_s() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _cpu_of_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _cpu_of_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _cpu_of_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("GDSFLEET_TEST_DURATIONS") and _CPU_SPENT in item.stash:
        # the phase's CPU travels with the report to the xdist controller, which writes it
        spent: float = item.stash[_CPU_SPENT]
        report.user_properties.append(("cpu", round(spent, 2)))
    if call.when == "call" and call.duration > SLOW_SECONDS \
            and slow_reason(getattr(item, "obj", None)) is None \
            and item.nodeid.split("[", 1)[0] not in documented_slow_tests():
        # user_properties travel with the report from an xdist worker to the controller
        report.user_properties.append((_UNEXPLAINED, round(call.duration, 1)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("GDSFLEET_TEST_DURATIONS")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes (once)
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    line = {"nodeid": report.nodeid, "when": report.when, "seconds": round(report.duration, 2),
            "outcome": report.outcome, "worker": getattr(gateway, "id", None)}
    cpu = dict(report.user_properties).get("cpu")
    if cpu is not None:
        line["cpu"] = cpu
    if report.failed:  # what failed, as the run goes (the tracebacks come at the end)
        lines = [ln for ln in report.longreprtext.splitlines() if ln.startswith("E ")]
        line["error"] = (lines[0] if lines else report.longreprtext[-300:])[:300]
    with Path(path).open("a") as fh:
        fh.write(json.dumps(line) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    slow = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()):
                if key == _UNEXPLAINED:
                    slow.append((value, rep.nodeid))
    if slow:
        terminalreporter.write_sep("=", f"tests over {SLOW_SECONDS:.0f} s without a 'Slow:' "
                                        "line in their docstring (docs/testing.md)")
        for seconds, nodeid in sorted(slow, reverse=True):
            terminalreporter.write_line(f"{seconds:7.1f}s {nodeid}")
