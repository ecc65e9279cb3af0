"""verify on network filesystems (issue 33): each judged on its own prerequisites. The node
documents are SYNTHETIC stand-ins (tests/unit/nodefacts.py) with the mount table and the
gdscheck DRIVER CONFIGURATION lines swapped for a network mount's; the parser is fed a real
capture (tests/fixtures/gdscheck/netfs-*.yml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import cli
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.verify import checks, iotest, netfs
from provisioner.verify.facts import build_facts
from provisioner.verify.model import IoTestOptions, NodeReport
from provisioner.verify.node import choose_io_path
from provisioner.verify.parsers import gdscheck
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf
from tests.unit.test_checks import failing, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gdscheck"

RDMA_OK = (" --Mellanox PeerDirect : Enabled\n"
           " --rdma library        : Loaded (libcufile_rdma.so)\n"
           " --rdma devices        : Configured\n"
           " --rdma_device_status  : Up: 2 Down: 0\n")
RDMA_OFF = (" --rdma library        : Not Loaded (libcufile_rdma.so)\n"
            " --rdma devices        : Not configured\n"
            " --rdma_device_status  : Up: 0 Down: 0\n")


def netfs_doc(fstype: str, opts: str, source: str, lines: dict[str, str], rdma: str = RDMA_OK,
              **kw: Any) -> dict[str, Any]:
    doc = nf.gather_doc(route="nvfs", **kw)
    items = doc["items"]
    items["mounts"] = nf._ok("/dev/sda1 / ext4 rw,relatime 0 0\n"
                             f"{source} /mnt/gds {fstype} {opts} 0 0\n")
    extra = "".join(f" {k:<19}: {v}\n" for k, v in lines.items()) + rdma
    items["gdscheck"]["out"] = items["gdscheck"]["out"].replace(
        " NVMeOF             : compat\n", " NVMeOF             : compat\n" + extra)
    return doc


NFS_RDMA = "rw,relatime,vers=3,proto=rdma,port=20049,nconnect=8,_netdev"
NFS_TCP = "rw,relatime,vers=3,proto=tcp,nconnect=8,_netdev"


def test_nfs_over_rdma_with_prerequisites_is_compliant_with_counter_proof() -> None:
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"})
    _, by_id, compliant, io = run(doc, nf.direct_nvfs_io())
    assert by_id["fs.mount.type"].status == "pass", by_id["fs.mount.type"]
    assert by_id["fs.mount.nvme"].status == "skip"
    assert by_id["fs.mount.transport"].status == "skip"
    assert failing(by_id) == set()
    assert compliant is True
    assert io.evidence["proof"] == "nvfs_counters"


def test_nfs_over_tcp_is_not_compliant_and_names_tcp() -> None:
    doc = netfs_doc("nfs4", NFS_TCP, "10.0.0.5:/export", {"NFS": "Supported"})
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    res = by_id["fs.mount.type"]
    assert res.status == "fail" and not compliant
    assert "TCP" in res.message and "compat" in res.message and "proto=rdma" in res.message


def test_nfs_without_proto_option_is_tcp() -> None:
    assert netfs.nfs_transport(["rw", "vers=4.2"]) == "tcp"
    assert netfs.nfs_transport(["proto=rdma"]) == "rdma"


@pytest.mark.parametrize(("fstype", "line", "source"), [
    ("lustre", "DDN EXAScaler", "10.0.0.1@o2ib:/fs"),
    ("gpfs", "IBM Spectrum Scale", "gpfs0"),
    ("wekafs", "WekaFS", "wekafs/default"),
    ("beegfs", "BeeGFS", "beegfs_nodev"),
])
def test_each_filesystem_needs_its_own_gdscheck_line(fstype: str, line: str, source: str) -> None:
    ok = netfs_doc(fstype, "rw,relatime", source, {line: "Supported"})
    _, by_id, compliant, _ = run(ok, nf.direct_nvfs_io())
    assert by_id["fs.mount.type"].status == "pass" and compliant
    # another filesystem's line does not count for this one
    other = "NFS" if line != "NFS" else "WekaFS"
    bad = netfs_doc(fstype, "rw,relatime", source, {line: "Unsupported", other: "Supported"})
    _, by_id, compliant, _ = run(bad, nf.direct_nvfs_io())
    assert by_id["fs.mount.type"].status == "fail" and not compliant
    assert f"{line} : Unsupported" in by_id["fs.mount.type"].message


def test_nfs_needs_nvidia_fs_but_no_cufile_rdma_library() -> None:
    """NFS over RDMA is kernel RDMA through nvidia-fs (issue 43 item 1): the cuFile RDMA
    library and its device count do not matter, nvidia-fs does."""
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"}, rdma=RDMA_OFF)
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    assert by_id["fs.mount.type"].status == "pass" and compliant, by_id["fs.mount.type"]
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"},
                    nvfs_loaded=False)
    _, by_id, _, _ = run(doc, nf.direct_nvfs_io())
    assert "nvidia-fs is not loaded" in by_id["fs.mount.type"].message


def test_wekafs_needs_the_cufile_rdma_library_and_a_device() -> None:
    doc = netfs_doc("wekafs", "rw,relatime", "wekafs/default", {"WekaFS": "Supported"},
                    rdma=RDMA_OFF)
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    msg = by_id["fs.mount.type"].message
    assert not compliant and "RDMA library is not loaded" in msg and "rdma_dev_addr_list" in msg
    assert "no RDMA device up" in msg


def test_policy_can_refuse_network_filesystems() -> None:
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"})
    pol = Policy.from_dict({"network_filesystems": []})
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io(), pol)
    assert by_id["fs.mount.type"].status == "fail" and not compliant


def test_real_capture_nfs_supported_but_rdma_not_loaded() -> None:
    """pg-strom's capture (GDS 1.10): NFS Supported with the cuFile RDMA library not loaded is
    ready for NFS over RDMA (kernel RDMA: the library serves WekaFS and Storage Scale)."""
    fx = yaml.safe_load((FIX / "netfs-gds-1.10.0.4_nfs-supported.yml").read_text())
    parsed = gdscheck.parse("\n".join(fx["output"]) + "\n").to_dict()
    assert netfs.prerequisites("nfs", ["proto=rdma"], parsed, nvfs_loaded=True) == []
    beegfs = netfs.prerequisites("beegfs", [], parsed, True)
    assert beegfs == ["gdscheck says BeeGFS : Unsupported"]


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.text(max_size=300), st.lists(st.text(max_size=30), max_size=6))
def test_prerequisites_never_raise_on_hostile_input(text: str, opts: list[str]) -> None:
    parsed = gdscheck.parse(text).to_dict()
    for fstype, fs in netfs.NETWORK_FILESYSTEMS.items():
        out = netfs.prerequisites(fstype, opts, parsed, nvfs_loaded=False)
        assert ("nvidia-fs is not loaded (gdsfleet.gds.nvidia_fs)" in out) is (fs.route == "nvfs")


def test_io_path_defaults_to_the_network_mount() -> None:
    """Without --io-path and with no NVMe mount, verify writes on the network GDS mount (it
    used to fall back to /mnt/gds, not mounted there, and fail fs.mount.present)."""
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"})
    doc["items"]["mounts"] = nf._ok("/dev/sda1 / ext4 rw,relatime 0 0\n"
                                    f"10.0.0.5:/export /mnt/vast nfs {NFS_RDMA} 0 0\n")
    facts = build_facts(doc)
    assert choose_io_path(facts, IoTestOptions(), Policy.default()) == "/mnt/vast"
    assert choose_io_path(facts, IoTestOptions(), Policy.from_dict(
        {"network_filesystems": []})) == "/mnt/gds"


def test_export_env_gives_the_network_mount_like_a_local_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = netfs_doc("nfs", NFS_RDMA, "10.0.0.5:/export", {"NFS": "Supported"})
    facts = build_facts(doc)
    facts["io_path"] = "/mnt/gds"
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_nvfs_io(), route=route)
    route, results, compliant = checks.evaluate(facts, io, Policy.default(), route=route,
                                                io_path="/mnt/gds")
    assert compliant
    report = NodeReport(name="vast-01", reachable=True, compliant=compliant, route=route,
                        checks=results, io_test=io, facts=facts)
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as led:
        run_id = led.start_run("verify", "fleet")
        led.record_verification(run_id, report.to_dict())
        led.finish_run(run_id, "done")
    code = cli.main(["export", "env", "--ledger", str(path), "--node", "vast-01"])
    out = capsys.readouterr().out
    assert code == Exit.OK, out
    assert "export KVIKIO_COMPAT_MODE=OFF" in out
    assert "export GDSFLEET_GDS_MOUNT=/mnt/gds" in out


def test_verify_yml_accepts_every_network_filesystem_of_the_table() -> None:
    # playbooks/verify.yml asks the collection's table (gdsfleet.gds.netfs_capability) which
    # mount types are network filesystems: no list of its own to keep equal
    root = Path(__file__).resolve().parents[2]
    play = yaml.safe_load((root / "playbooks" / "verify.yml").read_text())[0]
    task = next(t for t in play["tasks"]
                if t["name"] == "Assert the GDS filesystem is mounted the way GDS accepts")
    accepted = task["ansible.builtin.assert"]["that"][1]
    assert "gdsfleet.gds.netfs_capability" in accepted


@pytest.mark.parametrize(("fstype", "line", "source", "opts"), [
    ("nfs", "NFS", "10.0.0.5:/export", NFS_RDMA),
    ("lustre", "DDN EXAScaler", "10.0.0.1@o2ib:/fs", "rw,relatime"),
    ("beegfs", "BeeGFS", "beegfs_nodev", "rw,relatime"),
])
def test_network_only_node_without_patched_nvme_is_on_the_nvfs_route(
        fstype: str, line: str, source: str, opts: str) -> None:
    """No local NVMe, so no GDS-patched nvme driver and gdscheck's NVMe line Unsupported: the
    network mount GDS reaches decides the route, and the NVMe-only checks skip (issue 33)."""
    doc = netfs_doc(fstype, opts, source, {line: "Supported"}, patched_nvme=False,
                    gdscheck_nvme="Unsupported")
    facts, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    assert checks.determine_route(build_facts(doc)) == "nvfs"
    for cid in ("nvfs.nvme.patched", "gdscheck.nvme", "fs.mount.nvme"):
        assert by_id[cid].status == "skip", by_id[cid]
    assert "gdscheck.platform" not in by_id or by_id["gdscheck.platform"].status != "warn"
    assert failing(by_id) == set() and compliant is True


def test_network_mount_without_its_prerequisites_does_not_make_the_nvfs_route() -> None:
    """The same node with the NFS mount over TCP: no direct route at all (compat)."""
    doc = netfs_doc("nfs", NFS_TCP, "10.0.0.5:/export", {"NFS": "Supported"}, patched_nvme=False,
                    gdscheck_nvme="Unsupported")
    assert checks.determine_route(build_facts(doc)) == "compat"


# -- GPU Operator nodes: no gdscheck on the host, the node's own state judged -----------------
NVFS_DMA_H = Path(__file__).resolve().parents[1] / "fixtures" / "netfs" / "nvfs_client_modules.yml"


def test_client_modules_are_the_ones_nvidia_fs_registers_with() -> None:
    # the fixture names its source (NVIDIA/gds-nvidia-fs src/nvfs-dma.h at v2.28.4); netfs.py,
    # verify.yml and the gather script must all carry the same module per filesystem
    from provisioner.remote import _netfs_state

    fx = yaml.safe_load(NVFS_DMA_H.read_text())["client_module"]
    assert {k: netfs.NETWORK_FILESYSTEMS[k].client_module for k in fx} == fx
    assert set(fx.values()) <= set(_netfs_state.NETFS_CLIENT_MODULES)


OPERATOR_NODE = {"operator": True, "client_modules": ["rpcrdma"], "rdma_readable": True,
                 "rdma_ports": [{"device": "mlx5_0", "port": "1", "state": "ACTIVE"}],
                 "rdma_active": 1, "rdma_dev_addr_list": ["192.0.2.10"]}


def test_operator_node_without_gdscheck_is_judged_on_its_own_state() -> None:
    assert netfs.prerequisites("nfs", NFS_RDMA.split(","), None, True, OPERATOR_NODE) == []
    for change, words in (
            ({"client_modules": []}, "kernel module rpcrdma is not loaded"),
            ({"rdma_active": 0, "rdma_ports": [{"device": "mlx5_0", "port": "1",
                                                 "state": "DOWN"}]}, "mlx5_0/1 DOWN"),
            ({"rdma_active": 0, "rdma_ports": []}, "no RDMA device"),
            ({"client_modules": None}, "kernel modules were not read"),
            ({"symbols": ["nvme_v1_register_nvfs_dma_ops"]},
             "does not export rpcrdma_register_nvfs_dma_ops")):
        missing = netfs.prerequisites("nfs", NFS_RDMA.split(","), None, True,
                                      {**OPERATOR_NODE, **change})
        assert len(missing) == 1 and words in missing[0], (change, missing)
    # NFS is kernel RDMA: no client NIC in cufile.json needed (issue 43 item 1)
    for addrs in ([], None):
        assert netfs.prerequisites("nfs", NFS_RDMA.split(","), None, True,
                                   {**OPERATOR_NODE, "rdma_dev_addr_list": addrs}) == []
    # WekaFS is cuFile's userspace RDMA: its NICs (properties or its own fs.weka section) and
    # nvidia_peermem or dmabuf
    weka = {**OPERATOR_NODE, "client_modules": ["wekafsio", "nvidia_peermem"],
            "peermem_loaded": True}
    assert netfs.prerequisites("wekafs", [], None, True, weka) == []
    no_nics = netfs.prerequisites("wekafs", [], None, True, {**weka, "rdma_dev_addr_list": []})
    assert len(no_nics) == 1 and "fs.weka.rdma_dev_addr_list" in no_nics[0]
    assert netfs.prerequisites("wekafs", [], None, True, {
        **weka, "rdma_dev_addr_list": None,
        "fs_rdma_dev_addr_list": {"weka": ["192.0.2.11"]}}) == []
    # over TCP it is compat whatever the node shows
    tcp = netfs.prerequisites("nfs", ["proto=tcp"], None, True, OPERATOR_NODE)
    assert len(tcp) == 1 and "over TCP" in tcp[0]
    # a host install is judged by its gdscheck: without one it fails, naming gds-tools
    host = netfs.prerequisites("nfs", NFS_RDMA.split(","), None, True,
                               {**OPERATOR_NODE, "operator": False})
    assert len(host) == 1 and "gds-tools" in host[0]


def test_rdma_ports_parse_the_sysfs_states() -> None:
    item = {"rc": 0, "out": "mlx5_0 1 4: ACTIVE\nmlx5_1 1 1: DOWN\nmlx5_2 2 2: INIT\n"}
    got = netfs.parse_rdma_ports(item)
    assert got["rdma_readable"] and got["rdma_active"] == 1
    assert [p["state"] for p in got["rdma_ports"]] == ["ACTIVE", "DOWN", "INIT"]
    # no /sys/class/infiniband: readable, no port; an older gather (not gathered): not read
    assert netfs.parse_rdma_ports({"rc": None, "err": "missing"}) == {
        "rdma_readable": True, "rdma_ports": [], "rdma_active": 0}
    assert not netfs.parse_rdma_ports({"rc": None, "err": "not gathered"})["rdma_readable"]


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.text(max_size=400), st.sampled_from([0, None, 1]))
def test_rdma_ports_and_client_modules_bound_hostile_text(text: str, rc: int | None) -> None:
    got = netfs.parse_rdma_ports({"rc": rc, "out": text, "err": "missing"})
    assert len(got["rdma_ports"]) <= 64
    for p in got["rdma_ports"]:
        assert len(p["device"]) <= 64 and p["port"].isdigit()
        assert p["state"].replace("_", "").isalpha() and p["state"].isupper()
    assert got["rdma_active"] == sum(p["state"] == "ACTIVE" for p in got["rdma_ports"])
    from provisioner.remote._netfs_state import NETFS_CLIENT_MODULES

    mods = netfs.parse_client_modules(text)
    assert mods is not None and set(mods) <= set(NETFS_CLIENT_MODULES)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.text(max_size=20),
                 st.lists(st.one_of(st.text(max_size=100), st.integers(), st.none()),
                          max_size=80)))
def test_cufile_rdma_dev_addr_list_takes_only_strings(value: Any) -> None:
    import json

    from provisioner.verify.parsers import cufile

    doc = json.dumps({"properties": {"allow_compat_mode": False, "rdma_dev_addr_list": value}})
    got = cufile.parse(doc).to_dict()["rdma_dev_addr_list"]
    fs_doc = json.dumps({"fs": {"nfs": {"rdma_dev_addr_list": value}}})
    assert cufile.parse(fs_doc).to_dict()["fs_rdma_dev_addr_list"]["nfs"] == got
    if not isinstance(value, list):
        assert got is None
    else:
        assert got == [v[:64] for v in value[:64] if isinstance(v, str)]


def test_real_node_without_rdma_device() -> None:
    # captured on an H100 node (Ubuntu 24.04, no RDMA NIC): /sys/class/infiniband exists and is
    # empty; the gather's items as that node sent them (docs/evidence/h100-node/issue33)
    import json

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs/evidence/h100-node/issue33/netfs-node-state.txt").read_text()
    items = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
             for line in text.splitlines()
             if line.startswith(("netfs_client_modules {", "rdma_ports {"))}
    ports = netfs.parse_rdma_ports(items["rdma_ports"])
    assert ports == {"rdma_readable": True, "rdma_ports": [], "rdma_active": 0}
    mods = netfs.parse_client_modules(items["netfs_client_modules"]["out"])
    node = {**OPERATOR_NODE, **ports, "client_modules": mods}
    missing = netfs.prerequisites("nfs", NFS_RDMA.split(","), None, True, node)
    assert any("kernel module rpcrdma is not loaded" in m for m in missing)
    assert any("no RDMA port ACTIVE" in m and "no RDMA device" in m for m in missing)
