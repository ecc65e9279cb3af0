"""nvfs.nvme.patched on NVMe-oF: nvidia-fs registers with the GDS-patched nvme-rdma through
nvme_rdma_v1_register_nvfs_dma_ops (NVIDIA/gds-nvidia-fs src/nvfs-dma.c; fixture
tests/fixtures/kallsyms/). The gather script keeps that symbol, the parser reads it, and the
check requires it when the GDS mount's transport is rdma on the nvfs route."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.remote import gather
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.parsers import kernel, storage
from provisioner.verify.policy import Policy
from tests.unit import nodefacts

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = yaml.safe_load((ROOT / "tests" / "fixtures" / "kallsyms"
                           / "nvfs-dma-modules-list.yml").read_text())
NVMEOF = ROOT / "tests" / "fixtures" / "nvmeof"
LOCAL = "ffffffffc0a1b2c0 T nvme_v1_register_nvfs_dma_ops\t[nvme]"
RDMA = "ffffffffc0c3d4e0 T nvme_rdma_v1_register_nvfs_dma_ops\t[nvme_rdma]"


def test_the_fixture_names_its_source() -> None:
    assert UPSTREAM["source"] == {"repository": "https://github.com/NVIDIA/gds-nvidia-fs",
                                  "path": "src/nvfs-dma.c"}
    assert all(len(v["commit"]) == 40 for v in UPSTREAM["tags"].values())


@pytest.mark.parametrize("tag", sorted(UPSTREAM["tags"]))
def test_gather_keeps_and_the_parser_reads_every_upstream_name(tag: str) -> None:
    wanted = set(gather.KALLSYMS_WANTED) | set(gather.KALLSYMS_NVMEOF)
    names = UPSTREAM["tags"][tag]
    for sym in names["nvme"] + names["nvme_rdma"]:
        assert sym in wanted, (tag, sym)
    for sym in names["nvme_rdma"]:
        if "_unregister_" in sym:
            continue
        parsed = kernel.parse_kallsyms(f"ffffffffc0c3d4e0 T {sym}\t[nvme_rdma]\n")
        assert parsed["nvfs_rdma_dma_ops"] == sym
        assert parsed["nvfs_rdma_dma_ops_module"] == "nvme_rdma"
        assert parsed["nvfs_dma_ops"] is None


def test_gather_keeps_the_rdma_symbol_after_many_nvidia_fs_symbols(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia_fs's own symbols (all with "nvfs" in the name) come first and are capped; the
    # registration symbols must survive the cap
    lines = [f"ffffffffc1{i:06x} t nvfs_fn_{i}\t[nvidia_fs]\n" for i in range(1500)]
    text = "".join(lines) + LOCAL + "\n" + RDMA + "\n" + "ffffffff81000000 T other_symbol\n"

    def fake_open(path: str, mode: str = "r", *a: Any, **kw: Any) -> Any:
        assert path == "/proc/kallsyms" and "b" in mode
        return io.BytesIO(text.encode())

    monkeypatch.setattr(gather, "open", fake_open, raising=False)
    res = gather.grep_kallsyms()
    assert res["rc"] == 0
    kept = res["out"].splitlines()
    assert LOCAL in kept and RDMA in kept
    assert len(kept) <= gather.KALLSYMS_NVFS_MAX + gather.KALLSYMS_EXACT_MAX
    assert not any("other_symbol" in k for k in kept)


def _patched(kallsyms: list[str], topo: str = "topology-rdma.json") -> Any:
    doc = nodefacts.gather_doc(route="nvfs")
    info = (NVMEOF / "mountinfo.txt").read_text()
    doc["items"]["mounts"] = {"kind": "file", "rc": 0, "err": "", "out": "".join(
        f"{i['source']} {i['target']} {i['fstype']} rw,noatime 0 0\n"
        for i in storage.parse_mountinfo(info))}
    doc["items"]["mountinfo"] = {"kind": "file", "rc": 0, "out": info, "err": ""}
    doc["items"]["nvme_topology"] = {"kind": "probe", "rc": 0, "err": "",
                                     "out": json.dumps(json.loads((NVMEOF / topo).read_text()))}
    doc["items"]["kallsyms"] = {"kind": "grep", "rc": 0, "out": "\n".join(kallsyms), "err": ""}
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    _, results, _ = checks.evaluate(facts, iotest.evaluate({}, route=route), Policy.default(),
                                    route=route, io_path="/mnt/gds")
    return {c.id: c for c in results}["nvfs.nvme.patched"]


def test_an_rdma_mount_over_an_unpatched_nvme_rdma_fails() -> None:
    res = _patched([LOCAL])
    assert res.status == "fail", res
    assert "nvme_rdma_v1_register_nvfs_dma_ops" in res.expected
    assert "NVMe-oF (rdma)" in res.message and "mlnx-nvme" in res.message


def test_an_rdma_mount_over_a_patched_nvme_rdma_passes() -> None:
    res = _patched([LOCAL, RDMA])
    assert res.status == "pass", res
    assert "nvme_rdma_v1_register_nvfs_dma_ops" in res.observed
    # NVMe-oF only: the local nvme driver need not be loaded or patched
    assert _patched([RDMA]).status == "pass"


def test_a_local_mount_needs_only_the_local_symbol() -> None:
    res = _patched([LOCAL], topo="topology-pcie-md.json")
    assert res.status == "pass", res
    # nvidia-fs 2.26.6 on a 6.1 kernel looks up the v1 name (nvfs_lookup)
    assert res.expected == "nvme_v1_register_nvfs_dma_ops in kallsyms"
    assert _patched([RDMA], topo="topology-pcie-md.json").status == "fail"
