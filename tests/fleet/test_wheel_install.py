"""``pip install`` of the provisioner (a wheel, not editable) rolls out a SIMULATED lab fleet.

What a new operator does on a controller, outside any checkout:

1. build the wheel from this checkout with pinned dependencies (``pip wheel -c
   requirements/ci.txt``: PyPI, or pip's cache) into a wheelhouse;
2. create a fresh virtual environment in a temporary folder (no ``--system-site-packages``:
   it must not see this checkout's editable install) and ``pip install --no-index
   --find-links <wheelhouse> gdsfleet``;
3. build and install the collection with that environment's ``ansible-galaxy`` into a
   collections folder named by ``ANSIBLE_COLLECTIONS_PATH`` (its dependencies ansible.posix and
   community.general, which an operator gets from Galaxy, are linked from the ``ansible``
   package of this checkout's .venv: Galaxy is not reachable here);
4. ``provisioner rollout`` from a working directory outside the checkout, with nothing of the
   checkout on PATH: the node must end compliant in the ledger. One node: what this test
   proves is the installed package and collection; waves, gates and more nodes are
   tests/fleet/test_rollout.py's (a second node here added a site.yml host-play, a reboot and
   a verification to a CPU-bound CI run, and no assertion).

A second test shows the refusal when the collection is not installed: exit 64 before anything
runs, and the message says how to install it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.exitcodes import Exit
from provisioner.store import Ledger

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_VENV = ROOT / ".venv"

pytestmark = pytest.mark.fleet


def _run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)
    return proc


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (f"{' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-6000:]}")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("outside-checkout")
    assert ROOT not in d.resolve().parents
    return d


@pytest.fixture(scope="module")
def wheel_venv(outside: Path) -> Path:
    """A fresh venv outside the checkout with the provisioner installed from its wheel."""
    wheelhouse = outside / "wheelhouse"
    proc = _run([str(CHECKOUT_VENV / "bin" / "pip"), "wheel", "-q", "-w", str(wheelhouse),
                 "-c", str(ROOT / "requirements" / "ci.txt"), str(ROOT)], timeout=600)
    assert proc.returncode == 0, _explain(proc)
    assert list(wheelhouse.glob("gdsfleet-*.whl")), sorted(os.listdir(wheelhouse))
    venv = outside / "venv"
    proc = _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    assert proc.returncode == 0, _explain(proc)
    # --no-compile: pip would byte-compile every file of ansible-core and the rest up front
    # (tens of CPU seconds on 2 cores); Python compiles what the rollout imports as it goes,
    # so what is installed and run is the same
    proc = _run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "--no-index",
                 "--find-links", str(wheelhouse), "gdsfleet"], timeout=600)
    assert proc.returncode == 0, _explain(proc)
    # the package the venv imports is the wheel's copy, not this checkout
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import provisioner, sys; print(provisioner.__file__); print(sys.prefix)"],
                 cwd=outside)
    assert where.returncode == 0, _explain(where)
    pkg_file = Path(where.stdout.splitlines()[0]).resolve()
    assert venv.resolve() in pkg_file.parents, where.stdout
    assert ROOT not in pkg_file.parents, where.stdout
    return venv


def _clean_env(venv: Path, collections: Path | None) -> dict[str, str]:
    """No trace of the checkout: its .venv is not on PATH, no ANSIBLE_* settings inherited."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV", "PYTHON", "GDSFLEET_LEDGER"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["HOME"] = str(venv.parent / "home")  # no ~/.ansible/collections of this machine
    Path(env["HOME"]).mkdir(exist_ok=True)
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return env


