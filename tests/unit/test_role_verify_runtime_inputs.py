"""The role gdsfleet.gds.verify_runtime refuses bad input with a message that names the fix,
before any change: its assert.yml run for real with ansible-playbook against this machine
(connection local; assert.yml only reads facts), the role taken from this checkout.

The assert.yml cases run as ONE ansible-playbook per module (tests/unit/playbatch.py: one local
inventory host per case, the case's variables as its host vars, which beat the role's defaults as
``-e`` does): the ``assert_run`` fixture builds the batch for the tests selected, and each test
reads its own host's exit code and messages. A case no test registered runs alone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, case_key, run_cases

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
ROLE = ROOT / "roles" / "verify_runtime"


def run_assert(tmp_path: Path, variables: dict[str, Any], tasks_from: str = "assert.yml",
               *extra_args: str) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local",
        "gather_facts": tasks_from != "assert.yml",
        "tasks": [{"name": "Only the role's input checks",
                   "ansible.builtin.include_role": {"name": "verify_runtime",
                                                    "tasks_from": tasks_from}}],
    }]))
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(play),
                           "-e", f"@{extra}", *extra_args], capture_output=True, text=True,
                          timeout=180,
                          env=env, check=False)


ASSERT_TASKS = [{"name": "Only the role's input checks",
                 "ansible.builtin.include_role": {"name": "verify_runtime",
                                                  "tasks_from": "assert.yml"}}]


def _batch_env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
                ANSIBLE_PYTHON_INTERPRETER=sys.executable)


def _stub_at(folder: Path, version: str) -> str:
    """STAND-IN interpreter: prints ``version`` whatever it is asked (the role's probe asks for
    sys.version_info)."""
    stub = folder / f"python-{version}"
    if not stub.exists():
        stub.write_text(f"#!/bin/sh\necho {version}\n")
        stub.chmod(0o755)
    return str(stub)


class AssertBatch:
    """The module's assert.yml cases, run together once; ``self(variables)`` is one case's run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.wheels = folder / "wheels"
        self.wheels.mkdir(parents=True, exist_ok=True)
        self.nopython = str(folder / "nopython")
        self.results: dict[str, HostRun] = {}

    def stub(self, version: str) -> str:
        return _stub_at(self.folder, version)

    def run(self, cases: list[dict[str, Any]]) -> None:
        named = {case_key(c): c for c in cases}
        if named:
            self.results.update(run_cases(self.folder / "batch", ASSERT_TASKS, named,
                                          _batch_env()))

    def __call__(self, variables: dict[str, Any]) -> HostRun:
        key = case_key(variables)
        if key not in self.results:  # a case no test registered: it runs alone
            self.results.update(run_cases(self.folder / f"single{len(self.results)}",
                                          ASSERT_TASKS, {key: variables}, _batch_env()))
        return self.results[key]


def _kvikio_floor_cases(batch: AssertBatch) -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """(tag, python, variables, rc) for each tag of the fixture, one Python below its floor and
    one at it."""
    # tests/fixtures/verify_runtime/kvikio_requires_python.txt: rapidsai/kvikio's
    # python/kvikio/pyproject.toml at each tag (README.md beside it)
    fixture = ROOT / "tests" / "fixtures" / "verify_runtime" / "kvikio_requires_python.txt"
    for line in fixture.read_text().splitlines():
        tag, _commit, spec = line.split()
        floor = spec.removeprefix(">=")
        kvikio = ".".join(str(int(p)) for p in tag.lstrip("v").split(".")[:2]) + ".0"
        major, minor = (int(x) for x in floor.split("."))
        below = batch.stub(f"{major}.{minor - 1}.9")
        at = batch.stub(f"{floor}.0")
        for python, rc in ((below, 2), (at, 0)):
            yield tag, python, {**GOOD, "verify_runtime_kvikio_version": kvikio,
                                "verify_runtime_python": python}, rc


def _cases_of(test: str, params: dict[str, Any], batch: AssertBatch) -> list[dict[str, Any]]:
    """The assert.yml variables a selected test will ask ``assert_run`` for."""
    if test == "test_good_input_passes":
        return [GOOD]
    if test == "test_wheel_dir_source_accepts_an_existing_folder":
        return [{**GOOD, "verify_runtime_source": "wheel_dir",
                 "verify_runtime_wheel_dir": str(batch.wheels)}]
    if test == "test_bad_input_is_refused_with_the_fix":
        return [{**GOOD, **params["variables"]}]
    if test == "test_an_interpreter_older_than_kvikio_needs_is_refused":
        return [{**GOOD, "verify_runtime_python": batch.stub(params["version"])}]
    if test == "test_an_interpreter_that_does_not_run_is_refused":
        return [{**GOOD, "verify_runtime_python": batch.nopython}]
    if test == "test_the_floor_follows_the_pinned_kvikio":
        return [{**GOOD, "verify_runtime_kvikio_version": params["kvikio"],
                 "verify_runtime_python": batch.stub(params["version"])}]
    if test == "test_the_floor_matches_kvikios_own_requires_python":
        return [variables for _tag, _python, variables, _rc in _kvikio_floor_cases(batch)]
    return []


