"""playbooks/site.yml (gdsfleet.gds.site from the built collection) refuses, in the preflight
role and before any change, a node on which a later role would fail half-way:

- `provider_kernel`: the lent H100's state. The running kernel has no /lib/modules/<kernel> (built
  by the cloud provider, not installed from a package; `SIM_DISTRO_KERNEL=0`), no headers, no
  package lists, and the driver has no sources (`SIM_DRIVER_SOURCES=0`).
- `no_headers_in_repo`: a distribution kernel without headers, and APT's only repository (the
  stand-in DOCA one) does not offer linux-headers-<kernel>.
- `no_driver_sources`: headers are fine but the GPU driver came without its sources, so there is
  no nv-p2p.h under /usr/src/nvidia-* for nvidia-fs to compile against (`SIM_DRIVER_SOURCES=0`).
- `check_without_python3_apt`: a `--check` run on a node without python3-apt, which the apt
  module needs to simulate installs.

Each fails in gdsfleet.gds.preflight with the message that names the fix; afterwards no file
under /etc, /usr, /opt or /var is newer than a marker touched just before the run, and dpkg
lists exactly the packages it listed before (as in test_preflight_refusals.py). A control node
(python3-apt, headers installed like the distribution archive would, driver sources present)
is not refused by these checks: its --check run gets past preflight.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from gds_collection import ROOT, VENV_BIN, ansible_env
from test_preflight_refusals import CHANGED_FILES, MARKER, PACKAGES

from tests.harness.fixtures import SimNode, SimNodeFactory, on_each

pytestmark = pytest.mark.container

PREFLIGHT = "gdsfleet.gds.preflight : "


def _results(report: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """host -> [(task name, result)] in play order, from the JSON callback."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                out.setdefault(host, []).append((task["task"]["name"], result))
    return out


def _first_failure(results: list[tuple[str, dict[str, Any]]]) -> tuple[str, str] | None:
    for name, result in results:
        if result.get("failed"):
            return name, str(result.get("msg", ""))
    return None


def _run(inventory: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), *extra, "gdsfleet.gds.site"],
        cwd=ROOT, env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True, text=True, timeout=600)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _inventory(path: Path, nodes: dict[str, Any], repo: Any) -> Path:
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars() for node in nodes.values()},
        "vars": {"mofed_flavor": "none", **repo.group_vars()},
    }}}}))
    return path


