"""Layering of the orchestrator (issue 16): the commands sit on top, nothing below them
reaches back up.

``provisioner/commands/`` parses arguments, loops over the fleet and prints; the use cases
(``verify/``), the rollout (``rollout/``), the report writers (``reports/``) and the ledger
(``store.py`` or a ``store`` package) never import from it, not even lazily inside a
function. The walk reads the source (ast), so an import that only runs on some path counts too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "provisioner"
FORBIDDEN = "provisioner.commands"
# the layers below the commands: packages, and top-level modules or packages by prefix
BELOW_PACKAGES = ("rollout", "verify", "reports")
BELOW_PREFIXES = ("store",)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _below_commands() -> list[Path]:
    files: list[Path] = []
    for entry in sorted(PKG.iterdir()):
        top = entry.name.removesuffix(".py")
        wanted = top in BELOW_PACKAGES or top.startswith(BELOW_PREFIXES)
        if not wanted:
            continue
        if entry.is_dir():
            files.extend(sorted(entry.rglob("*.py")))
        elif entry.suffix == ".py":
            files.append(entry)
    return files


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """``from ..x import y`` inside ``importer`` -> the absolute module name."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()  # a module's relative imports start from its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _hits(name: str) -> bool:
    return name == FORBIDDEN or name.startswith(FORBIDDEN + ".")


def forbidden_imports(source: str, importer: str, *, is_package: bool = False
                      ) -> Iterator[tuple[int, str]]:
    """(line, what) for every import of provisioner.commands in ``source``, wherever it
    stands (module level, inside a function or class, under ``if TYPE_CHECKING``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _hits(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, importer, is_package)
            if _hits(base):
                yield node.lineno, f"from {base} import ..."
            else:  # from provisioner import commands
                for alias in node.names:
                    if _hits(f"{base}.{alias.name}"):
                        yield node.lineno, f"from {base} import {alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            # importlib.import_module("provisioner.commands...") / __import__(...)
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if (fname in ("import_module", "__import__") and isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str) and _hits(arg.value)):
                yield node.lineno, f"{fname}({arg.value!r})"


def test_the_walk_sees_the_layers() -> None:
    names = {_module_name(p) for p in _below_commands()}
    # not vacuous: the modules that once imported the commands are among those walked
    assert "provisioner.rollout.adapters" in names
    assert "provisioner.verify" in names and "provisioner.reports" in names
    assert any(n == "provisioner.store" or n.startswith("provisioner.store") for n in names)
    assert not any(n.startswith(FORBIDDEN) for n in names)


@pytest.mark.parametrize(("source", "importer", "is_package"), [
    ("from provisioner.commands.verify import verify_one\n", "provisioner.rollout.x", False),
    ("def f():\n    from provisioner.commands import verify\n", "provisioner.verify.x", False),
    ("import provisioner.commands.verify as v\n", "provisioner.store", False),
    ("from provisioner import commands\n", "provisioner.reports.x", False),
    ("from ..commands import verify\n", "provisioner.rollout.adapters", False),
    ("from ...commands.verify import x\n", "provisioner.rollout.executors.ssh", False),
    ("from ..commands import verify\n", "provisioner.rollout", True),
    ("class C:\n    def m(self):\n        import provisioner.commands\n", "provisioner.store",
     False),
    ("import importlib\nimportlib.import_module('provisioner.commands.verify')\n",
     "provisioner.verify.x", False),
])
def test_the_walk_catches_every_form(source: str, importer: str, is_package: bool) -> None:
    assert list(forbidden_imports(source, importer, is_package=is_package))


@pytest.mark.parametrize(("source", "importer"), [
    ("from provisioner.commandsx import y\n", "provisioner.verify.x"),
    ("from provisioner.verify.usecase import verify_one\n", "provisioner.rollout.adapters"),
    ("from . import commands_help\n", "provisioner.rollout.adapters"),
    ("from .commands import x\n", "provisioner.rollout.adapters"),  # provisioner.rollout.commands
])
def test_the_walk_leaves_other_imports_alone(source: str, importer: str) -> None:
    assert not list(forbidden_imports(source, importer))


def test_nothing_below_the_commands_imports_them() -> None:
    found = []
    for path in _below_commands():
        for line, what in forbidden_imports(path.read_text(encoding="utf-8"),
                                            _module_name(path),
                                            is_package=path.name == "__init__.py"):
            found.append(f"{path.relative_to(PKG.parent)}:{line}: {what}")
    assert found == [], "move what these need out of provisioner/commands/:\n" + "\n".join(found)


def test_the_old_report_module_is_folded_into_reports() -> None:
    assert not (PKG / "report.py").exists(), (
        "provisioner/report.py folds into provisioner/reports/ (issue 16)")
    assert (PKG / "reports" / "__init__.py").is_file()
