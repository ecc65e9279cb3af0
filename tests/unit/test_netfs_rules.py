"""The network filesystems' capability table and rules (issue 43 items 1 and 2): kernel RDMA
through nvidia-fs for NFS, Lustre, BeeGFS and ScaTeFS, cuFile's userspace RDMA for WekaFS and
Storage Scale, the P2PDMA route for virtiofs; gdscheck 1.16+'s mode lists. Fed NVIDIA's own
outputs (tests/fixtures/gdscheck/: the GDS 1.0 README sample, the 1.16.0.49 troubleshooting guide
sample, ThinkParQ/beegfs#123's 1.18.1.6 output); the states built here are SYNTHETIC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import collection_utils
from provisioner.verify import netfs
from provisioner.verify.parsers import gdscheck
from provisioner.verify.policy import Policy
from tests.unit.fixture_loader import load

rules = collection_utils.load("netfs_rules.py")
ROOT = Path(__file__).resolve().parents[2]
CAPTURES = [(n, c) for n, c in load("gdscheck") if c.get("netfs_expected")]
NFS_RDMA = ["rw", "vers=3", "proto=rdma", "port=20049"]


def _parsed(text: str) -> dict[str, Any]:
    return gdscheck.parse(text).to_dict()


@pytest.mark.parametrize(("name", "case"), CAPTURES, ids=[n for n, _ in CAPTURES])
def test_nvidias_own_outputs_judged_per_filesystem(name: str, case: dict[str, Any]) -> None:
    """Each capture, each mount type: exactly the reasons the fixture names (words of each)."""
    parsed = _parsed(case["text"])
    for fstype, words in case["netfs_expected"].items():
        opts = NFS_RDMA if fstype.startswith("nfs") else []
        missing = netfs.prerequisites(fstype, opts, parsed, nvfs_loaded=True)
        assert len(missing) == len(words), (fstype, missing)
        for want, got in zip(words, missing, strict=True):
            assert want in got, (fstype, want, got)


def test_readme_sample_nfs_node_is_ready_for_nfs_over_rdma() -> None:
    """Issue 43's example: NFS Supported, the cuFile RDMA library Not Loaded, Up: 0 Down: 0,
    nvidia-fs loaded. NFS uses kernel RDMA through nvidia-fs: nothing is missing (it used to
    be 'the cuFile RDMA library is not loaded' and 'no RDMA device up')."""
    case = dict(load("gdscheck"))["netfs-gds-1.0.0.71_readme-sample"]
    parsed = _parsed(case["text"])
    assert netfs.prerequisites("nfs4", NFS_RDMA, parsed, nvfs_loaded=True) == []
    assert netfs.prerequisites("nfs4", NFS_RDMA, parsed, nvfs_loaded=False) == [
        "nvidia-fs is not loaded (gdsfleet.gds.nvidia_fs)"]


KERNEL_LINES = {"nfs": "NFS", "lustre": "DDN EXAScaler", "beegfs": "BeeGFS",
                "scatefs": "ScaTeFS"}


@pytest.mark.parametrize("fstype", sorted(KERNEL_LINES))
def test_kernel_rdma_filesystems_need_no_cufile_rdma_library(fstype: str) -> None:
    driver = {KERNEL_LINES[fstype]: "Supported", "--rdma library": "Not Loaded",
              "--rdma_device_status": "Up: 0 Down: 0", "Userspace RDMA": "Unsupported",
              "--Mellanox PeerDirect": "Disabled"}
    opts = NFS_RDMA if fstype == "nfs" else []
    assert netfs.prerequisites(fstype, opts, {"driver": driver}, True, {}) == []
    # without gdscheck (a GPU Operator node): no client NIC in cufile.json is needed either
    e = rules.filesystems()[fstype]
    node = {"operator": True, "client_modules": [e["client_module"]], "rdma_readable": True,
            "rdma_ports": [{"device": "mlx5_0", "port": "1", "state": "ACTIVE"}],
            "rdma_active": 1, "rdma_dev_addr_list": None, "symbols": [e["registration_symbol"]]}
    assert netfs.prerequisites(fstype, opts, None, True, node) == []


USERSPACE = {"wekafs": "WekaFS", "gpfs": "IBM Spectrum Scale"}
READY = {"Userspace RDMA": "Supported", "--Mellanox PeerDirect": "Enabled",
         "--rdma library": "Loaded (libcufile_rdma.so)", "--rdma devices": "Configured",
         "--rdma_device_status": "Up: 2 Down: 0"}


@pytest.mark.parametrize("fstype", sorted(USERSPACE))
@pytest.mark.parametrize(("change", "words"), [
    ({"Userspace RDMA": "Unsupported"}, "Userspace RDMA : Unsupported"),
    ({"--rdma library": "Not Loaded (libcufile_rdma.so)"}, "RDMA library is not loaded"),
    ({"--rdma_device_status": "Up: 0 Down: 2"}, "no RDMA device up"),
    ({"--Mellanox PeerDirect": "Disabled"}, "nvidia_peermem"),
])
def test_userspace_rdma_filesystems_need_every_piece(fstype: str, change: dict[str, str],
                                                     words: str) -> None:
    driver = {USERSPACE[fstype]: "Supported", **READY}
    assert netfs.prerequisites(fstype, [], {"driver": driver}, True, {}) == []
    missing = netfs.prerequisites(fstype, [], {"driver": {**driver, **change}}, True, {})
    assert len(missing) == 1 and words in missing[0], missing


@pytest.mark.parametrize("fstype", sorted(USERSPACE))
def test_nvidia_peermem_or_dmabuf_either_will_do(fstype: str) -> None:
    driver = {USERSPACE[fstype]: "Supported", **READY, "--Mellanox PeerDirect": "Disabled"}
    gc = {"driver": driver}
    assert netfs.prerequisites(fstype, [], gc, True, {"peermem_loaded": True}) == []
    assert netfs.prerequisites(fstype, [], gc, True, {"rdma_peer_type": "dmabuf"}) == []
    assert netfs.prerequisites(fstype, [], {"driver": {**driver, "--DmaBuf support": "Enabled"}},
                               True, {}) == []
    # on a GPU Operator node (no gdscheck): the module or the cufile.json key, and the NICs
    e = rules.filesystems()[fstype]
    node = {"operator": True, "client_modules": [e["client_module"]], "rdma_readable": True,
            "rdma_ports": [{"device": "mlx5_0", "port": "1", "state": "ACTIVE"}],
            "rdma_active": 1, "rdma_dev_addr_list": ["192.0.2.10"]}
    missing = netfs.prerequisites(fstype, [], None, True, node)
    assert len(missing) == 1 and "nvidia_peermem" in missing[0]
    assert netfs.prerequisites(fstype, [], None, True, {**node, "rdma_peer_type": "dmabuf"}) == []


def test_mode_lists_count_each_filesystems_own_direct_tokens() -> None:
    """gdscheck 1.16+: dmabuf / nvidia_peermem are WekaFS's and Storage Scale's direct modes,
    p2pdma / c2c virtiofs's; a p2pdma token on IBM Spectrum Scale is no GPFS route (gds-diag
    DESIGN.md: the global use_pci_p2pdma false positive)."""
    assert netfs.line_supported("wekafs", "dmabuf, compat")
    assert netfs.line_supported("gpfs", "nvidia_peermem, compat")
    assert not netfs.line_supported("gpfs", "p2pdma, compat")
    assert netfs.line_supported("nfs", "nvfs, compat") and netfs.line_supported("nfs", "Supported")
    assert not netfs.line_supported("nfs", "dmabuf, compat")
    assert netfs.line_supported("virtiofs", "p2pdma, compat")
    assert netfs.line_supported("virtiofs", "c2c, compat")
    assert not netfs.line_supported("virtiofs", "nvfs, compat")
    for fstype in netfs.NETWORK_FILESYSTEMS:
        assert not netfs.line_supported(fstype, "compat")
        assert not netfs.line_supported(fstype, "Unsupported")
    # the one tokenizer: the NVMe parser reads the same tokens
    assert gdscheck.mode_tokens is rules.mode_tokens
    assert gdscheck.classify_nvme("c2c, nvfs, compat").modes == ("c2c", "nvfs", "compat")


def test_lustre_is_exascaler_or_fsx_lustre() -> None:
    fsx = {"DDN EXAScaler": "compat", "FSx Lustre": "Supported"}
    assert netfs.prerequisites("lustre", [], {"driver": fsx}, True, {}) == []
    ddn = {"DDN EXAScaler": "nvfs, compat", "FSx Lustre": "compat"}
    assert netfs.prerequisites("lustre", [], {"driver": ddn}, True, {}) == []
    none = netfs.prerequisites("lustre", [], {"driver": {"DDN EXAScaler": "compat",
                                                         "FSx Lustre": "compat"}}, True, {})
    assert none == ["gdscheck says DDN EXAScaler : compat; FSx Lustre : compat"]


def test_virtiofs_takes_the_p2pdma_route_without_nvidia_fs() -> None:
    both = {"properties.use_pci_p2pdma": True, "fs.virtiofs.use_pci_p2pdma": True}
    gc = {"driver": {"VIRTIOFS": "p2pdma, compat"}}
    assert netfs.prerequisites("virtiofs", [], gc, nvfs_loaded=False, node={}) == []
    missing = netfs.prerequisites("virtiofs", [], {"driver": {"VIRTIOFS": "compat"}}, False,
                                  {"cufile_keys": {"properties.use_pci_p2pdma": True}})
    assert missing[0] == "gdscheck says VIRTIOFS : compat"
    assert missing[1].startswith("cufile.json does not set fs.virtiofs.use_pci_p2pdma to true")
    op = {"operator": True, "cufile_keys": both}
    assert netfs.prerequisites("virtiofs", [], None, False, op) == []
    assert netfs.NETWORK_FILESYSTEMS["virtiofs"].route == "p2pdma"


# -- the table: one copy, read everywhere ---------------------------------------------------------
def test_table_entries_are_complete_and_cite_their_sources() -> None:
    table = rules.table()
    seen: set[str] = set()
    for name, e in table["filesystems"].items():
        assert e["sources"] and set(e["sources"]) <= set(table["sources"]), name
        assert e["rdma"] in ("kernel", "userspace", "none") and e["route"] in ("nvfs", "p2pdma")
        assert e["p2pdma"] in (True, False, "config"), name
        assert set(e["direct_tokens"]) <= rules.DIRECT_TOKENS | {"supported"}, name
        assert not seen & set(e["mount_types"]), name
        seen |= set(e["mount_types"])
        if e["rdma"] == "userspace":
            assert e["write_key"] and not e["nvfs_counters"], name


def test_everything_that_knew_a_copy_reads_the_table() -> None:
    from provisioner.remote import _netfs_state
    from tests.conformance import simnode

    types = rules.mount_types()
    assert set(netfs.NETWORK_FILESYSTEMS) == set(types)
    assert set(Policy.default().network_filesystems) == set(types)
    mods = {e["client_module"] for e in rules.filesystems().values() if e["client_module"]}
    assert mods - {"nvme_rdma"} <= set(_netfs_state.NETFS_CLIENT_MODULES)
    for fstype, mod in simnode.NETFS_CLIENT_MODULE.items():
        assert rules.entry(fstype)["client_module"] == mod, fstype
    # the cufile.json keys the rules read are keys of the one schema
    schema = json.loads((ROOT / "plugins/module_utils/cufile_schema.json").read_text())["keys"]
    assert set(rules.cufile_keys()) <= set(schema), set(rules.cufile_keys()) - set(schema)
    # playbooks/verify.yml holds no table of its own: it asks the collection's filters
    text = (ROOT / "playbooks" / "verify.yml").read_text()
    for gone in ("__netfs_gdscheck_line", "__netfs_client_module", "__netfs_cufile_section"):
        assert gone not in text
    assert "gdsfleet.gds.netfs_prerequisites" in text and "gdsfleet.gds.netfs_capability" in text
    # the roles: the cufile role asks the table which filesystems need client NICs, the netfs
    # role's NFS client check greps the table's registration symbol
    assert "gdsfleet.gds.netfs_capability" in (ROOT / "roles/cufile/vars/main.yml").read_text()
    nfs_sym = rules.filesystems()["nfs"]["registration_symbol"]
    assert nfs_sym in (ROOT / "roles/netfs/tasks/nfs_client.yml").read_text()


def test_fixture_modules_match_the_table() -> None:
    fx = yaml.safe_load((ROOT / "tests/fixtures/netfs/nvfs_client_modules.yml").read_text())
    for fstype, mod in fx["client_module"].items():
        assert netfs.NETWORK_FILESYSTEMS[fstype].client_module == mod


# -- verify.yml's filter is the same rule, with the node's raw state converted -----------------
def _filter() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gdsfleet_netfs_filter",
                                                  ROOT / "plugins/filter/netfs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


STATES = st.sampled_from(["ACTIVE", "DOWN", "INIT"])


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.sampled_from(sorted(rules.mount_types())),
       st.lists(st.sampled_from(["Supported", "Unsupported", "compat", "nvfs, compat",
                                 "dmabuf, compat", "p2pdma, compat"]), min_size=1, max_size=1),
       st.booleans(), st.booleans(), st.lists(STATES, max_size=3),
       st.sampled_from([None, [], ["192.0.2.10"]]), st.sampled_from([None, "dmabuf"]),
       st.booleans())
def test_the_filter_and_verify_judge_alike(fstype: str, value: list[str], operator: bool,
                                           nvfs: bool, ports: list[str], addrs: Any,
                                           peer: Any, peermem: bool) -> None:
    e = rules.entry(fstype)
    text = (" DRIVER CONFIGURATION:\n ====\n"
            f" {e['gdscheck_lines'][0]} : {value[0]}\n --rdma library : Loaded\n"
            " --rdma_device_status : Up: 1 Down: 0\n Userspace RDMA : Supported\n ====\n")
    cfg = {"properties": {"rdma_peer_type": peer} if peer else {}}
    if addrs is not None:
        cfg["properties"]["rdma_dev_addr_list"] = addrs
    lines = [f"/sys/class/infiniband/mlx5_{i}/ports/1/state:4: {s}" for i, s in enumerate(ports)]
    mods = ([e["client_module"]] if e["client_module"] else []) + (
        ["nvidia_peermem"] if peermem else [])
    raw = {"operator": operator, "client_modules": mods, "peermem_loaded": peermem,
           "symbols": None, "cufile": cfg, "rdma_port_lines": lines}
    got = _filter().netfs_prerequisites("" if operator else text.splitlines(), fstype,
                                        "rw,proto=rdma", nvfs, raw)
    node = {**rules.cufile_evidence(cfg), **rules.ports_from_sysfs(lines), "operator": operator,
            "client_modules": mods, "peermem_loaded": peermem, "symbols": None}
    want = netfs.prerequisites(fstype, ["rw", "proto=rdma"],
                               None if operator else _parsed(text), nvfs, node)
    assert got == want


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.text(max_size=300), st.lists(st.text(max_size=30), max_size=6), st.booleans())
def test_rules_never_raise_on_hostile_output(text: str, opts: list[str], nvfs: bool) -> None:
    """gdscheck's output and the mount options are the node's: any text gives reasons, never
    an exception; without nvidia-fs an nvfs-route filesystem always names it."""
    driver = rules.driver_config(text)
    for fstype in rules.mount_types():
        out = rules.prerequisites(fstype, opts, driver, nvfs, {"operator": driver is None})
        assert isinstance(out, list) and all(isinstance(m, str) for m in out)
        if not nvfs and rules.entry(fstype)["route"] == "nvfs":
            assert out[-1] == "nvidia-fs is not loaded (gdsfleet.gds.nvidia_fs)"
