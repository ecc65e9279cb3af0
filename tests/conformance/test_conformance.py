"""The conformance matrix (tests/conformance/README.md): each node profile through the REAL
gather script on its simulated node, `provisioner verify`'s evaluation and playbooks/verify.yml.
No containers: the fast lane."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.verify.checks.registry import ordered
from tests.conformance import matrix, simnode, verifyyml

# verify.yml's regular expressions ('\s' in Jinja string literals, which Ansible keeps as
# written) make Jinja's lexer warn; they are the playbook's, not this test's
pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
PROFILES = matrix.profiles()
IDS = [p["id"] for p in PROFILES]
CHECK_IDS = {c.id for c in ordered()}
STATUSES = {"pass", "warn", "fail", "skip"}


@pytest.mark.parametrize("profile", PROFILES, ids=IDS)
def test_profile(profile: dict[str, Any]) -> None:
    out = matrix.run(profile)
    ex = profile["expect"]
    got = {cid: r.status for cid, r in out.results.items()}
    why = {cid: r.message for cid, r in out.results.items() if r.status == "fail"}
    for cid, status in ex["checks"].items():
        assert got.get(cid) == status, (cid, got.get(cid), out.results.get(cid))
    # a check the profile does not name must not fail: every failure is declared
    undeclared = {c: m for c, m in why.items() if c not in ex["checks"]}
    assert not undeclared, undeclared
    assert out.route == ex["route"], (out.route, why)
    assert out.compliant is ex["compliant"], why
    # the two verify paths agree
    assert out.verify_yml["verdict"] == ex["verify_yml"], (out.verify_yml, why)
    assert (out.verify_yml["verdict"] == "pass") is out.compliant


def test_profiles_are_well_formed() -> None:
    assert len(PROFILES) >= 40
    assert len(set(IDS)) == len(IDS)
    for path in sorted(matrix.PROFILES.glob("*.yml")):
        p = matrix.load(path)
        assert path.stem == p["id"], path
        assert path.read_text().startswith("# Conformance profile"), path
        assert set(p["axes"]) == set(matrix.AXES), (path, set(p["axes"]) ^ set(matrix.AXES))
        for axis, value in p["axes"].items():
            assert value in matrix.AXES[axis], (path, axis, value)
        ex = p["expect"]
        assert set(ex) >= {"compliant", "route", "verify_yml", "checks"}, path
        assert ex["verify_yml"] == ("pass" if ex["compliant"] else "fail"), path
        for cid, status in ex["checks"].items():
            assert cid in CHECK_IDS and status in STATUSES, (path, cid, status)
        assert p["facts"] and all(isinstance(f, str) and f for f in p["facts"]), path
        assert (p.get("io") or {}).get("outcome") in ("direct-nvfs", "direct-p2pdma",
                                                      "direct-cufile-stats", "compat",
                                                      "skipped"), path


def _cited_paths(text: str) -> list[str]:
    """The repository paths a source names (a fixture under tests/, a capture under
    docs/evidence/)."""
    words = [w.strip("(),;:.'\"") for w in text.split()]
    return [w for w in words if w.startswith(("tests/", "docs/evidence/"))]


def test_every_profile_cites_its_simulated_state_or_marks_it_an_assumption() -> None:
    """Issue 43 ("How the matrix stays honest"): every profile names where its simulated states
    come from (``sources``: NVIDIA's samples, gds-diag, an upstream issue, docs/evidence; a path
    it names exists) and says in ``assumption`` what no capture shows; one convention, no
    ``capture:`` or ``ASSUMPTION:`` lines left in ``facts``."""
    for p in PROFILES:
        sources = p.get("sources") or []
        assumption = p.get("assumption")
        assert sources or assumption, f"{p['id']}: neither sources nor assumption"
        assert isinstance(sources, list), p["id"]
        assert all(isinstance(s, str) and len(s) > 20 for s in sources), p["id"]
        assert assumption is None or (isinstance(assumption, str) and assumption.strip()), p["id"]
        for s in [*sources, assumption or ""]:
            for path in _cited_paths(s):
                assert (matrix.HERE.parents[1] / path).exists(), (p["id"], path)
        stray = [f for f in p["facts"] if f.strip().lower().startswith(("capture:",
                                                                         "assumption:"))]
        assert not stray, (p["id"], "move these to sources / assumption", stray)


def test_the_matrix_table_states_every_profiles_source() -> None:
    rows = [line for line in matrix.render_sources(PROFILES) if line.startswith("| `")]
    assert len(rows) == len(PROFILES)
    assert not [r for r in rows if "| not stated |" in r]
    text = matrix.DOC.read_text()
    assert "| not stated |" not in text
    for p in PROFILES:
        if p.get("assumption"):
            assert " ".join(p["assumption"].split())[:60] in text, p["id"]


def test_every_axis_value_is_covered() -> None:
    for axis, values in matrix.AXES.items():
        seen = {p["axes"][axis] for p in PROFILES}
        assert seen == set(values), (axis, set(values) - seen)


@pytest.mark.parametrize(("arch", "supported"), [("x86_64", matrix.SUPPORTED),
                                                  ("aarch64", matrix.SUPPORTED_AARCH64)])
def test_every_supported_deployment_os_route_pair_has_a_compliant_profile(
        arch: str, supported: set[tuple[str, str, str]]) -> None:
    compliant = {(p["axes"]["deployment"], p["axes"]["os"], p["axes"]["route"])
                 for p in PROFILES if p["expect"]["compliant"] and p["axes"]["arch"] == arch}
    assert compliant >= supported, sorted(supported - compliant)


def test_the_operators_gds_is_supported_only_where_nvidia_lists_it() -> None:
    """Issue 43: Ubuntu 22.04/24.04 and OpenShift only (tests/fixtures/gpu-operator/
    gds_support.yml); the matrix claimed RHEL 8/9 too."""
    import yaml

    support = yaml.safe_load((matrix.HERE.parents[0] / "fixtures" / "gpu-operator"
                              / "gds_support.yml").read_text())["platform_support"]
    listed = {f"ubuntu-{v}" for v in support["ubuntu_versions"]}
    for dep, os_, _route in matrix.SUPPORTED | matrix.SUPPORTED_AARCH64:
        if dep == "operator":
            assert os_ in listed, os_


def test_the_simulated_gather_is_the_real_script(tmp_path: Path) -> None:
    # the shim answers only what the node model holds: the gather script's own document
    profile = next(p for p in PROFILES if p["id"] == "host-rhel9-nvfs-local")
    simnode.build_root(profile, tmp_path)
    doc = simnode.run_gather(tmp_path)
    items = doc["items"]
    assert items["kernel_release"]["out"] == "5.14.0-570.12.1.el9_6.x86_64"
    assert items["packages"]["manager"] == "rpm"
    assert "nvidia-fs-dkms\t2.26.6-1" in items["packages"]["out"]
    assert items["nvfs_module"]["version"] == "2.26.6"
    assert "nvme_v1_register_nvfs_dma_ops" in items["kallsyms"]["out"]
    assert items["gdscheck"]["argv"][0] == "/usr/local/cuda-13.0/gds/tools/gdscheck"
    # nothing of this machine leaks in: its own /proc is not read
    assert items["os_release"]["out"].startswith('PRETTY_NAME="Red Hat Enterprise Linux 9.6')


def test_docs_matrix_is_up_to_date() -> None:
    text = matrix.DOC.read_text()
    assert matrix.current_section(text) == matrix.render(PROFILES), (
        "docs/checks.md's matrix is out of date: run python -m tests.conformance.matrix --write")
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.matrix", "--check"],
                          cwd=matrix.HERE.parents[1], capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_package_facts_shapes_follow_ansible_core() -> None:
    # issue 28 item 4: RPM's version without its release, dpkg's whole version
    import ansible.modules.package_facts as pf
    import yaml

    fixture = yaml.safe_load((matrix.HERE.parents[0] / "fixtures" / "ansible-core"
                              / "upstream.yml").read_text())["package_facts"]
    source = Path(pf.__file__).read_text()
    assert f"version=to_text(package[self._lib.{fixture['rpm']['version']}])" in source
    assert f"release=to_text(package[self._lib.{fixture['rpm']['release']}])" in source
    assert "version=ac_pkg.version" in source
    pkgs = [{"name": "nvidia-fs-dkms", "version": "2.25.7", "release": "1"}]
    rpm = verifyyml.package_facts({"manager": "rpm", "packages": pkgs})["nvidia-fs-dkms"][0]
    assert (rpm["version"], rpm["release"]) == ("2.25.7", "1")
    deb = verifyyml.package_facts({"manager": "dpkg", "packages": [
        {"name": "nvidia-fs-dkms", "version": "2.25.7-1", "release": "1"}]})["nvidia-fs-dkms"][0]
    assert deb["version"] == "2.25.7-1"


def test_verify_yml_greps_every_symbol_the_shared_rules_read() -> None:
    # the names plugins/module_utils/nvfs_symbols.py judges must reach its filters
    import re

    import yaml

    from provisioner import collection_utils

    syms = collection_utils.load("nvfs_symbols.py")
    play = yaml.safe_load(verifyyml.PLAYBOOK.read_text())[0]
    task = next(t for t in play["tasks"] if t["name"] == "Read the route's kernel symbols")
    argv = task["ansible.builtin.command"]["argv"]
    patterns = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    alternatives = [alt for p in patterns for alt in p.split("|")]
    for name in syms.GREP_PATTERN.split("|"):
        assert any(re.fullmatch(alt, name) for alt in alternatives), name
