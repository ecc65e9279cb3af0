"""The mofed role's decisions for distributions this machine cannot run (RHEL, Ubuntu).

Only Debian containers run here, so the RHEL and Ubuntu branches are tested through what the
role computes: ``ansible-playbook`` on localhost runs the role's own ``tasks/assert.yml`` (its
vars files and input checks) with the node's facts given as ``ansible_facts``, and reports the
resolved repository URL, the ofed_info version, the GDS support verdict, the packages and the
mlnxofedinstall arguments. Those probes run as ONE ansible-playbook per module
(tests/unit/playbatch.py: one local host per case; ``ansible_facts`` keeps ``-e`` precedence):
the ``probe`` fixture builds the batch for the tests selected, each test reads its own case.
The RHEL check that the patched nvme driver is in place runs the
role's ``tasks/nvme_check.yml`` against stand-in ``rpm``/``modinfo`` commands on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.playbatch import HostRun, case_key, run_cases

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PROBE = """\
- name: Resolve the mofed role's settings for given facts
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role's input checks and load its data
      ansible.builtin.include_role:
        name: mofed
        tasks_from: assert
        public: true
    - name: Report what the role resolved
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0644"
        content: "{{ {'url': __mofed_doca_repo_url, 'ofed': __mofed_doca_ofed_ver,
                      'supported': __mofed_doca_gds_supported | bool,
                      'pkgs': __mofed_doca_pkgs, 'args': __mofed_mlnx_ofed_args} | to_json }}"
      check_mode: false
"""

NVME_CHECK = """\
- name: Check the patched nvme driver as the role does after an install
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role's check
      ansible.builtin.include_role:
        name: mofed
        tasks_from: nvme_check
