"""gdsfleet.gds.verify_runtime pins the cuFile wheel to the node's CUDA release and installs the
venv package of the chosen interpreter (issue 28, items 2 and 3).

kvikio's wheels depend on ``cuda-toolkit[cufile]==<major>.*`` (rapidsai/kvikio dependencies.yaml),
which pip resolves to the NEWEST CUDA minor's cuFile (nvidia-cufile 1.19.x at the time of
writing) while a CUDA 12.8 node's libcufile is 1.13.x and a 13.0 node's 1.15.x: io.libcufile then
fails on every node not on the newest minor. The role's assert.yml runs for real (one
ansible-playbook for all cases, tests/unit/playbatch.py) and a debug task reads the decisions the
role's install.yml acts on. Versions: tests/fixtures/verify_runtime/libcufile_by_cuda.txt."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, case_key, run_cases
from tests.unit.test_role_verify_runtime_inputs import (
    CU12_ENV,
    CU13_ENV,
    ROLE,
    ROOT,
    _batch_env,
    _fake_env,
    _probe_script,
    _stub_at,
)

FIXTURE = ROOT / "tests" / "fixtures" / "verify_runtime" / "libcufile_by_cuda.txt"
SHOW = ("{{ {'specs': __verify_runtime_wanted_specs, 'venv': __verify_runtime_os_packages.Debian,"
        " 'constraints': __verify_runtime_constraints} | to_json }}")
TASKS = [{"name": "Only the role's input checks",
          "ansible.builtin.include_role": {"name": "verify_runtime", "tasks_from": "assert.yml",
                                           "public": True}},
         {"name": "Show the decisions", "ansible.builtin.debug": {"msg": SHOW}}]


def _fixture() -> dict[str, list[str]]:
    rows = {}
    for line in FIXTURE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            minor, *releases = line.split()
            rows[minor] = releases
    return rows


def _shown(run: HostRun) -> dict[str, Any]:
    found = re.findall(r'\{"specs": .*?\}(?=\s|$)', run.out)
    assert found, run.out
    return dict(json.loads(found[-1]))


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    folder = tmp_path_factory.mktemp("verify_runtime_cufile")
    py311, py312 = _stub_at(folder, "3.11.0"), _stub_at(folder, "3.12.3")
    named = {
        "12.8": {"cuda_version": "12.8", "verify_runtime_python": py312},
        "12.8.1": {"cuda_version": "12.8.1", "verify_runtime_python": py312},
        "12.9": {"cuda_version": "12.9", "verify_runtime_python": py312},
        "13.0": {"cuda_version": "13.0", "verify_runtime_python": py312},
        "13.1": {"cuda_version": "13.1", "verify_runtime_python": py312},
        "13.2": {"cuda_version": "13.2", "verify_runtime_python": py312},
        "13.3": {"cuda_version": "13.3.1", "verify_runtime_python": py312},
        "13.4": {"cuda_version": "13.4", "verify_runtime_python": py312},
        "aarch64-13.0": {"cuda_version": "13.0", "verify_runtime_python": py312,
                         "ansible_facts": {"architecture": "aarch64", "os_family": "Debian"}},
        "aarch64-13.1": {"cuda_version": "13.1", "verify_runtime_python": py312,
                         "ansible_facts": {"architecture": "aarch64", "os_family": "Debian"}},
        "x86-13.0": {"cuda_version": "13.0", "verify_runtime_python": py312,
                     "ansible_facts": {"architecture": "x86_64", "os_family": "Debian"}},
        "13.9": {"cuda_version": "13.9", "verify_runtime_python": py312},
        "13.9-set": {"cuda_version": "13.9", "verify_runtime_cufile_version": "1.23",
                     "verify_runtime_python": py312},
        "major-only": {"verify_runtime_cuda_major": "13", "verify_runtime_python": py312},
        "jammy-3.11": {"cuda_version": "12.8", "verify_runtime_python": py311},
    }
    # the architecture is a fact: -e precedence (playbatch's extra_var_names); this machine's
    # own (x86_64, Debian) where a case does not set it
    for v in named.values():
        v.setdefault("ansible_facts", {"architecture": "x86_64", "os_family": "Debian"})
    runs = run_cases(folder / "batch", TASKS, {case_key(v): v for v in named.values()},
                     _batch_env(), extra_var_names=("ansible_facts",))
    return {name: runs[case_key(v)] for name, v in named.items()}


@pytest.mark.parametrize(("case", "spec"), [
    ("12.8", "nvidia-cufile-cu12==1.13.*"),
    ("12.8.1", "nvidia-cufile-cu12==1.13.*"),
    ("12.9", "nvidia-cufile-cu12==1.14.*"),
    ("13.0", "nvidia-cufile==1.15.*"),
    ("13.1", "nvidia-cufile==1.16.*"),
    ("13.2", "nvidia-cufile==1.17.*"),
    ("13.3", "nvidia-cufile==1.18.*"),
    ("13.9-set", "nvidia-cufile==1.23.*"),
    ("x86-13.0", "nvidia-cufile==1.15.*"),
    # aarch64: the broken 1.15.x wheels are excluded
    # (tests/fixtures/verify_runtime/broken_wheels.yml)
    ("aarch64-13.1", "nvidia-cufile==1.16.*,!=1.15.0.42,!=1.15.1.6"),
])
def test_the_cufile_wheel_is_pinned_to_the_nodes_cuda_release(cases: dict[str, HostRun],
                                                                case: str, spec: str) -> None:
    run = cases[case]
    assert run.rc == 0, run.out
    shown = _shown(run)
    assert spec in shown["specs"]
    assert shown["constraints"] == "/opt/gdsfleet/venv/gdsfleet-constraints.txt"


def test_a_cuda_release_without_a_known_cufile_is_refused_with_the_fix(
        cases: dict[str, HostRun]) -> None:
    run = cases["13.9"]
    assert run.rc == 2, run.out
    assert "Cannot pin the cuFile wheel" in run.out
    assert "verify_runtime_cufile_version" in run.out
    assert "nothing was changed" in run.out


def test_cuda_13_4_has_no_verified_cufile_and_is_refused_with_the_fix(
        cases: dict[str, HostRun]) -> None:
    """No NVIDIA source read names 13.4's libcufile (libcufile_by_cuda.txt): unverified, so
    no row; the operator sets verify_runtime_cufile_version."""
    assert "13.4" not in _fixture() and "13.4: UNVERIFIED" in FIXTURE.read_text()
    run = cases["13.4"]
    assert run.rc == 2 and "Cannot pin the cuFile wheel" in run.out, run.out


def test_the_broken_aarch64_cufile_wheels_are_never_pinned(cases: dict[str, HostRun]) -> None:
    """CUDA 13.0 on Grace: every nvidia-cufile 1.15 aarch64 wheel lacks DT_NEEDED librt
    (NVIDIA/cuda-python#2313): refused before any change, with the fix."""
    broken = yaml.safe_load((FIXTURE.parent / "broken_wheels.yml").read_text())
    assert broken["aarch64"]["nvidia-cufile"]["broken"] == ["1.15.0.42", "1.15.1.6"]
    run = cases["aarch64-13.0"]
    assert run.rc == 2, run.out
    assert "do not load" in run.out and "cuda-python#2313" in run.out
    assert "CUDA 13.1 or newer" in run.out and "nothing was changed" in run.out


def test_no_cuda_version_and_no_host_cufile_installs_unpinned_with_a_warning(
        cases: dict[str, HostRun]) -> None:
    # a GPU Operator node: no cuda_version, no libcufile package (the operator installs no
    # cuFile on the host); the wheel is kvikio's, and the operator says how to pin it
    run = cases["major-only"]
    assert run.rc == 0, run.out
    assert "[WARNING] The cuFile wheel (nvidia-cufile) is not" in run.out
    assert "set cuda_version" in run.out
    assert "nvidia-cufile" in _shown(run)["specs"]
    assert not any(s.startswith("nvidia-cufile=") for s in _shown(run)["specs"])


def test_the_pins_are_the_releases_nvidia_ships() -> None:
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    table = role_vars["__verify_runtime_cufile_by_cuda"]
    fixture = _fixture()
    assert set(table) == set(fixture)
    for minor, prefix in table.items():
        # every patch release of that CUDA minor matches the pin, and only those
        assert all(r.startswith(prefix + ".") for r in fixture[minor]), (minor, prefix)
        others = [r for m, rs in fixture.items() if m != minor for r in rs]
        assert not any(r.startswith(prefix + ".") for r in others), (minor, prefix)


def test_the_newest_cufile_is_not_what_a_12_8_or_13_0_node_gets(cases: dict[str, HostRun]) -> None:
    # the floating resolution of issue 28: 1.19.x is neither 12.8's nor 13.0's
    for case in ("12.8", "13.0"):
        spec = next(s for s in _shown(cases[case])["specs"] if "cufile" in s)
        prefix = spec.split("==")[1].removesuffix(".*")
        assert not "1.19.1.55".startswith(prefix + ".")


def test_jammy_python311_gets_its_own_venv_package(cases: dict[str, HostRun]) -> None:
    # Ubuntu 22.04: python3-venv covers the default 3.10 only; ensurepip for 3.11 is python3.11-venv
    assert _shown(cases["jammy-3.11"])["venv"] == ["python3.11-venv"]
    assert _shown(cases["12.8"])["venv"] == ["python3.12-venv"]


@pytest.mark.parametrize(("env", "want", "cufile"), [
    (CU12_ENV, 12, "1.13.1.3"), (CU13_ENV, 13, "1.15.1.6"), (CU13_ENV, 12, "")])
def test_the_probe_reports_the_installed_cufile(tmp_path: Path, env: dict[str, str], want: int,
                                                cufile: str) -> None:
    import subprocess
    import sys

    site = _fake_env(tmp_path, env)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c",
                           f"import sys; sys.path.insert(0, {str(site)!r}); "
                           f"exec(compile({_probe_script(want)!r}, 'probe', 'exec'))"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(proc.stdout)["cufile"] == cufile
