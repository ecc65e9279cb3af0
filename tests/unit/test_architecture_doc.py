"""docs/architecture.md draws what calls what, and it matches the code (issue 16, "Also").

The section "What calls what" holds one table row per part of ``provisioner/`` (a top-level
module or package) with the parts it imports, lazily inside functions too. This test walks the
source with ``ast`` and compares both ways: a new import between parts, a part that stops
importing another, or a new part, fails here until the page says so.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "provisioner"
DOC = ROOT / "docs" / "architecture.md"


def parts() -> set[str]:
    names = {p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return names | {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}


def _target(mod: str, known: set[str]) -> str | None:
    bits = mod.split(".")
    if bits[0] != "provisioner" or len(bits) < 2:
        return None
    return bits[1] if bits[1] in known else None


def code_graph() -> dict[str, set[str]]:
    known = parts()
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("").parts  # ("provisioner", part, ...)
        if len(rel) < 2 or rel[1] not in known:
            continue
        here = rel[1]
        package = list(rel[:-1])  # the package a relative import starts from
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods: list[str] = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, node.module] if node.module else base)
                mods = [mod]
                if mod == "provisioner":  # from provisioner import x
                    mods += [f"provisioner.{a.name}" for a in node.names]
            for mod in mods:
                other = _target(mod, known)
                if other and other != here:
                    edges[here].add(other)
    return {p: edges.get(p, set()) for p in known}


def doc_graph() -> dict[str, set[str]]:
    text = DOC.read_text()
    section = text.split("## What calls what", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z_]+)` \| (.*?) \|", line)
        if m:
            out[m.group(1)] = set(re.findall(r"`([a-z_]+)`", m.group(2)))
    return out


def test_the_page_names_every_part_and_only_real_ones() -> None:
    assert set(doc_graph()) == parts()


def test_every_import_between_parts_is_drawn_and_every_drawn_one_is_real() -> None:
    code, doc = code_graph(), doc_graph()
    missing = {p: sorted(code[p] - doc.get(p, set())) for p in code if code[p] - doc.get(p, set())}
    extra = {p: sorted(doc[p] - code.get(p, set())) for p in doc if doc[p] - code.get(p, set())}
    assert not missing, f"imports the page does not draw: {missing}"
    assert not extra, f"drawn on the page but not in the code: {extra}"


def test_the_walk_sees_lazy_and_relative_imports() -> None:
    """Guards the walk itself: known edges that are lazy (inside a function) or relative."""
    code = code_graph()
    assert "verify" in code["rollout"]  # rollout/adapters.py imports verify inside functions
    assert "store" in code["commands"]
    assert "commands" not in code["rollout"] | code["verify"] | code["reports"] | code["store"]
