"""Helpers shared by the collection's container tests (molecule scenarios, preflight refusals)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness import run as runmod

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def ansible_env(**extra: str) -> dict[str, str]:
    """Environment for ansible-playbook/molecule: the venv first, the built collection, and the
    repository's containers.conf (podman needs it on these machines)."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(ROOT / "tests" / "harness" / "containers.conf")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / ".lab" / "collections")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def installed_collection() -> Path:
    """The collection built from this checkout and installed into .lab/collections, so the
    playbooks run the roles by FQCN exactly as an operator would. Built once per test run,
    whichever xdist worker asks first (the others wait, then use it)."""

    def install() -> None:
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "install_collection.sh")],
            cwd=ROOT,
            env=ansible_env(),
            check=True,
            capture_output=True,
            timeout=300,
        )

    # scripts/test.sh installs it before pytest (and runs ansible-lint beside the tests, which
    # must not see it reinstalled under its feet): it says so with this variable
    if os.environ.get("GDSFLEET_COLLECTION_INSTALLED") != str(ROOT):
        runmod.once("installed-collection", install)
    path = ROOT / ".lab" / "collections"
    assert (path / "ansible_collections" / "gdsfleet" / "gds" / "roles" / "preflight").is_dir()
    return path


@pytest.fixture(scope="session")
def molecule_ssh_pubkey() -> str:
    """Key pair the molecule scenarios reach their nodes with (sshd on a loopback port); the
    public half goes to the node through GDSFLEET_MOLECULE_SSH_PUBKEY."""
    key = ROOT / ".lab" / "molecule" / "ssh" / "id_ed25519"
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with runmod.locked(key.parent / ".keygen.lock"):  # xdist workers and other runs
        if key.exists():
            return key.with_suffix(".pub").read_text().strip()
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gdsfleet-molecule",
             "-f", str(key)],
            check=True,
            timeout=30,
        )
    return key.with_suffix(".pub").read_text().strip()
