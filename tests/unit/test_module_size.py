"""Issue 16, tightened by issue 46: no file of ``provisioner/`` or of the collection's ``plugins/``
over 600 lines. There is no escape: a ``One piece:`` note in the docstring used to excuse a file,
and a reader could not act on it; every file that carried one is split along a seam (redaction
rules vs. where they apply, ELF reading vs. the gate's policy, the I/O test's run vs. its
judgement, the SSH executor's transport vs. its fencing)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 600


def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Every ``*.py`` under ``root/provisioner`` and ``root/plugins`` over ``limit`` lines, as its
    path relative to ``root`` -> its line count."""
    found: dict[str, int] = {}
    for path in sorted([*(root / "provisioner").rglob("*.py"), *(root / "plugins").rglob("*.py")]):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_provisioner_or_plugins_file_over_600_lines() -> None:
    over = oversized(REPO)
    assert not over, (
        f"over {MAX_LINES} lines: " + ", ".join(f"{p} ({n})" for p, n in sorted(over.items()))
        + "; split it along a seam a newcomer would name (what it reads vs. what it decides)"
    )


def _module(tmp_path: Path, name: str, lines: int, doc: str = "") -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f'"""{doc}"""\n' if doc else ""
    body = "".join(f"x{i} = {i}\n" for i in range(lines - len(head.splitlines())))
    path.write_text(head + body, encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "lines", "doc", "flagged"),
    [
        ("provisioner/sub/mod.py", 600, "", False),
        ("provisioner/sub/mod.py", 601, "", True),
        ("plugins/module_utils/big.py", 601, "", True),
        # the former escape excuses nothing now
        ("provisioner/sub/mod.py", 601,
         "Big.\n\nOne piece: one table the parser and its tests read together.\n", True),
    ],
)
def test_the_rule_itself(tmp_path: Path, name: str, lines: int, doc: str, flagged: bool) -> None:
    _module(tmp_path, name, lines, doc)
    _module(tmp_path, "provisioner/small.py", 10)
    assert oversized(tmp_path) == ({name: lines} if flagged else {})
