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
NFS = {"path": "/mnt/vast", "server": "192.0.2.10", "export": "/gds", "vers": "3"}
NFS_SYM = "rpcrdma_register_nvfs_dma_ops"
K612 = "6.12.0-124.56.1.el10_1.x86_64"  # ThinkParQ/beegfs#123's kernel

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
    # BeeGFS 8.4 on a kernel before 6.6: the GPL-only rule does not apply (issue 43 item 10)
    "beegfs_ok": ({"netfs_beegfs_gds": True, "netfs_beegfs_version": "8.4.0",
                   "netfs_kernel_release": "5.14.0-503.35.1.el9_5.x86_64"}, {}, []),
    "beegfs_no_client": ({"netfs_beegfs_gds": True}, {}, []),
    "beegfs_no_nv_p2p": ({"netfs_beegfs_gds": True}, {}, []),
    # BeeGFS 8's DKMS client (issue 43 item 10): dkms status names the module's version
    "beegfs8_dkms_ok": ({"netfs_beegfs_gds": True, "netfs_kernel_release": K612},
                        {"dkms": {"status": (f"beegfs/8.5.0, {K612}, x86_64: installed\n", 0)}},
                        []),
    "beegfs84_k612": ({"netfs_beegfs_gds": True, "netfs_kernel_release": K612},
                      {"dkms": {"status": (f"beegfs/8.4.0, {K612}, x86_64: installed\n", 0)}}, []),
    # the NFS client by symbol (item 4): the loaded rpcrdma, else the one modprobe would load
    "nfs_loaded_gds": ({"netfs_nfs_mounts": [NFS]}, {}, [NFS_SYM]),
    "nfs_loaded_stock": ({"netfs_nfs_mounts": [NFS]}, {}, []),
    "nfs_depmod_gds": ({"netfs_nfs_mounts": [NFS]}, {}, []),
    "nfs_depmod_stock": ({"netfs_nfs_mounts": [NFS]}, {}, []),
}
REFUSED = {"lustre_tcp_lnet", "lustre_no_gds", "lustre_no_client", "lustre_tcp_source",
           "gpfs_rdma_off", "gpfs_no_ports", "gpfs_no_gds_module", "weka_udp", "weka_no_net",
           "weka_no_client", "beegfs_no_client", "beegfs_no_nv_p2p", "beegfs84_k612",
           "nfs_loaded_stock", "nfs_depmod_stock"}
# BeeGFS 8's build configuration (ThinkParQ/beegfs 8.3.1
# client_module/build/dist/etc/beegfs-client-build.mk): its example lines commented out
BUILD_MK = ("# BeeGFS client module DKMS build configuration (stand-in copy)\n"
            "#OFED_INCLUDE_PATH=/usr/src/ofa_kernel/default/include\n"
            "#OFED_INCLUDE_PATH=/usr/src/openib/include\n#BEEGFS_NO_RDMA=1\n"
            "#NVFS_INCLUDE_PATH=/usr/src/nvidia-fs-2.13.5\n"
            "#NVIDIA_INCLUDE_PATH=/usr/src/nvidia-520.61.05/nvidia\n")


