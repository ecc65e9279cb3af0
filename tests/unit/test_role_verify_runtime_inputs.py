"""The role gdsfleet.gds.verify_runtime refuses bad input with a message that names the fix,
before any change: its assert.yml run for real with ansible-playbook against this machine
(connection local; assert.yml only reads facts), the role taken from this checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
ROLE = ROOT / "roles" / "verify_runtime"


def run_assert(tmp_path: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Only the role's input checks",
                   "ansible.builtin.include_role": {"name": "verify_runtime",
                                                    "tasks_from": "assert.yml"}}],
    }]))
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(play),
                           "-e", f"@{extra}"], capture_output=True, text=True, timeout=180,
                          env=env, check=False)


def test_defaults_pin_real_releases_for_both_majors() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    wheels = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__verify_runtime_wheels"]
    # released on PyPI (pip index versions, 2026-11): kvikio-cu12/-cu13 26.10.0,
    # cupy-cuda12x/-cuda13x 14.2.0
    assert (defaults["verify_runtime_kvikio_version"],
            defaults["verify_runtime_cupy_version"]) == ("26.10.0", "14.2.0")
    assert wheels == {"12": {"kvikio": "kvikio-cu12", "cupy": "cupy-cuda12x"},
                      "13": {"kvikio": "kvikio-cu13", "cupy": "cupy-cuda13x"}}
    assert defaults["verify_runtime_venv"] == "/opt/gdsfleet/venv"
    assert defaults["verify_runtime_source"] == "pypi"


def test_stand_in_wheels_follow_the_pins() -> None:
    from tests.harness.standin_wheels.build_wheels import pinned_versions

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert pinned_versions() == {"kvikio": defaults["verify_runtime_kvikio_version"],
                                 "cupy": defaults["verify_runtime_cupy_version"]}


GOOD = {"cuda_version": "12.9"}


def test_good_input_passes(tmp_path: Path) -> None:
    proc = run_assert(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_wheel_dir_source_accepts_an_existing_folder(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    proc = run_assert(tmp_path, {**GOOD, "verify_runtime_source": "wheel_dir",
                                 "verify_runtime_wheel_dir": str(tmp_path / "wheels")})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("variables, needle", [
    ({"verify_runtime_source": "index"}, "set verify_runtime_index_url"),
    ({"verify_runtime_source": "index", "verify_runtime_index_url": "mirror/simple"},
     "set verify_runtime_index_url"),
    ({"verify_runtime_source": "wheel_dir"}, "set\nverify_runtime_wheel_dir"),
    ({"verify_runtime_source": "wheel_dir", "verify_runtime_wheel_dir": "/nonexistent/wheels"},
     "which is not a\nfolder there"),
    ({"verify_runtime_source": "conda"}, "(pypi, index or wheel_dir)"),
    ({"verify_runtime_venv": "/usr"}, "never goes into the system Python"),
    ({"verify_runtime_venv": "venv"}, "must be absolute paths"),
    ({"verify_runtime_venv": "/opt/gdsfleet/venv/"}, "no trailing"),
    ({"cuda_version": "11.8"}, 'the CUDA major is\n"11"'),
    ({"cuda_version": "12.9", "verify_runtime_cuda_major": "14"}, 'the CUDA major is\n"14"'),
    ({"cuda_version": ""}, "Set cuda_version"),
    ({"verify_runtime_kvikio_version": "latest"}, "must be release numbers"),
])
def test_bad_input_is_refused_with_the_fix(tmp_path: Path, variables: dict[str, Any],
                                           needle: str) -> None:
    proc = run_assert(tmp_path, {**GOOD, **variables})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    flat = " ".join(out.split())
    assert " ".join(needle.split()) in flat, out
    assert "nothing was changed" in flat or "never goes into" in flat or "absolute" in flat
