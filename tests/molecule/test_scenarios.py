"""Runs every molecule scenario (molecule/*/molecule.yml) end to end: converge, idempotence,
a check-mode converge that must change nothing plus the verify playbook (side_effect), and the
testinfra tests (verify). One test per scenario; the stand-in package repository is served for
the whole session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gds_collection import ROOT, VENV_BIN, ansible_env

SCENARIOS = sorted(path.parent.name for path in ROOT.glob("molecule/*/molecule.yml"))

pytestmark = pytest.mark.molecule


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(
    scenario: str,
    standin_repo: object,
    node_image: object,
    installed_collection: Path,
    molecule_ssh_pubkey: str,
) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", scenario],
        cwd=ROOT,
        env=ansible_env(GDSFLEET_MOLECULE_SSH_PUBKEY=molecule_ssh_pubkey),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test -s {scenario} failed:\n{output[-12000:]}"
