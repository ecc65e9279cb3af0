"""The mofed role's MLNX_OFED path on a simulated node: refusals change nothing, the installer
never flashes firmware unless asked.

One simulated node (tests/harness sim_node, APT pointed at the stand-in repository for dkms and
the kernel headers), the role run by ansible-playbook over SSH from the collection built from
this checkout, the stand-in MLNX_OFED tarball served over plain http on loopback. The stand-in
mlnxofedinstall records whether it would update the HCA firmware, as the real one decides it
(updates unless given --without-fw-update), in /var/lib/gdsfleet-standin/mlnxofedinstall.record.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_bad_input import Node, failed_task, recap

RECORD = "/var/lib/gdsfleet-standin/mlnxofedinstall.record"
WORK = "/var/cache/gdsfleet/mofed"
STATE = ("dpkg-query -W -f='${Package} ${Version} ${Status}\\n' | sort | sha256sum; "
         f"ls -la {WORK} 2>&1; ls /var/lib/gdsfleet 2>&1; cat {RECORD} 2>&1; "
         "ls /etc/apt/sources.list.d/")


@pytest.fixture(scope="module")
def node(module_sim_node: Callable[..., Any], installed_collection: Path, standin_repo: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Node:
    sim = module_sim_node("nvfs", ssh=True)
    sim.install_repo(standin_repo, doca=False)  # dkms and the kernel headers come from here
    return Node(sim, tmp_path_factory.mktemp("mlnx-ofed"))


@pytest.fixture(scope="module")
def mlnx_vars(standin_repo: Any) -> dict[str, Any]:
    return {"mofed_flavor": "mlnx_ofed",
            "mofed_mlnx_ofed_tarball": standin_repo.mlnx_ofed_tarball_url,
            "mofed_mlnx_ofed_tarball_checksum": standin_repo.mlnx_ofed_tarball_checksum}


def test_plain_http_without_checksum_is_refused_and_changes_nothing(
    node: Node, mlnx_vars: dict[str, Any]
) -> None:
    assert mlnx_vars["mofed_mlnx_ofed_tarball"].startswith("http://127.0.0.1:")
    before = node.sh(STATE, check=False)
    proc = node.play("mofed", {**mlnx_vars, "mofed_mlnx_ofed_tarball_checksum": ""})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert failed_task(proc) == \
        "gdsfleet.gds.mofed : Assert a MLNX_OFED tarball over plain http or ftp comes with a " \
        "checksum"
    assert "Use an https:// URL, or set mofed_mlnx_ofed_tarball_checksum" in proc.stdout
    assert " changed=0 " in recap(proc)
    assert node.sh(STATE, check=False) == before  # no package, no work dir, no record


def test_install_passes_without_fw_update_and_is_idempotent(
    node: Node, mlnx_vars: dict[str, Any]
) -> None:
    proc = node.play("mofed", mlnx_vars)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert node.sh("ofed_info -s").strip() == "MLNX_OFED_LINUX-23.10-2.1.3.1:"
    record = dict(line.split("=", 1) for line in node.sh(f"cat {RECORD}").splitlines())
    assert record["firmware_update"] == "no"
    assert "--without-fw-update" in record["args"].split()
    assert "--with-nvmf" in record["args"].split()
    again = node.play("mofed", mlnx_vars)
    assert again.returncode == 0, again.stdout[-3000:]
    assert " changed=0 " in recap(again)


def test_the_standin_installer_updates_firmware_unless_told_not_to(node: Node) -> None:
    """The stand-in decides as the real mlnxofedinstall does, so the role's flag is what keeps
    the firmware untouched (run after the install above, from the unpacked tarball)."""
    installer = node.sh(f"ls -d {WORK}/MLNX_OFED_LINUX-*/mlnxofedinstall | head -1").strip()
    out = node.sh(f"{installer} --with-nvmf --with-nfsrdma --add-kernel-support --dkms --force")
    assert "Attempting to perform Firmware update" in out
    assert "firmware_update=yes" in node.sh(f"cat {RECORD}")
    bad = node.sim.exec(f"{installer} --with-nvmf --no-such-option", check=False)
    assert bad.returncode == 22 and "Unsupported option: --no-such-option" in bad.stderr


# --- DOCA on the same kind of node: the default release, the GDS-table warning, the nvme check


@pytest.fixture(scope="module")
def doca_node(module_sim_node: Callable[..., Any], installed_collection: Path,
              standin_repo: Any, tmp_path_factory: pytest.TempPathFactory) -> Node:
    sim = module_sim_node("nvfs", ssh=True)
    sim.install_repo(standin_repo, doca=False)  # dkms and the kernel headers; DOCA via the role
    return Node(sim, tmp_path_factory.mktemp("doca"))


def test_doca_default_release_warns_outside_the_gds_table_and_checks_nvme(
    doca_node: Node, standin_repo: Any
) -> None:
    variables = {"mofed_flavor": "doca",
                 "mofed_doca_repo_base_url": f"{standin_repo.base_url}/doca"}
    proc = doca_node.play("mofed", variables)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the default release, from its folder in the (stand-in) repository
    assert "/doca/3.1.0/debian12/x86_64/" in doca_node.sh("cat /etc/apt/sources.list.d/doca.list")
    assert doca_node.sh("ofed_info -s").strip() == "OFED-internal-25.07-0.9.7:"
    # Debian is in no GDS support table: said, not refused
    assert "WARNING: NVIDIA's GDS release notes do not list DOCA 3.1 for Debian" in proc.stdout
    # the shared nvme check ran its DKMS branch after the install
    check = "Assert the patched nvme driver is built for the running kernel (DKMS)"
    assert f"{check}]" in proc.stdout
    section = proc.stdout.split(f"{check}]", 1)[1].split("TASK [", 1)[0]
    assert "ok:" in section and "skipping" not in section, section
    again = doca_node.play("mofed", variables)
    assert again.returncode == 0 and " changed=0 " in recap(again), again.stdout[-3000:]
