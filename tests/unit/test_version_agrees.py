"""``provisioner --version``, the wheel's version and the collection's (galaxy.yml) are one
version: the provisioner said 0.1.0 while the collection was 0.2.0 (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from provisioner import __version__
from provisioner.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_provisioner_wheel_and_collection_share_one_version(
        capsys: pytest.CaptureFixture[str]) -> None:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    wheel = re.search(r'(?m)^version = "([^"]+)"$',
                      (REPO / "pyproject.toml").read_text()).group(1)  # type: ignore[union-attr]
    assert __version__ == wheel == galaxy
    with pytest.raises(SystemExit):
        main(["--version"])
    assert re.fullmatch(rf"provisioner {re.escape(galaxy)}\n", capsys.readouterr().out)
