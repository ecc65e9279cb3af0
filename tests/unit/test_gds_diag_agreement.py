"""gdsfleet's network-filesystem rules against NVIDIA's gds-diag (issue 43).

NVIDIA's gds-diag (NVIDIA/MagnumIO gds-diag/) publishes, per filesystem, which GDS modes apply
and what each requires; its facts are kept as data in
tests/fixtures/netfs/gds-diag-expectations.yml (commits named there). This test runs gdsfleet's
table (plugins/module_utils/netfs_caps.json) and rules (netfs_rules.prerequisites, the rule of
``provisioner verify``'s fs.mount.type and verify.yml's filter) against each expectation, lists
every disagreement, and fails on one that is not declared deliberate with an upstream source (or
on a declared one that no longer exists). docs/checks.md names each deliberate disagreement.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from provisioner import collection_utils
from provisioner.verify import netfs

rules = collection_utils.load("netfs_rules.py")
ROOT = Path(__file__).resolve().parents[2]
FIXTURE = yaml.safe_load((ROOT / "tests/fixtures/netfs/gds-diag-expectations.yml").read_text())
PORT_UP = [{"device": "mlx5_0", "port": "1", "state": "ACTIVE"}]


def _state(name: str, operator: bool = False) -> dict[str, Any]:
    """A node where every piece gds-diag asks for is in place, for filesystem ``name``."""
    e = rules.filesystems()[name]
    first = e["gdscheck_lines"][0]
    lines = {first: "p2pdma, compat" if e["route"] == "p2pdma" else "Supported"}
    if e["rdma"] == "userspace":
        lines.update({"Userspace RDMA": "Supported", "--Mellanox PeerDirect": "Enabled",
                      "--DmaBuf support": "Disabled",
                      "--rdma library": "Loaded (libcufile_rdma.so)",
                      "--rdma devices": "Configured", "--rdma_device_status": "Up: 1 Down: 0"})
    node = {"operator": operator, "client_modules": [e["client_module"]] if e["client_module"]
            else [], "symbols": [e["registration_symbol"]] if e["registration_symbol"] else [],
            "rdma_readable": True, "rdma_ports": PORT_UP, "rdma_active": 1,
            "peermem_loaded": operator, "rdma_peer_type": None,
            "rdma_dev_addr_list": ["192.0.2.10"], "fs_rdma_dev_addr_list": {},
            "cufile_keys": dict.fromkeys(e.get("p2pdma_keys") or (), True)}
    return {"fstype": e["mount_types"][0], "options": ["proto=rdma"] if name == "nfs" else [],
            "driver": None if operator else {k.lower(): v for k, v in lines.items()},
            "nvfs": True, "node": node}


def _missing(s: dict[str, Any]) -> list[str]:
    """What ``provisioner verify``'s fs.mount.type finds missing in state ``s``."""
    gc = None if s["driver"] is None else {"driver": s["driver"]}
    out: list[str] = netfs.prerequisites(s["fstype"], s["options"], gc, s["nvfs"], s["node"])
    return out


def _without(name: str, piece: str) -> dict[str, Any] | None:
    """The ready state with ``piece`` taken away (None: gdsfleet reads no such input)."""
    s = _state(name, operator=piece == "rdma_dev_addr_list")
    d, node = s["driver"], s["node"]
    if piece == "nvidia_fs_loaded":
        s["nvfs"] = False
    elif piece == "rdma_mount_option":
        s["options"] = ["proto=tcp"]
    elif piece == "rdma_device_active":
        node.update(rdma_ports=[{**PORT_UP[0], "state": "DOWN"}], rdma_active=0)
    elif piece == "peermem_or_dmabuf":
        d["--mellanox peerdirect"] = "Disabled"
        node["peermem_loaded"] = False
    elif piece == "userspace_rdma_supported":
        d["userspace rdma"] = "Unsupported"
    elif piece == "rdma_library_loaded":
        d["--rdma library"] = "Not Loaded (libcufile_rdma.so)"
    elif piece == "rdma_devices_up":
        d["--rdma_device_status"] = "Up: 0 Down: 1"
    elif piece == "rdma_dev_addr_list":
        node.update(rdma_dev_addr_list=None, fs_rdma_dev_addr_list={})
    elif piece == "p2pdma_keys":
        d[rules.filesystems()[name]["gdscheck_lines"][0].lower()] = "compat"
        node["cufile_keys"] = {}
    else:  # ofed_or_doca: gdsfleet asks for no MLNX_OFED/DOCA
        return None
    return s


