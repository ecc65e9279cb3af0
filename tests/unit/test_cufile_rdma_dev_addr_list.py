"""The role gdsfleet.gds.cufile takes the client RDMA NICs from cufile_rdma_dev_addr_list and
refuses, before any change, an inventory that puts GDS on WekaFS or Storage Scale (cuFile's
userspace RDMA: plugins/module_utils/netfs_caps.json) with no client NIC for cuFile, a list that
disagrees with cufile_config's, and an address that is not IPv4. NFS, Lustre and BeeGFS are
kernel RDMA through nvidia-fs and need no client NIC (issue 43 item 1: NVIDIA's GDS README
sample shows NFS Supported with the cuFile RDMA library not loaded). The role runs for real
with ansible-playbook over several hosts at once (connection local), each writing its
cufile.json under a temporary directory."""

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
NFS = [{"path": "/mnt/vast", "server": "192.0.2.10", "export": "/gds", "vers": "3"}]
NICS = ["192.0.2.21", "192.0.2.22"]

HOSTS: dict[str, dict[str, Any]] = {
    "nfs_with_nics": {"netfs_nfs_mounts": NFS, "cufile_rdma_dev_addr_list": NICS},
    "nfs_nics_in_fs_section": {"netfs_nfs_mounts": NFS, "cufile_config": {
        "fs": {"nfs": {"rdma_dev_addr_list": NICS}}}},
    "local_nvme_only": {},
    "nfs_without_nics": {"netfs_nfs_mounts": NFS},
    "lustre_without_nics": {"netfs_lustre_mounts": [{"path": "/mnt/exa",
                                                     "source": "10.0.0.1@o2ib:/fs0"}]},
    "beegfs_without_nics": {"netfs_beegfs_gds": True},
    "weka_without_nics": {"netfs_wekafs_mounts": [{"path": "/mnt/weka", "source": "backend/fs",
                                                   "options": ["net=ib0"]}]},
    "gpfs_without_nics": {"netfs_gpfs_filesystems": ["gpfs0"]},
    "weka_nics_in_fs_section": {"netfs_wekafs_mounts": [{"path": "/mnt/weka", "source": "b/fs"}],
                                "cufile_config": {"fs": {"weka": {"rdma_dev_addr_list": NICS}}}},
    "disagree": {"netfs_nfs_mounts": NFS, "cufile_rdma_dev_addr_list": NICS,
                 "cufile_config": {"properties": {"rdma_dev_addr_list": ["192.0.2.99"]}}},
    "not_ipv4": {"netfs_nfs_mounts": NFS, "cufile_rdma_dev_addr_list": ["ib0"]},
}
# kernel RDMA needs no client NIC (issue 43 item 1); WekaFS's own fs.weka section counts
GOOD = {"nfs_with_nics", "nfs_nics_in_fs_section", "local_nvme_only", "nfs_without_nics",
        "lustre_without_nics", "beegfs_without_nics", "weka_nics_in_fs_section"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("cufile_nics")
    hosts = {name: {"ansible_connection": "local", "cufile_path": str(tmp / f"{name}.json"),
                    "cufile_backup": False, **v} for name, v in HOSTS.items()}
    (tmp / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = [{"name": "cufile", "hosts": "all", "gather_facts": False,
             "roles": [{"role": "cufile"}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH",
                                                       str(ROOT / ".lab" / "collections")))
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                           str(tmp / "play.yml")], capture_output=True, text=True, timeout=240,
                          env=env, check=False)
    doc = json.loads(proc.stdout)
    failed: dict[str, str] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            if res.get("failed"):
                failed[host] = " ".join(str(res.get("msg")).split())
    return tmp, failed


def test_network_storage_without_client_nics_is_refused_before_any_change(
        run: tuple[Path, dict[str, str]]) -> None:
    tmp, failed = run
    assert set(failed) == set(HOSTS) - GOOD, sorted(failed)
    for host in set(HOSTS) - GOOD:
        assert not (tmp / f"{host}.json").exists(), host  # nothing was written
        assert "Nothing was changed" in failed[host] or "nothing was changed" in failed[host]
    assert "WekaFS (netfs_wekafs_mounts)" in failed["weka_without_nics"]
    assert "cufile_rdma_dev_addr_list" in failed["weka_without_nics"]
    assert "Storage Scale (netfs_gpfs_filesystems)" in failed["gpfs_without_nics"]
    assert "userspace RDMA" in failed["gpfs_without_nics"]
    assert "disagree" in failed["disagree"]
    assert "rdma_dev_addr_list" in failed["not_ipv4"] and "ib0" in failed["not_ipv4"]


def test_client_nics_land_in_properties(run: tuple[Path, dict[str, str]]) -> None:
    tmp, _ = run
    with_nics = json.loads((tmp / "nfs_with_nics.json").read_text())
    assert with_nics["properties"]["rdma_dev_addr_list"] == NICS
    assert with_nics["properties"]["allow_compat_mode"] is False
    in_fs = json.loads((tmp / "nfs_nics_in_fs_section.json").read_text())
    assert in_fs["fs"]["nfs"]["rdma_dev_addr_list"] == NICS
    local = json.loads((tmp / "local_nvme_only.json").read_text())
    assert not (local.get("properties") or {}).get("rdma_dev_addr_list")
