"""The role gdsfleet.gds.netfs checks the GDS prerequisites of the file systems whose clients
their vendors install (Lustre/EXAScaler, IBM Storage Scale, WekaFS) and refuses, before any
change, naming the vendor's step; it builds the BeeGFS client with GDS through BeeGFS's
autobuild. roles/netfs/tasks/main.yml runs for real with ansible-playbook (connection local)
against stand-ins: the vendors' tools are tests/harness/netfs_standins/standin_tool.sh copied
under their names, /proc/kallsyms a file of synthetic lines in its format. Mounts run in check
mode (no Lustre or WEKA cluster here); the BeeGFS autobuild file is a temporary copy.
Facts and sources: tests/fixtures/netfs/README.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
STANDIN = ROOT / "tests" / "harness" / "netfs_standins" / "standin_tool.sh"
FACTS = yaml.safe_load((ROOT / "tests/fixtures/netfs/prerequisites.yml").read_text())
LUSTRE_SYM = FACTS["nvfs_registration_symbols"]["lustre"]
SCALE_SYM = FACTS["nvfs_registration_symbols"]["ibm_scale"]
KALLSYMS_LINE = "0000000000000000 T {} [{}]\n"
LUSTRE = {"path": "/mnt/exa", "source": "10.0.0.1@o2ib:/fs0", "options": ["flock"]}
WEKA = {"path": "/mnt/weka", "source": "backend1/fs01", "options": ["net=ib0", "num_cores=2"]}
AUTOBUILD = "# BeeGFS client autobuild (stand-in copy)\nbuildArgs=-j8\nbuildEnabled=true\n"

# host: (inventory vars, {tool: {arg or "": (stdout, rc)}}, kallsyms symbols)
NODES: dict[str, tuple[dict[str, Any], dict[str, dict[str, tuple[str, int]]], list[str]]] = {
    "lustre_ok": ({"netfs_lustre_mounts": [LUSTRE]},
                  {"lctl": {"": ("192.168.10.5@o2ib\n0@lo\n", 0)}}, [LUSTRE_SYM]),
    "lustre_tcp_lnet": ({"netfs_lustre_mounts": [LUSTRE]},
                        {"lctl": {"": ("192.168.10.5@tcp\n", 0)}}, [LUSTRE_SYM]),
    "lustre_no_gds": ({"netfs_lustre_mounts": [LUSTRE]},
                      {"lctl": {"": ("192.168.10.5@o2ib1\n", 0)}}, ["ksocknal_startup"]),
    "lustre_no_client": ({"netfs_lustre_mounts": [LUSTRE]}, {}, [LUSTRE_SYM]),
    "lustre_tcp_source": ({"netfs_lustre_mounts": [dict(LUSTRE, source="10.0.0.1@tcp:/fs0")]},
                          {"lctl": {"": ("192.168.10.5@o2ib\n", 0)}}, [LUSTRE_SYM]),
    "gpfs_ok": ({"netfs_gpfs_filesystems": ["gpfs0"]},
                {"mmlsconfig": {"verbsRdma": ("verbsRdma enable\n", 0),
                                "verbsPorts": ("verbsPorts mlx5_0/1 mlx5_1/1\n", 0)}},
                [SCALE_SYM]),
    "gpfs_rdma_off": ({"netfs_gpfs_filesystems": ["gpfs0"]},
                      {"mmlsconfig": {"verbsRdma": ("verbsRdma disable\n", 0),
                                      "verbsPorts": ("verbsPorts mlx5_0/1\n", 0)}},
                      [SCALE_SYM]),
    "gpfs_no_ports": ({"netfs_gpfs_filesystems": ["gpfs0"]},
                      {"mmlsconfig": {"verbsRdma": ("verbsRdma enable\n", 0),
                                      "verbsPorts": ("", 0)}}, [SCALE_SYM]),
    "gpfs_no_gds_module": ({"netfs_gpfs_filesystems": ["gpfs0"]},
                           {"mmlsconfig": {"verbsRdma": ("verbsRdma enable\n", 0),
                                           "verbsPorts": ("verbsPorts mlx5_0/1\n", 0)}}, []),
    "weka_ok": ({"netfs_wekafs_mounts": [WEKA]}, {"weka": {"": ("4.4.2\n", 0)}}, []),
    "weka_udp": ({"netfs_wekafs_mounts": [dict(WEKA, options=["net=udp"])]},
                 {"weka": {"": ("4.4.2\n", 0)}}, []),
    "weka_no_net": ({"netfs_wekafs_mounts": [dict(WEKA, options=[])]},
                    {"weka": {"": ("4.4.2\n", 0)}}, []),
    "weka_no_client": ({"netfs_wekafs_mounts": [WEKA]}, {}, []),
    "beegfs_ok": ({"netfs_beegfs_gds": True}, {}, []),
    "beegfs_no_client": ({"netfs_beegfs_gds": True}, {}, []),
    "beegfs_no_nv_p2p": ({"netfs_beegfs_gds": True}, {}, []),
}
REFUSED = {"lustre_tcp_lnet", "lustre_no_gds", "lustre_no_client", "lustre_tcp_source",
           "gpfs_rdma_off", "gpfs_no_ports", "gpfs_no_gds_module", "weka_udp", "weka_no_net",
           "weka_no_client", "beegfs_no_client", "beegfs_no_nv_p2p"}


def _node(tmp: Path, name: str) -> dict[str, Any]:
    inv, tools, symbols = NODES[name]
    d = tmp / name
    d.mkdir()
    for tool, outs in tools.items():
        shutil.copy(STANDIN, d / tool)
        for arg, (out, rc) in outs.items():
            (d / (f"{tool}.{arg}.out" if arg else f"{tool}.out")).write_text(out)
            (d / f"{tool}.rc").write_text(str(rc))
    (d / "kallsyms").write_text("".join(KALLSYMS_LINE.format(s, "lnet") for s in symbols)
                                + "ffffffffc0000000 t nvfs_mod_init\t[nvidia_fs]\n")
    shutil.copy(STANDIN, d / "beegfs-rebuild")
    hdr = {"ofed": d / "ofed", "nvfs": d / "nvidia-fs-2.26.6",
           "nvidia": d / "nvidia-580" / "nvidia"}
    for rel in ("ofed/rdma/rdma_cm.h", "nvidia-fs-2.26.6/nvfs-dma.h",
                "nvidia-fs-2.26.6/config-host.h", "nvidia-580/nvidia/nv-p2p.h"):
        if not (name == "beegfs_no_nv_p2p" and rel.endswith("nv-p2p.h")):
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text("/* stand-in header */\n")
    if name != "beegfs_no_client":
        (d / "beegfs-client-autobuild.conf").write_text(AUTOBUILD)
    return dict(inv, ansible_connection="local", ansible_python_interpreter=sys.executable,
                netfs_lctl=str(d / "lctl"), netfs_weka=str(d / "weka"),
                netfs_mmlsconfig=str(d / "mmlsconfig"), netfs_kallsyms=str(d / "kallsyms"),
                netfs_beegfs_autobuild_conf=str(d / "beegfs-client-autobuild.conf"),
                netfs_beegfs_rebuild_command=[str(d / "beegfs-rebuild"), "rebuild"],
                netfs_beegfs_ofed_include_path=str(hdr["ofed"]),
                netfs_beegfs_nvfs_include_path=str(hdr["nvfs"]),
                netfs_beegfs_nvidia_include_path=str(hdr["nvidia"]))


def _play(tmp: Path, hosts: list[str], *args: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Run the role; per host, the results of the tasks that ran (name -> results)."""
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                           "--limit", ",".join(hosts), str(tmp / "play.yml"), *args],
                          capture_output=True, text=True, timeout=240, env=env, check=False)
    doc = json.loads(proc.stdout)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {h: {} for h in hosts}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            out[host].setdefault(task["task"]["name"], []).append(res)
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("netfs_vendor")
    hosts = {name: _node(tmp, name) for name in NODES}
    (tmp / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = [{"name": "netfs", "hosts": "all", "gather_facts": False,
             "roles": [{"role": "netfs"}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    return tmp


@pytest.fixture(scope="module")
def checked(lab: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return _play(lab, sorted(NODES), "--check")


def _failed(tasks: dict[str, list[dict[str, Any]]]) -> str:
    for results in tasks.values():
        for r in results:
            for one in r.get("results", [r]):
                if one.get("failed"):
                    return " ".join(str(one.get("msg", "")).split())
    return ""


def test_missing_prerequisites_are_refused_before_any_change(
        checked: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    refused = {h for h, tasks in checked.items() if _failed(tasks)}
    assert refused == REFUSED
    for host in REFUSED:
        msg = _failed(checked[host])
        assert "nothing was changed" in msg, (host, msg)
        changed = [n for n, rs in checked[host].items() if any(r.get("changed") for r in rs)]
        assert changed == [], (host, changed)


@pytest.mark.parametrize(("host", "words"), [
    ("lustre_tcp_lnet", ["NIDs 192.168.10.5@tcp", "o2ib", "lnetctl net add"]),
    ("lustre_no_gds", ["built without GDS", LUSTRE_SYM]),
    ("lustre_no_client", ["lctl list_nids failed"]),
    ("lustre_tcp_source", ["o2ib network", "compat mode"]),
    ("gpfs_rdma_off", ["verbsRdma is not enabled", "mmchconfig verbsRdma=enable"]),
    ("gpfs_no_ports", ["verbsPorts is not set"]),
    ("gpfs_no_gds_module", [SCALE_SYM]),
    ("weka_udp", ["net=udp is refused"]),
    ("weka_no_net", ["net=ib0"]),
    ("weka_no_client", ["WEKA client is not installed", "14000/dist/v1/install"]),
    ("beegfs_no_client", ["install beegfs-client"]),
    ("beegfs_no_nv_p2p", ["nv-p2p.h", "netfs_beegfs_nvidia_include_path"]),
])
def test_refusal_names_what_is_missing_and_the_vendor_step(
        checked: dict[str, dict[str, list[dict[str, Any]]]], host: str, words: list[str]) -> None:
    msg = _failed(checked[host])
    for w in words:
        assert w in msg, (w, msg)


def test_ready_nodes_mount_only_what_is_listed_in_check_mode(
        lab: Path, checked: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    lustre = checked["lustre_ok"]["netfs : Mount the Lustre file systems over LNet o2ib"][0]
    (item,) = lustre["results"]
    assert item["changed"] and item["fstype"] == "lustre"
    assert item["src"] == "10.0.0.1@o2ib:/fs0" and item["opts"] == "_netdev,flock"
    weka = checked["weka_ok"]["netfs : Mount the WekaFS file systems over the RDMA interface"][0]
    (item,) = weka["results"]
    assert item["fstype"] == "wekafs" and item["opts"] == "_netdev,net=ib0,num_cores=2"
    assert not _failed(checked["gpfs_ok"])
    # Storage Scale mounts its own file systems (mmmount): nothing is mounted for gpfs_ok.
    assert all(not r.get("changed") for rs in checked["gpfs_ok"].values() for r in rs)
    # check mode wrote nothing: the BeeGFS autobuild file is as it was, no rebuild ran
    assert (lab / "beegfs_ok" / "beegfs-client-autobuild.conf").read_text() == AUTOBUILD
    assert not (lab / "beegfs_ok" / "beegfs-rebuild.calls").exists()


def test_beegfs_autobuild_points_at_the_headers_and_rebuilds_once(lab: Path) -> None:
    d = lab / "beegfs_ok"
    first = _play(lab, ["beegfs_ok"])["beegfs_ok"]
    assert not _failed(first)
    line = [ln for ln in (d / "beegfs-client-autobuild.conf").read_text().splitlines()
            if ln.startswith("buildArgs=")]
    assert line == [f"buildArgs=-j8 OFED_INCLUDE_PATH={d / 'ofed'} NVFS_INCLUDE_PATH="
                    f"{d / 'nvidia-fs-2.26.6'} NVIDIA_INCLUDE_PATH={d / 'nvidia-580' / 'nvidia'}"]
    names = {k.split("=")[0] for k in line[0].split()[1:]}
    assert names == set(FACTS["beegfs_autobuild"]["build_args"])
    assert "buildEnabled=true" in (d / "beegfs-client-autobuild.conf").read_text()
    assert (d / "beegfs-rebuild.calls").read_text() == "rebuild\n"
    second = _play(lab, ["beegfs_ok"])["beegfs_ok"]
    assert not any(r.get("changed") for rs in second.values() for r in rs)
    assert (d / "beegfs-rebuild.calls").read_text() == "rebuild\n"
