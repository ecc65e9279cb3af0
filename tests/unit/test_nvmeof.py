"""NVMe over Fabrics: the nvmeof role's filters (plugins/filter/nvmeof.py) over nvme-cli 2.x
list-subsys/discover JSON, and verify's fs.mount.transport resolution (mountinfo device number
-> namespace or md members -> controller transport), on the files in tests/fixtures/nvmeof/
(formats and sources named in its README)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from provisioner.verify.parsers import storage

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "nvmeof"
POOL_A = "nqn.2024-01.com.example:gds-pool-a"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gdsfleet_nvmeof_filter",
                                                  ROOT / "plugins" / "filter" / "nvmeof.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nf = _load()


def target(**kw: Any) -> dict[str, Any]:
    t = {"address": "10.20.0.5", "transport": "rdma", "service_id": "4420", "nqn": POOL_A,
         "discovery": False, "gds": True, "host_traddr": ""}
    t.update(kw)
    return t


@pytest.mark.parametrize("name", ["list-subsys-2.11.json", "list-subsys-2.0.json"])
def test_paths_from_both_list_subsys_shapes(name: str) -> None:
    paths = nf.nvmeof_paths((FIX / name).read_text())
    first = paths[0]
    assert first == {"nqn": POOL_A, "subsys": "nvme-subsys1", "controller": "nvme1",
                     "transport": "rdma", "traddr": "10.20.0.5", "trsvcid": "4420",
                     "state": "live"}


def test_paths_of_garbage_are_empty() -> None:
    assert nf.nvmeof_paths("") == [] and nf.nvmeof_paths("not json") == []


def test_plan_skips_what_is_live_and_connects_the_rest() -> None:
    live = nf.nvmeof_paths((FIX / "list-subsys-2.11.json").read_text())
    plan = nf.nvmeof_plan([target(), target(address="10.20.1.5")], [], live)
    assert plan["connect"] == []  # nvme1 live, nvme2 connecting: both count as connected
    plan = nf.nvmeof_plan([target(address="10.20.2.5")], [], live)
    assert [t["address"] for t in plan["connect"]] == ["10.20.2.5"]


def test_plan_from_discovery_connects_rdma_entries_only() -> None:
    disc = target(discovery=True, nqn="")
    results = [{"item": disc, "stdout": (FIX / "discover-2.x.json").read_text()}]
    live = nf.nvmeof_paths((FIX / "list-subsys-2.11.json").read_text())
    plan = nf.nvmeof_plan([disc], results, live)
    assert [(t["nqn"], t["transport"]) for t in plan["connect"]] == [
        ("nqn.2024-01.com.example:gds-pool-b", "rdma")]  # pool-a is live, the tcp port skipped
    assert len(plan["skipped"]) == 1 and "tcp" in plan["skipped"][0]


@pytest.mark.parametrize(("multipath", "want"), [(True, ["1"]), (False, ["1", "2"])])
def test_instances_follow_native_multipath(multipath: bool, want: list[str]) -> None:
    text = (FIX / "list-subsys-2.11.json").read_text()
    assert nf.nvmeof_instances(text, [target()], multipath) == want


def _transport(target_path: str, topo: str, multipath: bool = True) -> list[dict[str, str]]:
    info = storage.parse_mountinfo((FIX / "mountinfo.txt").read_text())
    m = [i for i in info if i["target"] == target_path][-1]
    return storage.mount_transports(m["source"], m["devno"],
                                    storage.parse_nvme_topology((FIX / topo).read_text()),
                                    multipath)


def test_mountinfo_fields() -> None:
    info = storage.parse_mountinfo((FIX / "mountinfo.txt").read_text())
    assert info[1] == {"devno": "259:5", "target": "/mnt/gds", "fstype": "xfs",
                       "source": "/dev/nvme1n1"}


def test_rdma_namespace_resolves_every_path() -> None:
    paths = _transport("/mnt/gds", "topology-rdma.json")
    assert [(p["controller"], p["transport"]) for p in paths] == [("nvme1", "rdma"),
                                                                   ("nvme2", "rdma")]


def test_without_multipath_the_name_is_the_controller() -> None:
    paths = _transport("/mnt/gds", "topology-rdma.json", multipath=False)
    assert [p["controller"] for p in paths] == ["nvme1"]


def test_md_members_on_tcp_are_found() -> None:
    paths = _transport("/mnt/raid", "topology-tcp-md.json")
    assert {p["transport"] for p in paths} == {"tcp", "rdma"}


def test_local_root_is_pcie() -> None:
    assert [p["transport"] for p in _transport("/", "topology-rdma.json")] == ["pcie"]


def test_no_topology_means_nothing_visible() -> None:
    assert storage.mount_transports("/dev/loop3", "7:3", {}) == []


def _check(topo: str, target_path: str = "/mnt/gds", route: str = "nvfs") -> Any:
    from provisioner.verify import checks, iotest
    from provisioner.verify.facts import build_facts
    from provisioner.verify.policy import Policy
    from tests.unit import nodefacts

    doc = nodefacts.gather_doc(route=route)
    mounts = "".join(f"{i['source']} {i['target']} {i['fstype']} rw,noatime 0 0\n" for i in
                     storage.parse_mountinfo((FIX / "mountinfo.txt").read_text()))
    doc["items"]["mounts"] = {"kind": "file", "rc": 0, "out": mounts, "err": ""}
    doc["items"]["mountinfo"] = {"kind": "file", "rc": 0,
                                 "out": (FIX / "mountinfo.txt").read_text(), "err": ""}
    doc["items"]["nvme_topology"] = {"kind": "probe", "rc": 0,
                                     "out": json.dumps(json.loads((FIX / topo).read_text())),
                                     "err": ""}
    facts = build_facts(doc)
    seen = checks.determine_route(facts)
    assert seen == route
    _, results, _ = checks.evaluate(facts, iotest.evaluate({}, route=seen), Policy.default(),
                                    route=seen, io_path=target_path)
    return {c.id: c for c in results}["fs.mount.transport"]


def test_check_passes_rdma_and_fails_tcp() -> None:
    assert _check("topology-rdma.json").status == "pass"
    failed = _check("topology-tcp-md.json", "/mnt/raid")
    assert failed.status == "fail"
    assert "GDS does not work over NVMe/TCP" in failed.message and "RDMA" in failed.message


def test_md_members_are_marked_with_their_array() -> None:
    assert {p["md"] for p in _transport("/mnt/raid", "topology-pcie-md.json", False)} == {"md127"}
    assert {p["md"] for p in _transport("/mnt/gds", "topology-rdma.json")} == {""}


def test_p2pdma_route_fails_nvme_of_and_md_raid() -> None:
    # NVIDIA's P2PDMA guide: NVMe-oF and RAID0 over NVMe are not supported on that route
    rdma = _check("topology-rdma.json", route="p2pdma")
    assert rdma.status == "fail", rdma
    assert "NVMe-oF (rdma)" in rdma.message and "nvfs route" in rdma.message
    raid = _check("topology-pcie-md.json", "/mnt/raid", route="p2pdma")
    assert raid.status == "fail", raid
    assert "md RAID (md127)" in raid.message
    # the same mounts pass on the nvfs route, and one local namespace passes on p2pdma
    assert _check("topology-rdma.json").status == "pass"
    assert _check("topology-pcie-md.json", "/mnt/raid").status == "pass"
    assert _check("topology-pcie-md.json", route="p2pdma").status == "pass"


def test_schema_has_the_rdma_keys_nvmeof_needs() -> None:
    schema = ROOT / "plugins" / "module_utils" / "cufile_schema.json"
    keys = json.loads(schema.read_text())["keys"]
    for key in ("properties.rdma_dev_addr_list", "properties.rdma_load_balancing_policy",
                "block.nvmeof.use_pci_p2pdma"):
        assert key in keys


def test_persist_splits_discovery_from_nqn_targets_and_dedups_on_the_full_key() -> None:
    disc = target(discovery=True, nqn="")
    targets = [
        target(), target(),                                   # the same NQN target twice
        target(nqn="nqn.2024-01.com.example:gds-pool-b"),     # another subsystem, same port
        disc, dict(disc),                                     # the same discovery line twice
        dict(disc, service_id="8009"),                        # another port of that address
        dict(disc, host_traddr="10.20.0.11"),                 # from another local address
        dict(disc, transport="tcp"),                          # another transport
    ]
    plan = nf.nvmeof_persist(targets)
    # NQN targets are connected one by one at boot, never written as discovery lines
    assert [t["nqn"] for t in plan["connect"]] == [POOL_A, "nqn.2024-01.com.example:gds-pool-b"]
    assert all(t["discovery"] for t in plan["discovery"])
    assert [(t["transport"], t["service_id"], t["host_traddr"]) for t in plan["discovery"]] == [
        ("rdma", "4420", ""), ("rdma", "8009", ""), ("rdma", "4420", "10.20.0.11"),
        ("tcp", "4420", "")]
    assert nf.nvmeof_persist([]) == {"discovery": [], "connect": []}