@pytest.fixture(scope="module")
def assert_run(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> AssertBatch:
    """One ansible-playbook over the assert.yml cases of this module's selected tests."""
    batch = AssertBatch(tmp_path_factory.mktemp("verify_runtime_assert"))
    cases: list[dict[str, Any]] = []
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.module is request.module:
            callspec = getattr(item, "callspec", None)
            cases += _cases_of(item.originalname, dict(callspec.params) if callspec else {},
                               batch)
    batch.run(cases)
    return batch


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


def test_good_input_passes(assert_run: AssertBatch) -> None:
    proc = assert_run(GOOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_wheel_dir_source_accepts_an_existing_folder(assert_run: AssertBatch) -> None:
    assert assert_run.wheels.is_dir()
    proc = assert_run({**GOOD, "verify_runtime_source": "wheel_dir",
                       "verify_runtime_wheel_dir": str(assert_run.wheels)})
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
def test_bad_input_is_refused_with_the_fix(assert_run: AssertBatch, variables: dict[str, Any],
                                           needle: str) -> None:
    proc = assert_run({**GOOD, **variables})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    flat = " ".join(out.split())
    assert " ".join(needle.split()) in flat, out
    assert "nothing was changed" in flat or "never goes into" in flat or "absolute" in flat


# -- the interpreter's version (issue 15): kvikio 26.04+ needs Python 3.11 ----------------------
@pytest.mark.parametrize("version", ["3.10.12", "3.9.18"])
def test_an_interpreter_older_than_kvikio_needs_is_refused(assert_run: AssertBatch,
                                                           version: str) -> None:
    proc = assert_run({**GOOD, "verify_runtime_python": assert_run.stub(version)})
    flat = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, flat
    assert "nothing was changed" in flat and "needs Python >= 3.11" in flat
    assert f"is Python {version}" in flat and "Set verify_runtime_python" in flat


def test_an_interpreter_that_does_not_run_is_refused(assert_run: AssertBatch) -> None:
    assert not Path(assert_run.nopython).exists()
    proc = assert_run({**GOOD, "verify_runtime_python": assert_run.nopython})
    flat = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "does not run on this node" in flat, flat


@pytest.mark.parametrize(("kvikio", "version", "rc"), [
    ("26.02.0", "3.10.12", 0),   # requires-python ">=3.10" up to 26.02
    ("26.04.0", "3.10.12", 2),   # ">=3.11" from 26.04
    ("26.10.0", "3.11.2", 0),
])
def test_the_floor_follows_the_pinned_kvikio(assert_run: AssertBatch, kvikio: str, version: str,
                                             rc: int) -> None:
    proc = assert_run({**GOOD, "verify_runtime_kvikio_version": kvikio,
                       "verify_runtime_python": assert_run.stub(version)})
    assert proc.returncode == rc, proc.stdout + proc.stderr


# -- the other CUDA major's wheels (issue 15) ---------------------------------------------------
def _probe_script(want_major: int) -> str:
    """The role's own probe (tasks/install.yml), rendered as Ansible would for ``want_major``."""
    import jinja2

    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    task = next(t for t in tasks if t["name"].startswith("Read which kvikio/cupy distributions"))
    wheels = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__verify_runtime_wheels"]
    names = wheels[str(want_major)]
    env = jinja2.Environment(autoescape=False)  # noqa: S701 - renders Python, not HTML
    env.filters["to_json"] = json.dumps
    return env.from_string(task["ansible.builtin.command"]["argv"][2]).render(
        __verify_runtime_cuda_major=str(want_major),
        __verify_runtime_cufile_name=yaml.safe_load((ROLE / "vars" / "main.yml").read_text())[
            "__verify_runtime_cufile_wheel"][str(want_major)],
        __verify_runtime_want={names["kvikio"]: "26.10.0", names["cupy"]: "14.2.0"},
        __verify_runtime_known=[n for m in wheels.values() for n in m.values()])


def _fake_env(tmp_path: Path, dists: dict[str, str]) -> Path:
    """STAND-IN site-packages: one .dist-info folder per distribution."""
    site = tmp_path / "site"
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return site


CU12_ENV = {"kvikio-cu12": "26.10.0", "libkvikio-cu12": "26.10.0", "cupy-cuda12x": "14.2.0",
            "nvidia-cufile-cu12": "1.13.1.3", "nvidia-cuda-runtime-cu12": "12.9.79",
            "nvidia-nvjitlink-cu12": "12.9.86", "cuda-toolkit": "12.9.1", "numpy": "2.3.0",
            "rapids-logger": "0.2.0", "cuda-pathfinder": "1.3.4"}
CU13_ENV = {"kvikio-cu13": "26.10.0", "libkvikio-cu13": "26.10.0", "cupy-cuda13x": "14.2.0",
            "nvidia-cufile": "1.15.1.6", "nvidia-cuda-runtime": "13.0.96",
            "nvidia-nccl-cu13": "2.28.9", "cuda-toolkit": "13.0.2", "numpy": "2.3.0",
            "nvidia-ml-py": "13.610.43", "cuda-pathfinder": "1.8.1"}


@pytest.mark.parametrize(("env", "want", "stale", "have"), [
    (CU12_ENV, 13, ["cuda-toolkit", "cupy-cuda12x", "kvikio-cu12", "libkvikio-cu12",
                    "nvidia-cuda-runtime-cu12", "nvidia-cufile-cu12", "nvidia-nvjitlink-cu12"], {}),
    (CU13_ENV, 12, ["cuda-toolkit", "cupy-cuda13x", "kvikio-cu13", "libkvikio-cu13",
                    "nvidia-cuda-runtime", "nvidia-cufile", "nvidia-nccl-cu13"], {}),
    (CU13_ENV, 13, [], {"kvikio-cu13": "26.10.0", "cupy-cuda13x": "14.2.0"}),
])
def test_switching_majors_removes_every_wheel_of_the_other(tmp_path: Path, env: dict[str, str],
                                                           want: int, stale: list[str],
                                                           have: dict[str, str]) -> None:
    site = _fake_env(tmp_path, env)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c",
                           f"import sys; sys.path.insert(0, {str(site)!r}); "
                           f"exec(compile({_probe_script(want)!r}, 'probe', 'exec'))"],
                          capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(proc.stdout)
    assert out["stale"] == stale  # numpy, rapids-logger, cuda-pathfinder, nvidia-ml-py stay
    assert {k: v for k, v in out["have"].items()} == have


# -- OS packages (issue 15): never the package module for a package that is installed ----------
@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-family controller")
def test_an_installed_package_never_reaches_the_package_module(tmp_path: Path) -> None:
    # install.yml in check mode against this machine, with the OS package list set to dpkg
    # (installed wherever dpkg-query runs): on a node without python3-apt, ansible.builtin.apt
    # fails even for an installed package, so it must not be called at all
    (tmp_path / "wheels").mkdir()
    proc = run_assert(tmp_path, {
        **GOOD, "verify_runtime_source": "wheel_dir",
        "verify_runtime_wheel_dir": str(tmp_path / "wheels"),
        "verify_runtime_venv": str(tmp_path / "venv"),
        "verify_runtime_node_wheel_dir": str(tmp_path / "node-wheels"),
        "__verify_runtime_os_packages": {"Debian": ["dpkg"], "RedHat": []},
    }, "install.yml", "--check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    blocks = re.split(r"\nTASK \[", out)
    status = {b.split("]", 1)[0].split(" : ", 1)[-1]: b for b in blocks[1:]}
    probe = status["Read which OS packages venv needs are installed"]
    assert "ok: [localhost] => (item=dpkg)" in probe
    for task in ("Install the OS packages venv needs",
                 "Update the APT cache before installing python3-venv"):
        assert "skipping: [localhost]" in status[task], status[task]


def test_the_floor_matches_kvikios_own_requires_python(assert_run: AssertBatch) -> None:
    # tests/fixtures/verify_runtime/kvikio_requires_python.txt: rapidsai/kvikio's
    # python/kvikio/pyproject.toml at each tag (README.md beside it)
    cases = list(_kvikio_floor_cases(assert_run))
    assert len(cases) >= 6  # three tags of the fixture, each below and at its floor
    for tag, python, variables, rc in cases:
        proc = assert_run(variables)
        assert proc.returncode == rc, (tag, python, proc.stdout)