def disagreements() -> dict[str, str]:
    """Every point where gdsfleet and gds-diag differ: id -> what each says."""
    out: dict[str, str] = {}
    table = rules.filesystems()
    for name, diag in FIXTURE["filesystems"].items():
        e = table[name]
        ours = {"native": e["route"] == "nvfs", "p2pdma": e["p2pdma"],
                "rdma": None if e["rdma"] == "none" else e["rdma"]}
        for mode in ("native", "p2pdma", "rdma"):
            if ours[mode] != diag[mode]:
                out[f"{mode}:{name}"] = f"gds-diag {diag[mode]!r}, gdsfleet {ours[mode]!r}"
        if set(diag["gdscheck_keys"]) != set(e["gdscheck_lines"]):
            out[f"gdscheck_keys:{name}"] = f"gds-diag {diag['gdscheck_keys']}, " \
                                           f"gdsfleet {e['gdscheck_lines']}"
        lost = sorted(set(diag["aliases"]) - set(e["mount_types"]))
        if lost:
            out[f"aliases:{name}"] = f"gdsfleet does not take {lost}"
        for piece, verdict in (diag.get("pieces") or {}).items():
            s = _without(name, piece)
            required = bool(s is not None and _missing(s))
            if required != (verdict == "fail"):
                out[f"{piece}:{name}"] = (f"gds-diag {verdict}, gdsfleet "
                                          f"{'fails' if required else 'does not check it'}")
    return out


def test_every_ready_state_is_ready() -> None:
    """The states the comparison starts from meet gdsfleet's rules (else every piece would
    look required)."""
    for name in FIXTURE["filesystems"]:
        if rules.filesystems()[name]["mount_types"]:
            assert _missing(_state(name)) == [], name
            assert _missing(_state(name, operator=True)) == [], name


def test_gdsfleet_agrees_with_gds_diag_except_where_it_says_why() -> None:
    found = disagreements()
    declared = {d["id"]: d for d in FIXTURE["deliberate"]}
    undeclared = {k: v for k, v in found.items() if k not in declared}
    assert not undeclared, ("gdsfleet disagrees with gds-diag here; fix gdsfleet or declare it "
                            f"with an upstream source: {undeclared}")
    stale = sorted(set(declared) - set(found))
    assert not stale, f"declared disagreements that no longer exist: {stale}"
    for d in declared.values():
        assert d["gdsfleet"].strip() and d["source"].strip(), d["id"]


def test_docs_name_every_deliberate_disagreement() -> None:
    text = (ROOT / "docs" / "checks.md").read_text()
    for d in FIXTURE["deliberate"]:
        assert f"`{d['id']}`" in text, d["id"]


def test_gds_diag_gdscheck_verdicts_are_gdsfleets() -> None:
    for case in FIXTURE["gdscheck_cases"]:
        s = _state(case["fstype"])
        s["driver"] = rules.driver_config(
            [" DRIVER CONFIGURATION:", *case["lines"], " ====="])
        node = copy.deepcopy(s["node"])
        node["peermem_loaded"] = False
        got = rules.prerequisites(s["fstype"], s["options"], s["driver"], True, node)
        assert (got == []) is case["native"], (case["name"], got)


def test_the_fixture_covers_every_filesystem_of_the_table() -> None:
    assert set(FIXTURE["filesystems"]) == set(rules.filesystems())
