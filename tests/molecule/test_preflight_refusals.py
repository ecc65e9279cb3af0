"""playbooks/site.yml (run as gdsfleet.gds.site from the built collection) refuses unfit
nodes in the preflight role, before any change, and says what to fix.

Six simulated nodes (SSH with pipelining, one ansible-playbook run over all, JSON callback): an
unsupported OS (the node's /etc/os-release rewritten to Ubuntu 20.04), the proprietary GPU
driver (profile `proprietary`), no GPU driver at all (profile `nogpu`), Secure Boot on with the
nvfs route's unsigned DKMS modules (profile `iommu`), and the p2pdma route asked of a kernel
without P2PDMA (profile `nvfs`, gds_route p2pdma), and an IOMMU that is on under
preflight_iommu_policy fail (profile `iommu`, Secure Boot accepted explicitly). Each must fail in
gdsfleet.gds.preflight with the message that names the fix, and afterwards no file under /etc,
/usr, /opt or /var may be newer than a marker touched just before the run, and dpkg must list
exactly the packages it listed before.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gds_collection import ROOT, VENV_BIN, ansible_env

from tests.harness.fixtures import SimNode, SimNodeFactory, on_each

pytestmark = pytest.mark.container

UBUNTU_2004 = """NAME="Ubuntu"
VERSION="20.04.6 LTS (Focal Fossa)"
ID=ubuntu
ID_LIKE=debian
PRETTY_NAME="Ubuntu 20.04.6 LTS"
VERSION_ID="20.04"
VERSION_CODENAME=focal
UBUNTU_CODENAME=focal
"""

MARKER = "/run/gdsfleet-test-before-site"
# Written by the simulation itself (stand-in hardware), never by the roles.
CHANGED_FILES = (
    f"find /etc /usr /opt /var -xdev -newer {MARKER} "
    "-not -path '/var/lib/gdsfleet-sim' -not -path '/var/lib/gdsfleet-sim/*' "
    "-not -path '/var/log/*' -not -name '__pycache__' "
    "-not -path '*/__pycache__/*' -not -path '/var/tmp/*' -not -path '/var/cache/debconf/*' "
    "-print"
)
PACKAGES = "dpkg-query -W -f '${Package}=${Version}\\n' | sort"

# node -> (what was wrong, text the failure message must carry)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ubuntu2004": (
        "unsupported OS",
        ("Unsupported operating system Ubuntu 20.04", "Ubuntu 22.04/24.04, Debian 12",
         "Reinstall the node with a supported release"),
    ),
    "proprietary": (
        "proprietary GPU driver",
        ("proprietary kernel module", "needs the open kernel module",
         "install the open kernel module flavour of the NVIDIA driver"),
    ),
    "nogpu": (
        "no GPU driver",
        ("No NVIDIA GPU driver is loaded", "/proc/driver/nvidia/version is missing",
         "install the open kernel module flavour of the NVIDIA driver"),
    ),
    "secureboot": (
        "Secure Boot on with unsigned DKMS modules (profile iommu)",
        ("Secure Boot is enabled", "SecureBoot enabled", "Enrol a MOK key",
         "preflight_mok_key", "preflight_allow_secure_boot"),
    ),
    "iommu": (
        "IOMMU on with preflight_iommu_policy fail (Secure Boot accepted explicitly)",
        ("IOMMU is on", "intel_iommu=off or amd_iommu=off", "preflight_iommu_accepted_states"),
    ),
    "nop2pdma": (
        "p2pdma route on a kernel without P2PDMA",
        ("gds_route is p2pdma", "nor pci_p2pdma_add_resource is in /proc/kallsyms",
         "CONFIG_PCI_P2PDMA", "or use gds_route nvfs"),
    ),
}


def _failures(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """host -> (task name, message) of the first failed task, from the JSON callback."""
    failed: dict[str, tuple[str, str]] = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if result.get("failed") and host not in failed:
                    failed[host] = (task["task"]["name"], str(result.get("msg", "")))
    return failed


@pytest.fixture(scope="module")
def refused(
    module_sim_node: SimNodeFactory,
    standin_repo: Any,
    installed_collection: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    # started at once (threads): each start waits on podman and the node's boot
    nodes = module_sim_node.many({
        "ubuntu2004": {"profile": "nvfs", "ssh": True},
        "proprietary": {"profile": "proprietary", "ssh": True},
        "nogpu": {"profile": "nogpu", "ssh": True},
        "secureboot": {"profile": "iommu", "ssh": True},
        "nop2pdma": {"profile": "nvfs", "ssh": True},
        "iommu": {"profile": "iommu", "ssh": True},
    })
    nodes["ubuntu2004"].exec(
        "rm -f /etc/os-release && cat > /etc/os-release <<'EOF'\n" + UBUNTU_2004 + "EOF\n"
        "printf 'DISTRIB_ID=Ubuntu\\nDISTRIB_RELEASE=20.04\\nDISTRIB_CODENAME=focal\\n' "
        "> /etc/lsb-release"
    )
    def mark(node: SimNode) -> str:
        packages = node.exec(PACKAGES).stdout
        # the simulation keeps its own state in /var/lib/gdsfleet-sim, made on first use (a
        # GPU query made by preflight's probes): made here, so that only the role's changes
        # are newer than the marker
        node.exec(f"mkdir -p /var/lib/gdsfleet-sim; sleep 1; touch {MARKER}")
        return str(packages)

    before = dict(zip(nodes, on_each(nodes.values(), mark), strict=True))
    tmp = tmp_path_factory.mktemp("refusals")
    inventory = tmp / "hosts.yml"
    hosts: dict[str, dict[str, Any]] = {
        node.name: node.ansible_host_vars() for node in nodes.values()
    }
    hosts[nodes["nop2pdma"].name]["gds_route"] = "p2pdma"
    hosts[nodes["iommu"].name].update(
        preflight_allow_secure_boot="true", preflight_iommu_policy="fail")
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": hosts,
        "vars": {**standin_repo.group_vars()},
    }}}}))
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "gdsfleet.gds.site"],
        cwd=ROOT,
        env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(proc.stdout)
    yield {
        "rc": proc.returncode,
        "nodes": nodes,
        "failures": {
            key: _failures(report).get(node.name) for key, node in nodes.items()
        },
        "before": before,
        "stderr": proc.stderr,
    }


def test_the_run_fails(refused: dict[str, Any]) -> None:
    assert refused["rc"] == 2, refused["stderr"][-3000:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_preflight_refuses_with_what_to_fix(refused: dict[str, Any], case: str) -> None:
    what, texts = CASES[case]
    failure = refused["failures"][case]
    assert failure is not None, f"{what}: the node was not refused"
    task, message = failure
    assert task.startswith("gdsfleet.gds.preflight : ") or "preflight" in task, (what, task)
    for text in texts:
        assert text in message, f"{what}: {text!r} not in {message!r}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_node_is_unchanged(refused: dict[str, Any], case: str) -> None:
    node = refused["nodes"][case]
    changed = node.exec(CHANGED_FILES).stdout.split()
    assert changed == [], f"{CASES[case][0]}: files changed before the refusal: {changed}"
    assert node.exec(PACKAGES).stdout == refused["before"][case]
    for path in ("/etc/apt/sources.list.d/doca.list", "/etc/apt/preferences.d/gdsfleet-nvidia-fs",
                 "/var/lib/gdsfleet/reboot-required", "/etc/modules-load.d/nvidia_fs.conf"):
        assert node.exec(f"test -e {path}", check=False).returncode != 0, path
