"""Loads the captured-output fixtures under tests/fixtures/ (pyinfra style: command, output,
expected; the header comment of each file names its source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def load(kind: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((FIXTURES / kind).glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        data["text"] = "\n".join(data["output"]) + "\n"
        out.append((path.stem, data))
    return out


def header(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith(("#", "//"))]
