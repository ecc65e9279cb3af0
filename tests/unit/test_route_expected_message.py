"""route.expected on a compat node says what is missing, not "a GDS stack is installed": the
H100 capture (tests/fixtures/gather/h100-ubuntu24.04_no-nvidia-fs.yml: CUDA 13's libcufile and
NVIDIA's /etc/cufile.json only, no nvidia-fs, no gds-tools, a kernel without P2PDMA) and a
synthetic nvfs node whose nvidia_fs is installed but not loaded."""

from __future__ import annotations

import json
from typing import Any

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.policy import Policy
from tests.unit import fixture_loader
from tests.unit import nodefacts as nf


def route_expected(doc: dict[str, Any]) -> Any:
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    _, results, _ = checks.evaluate(facts, iotest.evaluate({}, route=route), Policy.default(),
                                    route=route, io_path="/mnt/gds")
    return route, {c.id: c for c in results}["route.expected"]


def test_h100_with_only_libcufile_is_told_what_is_missing() -> None:
    data = dict(fixture_loader.load("gather"))["h100-ubuntu24.04_no-nvidia-fs"]
    route, res = route_expected(json.loads(data["output"][0]))
    assert route == "compat" and res.status == "fail"
    assert "A GDS stack is installed" not in res.message
    assert res.message.startswith("No direct GDS route on this node: ")
    for gap in ("nvidia_fs is not loaded (no nvidia-fs installed)",
                "the kernel has no PCI P2PDMA (no p2pdma_pgmap_ops, no pci_p2pdma_add_resource)",
                "gdscheck (gds-tools) is not installed"):
        assert gap in res.message, (gap, res.message)
    assert "Present: libcufile, cufile.json, so cuFile runs in compat mode only" in res.message


def test_installed_but_unloaded_nvidia_fs_is_named() -> None:
    route, res = route_expected(nf.gather_doc(route="nvfs", nvfs_loaded=False,
                                              gdscheck_nvme="compat"))
    assert route == "compat" and res.status == "fail"
    assert "nvidia_fs is not loaded;" in res.message  # installed: no "(no nvidia-fs installed)"
    assert "gdscheck reports no direct NVMe route" in res.message
    assert "gdscheck, libcufile, cufile.json" in res.message
