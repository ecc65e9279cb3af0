"""How the test run spreads tests over pytest-xdist workers (``--dist loadfile
--gdsfleet-schedule``, as scripts/test.sh runs it).

TEST HARNESS ONLY. Like ``--dist loadfile`` (a file's tests run on one worker, in order, so its
module-scoped fleet or node is made once), with two differences:

* A file whose tests use different costly module-scoped fixtures of their own (a fixture of the
  test module whose closure brings up containers: ``lab_fleet``, ``module_sim_node``, or a
  ``sim_node``) is cut where the tests share none: tests/fleet/test_rollout.py's 5-node fleet
  and its smaller fleets run on two workers. Tests that share such a fixture, directly or
  through another one, stay together. Tests with another module- or class-scoped fixture of
  their file (or ``lab_fleet``/``module_sim_node`` used directly, or in a class) stay with the
  rest of their file. A test with only function- and session-scoped fixtures is a unit of its
  own (tests/molecule/test_scenarios.py's three scenarios run side by side). Each part keeps
  the file's order. A test must not depend on another test having run (it never could: pytest
  -k or a failure earlier in the file runs it alone).
* Parts start longest first (by tests/durations.json, the per-test seconds of a measured run;
  a test missing there counts 600 s when it uses containers, so that an unmeasured one starts
  early, else 0.5 s), so the long ones do not start last.

Workers compute the parts while collecting (they have the fixtures) and write them into the run
folder; the controller's scheduler reads them. Nothing here changes what a test does, only
where and when it runs. New test files need nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.harness import run as runmod

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
CONTAINER_FACTORIES = {"lab_fleet", "module_sim_node", "sim_node", "node_image"}
GROUPS_FILE = "xdist-groups.json"
DEFAULT_CONTAINER_SECONDS = 600.0  # unknown container tests start early: they may be long
DEFAULT_SECONDS = 0.5


def _scope_name(fixturedef: Any) -> str:
    scope = getattr(fixturedef, "scope", "function")
    return str(getattr(scope, "value", scope))


def parts(items: list[pytest.Item]) -> dict[str, dict[str, Any]]:
    """{nodeid: {"group": ..., "container": bool}} for the collected items."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    costly_of: dict[str, list[str]] = {}
    shares: dict[str, bool] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        info = getattr(item, "_fixtureinfo", None)
        costly: list[str] = []
        shared = info is None or getattr(item, "cls", None) is not None
        if info is not None:
            closure = set(info.names_closure)
            for name in sorted(closure):
                defs = info.name2fixturedefs.get(name) or ()
                if not defs:
                    continue
                fd = defs[-1]
                wide = _scope_name(fd) in ("module", "class", "package")
                own = str(getattr(fd, "baseid", "")).split("::", 1)[0] == path
                if wide and (own or name in CONTAINER_FACTORIES):
                    shared = True  # shares state with the file's other tests
                if not own or not wide:
                    continue
                # what this fixture needs, transitively (its argnames' closures)
                needs, todo = set(), list(getattr(fd, "argnames", ()))
                while todo:
                    n = todo.pop()
                    if n in needs:
                        continue
                    needs.add(n)
                    for d in info.name2fixturedefs.get(n) or ():
                        todo.extend(getattr(d, "argnames", ()))
                if needs & CONTAINER_FACTORIES:
                    costly.append(f"{path}::{name}")
        costly_of[item.nodeid] = costly
        shares[item.nodeid] = shared
        for a, b in zip(costly, costly[1:], strict=False):
            parent[find(a)] = find(b)
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        costly = costly_of[item.nodeid]
        if costly:
            group = find(costly[0])
        elif shares[item.nodeid]:
            group = path
        else:  # only function- and session-scoped fixtures: a unit of its own
            group = item.nodeid
        container = item.get_closest_marker("container") is not None
        out[item.nodeid] = {"group": group, "container": container}
    return out


def write_parts(items: list[pytest.Item]) -> None:
    """On an xdist worker: record the parts for the controller (each worker writes the same)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get(runmod.RUN_DIR_ENV):
        return
    target = runmod.run_dir() / GROUPS_FILE
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(parts(items)))
    tmp.replace(target)


def _durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    tests = data.get("tests", {}) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in tests.items() if isinstance(v, int | float)}


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class FleetScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """loadfile, cut at costly module fixtures, longest parts first (module docstring)."""

        _groups: dict[str, dict[str, Any]] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                try:
                    self._groups = json.loads((runmod.run_dir() / GROUPS_FILE).read_text())
                except (OSError, ValueError, runmod.RunError):
                    self._groups = {}
            entry = (self._groups or {}).get(nodeid)
            return str(entry["group"]) if entry else nodeid.split("::", 1)[0]

        def schedule(self) -> None:
            """LoadScopeScheduling.schedule with the work units ordered longest first
            (pytest-xdist 3.8.0's own logic otherwise; the order within a unit is the file's).
            """
            assert self.collection_is_completed
            if self.collection is not None:  # initial distribution done: new nodes only
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            units: dict[str, dict[str, bool]] = {}
            seconds = _durations()
            weight: dict[str, float] = {}
            for nodeid in self.collection:
                scope = self._split_scope(nodeid)
                units.setdefault(scope, {})[nodeid] = False
                entry = (self._groups or {}).get(nodeid) or {}
                default = DEFAULT_CONTAINER_SECONDS if entry.get("container") else DEFAULT_SECONDS
                weight[scope] = weight.get(scope, 0.0) + seconds.get(nodeid, default)
            order = list(units)
            for scope in sorted(order, key=lambda sc: (-weight[sc], order.index(sc))):
                self.workqueue[scope] = units[scope]
            extra_nodes = len(self.nodes) - len(self.workqueue)
            for _ in range(max(0, extra_nodes)):
                unused_node, _assigned = self.assigned_work.popitem()
                unused_node.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

    return FleetScheduling(config, log)


def main(argv: list[str] | None = None) -> int:
    """python -m tests.harness.schedule DURATIONS.jsonl > tests/durations.json: the per-test
    seconds (setup + call + teardown) of a run made with GDSFLEET_TEST_DURATIONS=DURATIONS.jsonl,
    the slowest first."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.harness.schedule DURATIONS.jsonl > tests/durations.json",
              file=sys.stderr)
        return 64
    seconds: dict[str, float] = {}
    with open(args[0]) as fh:
        for line in fh:
            row = json.loads(line)
            seconds[row["nodeid"]] = seconds.get(row["nodeid"], 0.0) + float(row["seconds"])
    tests = dict(sorted(((k, round(v, 1)) for k, v in seconds.items()), key=lambda kv: -kv[1]))
    json.dump({"about": "per-test seconds (setup+call+teardown) of a measured run; "
                        "tests/harness/schedule.py starts the longest parts first; "
                        "docs/testing.md says how to refresh it",
               "tests": tests}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
