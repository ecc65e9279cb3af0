"""Issue 16: no file of ``provisioner/`` or of the collection's ``plugins/`` over 600 lines, unless
its module docstring has a line starting with ``One piece:`` that says why it must be one piece
(``plugins/`` since issue 43: the kernel gate was 728 lines before its ELF reading moved to
kernel_elf.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 600
MARKER = "One piece:"

# Files being split on another branch, allowed over the limit until it is merged (empty now:
# every split of issue 16 is in); test_pending_splits_are_still_pending says when an entry has
# become stale.
PENDING_SPLITS: frozenset[str] = frozenset()


def one_piece_reason(source: str) -> str | None:
    """The reason a ``One piece:`` line of the module docstring gives (None: no such line, or
    one that gives no reason)."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return None
    for line in doc.splitlines():
        line = line.strip()
        if line.startswith(MARKER) and line[len(MARKER):].strip():
            return line[len(MARKER):].strip()
    return None


def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Every ``*.py`` under ``root/provisioner`` and ``root/plugins`` over ``limit`` lines without
    a ``One piece:`` reason, as its path relative to ``root`` -> its line count."""
    found: dict[str, int] = {}
    for path in sorted([*(root / "provisioner").rglob("*.py"), *(root / "plugins").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > limit and one_piece_reason(text) is None:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_provisioner_or_plugins_file_over_600_lines() -> None:
    over = {p: n for p, n in oversized(REPO).items() if p not in PENDING_SPLITS}
    assert not over, (
        f"over {MAX_LINES} lines: "
        + ", ".join(f"{p} ({n})" for p, n in sorted(over.items()))
        + f"; split it by concern, or say why it must be one piece on a line starting with "
        f"{MARKER!r} in its module docstring"
    )


def test_pending_splits_are_still_pending() -> None:
    """An entry of PENDING_SPLITS that is gone or no longer too long is stale: remove it."""
    over = oversized(REPO)
    stale = sorted(p for p in PENDING_SPLITS if p not in over)
    assert not stale, f"remove from PENDING_SPLITS (split or gone now): {', '.join(stale)}"


def _module(tmp_path: Path, name: str, lines: int, doc: str = "") -> None:
    path = tmp_path / "provisioner" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f'"""{doc}"""\n' if doc else ""
    body = "".join(f"x{i} = {i}\n" for i in range(lines - len(head.splitlines())))
    path.write_text(head + body, encoding="utf-8")


@pytest.mark.parametrize(
    ("lines", "doc", "flagged"),
    [
        (600, "", False),
        (601, "", True),
        (601, "Big.\n\nOne piece: one table the parser and its tests read together.\n", False),
        (601, "Big.\n\nOne piece:\n", True),  # the marker without a reason
        (601, "Big.\n\nThis is One piece: no, the line must start with it.\n", True),
    ],
)
def test_the_rule_itself(tmp_path: Path, lines: int, doc: str, flagged: bool) -> None:
    _module(tmp_path, "sub/mod.py", lines, doc)
    _module(tmp_path, "small.py", 10)
    assert oversized(tmp_path) == ({"provisioner/sub/mod.py": lines} if flagged else {})
