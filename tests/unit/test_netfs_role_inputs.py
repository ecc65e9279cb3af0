"""The role gdsfleet.gds.netfs refuses NFS mounts GDS cannot use, and text that would land in
/etc/fstab, before any change: tasks/validate.yml runs for real with ansible-playbook over
several inventories at once (connection local; the tasks only assert). The mount itself is not
run here (no NFS-over-RDMA server): the options it writes are rendered by the same task
template in test_mount_options_are_rdma."""

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
GOOD = {"path": "/mnt/vast", "server": "192.0.2.10", "export": "/gds", "vers": "3",
        "nconnect": 8}

HOSTS: dict[str, list[dict[str, Any]]] = {
    "good": [GOOD, dict(GOOD, path="/mnt/v4", vers="4.1", options=["hard", "rsize=1048576"])],
    "none": [],
    "tcp": [dict(GOOD, options=["proto=tcp"])],
    "port": [dict(GOOD, options=["port=2049"])],
    "vers": [dict(GOOD, vers="2")],
    "nconnect": [dict(GOOD, nconnect=64)],
    "relative": [dict(GOOD, path="mnt/vast")],
    "space_in_export": [dict(GOOD, export="/gds x")],
    "newline_server": [dict(GOOD, server="192.0.2.10\n/dev/sda /")],
    "comma_option": [dict(GOOD, options=["ro,proto=tcp"])],
    "no_server": [{"path": "/mnt/vast", "export": "/gds"}],
}
BAD = set(HOSTS) - {"good", "none"}


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("netfs_inputs")
    hosts = {name: {"ansible_connection": "local", "netfs_nfs_mounts": v}
             for name, v in HOSTS.items()}
    (tmp / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = [{"name": "Validate", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate the mounts", "ansible.builtin.include_role": {
            "name": "netfs", "tasks_from": "validate.yml"}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                           str(tmp / "play.yml")], capture_output=True, text=True, timeout=240,
                          env=env, check=False)
    doc = json.loads(proc.stdout)
    out: dict[str, dict[str, Any]] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            if res.get("failed"):
                out[host] = res
    return out


def test_bad_mounts_are_refused_before_any_change(failed: dict[str, dict[str, Any]]) -> None:
    assert set(failed) == BAD, sorted(failed)
    msgs = [" ".join(str(r).split()) for r in failed["tcp"].get("results", [failed["tcp"]])]
    text = " ".join(msgs)
    assert "Refusing to mount, nothing was changed" in text
    assert "over TCP GDS runs in compat mode" in text


def test_mount_options_are_rdma() -> None:
    """The mount task's opts expression, rendered by ansible-core's templating engine."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    task = next(t for t in yaml.safe_load((ROOT / "roles/netfs/tasks/main.yml").read_text())
                if t["name"] == "Mount the NFS exports over RDMA")
    mod = {k: trust_as_template(v) for k, v in task["ansible.posix.mount"].items()
           if k in ("opts", "src")}
    templar = Templar(loader=DataLoader(), variables={"item": dict(GOOD, options=["hard"])})
    opts = templar.template(mod["opts"]).strip()
    assert opts == "vers=3,proto=rdma,port=20049,nconnect=8,_netdev,hard"
    assert templar.template(mod["src"]) == "192.0.2.10:/gds"
    templar = Templar(loader=DataLoader(), variables={"item": {
        "path": "/m", "server": "fd00::5", "export": "/e", "vers": "4.2"}})
    assert templar.template(mod["opts"]).strip() == "vers=4.2,proto=rdma,port=20049,_netdev"
    assert templar.template(mod["src"]) == "[fd00::5]:/e"


def _site_netfs_task() -> tuple[list[str], dict[str, Any]]:
    play = yaml.safe_load((ROOT / "playbooks/site.yml").read_text())[0]
    block = next(t for t in play["tasks"] if "block" in t)["block"]
    roles = [t["ansible.builtin.import_role"]["name"] for t in block
             if "ansible.builtin.import_role" in t]
    task = next(t for t in block
                if t.get("ansible.builtin.import_role", {}).get("name") == "gdsfleet.gds.netfs")
    return roles, task


def test_site_yml_runs_netfs_only_when_the_inventory_lists_network_storage() -> None:
    """site.yml imports netfs after mofed and nvidia_fs and before the NVMe filesystem; its
    condition, rendered by ansible-core, is false on an inventory without network storage."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    roles, task = _site_netfs_task()
    pos = roles.index("gdsfleet.gds.netfs")
    assert roles.index("gdsfleet.gds.mofed") < pos and roles.index("gdsfleet.gds.nvidia_fs") < pos
    assert pos < roles.index("gdsfleet.gds.nvme")
    when = trust_as_template("{{ " + task["when"] + " }}")
    cases: list[tuple[dict[str, Any], bool]] = [
        ({}, False),
        ({"netfs_nfs_mounts": [], "netfs_beegfs_gds": False}, False),
        ({"netfs_nfs_mounts": [GOOD]}, True),
        ({"netfs_lustre_mounts": [{"path": "/mnt/exa", "source": "10.0.0.1@o2ib:/fs0"}]}, True),
        ({"netfs_wekafs_mounts": [{"path": "/w", "source": "b/fs"}]}, True),
        ({"netfs_gpfs_filesystems": ["gpfs0"]}, True),
        ({"netfs_beegfs_gds": True}, True),
    ]
    for variables, expected in cases:
        got = Templar(loader=DataLoader(), variables=variables).template(when)
        assert got is expected, (variables, got)


def test_every_variable_is_in_argument_specs_and_the_docs() -> None:
    """Each netfs default is described in meta/argument_specs.yml (and nothing more), and named
    in docs/network-filesystems.md."""
    defaults = set(yaml.safe_load((ROOT / "roles/netfs/defaults/main.yml").read_text()))
    spec = yaml.safe_load((ROOT / "roles/netfs/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(options) == defaults
    assert all(str(o.get("description") or "").strip() for o in options.values())
    doc = (ROOT / "docs/network-filesystems.md").read_text()
    assert sorted(v for v in defaults if f"`{v}`" not in doc) == []