"""


def facts(distribution: str, version: str, family: str | None = None) -> dict[str, str]:
    return {"os_family": family or ("RedHat" if distribution in ("RedHat", "Rocky")
                                    else "Debian"),
            "distribution": distribution, "distribution_version": version,
            "distribution_major_version": version.split(".")[0],
            "architecture": "x86_64", "kernel": "5.14.0-611.5.1.el9_7.x86_64"}


def play(tmp_path: Path, text: str, variables: dict[str, Any],
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    pb = tmp_path / "pb.yml"
    pb.write_text(text)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **variables}))
    run_env = dict(os.environ)
    run_env.update({"ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    run_env.update(env or {})
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(pb), "-e", f"@{extra}"], capture_output=True, text=True,
                          env=run_env, timeout=300, check=False, cwd=tmp_path)


def _probe_tasks() -> list[dict[str, Any]]:
    import yaml

    return list(yaml.safe_load(PROBE)[0]["tasks"])


class ProbeBatch:
    """PROBE over many (facts, variables) cases in one run; ``self(fact, **variables)`` is one
    case's (exit code and messages, the path its report was written to, or was not)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.results: dict[str, tuple[HostRun, Path]] = {}

    def _case(self, fact: dict[str, str], variables: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        key = case_key({"ansible_facts": fact, **variables})
        return key, {"ansible_python_interpreter": sys.executable, "ansible_facts": fact,
                     **variables}

    def run(self, cases: list[tuple[dict[str, str], dict[str, Any]]],
            folder: Path | None = None) -> None:
        named: dict[str, dict[str, Any]] = {}
        for fact, variables in cases:
            key, case = self._case(fact, variables)
            named[key] = case
        outs = {key: self.folder / f"out{len(self.results) + i}.json"
                for i, key in enumerate(named)}
        for key, case in named.items():
            case["out"] = str(outs[key])
        if not named:
            return
        env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
        runs = run_cases(folder or self.folder / "batch", _probe_tasks(), named, env,
                         extra_var_names=("ansible_facts",))
        for key, host_run in runs.items():
            self.results[key] = (host_run, outs[key])

    def __call__(self, fact: dict[str, str], **variables: Any) -> tuple[HostRun, Path]:
        key, _ = self._case(fact, variables)
        if key not in self.results:  # a case no test registered: it runs alone
            self.run([(fact, variables)], self.folder / f"single{len(self.results)}")
        return self.results[key]


def _probe_cases(test: str, params: dict[str, Any]) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The PROBE cases a selected test will ask ``probe`` for."""
    if test == "test_doca_default_per_os":
        return [(params["fact"], {})]
    if test == "test_doca_3_2_uses_the_major_release_folder":
        return [(facts("RedHat", "9.7"), {"mofed_doca_version": "3.2.0",
                                          "mofed_doca_ofed_version": "25.10-1.2.3"})]
    if test == "test_an_unknown_doca_release_needs_its_ofed_version":
        return [(facts("Ubuntu", "24.04"), {"mofed_doca_version": "3.2.0"})]
    if test == "test_firmware_update_is_opt_in":
        return [(facts("Ubuntu", "22.04"), dict(MLNX)),
                (facts("Ubuntu", "22.04"), {"mofed_mlnx_ofed_update_firmware": True, **MLNX})]
    if test == "test_mlnx_ofed_refusals":
        return [(facts("Ubuntu", "22.04"), {**MLNX, **params["variables"]})]
    if test == "test_plain_http_with_a_checksum_is_accepted":
        return [(facts("Ubuntu", "22.04"), PLAIN_HTTP_WITH_CHECKSUM)]
    return []


@pytest.fixture(scope="module")
def probe(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> ProbeBatch:
    """One ansible-playbook over the PROBE cases of this module's selected tests."""
    batch = ProbeBatch(tmp_path_factory.mktemp("mofed_probe"))
    cases: list[tuple[dict[str, str], dict[str, Any]]] = []
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.module is request.module:
            callspec = getattr(item, "callspec", None)
            cases += _probe_cases(item.originalname, dict(callspec.params) if callspec else {})
    batch.run(cases)
    return batch


Resolve = Callable[..., tuple[dict[str, Any], str]]


@pytest.fixture
def resolve(probe: ProbeBatch) -> Resolve:
    def _resolve(fact: dict[str, str], **variables: Any) -> tuple[dict[str, Any], str]:
        proc, out = probe(fact, **variables)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return json.loads(out.read_text()), proc.stdout
    return _resolve


# ------------------------------------------------------------------------- DOCA default per OS
@pytest.mark.parametrize(
    ("fact", "folder", "supported"),
    [
        (facts("Ubuntu", "24.04"), "ubuntu24.04", True),
        (facts("RedHat", "9.6"), "rhel9.6", True),
        # 3.1 has one folder per minor release; a 9.7 node takes its major release's folder
        (facts("RedHat", "9.7"), "rhel9.6", True),
        (facts("Rocky", "9.7"), "rhel9.6", True),
        (facts("RedHat", "10.0"), "rhel10.0", True),
        (facts("RedHat", "10.1"), "rhel10.0", True),
        (facts("Ubuntu", "22.04"), "ubuntu22.04", False),
        (facts("Debian", "12.11"), "debian12", False),
        (facts("RedHat", "8.10"), None, False),
    ],
)
def test_doca_default_per_os(resolve: Resolve, fact: dict[str, str], folder: str | None,
                             supported: bool) -> None:
    got, stdout = resolve(fact)
    if folder:
        assert got["url"] == f"https://linux.mellanox.com/public/repo/doca/3.1.0/{folder}/x86_64/"
    assert got["ofed"] == "25.07-0.9.7"  # what ofed_info -s reports for DOCA 3.1.0
    assert got["supported"] is supported
    warned = "WARNING: NVIDIA's GDS release notes do not list DOCA 3.1" in stdout
    assert warned is (not supported), stdout[-2000:]
    rpm = fact["os_family"] == "RedHat"
    assert got["pkgs"] == (["doca-ofed", "kmod-mlnx-nvme", "kmod-mlnx-nfsrdma"] if rpm
                           else ["doca-ofed", "mlnx-nvme-dkms", "mlnx-nfsrdma-dkms"])


def test_doca_3_2_uses_the_major_release_folder(resolve: Resolve) -> None:
    got, _ = resolve(facts("RedHat", "9.7"), mofed_doca_version="3.2.0",
                     mofed_doca_ofed_version="25.10-1.2.3")
    assert got["url"].endswith("/doca/3.2.0/rhel9/x86_64/")
    assert got["ofed"] == "25.10-1.2.3"
    assert got["supported"] is False  # the GDS table lists no 3.2


def test_an_unknown_doca_release_needs_its_ofed_version(probe: ProbeBatch) -> None:
    proc, out = probe(facts("Ubuntu", "24.04"), mofed_doca_version="3.2.0")
    assert proc.returncode != 0
    assert "set mofed_doca_ofed_version" in proc.stdout
    assert not out.exists()


# ------------------------------------------------------------------------------- MLNX_OFED
MLNX = {"mofed_flavor": "mlnx_ofed",
        "mofed_mlnx_ofed_tarball": "https://mirror.example.com/MLNX_OFED_LINUX-23.10-2.1.3.1.tgz"}


def test_firmware_update_is_opt_in(resolve: Resolve) -> None:
    got, _ = resolve(facts("Ubuntu", "22.04"), **MLNX)
    assert "--without-fw-update" in got["args"]
    got, _ = resolve(facts("Ubuntu", "22.04"), mofed_mlnx_ofed_update_firmware=True,
                     **MLNX)
    assert "--without-fw-update" not in got["args"]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"mofed_mlnx_ofed_extra_args": ["--force-fw-update"]}, "Firmware updates are opt-in"),
        ({"mofed_mlnx_ofed_update_firmware": True,
          "mofed_mlnx_ofed_extra_args": ["--without-fw-update"]}, "contradict"),
        ({"mofed_mlnx_ofed_tarball": "http://mirror.example.com/MLNX_OFED.tgz"},
         "Use an https:// URL, or set mofed_mlnx_ofed_tarball_checksum"),
        ({"mofed_mlnx_ofed_tarball": "ftp://mirror.example.com/MLNX_OFED.tgz"},
         "plain ftp"),
        ({"mofed_mlnx_ofed_tarball_checksum": "sha256 abc"}, "<algorithm>:<hex digest>"),
    ],
)
def test_mlnx_ofed_refusals(probe: ProbeBatch, variables: dict[str, Any], message: str) -> None:
    proc, out = probe(facts("Ubuntu", "22.04"), **{**MLNX, **variables})
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    assert not out.exists()


