"""No import circles in the orchestrator or the collection's module_utils (issue 46).

A circle (``a`` imports ``b`` which imports ``a``, directly or through others) makes the import
order matter, hides the layer a module belongs to and is how "import inside the function to
dodge the circle" spreads. The walk reads the source (ast), so an import inside a function or
under ``TYPE_CHECKING`` counts too: a circle a type checker needs is still one a reader must
untangle. ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else
``pkg`` itself (its ``__init__``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTION_PREFIX = "ansible_collections.gdsfleet.gds."


def _modules(root: Path, package: str, prefix: str) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every module under ``root/package``;
    names start with ``prefix`` (how the code imports them)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        found[prefix + ".".join(parts)] = (path, is_pkg)
    return found


def _absolute(module: str | None, level: int, importer: str, is_pkg: bool) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_pkg:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def import_graph(mods: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of ``mods`` it imports anywhere in its source."""
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, mod, is_pkg)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for target in targets:
                hit = known(target)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_walk_finds_a_circle_made_on_purpose(tmp_path: Path) -> None:
    """The detector itself: a lazy import inside a function closes a circle, and a
    ``from pkg import module`` names the module, not the package."""
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from p import a\n")
    (pkg / "a.py").write_text("from p.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from p import a\n")
    graph = import_graph(_modules(tmp_path, "p", ""))
    assert graph["p.sub.b"] == {"p.c"} and graph["p.c"] == {"p.a"}
    assert circles(graph) == [["p.a", "p.c", "p.sub.b"]]
    (pkg / "c.py").write_text("")
    assert circles(import_graph(_modules(tmp_path, "p", ""))) == []


def test_no_import_circle_in_the_provisioner() -> None:
    found = circles(import_graph(_modules(REPO, "provisioner", "")))
    assert not found, (
        "import circles: " + "; ".join(" <-> ".join(c) for c in found)
        + ": move what both need to a module below them, or type against a protocol")


def test_no_import_circle_in_the_collections_module_utils() -> None:
    found = circles(import_graph(_modules(REPO / "plugins", "module_utils",
                                          COLLECTION_PREFIX + "plugins.")))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
