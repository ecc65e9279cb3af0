"""Every test over SLOW_SECONDS in tests/durations.json says why it needs the time (issue 46):
a ``Slow:`` line in its docstring or a row of docs/testing.md's table of the slowest tests, the
two reasons tests/conftest.py accepts at run time. The run-time check only warns (a loaded
machine's seconds vary) and only sees the tests a run ran; this one holds the measured file to
it in the fast lane, without running a container."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.conftest import SLOW_SECONDS, documented_slow_tests, slow_reason

ROOT = Path(__file__).resolve().parents[2]


def _docstring(nodeid: str) -> str | None:
    """The docstring of the test function a node id names (parameters dropped; a class's
    method too), read from the file without importing it (most slow tests import the harness
    that starts containers). None when the file or the function is gone."""
    path, *names = nodeid.split("[", 1)[0].split("::")
    try:
        tree = ast.parse((ROOT / path).read_text())
    except (OSError, SyntaxError):
        return None
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for name in names:
        found = next((n for n in body if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name), None)
        if found is None:
            return None
        body = getattr(found, "body", [])
    assert isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    return ast.get_docstring(found) or ""


class _Doc:
    def __init__(self, doc: str) -> None:
        self.__doc__ = doc


def _slow() -> list[tuple[str, float]]:
    data = json.loads((ROOT / "tests" / "durations.json").read_text())
    return sorted(((k, float(v)) for k, v in data["tests"].items() if float(v) > SLOW_SECONDS),
                  key=lambda kv: -kv[1])


def test_the_measured_file_has_tests_over_the_limit() -> None:
    # the check below must have something to check: the slowest parts are container tests
    assert _slow(), f"no test over {SLOW_SECONDS} s in tests/durations.json"


@pytest.mark.parametrize("nodeid", [k for k, _ in _slow()],
                         ids=[k.replace("[", "(").replace("]", ")") for k, _ in _slow()])
def test_every_test_over_the_limit_says_why(nodeid: str) -> None:
    doc = _docstring(nodeid)
    assert doc is not None, f"{nodeid} is in tests/durations.json but not in its file: refresh " \
                            "the file (docs/testing.md, 'How long the suite takes')"
    in_table = nodeid.split("[", 1)[0] in documented_slow_tests()
    assert in_table or slow_reason(_Doc(doc)) is not None, (
        f"{nodeid} takes over {SLOW_SECONDS:.0f} s (tests/durations.json) and says nowhere why: "
        "add a 'Slow:' line to its docstring (what the time buys) or a row to docs/testing.md's "
        "table of the slowest tests")


class TestReader:
    def test_reads_a_method_and_tells_a_reason_from_none(self) -> None:
        """The reader of this very file.

        Slow: never (the line the reader must find)."""
        me = "tests/unit/test_slow_tests_documented.py"
        doc = _docstring(f"{me}::TestReader::test_reads_a_method_and_tells_a_reason_from_none[x]")
        assert slow_reason(_Doc(doc or "")) == "never (the line the reader must find)."
        plain = _docstring(f"{me}::test_the_measured_file_has_tests_over_the_limit")
        assert plain == "" and slow_reason(_Doc(plain)) is None
        assert _docstring(f"{me}::no_such_test") is None
        assert _docstring("tests/unit/no_such_file.py::test_x") is None