PLAIN_HTTP_WITH_CHECKSUM = {
    **MLNX, "mofed_mlnx_ofed_tarball": "http://127.0.0.1:8470/MLNX_OFED.tgz",
    "mofed_mlnx_ofed_tarball_checksum": "sha256:" + "ab" * 32}


def test_plain_http_with_a_checksum_is_accepted(resolve: Resolve) -> None:
    got, _ = resolve(facts("Ubuntu", "22.04"), **PLAIN_HTTP_WITH_CHECKSUM)
    assert got["args"][-1] == "--without-fw-update"


# ------------------------------------------------------------- RHEL: the patched nvme driver
def _standins(tmp_path: Path, rpm_rc: int, module_path: str) -> dict[str, str]:
    """Stand-in rpm and modinfo (TEST STAND-INS): rpm -q answers rpm_rc, modinfo prints the
    module path the kernel would resolve."""
    bindir = tmp_path / "standin-bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "rpm").write_text(
        "#!/bin/sh\n# TEST STAND-IN for rpm -q\n"
        f"[ {rpm_rc} -eq 0 ] && echo kmod-mlnx-nvme-25.07-OFED.25.07.0.9.7.1.rhel9u6.x86_64\n"
        f"[ {rpm_rc} -eq 0 ] || echo 'package kmod-mlnx-nvme is not installed'\nexit {rpm_rc}\n")
    (bindir / "modinfo").write_text(
        f"#!/bin/sh\n# TEST STAND-IN for modinfo -k K -F filename nvme\necho '{module_path}'\n")
    for f in ("rpm", "modinfo"):
        (bindir / f).chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


K = "5.14.0-611.5.1.el9_7.x86_64"


@pytest.mark.parametrize(
    ("rpm_rc", "module_path", "ok", "message"),
    [
        (0, f"/lib/modules/{K}/extra/mlnx-nvme/host/nvme.ko", True, ""),
        (0, f"/lib/modules/{K}/weak-updates/mlnx-nvme/host/nvme.ko", True, ""),
        (0, f"/lib/modules/{K}/kernel/drivers/nvme/host/nvme.ko.xz", False,
         "the kernel resolves the in-tree nvme driver"),
        (1, f"/lib/modules/{K}/kernel/drivers/nvme/host/nvme.ko.xz", False,
         "kmod-mlnx-nvme is not installed"),
    ],
)
def test_rhel_checks_the_patched_nvme_driver(tmp_path: Path, rpm_rc: int, module_path: str,
                                             ok: bool, message: str) -> None:
    proc = play(tmp_path, NVME_CHECK,
                {"ansible_facts": facts("RedHat", "9.7"),
                 "mofed_doca_packages": ["doca-ofed", "kmod-mlnx-nvme", "kmod-mlnx-nfsrdma"],
                 "__mofed_doca_install": {"changed": True}},
                env=_standins(tmp_path, rpm_rc, module_path))
    assert (proc.returncode == 0) is ok, proc.stdout[-3000:]
    if not ok:
        assert message in proc.stdout and "compat mode" in proc.stdout, proc.stdout[-3000:]
    else:
        assert "Assert the patched nvme driver is built for the running kernel (kmod)" in \
            proc.stdout