@pytest.fixture(scope="module")
def collections(wheel_venv: Path, outside: Path) -> Path:
    """gdsfleet.gds built and installed by the wheel venv's ansible-galaxy."""
    env = _clean_env(wheel_venv, None)
    build = outside / "build"
    proc = _run([str(wheel_venv / "bin" / "ansible-galaxy"), "collection", "build", "--force",
                 "--output-path", str(build), str(ROOT)], env=env, cwd=outside, timeout=300)
    assert proc.returncode == 0, _explain(proc)
    tarball = next(build.glob("gdsfleet-gds-*.tar.gz"))
    dest = outside / "collections"
    proc = _run([str(wheel_venv / "bin" / "ansible-galaxy"), "collection", "install",
                 "--offline", "--no-deps", "-p", str(dest), str(tarball)], env=env,
                cwd=outside, timeout=300)
    assert proc.returncode == 0, _explain(proc)
    site = next((CHECKOUT_VENV / "lib").glob("python3*/site-packages/ansible_collections"))
    for ns, name in (("ansible", "posix"), ("community", "general")):
        link = dest / "ansible_collections" / ns / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(site / ns / name, target_is_directory=True)
    assert (dest / "ansible_collections/gdsfleet/gds/playbooks/site.yml").is_file()
    return dest


@pytest.fixture(scope="module")
def repo_vars(private_repo: Any) -> dict[str, str]:
    """The role variables for the stand-in repository on this module's private server."""
    return dict(private_repo.group_vars())


def test_wheel_installed_provisioner_rolls_out_the_lab(
    lab_fleet: Any, wheel_venv: Path, collections: Path, repo_vars: dict[str, str],
    outside: Path,
) -> None:
    fleet = lab_fleet(1, {1: "p2pdma"}, group_vars={"gds_route": "p2pdma", **repo_vars})
    work = outside / "work"
    work.mkdir(exist_ok=True)
    ledger = work / "ledger.sqlite"
    report = work / "report.json"
    proc = _run([str(wheel_venv / "bin" / "provisioner"), "rollout", "-i",
                 str(fleet.inventory), "--ledger", str(ledger), "--waves", "1,100%",
                 # --allow-reboot: p2pdma's module options take effect at boot
                 "--io-size", "16M", "--plain", "--allow-reboot", "--json", str(report)],
                env=_clean_env(wheel_venv, collections), cwd=work)
    assert proc.returncode == Exit.OK, _explain(proc)
    doc = json.loads(report.read_text())
    assert doc["status"] == "succeeded"
    assert {n["step"] for n in doc["nodes"]} == {"compliant"}
    assert all(n["provisioned"] for n in doc["nodes"])
    with Ledger.open(ledger) as led:
        latest = {r["node"]: r for r in led.latest()}
    assert set(latest) == set(fleet.names)
    assert all(r["compliant"] and r["path_taken"] == "direct" for r in latest.values()), latest
    # ansible-runner ran the installed collection's playbook by its FQCN (its command record)
    commands = [json.loads(p.read_text()) for p in (work / "runner").glob("artifacts/*/command")]
    assert commands, sorted(str(p) for p in (work / "runner").rglob("*"))[:20]
    # (and, with --allow-reboot, the reboot playbook by its FQCN too)
    ran = [next(a for a in c["command"] if a.startswith("gdsfleet.gds.")) for c in commands]
    assert "gdsfleet.gds.site" in ran and set(ran) <= {"gdsfleet.gds.site",
                                                       "gdsfleet.gds.reboot"}, commands


def test_not_installed_collection_is_refused_before_anything_runs(
    lab_fleet: Any, wheel_venv: Path, outside: Path, repo_vars: dict[str, str]
) -> None:
    fleet = lab_fleet(1, {1: "p2pdma"}, group_vars={"gds_route": "p2pdma", **repo_vars})
    work = outside / "empty-work"
    work.mkdir(exist_ok=True)
    empty = outside / "no-collections"
    empty.mkdir(exist_ok=True)
    ledger = work / "ledger.sqlite"
    proc = _run([str(wheel_venv / "bin" / "provisioner"), "rollout", "-i",
                 str(fleet.inventory), "--ledger", str(ledger), "--plain"],
                env=_clean_env(wheel_venv, empty), cwd=work, timeout=300)
    assert proc.returncode == Exit.USAGE, _explain(proc)
    assert "gdsfleet.gds is not installed" in proc.stderr, proc.stderr
    assert "ansible-galaxy collection install" in proc.stderr
    assert str(empty) in proc.stderr  # where it looked
    assert not ledger.exists()  # nothing ran, not even a ledger was created
    assert not (work / "runner").exists()
