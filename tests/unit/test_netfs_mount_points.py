"""The role gdsfleet.gds.netfs refuses mount points that would hide the node's own files, paths
that are not plain, trailing newlines and options that change the NFS transport, before any
change (issue 45, item 4). Before: ``path: /etc``, ``/.``, ``/mnt/../root`` and
``"/mnt/x\\n"`` passed (Jinja's ``match`` is ``re.match``: ``$`` matches before a trailing
newline), and ``options: [tcp]`` overrode the role's ``proto=rdma``.

tasks/validate.yml runs for real with ansible-playbook on this machine (connection local; the
tasks only read and assert), as in test_netfs_role_inputs.py. The mount tables of the
"already mounted" cases are stand-ins in the format of proc(5) ``/proc/[pid]/mounts`` (the
fstab format: source, mount point, type, options, dump, pass), given through
``netfs_proc_mounts``; an assumption, not a capture of a node with such a mount.
"""

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
GOOD = {"path": "/mnt/vast", "server": "192.0.2.10", "export": "/gds", "vers": "3"}
LUSTRE = {"path": "/mnt/exa", "source": "10.0.0.1@o2ib:/fs0"}

SYSTEM = ["/", "/etc", "/usr", "/var", "/home", "/root", "/boot", "/proc", "/sys", "/dev",
          "/tmp", "/var/lib", "/etc/ssh", "/usr/local/gds", "/boot/efi", "/run/x"]
NOT_PLAIN = {"dotdot": "/mnt/../root", "dot": "/.", "dot_inside": "/mnt/./x",
             "hidden": "/mnt/.gds", "double_slash": "//mnt/x", "trailing_slash": "/mnt/x/",
             "newline": "/mnt/x\n"}
OPTIONS = {"tcp": ["tcp"], "udp": ["udp"], "rdma": ["rdma"], "proto_upper": ["PROTO=tcp"],
           "port": ["port=2049"], "rdma_port": ["rdma=20049"]}


def _hosts(tmp: Path) -> tuple[dict[str, dict[str, Any]], set[str]]:
    full, empty = tmp / "full", tmp / "empty"
    full.mkdir()
    (full / "data.bin").write_text("kept\n")
    empty.mkdir()
    (tmp / "link").symlink_to(empty)
    ours = tmp / "mounts-ours"
    ours.write_text(f"192.0.2.10:/gds {full} nfs4 rw,vers=4.1,proto=rdma,port=20049 0 0\n")
    other = tmp / "mounts-other"
    other.write_text(f"/dev/nvme0n1 {empty} xfs rw,relatime 0 0\n")
    hosts: dict[str, dict[str, Any]] = {
        "good": {"netfs_nfs_mounts": [GOOD, dict(GOOD, path="/data/gds/a-1",
                                                  options=["hard", "mountproto=tcp"])],
                 "netfs_lustre_mounts": [LUSTRE]},
        "good_empty_folder": {"netfs_nfs_mounts": [dict(GOOD, path=str(empty))]},
        "good_forced": {"netfs_nfs_mounts": [dict(GOOD, path=str(full))],
                        "netfs_force_nonempty_mountpoints": True},
        "good_already_ours": {"netfs_nfs_mounts": [dict(GOOD, path=str(full))],
                              "netfs_proc_mounts": str(ours)},
        "nonempty": {"netfs_nfs_mounts": [dict(GOOD, path=str(full))]},
        "other_fs": {"netfs_nfs_mounts": [dict(GOOD, path=str(empty))],
                     "netfs_proc_mounts": str(other)},
        "through_link": {"netfs_nfs_mounts": [dict(GOOD, path=str(tmp / "link"))],
                         "netfs_force_nonempty_mountpoints": True},
        "server_newline": {"netfs_nfs_mounts": [dict(GOOD, server="192.0.2.10\n")]},
        "export_newline": {"netfs_nfs_mounts": [dict(GOOD, export="/gds\n")]},
        "lustre_etc": {"netfs_lustre_mounts": [dict(LUSTRE, path="/etc")]},
        "wekafs_newline": {"netfs_wekafs_mounts": [{"path": "/mnt/w\n", "source": "b/fs",
                                                    "options": ["net=ib0"]}]},
    }
    for p in SYSTEM:
        hosts["sys" + p.replace("/", "_")] = {"netfs_nfs_mounts": [dict(GOOD, path=p)]}
    for name, p in NOT_PLAIN.items():
        hosts[f"path_{name}"] = {"netfs_nfs_mounts": [dict(GOOD, path=p)]}
    for name, opts in OPTIONS.items():
        hosts[f"opt_{name}"] = {"netfs_nfs_mounts": [dict(GOOD, options=opts)]}
    return hosts, {h for h in hosts if not h.startswith("good")}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("netfs_mount_points")
    hosts, bad = _hosts(tmp)
    inv = {"all": {"hosts": {name: dict(v, ansible_connection="local")
                             for name, v in hosts.items()}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    play = [{"name": "Validate", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate the mounts", "ansible.builtin.include_role": {
            "name": "netfs", "tasks_from": "validate.yml"}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_FORKS="8")
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                           str(tmp / "play.yml")], capture_output=True, text=True, timeout=300,
                          env=env, check=False)
    doc = json.loads(proc.stdout)
    failed: dict[str, str] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            if res.get("failed"):
                msgs = [str(r.get("msg", "")) for r in res.get("results", [res])
                        if r.get("failed")]
                failed[host] = " ".join(" ".join(msgs).split())
    return {"failed": failed, "bad": bad, "tmp": tmp, "stats": doc["stats"]}


def test_what_would_hide_the_node_or_change_the_transport_is_refused(
        run: dict[str, Any]) -> None:
    assert set(run["failed"]) == run["bad"], (
        sorted(run["bad"] - set(run["failed"])), sorted(set(run["failed"]) - run["bad"]))
    assert all("Refusing to mount, nothing was changed" in m for m in run["failed"].values())


def test_the_refusals_say_why(run: dict[str, Any]) -> None:
    failed = run["failed"]
    assert "outside the system's folders" in failed["sys_etc"]
    assert "no '.' or '..' part" in failed["path_dotdot"]
    assert "no option that sets the transport" in failed["opt_tcp"]
    assert "is a folder that holds files" in failed["nonempty"]
    assert "netfs_force_nonempty_mountpoints=true" in failed["nonempty"]
    assert "already holds a xfs file system" in failed["other_fs"]
    assert "symbolic link" in failed["through_link"]


def test_nothing_was_touched(run: dict[str, Any]) -> None:
    """The refused folder keeps its file; the validation changed nothing anywhere."""
    assert (run["tmp"] / "full" / "data.bin").read_text() == "kept\n"
    assert all(s.get("changed", 0) == 0 for s in run["stats"].values())