def _node(tmp: Path, name: str) -> dict[str, Any]:
    inv, tools, symbols = NODES[name]
    d = tmp / name
    d.mkdir()
    for tool, outs in tools.items():
        shutil.copy(STANDIN, d / tool)
        for arg, (out, rc) in outs.items():
            (d / (f"{tool}.{arg}.out" if arg else f"{tool}.out")).write_text(out)
            (d / f"{tool}.rc").write_text(str(rc))
    (d / "kallsyms").write_text("".join(KALLSYMS_LINE.format(
        s, "rpcrdma" if s.startswith("rpcrdma") else "lnet") for s in symbols)
                                + "ffffffffc0000000 t nvfs_mod_init\t[nvidia_fs]\n")
    (d / "sys_module").mkdir()
    if name.startswith("nfs_loaded"):
        (d / "sys_module" / "rpcrdma").mkdir()
    # depmod's modules.symbols (kmod tools/depmod.c output_symbols)
    (d / "modules.symbols").write_text(
        "# Aliases for symbols, used by symbol_request().\n"
        "alias symbol:svc_rdma_recv_ctxt_put rpcrdma\n"
        + ("alias symbol:rpcrdma_register_nvfs_dma_ops rpcrdma\n" if name == "nfs_depmod_gds"
           else ""))
    shutil.copy(STANDIN, d / "beegfs-rebuild")
    hdr = {"ofed": d / "ofed", "nvfs": d / "nvidia-fs-2.26.6",
           "nvidia": d / "nvidia-580" / "nvidia"}
    for rel in ("ofed/rdma/rdma_cm.h", "nvidia-fs-2.26.6/nvfs-dma.h",
                "nvidia-fs-2.26.6/config-host.h", "nvidia-580/nvidia/nv-p2p.h"):
        if not (name == "beegfs_no_nv_p2p" and rel.endswith("nv-p2p.h")):
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text("/* stand-in header */\n")
    if name != "beegfs_no_client" and not name.startswith(("beegfs8", "beegfs84")):
        (d / "beegfs-client-autobuild.conf").write_text(AUTOBUILD)
    if name.startswith(("beegfs8", "beegfs84")):
        (d / "beegfs-client-build.mk").write_text(BUILD_MK)
    return dict(inv, ansible_connection="local", ansible_python_interpreter=sys.executable,
                netfs_lctl=str(d / "lctl"), netfs_weka=str(d / "weka"),
                netfs_mmlsconfig=str(d / "mmlsconfig"), netfs_kallsyms=str(d / "kallsyms"),
                netfs_beegfs_autobuild_conf=str(d / "beegfs-client-autobuild.conf"),
                netfs_beegfs_rebuild_command=[str(d / "beegfs-rebuild"), "rebuild"],
                netfs_beegfs_build_mk=str(d / "beegfs-client-build.mk"),
                netfs_beegfs_dkms_command=[str(d / "dkms")],
                netfs_sys_module=str(d / "sys_module"),
                netfs_modules_symbols=str(d / "modules.symbols"),
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
                          capture_output=True, text=True, timeout=600, env=env, check=False)
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
    ("beegfs_no_client", ["install beegfs-client",
                          "beegfs-client-build.mk (BeeGFS 8, the DKMS client)"]),
    ("beegfs_no_nv_p2p", ["nv-p2p.h", "netfs_beegfs_nvidia_include_path"]),
    ("beegfs84_k612", ["BeeGFS 8.4.0 on kernel 6.12", "GPL-only", "ThinkParQ/beegfs#123",
                       "8.5 or later"]),
    ("nfs_loaded_stock", ["the loaded rpcrdma does not", NFS_SYM, "mlnx-nfsrdma-dkms",
                          "VAST", "linux-nvidia"]),
    ("nfs_depmod_stock", ["the rpcrdma modprobe would load does not", "modules.symbols"]),
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


def test_beegfs8_dkms_build_points_at_the_headers_and_rebuilds_once(lab: Path) -> None:
    """BeeGFS 8 builds its client under DKMS from beegfs-client-build.mk (issue 43 item 10): the
    role sets its three make variables (the commented examples stay) and has DKMS rebuild the
    module once; the autobuild file is not needed."""
    d = lab / "beegfs8_dkms_ok"
    first = _play(lab, ["beegfs8_dkms_ok"])["beegfs8_dkms_ok"]
    assert not _failed(first)
    text = (d / "beegfs-client-build.mk").read_text()
    assert text.startswith(BUILD_MK)
    assert text[len(BUILD_MK):].splitlines() == [
        f"OFED_INCLUDE_PATH={d / 'ofed'}", f"NVFS_INCLUDE_PATH={d / 'nvidia-fs-2.26.6'}",
        f"NVIDIA_INCLUDE_PATH={d / 'nvidia-580' / 'nvidia'}"]
    calls = (d / "dkms.calls").read_text().splitlines()
    assert calls[-2:] == ["build beegfs/8.5.0 --force", "install beegfs/8.5.0 --force"]
    assert not (d / "beegfs-client-autobuild.conf").exists()
    second = _play(lab, ["beegfs8_dkms_ok"])["beegfs8_dkms_ok"]
    assert not any(r.get("changed") for rs in second.values() for r in rs)
    assert (d / "dkms.calls").read_text().count("--force") == 2


def test_nfs_client_is_judged_by_the_symbol_it_exports(
        checked: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    """No package asked for: a loaded rpcrdma exporting the registration, or the rpcrdma depmod
    would load exporting it (VAST's client, a linux-nvidia kernel), is ready."""
    for host in ("nfs_loaded_gds", "nfs_depmod_gds"):
        assert not _failed(checked[host]), host
        mounted = checked[host]["netfs : Mount the NFS exports over RDMA"][0]["results"]
        assert [r["fstype"] for r in mounted] == ["nfs"]
    assert not _failed(checked["beegfs_ok"])  # BeeGFS 8.4 on 5.14: the GPL rule is 6.6+'s


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