@pytest.fixture(scope="module")
def runs(
    module_sim_node: SimNodeFactory,
    standin_repo: Any,
    installed_collection: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    # started at once (threads): each start waits on podman and the node's boot
    everyone = module_sim_node.many({
        "provider_kernel": {"profile": "nvfs", "ssh": True,
                            "env": {"SIM_DISTRO_KERNEL": "0", "SIM_DRIVER_SOURCES": "0"}},
        "no_headers_in_repo": {"profile": "nvfs", "ssh": True},
        "no_driver_sources": {"profile": "nvfs", "ssh": True,
                              "env": {"SIM_DRIVER_SOURCES": "0"}},
        # The control node runs in the --check run (quicker than a real rollout): it has
        # python3-apt (the node image has it), headers and driver sources, so no preflight
        # check may refuse it.
        "check_without_python3_apt": {"profile": "nvfs", "ssh": True},
        "control": {"profile": "nvfs", "ssh": True},
        "headers_in_repo": {"profile": "nvfs", "ssh": True},
    })
    nodes = {k: everyone[k] for k in ("provider_kernel", "no_headers_in_repo",
                                      "no_driver_sources")}
    check_nodes = {k: everyone[k] for k in ("check_without_python3_apt", "control",
                                            "headers_in_repo")}
    kernel = check_nodes["control"].exec("uname -r").stdout.strip()

    def no_headers_in_repo(node: SimNode) -> None:
        # APT knows one repository, and it has no kernel headers (the stand-in DOCA one).
        node.install_repo(standin_repo, doca=True)
        node.exec("sed -i '/cuda/d' /etc/apt/sources.list.d/gdsfleet-test.list && "
                  "rm -rf /var/lib/apt/lists/* && apt-get update -qq")

    def headers_installed(node: SimNode) -> None:
        # Headers installed as from the distribution archive (TEST HARNESS: this node has
        # no distribution source); the sources list is removed again afterwards.
        node.install_repo(standin_repo, doca=False)
        node.apt_install("dkms", f"linux-headers-{kernel}")
        node.exec("rm -f /etc/apt/sources.list.d/gdsfleet-test.list && "
                  "rm -rf /var/lib/apt/lists/*")

    def headers_in_repo(node: SimNode) -> None:
        # Headers not installed, but APT's repository (the stand-in CUDA one) offers them: the
        # roles will install them, so preflight must let the node through.
        node.install_repo(standin_repo, doca=False)

    def no_python3_apt(node: SimNode) -> None:
        node.exec("DEBIAN_FRONTEND=noninteractive dpkg --purge python3-apt >/dev/null")

    prepare: dict[str, Callable[[SimNode], None]] = {
        "no_headers_in_repo": no_headers_in_repo, "no_driver_sources": headers_installed,
        "control": headers_installed, "headers_in_repo": headers_in_repo,
        "check_without_python3_apt": no_python3_apt}
    # each node's preparation is its own (its own apt, its own files): all at once
    with ThreadPoolExecutor(max_workers=len(prepare)) as pool:
        for done in [pool.submit(step, everyone[k]) for k, step in prepare.items()]:
            done.result()

    def mark(node: SimNode) -> str:
        packages = node.exec(PACKAGES).stdout
        node.exec(f"sleep 1; touch {MARKER}")
        return str(packages)

    before = dict(zip(everyone, on_each(everyone.values(), mark), strict=True))
    tmp = tmp_path_factory.mktemp("build-refusals")
    # the two runs touch disjoint nodes: side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        main_run = pool.submit(_run, _inventory(tmp / "hosts.json", nodes, standin_repo))
        check_run = pool.submit(
            _run, _inventory(tmp / "check.json", check_nodes, standin_repo), "--check")
        rc, report, stderr = main_run.result()
        check_rc, check_report, check_stderr = check_run.result()
    results = {**_results(report), **_results(check_report)}
    yield {
        "rc": rc, "check_rc": check_rc, "stderr": stderr + check_stderr, "kernel": kernel,
        "nodes": everyone, "before": before,
        "results": {key: results.get(node.name, []) for key, node in everyone.items()},
    }


CASES: dict[str, tuple[str, ...]] = {
    "provider_kernel": (
        "kernel {kernel} has none", "/lib/modules/{kernel}/build is missing",
        "there is no /lib/modules/{kernel} at all",
        "not installed from a package of the distribution",
        "has no repository index", "install the headers of the running kernel",
        "linux-headers-{kernel}", "boot a kernel of the distribution", "gds_route p2pdma"),
    "no_headers_in_repo": (
        "/lib/modules/{kernel}/build is missing",
        "no configured repository offers linux-headers-{kernel}",
        "install the headers of the running kernel"),
    "no_driver_sources": (
        "nv-p2p.h", "no nv-p2p.h under /usr/src/nvidia-*", "570.133.20",
        "nvidia-dkms-570-open", "nvidia-kernel-source-570-open", "gds_route p2pdma"),
    "check_without_python3_apt": (
        "check-mode run (--check)", "no python3-apt", "`apt-get install python3-apt`",
        "A real run (without --check) needs nothing"),
}


def test_the_runs_fail(runs: dict[str, Any]) -> None:
    assert runs["rc"] == 2, runs["stderr"][-3000:]
    assert runs["check_rc"] == 2, runs["stderr"][-3000:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_preflight_refuses_with_what_to_fix(runs: dict[str, Any], case: str) -> None:
    failure = _first_failure(runs["results"][case])
    assert failure is not None, f"{case}: not refused"
    task, message = failure
    assert task.startswith(PREFLIGHT), (case, task, message)
    for text in CASES[case]:
        text = text.format(kernel=runs["kernel"])
        assert text in message, f"{case}: {text!r} not in {message!r}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_node_is_unchanged(runs: dict[str, Any], case: str) -> None:
    node = runs["nodes"][case]
    changed = node.exec(CHANGED_FILES).stdout.split()
    assert changed == [], f"{case}: files changed before the refusal: {changed}"
    assert node.exec(PACKAGES).stdout == runs["before"][case]


def test_control_node_gets_past_preflight(runs: dict[str, Any]) -> None:
    """python3-apt, headers and driver sources present: no preflight task fails in --check, and
    the node's empty package lists raise no refusal (the roles configure repositories later)."""
    results = runs["results"]["control"]
    assert results, "control node did not run"
    failure = _first_failure(results)
    assert failure is None or not failure[0].startswith(PREFLIGHT), failure
    assert any(name.startswith("gdsfleet.gds.cuda : ") for name, _ in results)


def test_headers_offered_by_a_repository_are_enough(runs: dict[str, Any]) -> None:
    """apt-cache names a candidate for linux-headers-<kernel>: no refusal, and the fact says so."""
    results = runs["results"]["headers_in_repo"]
    failure = _first_failure(results)
    assert failure is None or not failure[0].startswith(PREFLIGHT), failure
    facts = [r.get("ansible_facts", {}).get("gds_preflight_build") for _, r in results]
    build = next(f for f in facts if f)
    assert build["headers_installed"] is False
    assert build["headers_candidate"].endswith("-1"), build  # the stand-in package's version
    assert build["package_index_known"] is True
