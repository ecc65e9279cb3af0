"""The I/O test on network filesystems (issue 43 items 3 and 5): WekaFS and Storage Scale never
move nvidia-fs's counters, so cuFile's own per-process statistics (gds_stats) prove their path
and their write key judges the writes; /proc/driver/nvidia-fs/modules, read while the test holds
nvidia-fs open, says which drivers nvidia-fs registered with. The gds_stats parser is fed
NVIDIA's published sample (tests/fixtures/gds_stats/); the I/O documents are SYNTHETIC
(tests/unit/nodefacts.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.remote import iotest as node_iotest
from provisioner.verify import checks, iostats, iotest, proof
from provisioner.verify.facts import build_facts
from provisioner.verify.model import PROOF_KINDS
from provisioner.verify.parsers import gds_stats
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf
from tests.unit.fixture_loader import load
from tests.unit.test_checks_netfs import netfs_doc

STATS = load("gds_stats")
WEKA_116 = {"WekaFS": "dmabuf, compat", "Userspace RDMA": "Supported",
            "--DmaBuf support": "Enabled"}
WEKA_CTX = {"fstype": "wekafs", "name": "WekaFS", "rdma": "userspace", "nvfs_counters": False,
            "write_key": "fs.weka.rdma_write_support", "writes_direct": False}


@pytest.mark.parametrize(("name", "case"), STATS, ids=[n for n, _ in STATS])
def test_gds_stats_sample_parses(name: str, case: dict[str, Any]) -> None:
    got = gds_stats.parse(case["text"])
    assert got["parsed"] and got["gpus"] >= 1
    for key, want in case["expected"].items():
        assert got[key] == want, key


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.text(max_size=600))
def test_gds_stats_parser_takes_any_text(text: str) -> None:
    got = gds_stats.parse(text)
    if got["parsed"]:
        assert all(got[k] >= 0 for k in ("read_mib", "write_mib", "read_posix", "write_posix"))
    else:
        assert got["read_mib"] is None


def test_old_rule_called_a_working_wekafs_node_compat() -> None:
    """Without knowing the filesystem, counters that do not move mean compat on the nvfs route:
    right for NFS or NVMe, wrong for WekaFS (what verify said before issue 43)."""
    io = iotest.evaluate(nf.direct_userspace_io(), route="nvfs")
    assert io.path_taken == "compat"


def test_wekafs_reads_proven_by_cufiles_own_statistics() -> None:
    io = iotest.evaluate(nf.direct_userspace_io(), route="nvfs", netfs=WEKA_CTX)
    assert io.path_taken == "direct" and io.direct_proven, io.reason
    assert io.evidence["proof"] == "cufile_stats" in PROOF_KINDS
    assert "fs.weka.rdma_write_support" in io.reason and "POSIX" in io.reason


def test_wekafs_writes_judged_by_rdma_write_support() -> None:
    ctx = {**WEKA_CTX, "writes_direct": True}
    posix_writes = iotest.evaluate(nf.direct_userspace_io(), route="nvfs", netfs=ctx)
    assert posix_writes.path_taken == "compat"
    assert "fs.weka.rdma_write_support is true" in posix_writes.reason
    direct = iotest.evaluate(nf.direct_userspace_io(writes_direct=True), route="nvfs", netfs=ctx)
    assert direct.direct_proven and "unless" not in direct.reason


def test_wekafs_reads_through_posix_are_compat() -> None:
    io = iotest.evaluate(nf.direct_userspace_io(read_posix=12), route="nvfs", netfs=WEKA_CTX)
    assert io.path_taken == "compat" and "posix=12" in io.reason


def test_wekafs_without_gds_stats_is_unproven_and_says_why() -> None:
    doc = nf.direct_userspace_io()
    doc["attempts"][0]["cufile_stats"] = {"tool": None, "rc": None, "out": "",
                                          "err": "gds_stats not found (gds-tools)"}
    io = iotest.evaluate(doc, route="nvfs", netfs=WEKA_CTX)
    assert io.path_taken == "direct" and not io.direct_proven
    assert "gds_stats not found" in io.reason and "never moves nvidia-fs" in io.reason


def test_a_wekafs_node_with_116_lines_is_compliant_end_to_end() -> None:
    doc = netfs_doc("wekafs", "rw,relatime", "default", WEKA_116)
    facts = build_facts(doc)
    ctx = iostats.netfs_context(facts, "/mnt/gds")
    assert ctx == WEKA_CTX
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_userspace_io(), route=route, netfs=ctx)
    route, results, compliant = checks.evaluate(facts, io, Policy.default(), route=route,
                                                io_path="/mnt/gds")
    by_id = {c.id: c for c in results}
    assert compliant, {c.id: c.message for c in results if c.status == "fail"}
    assert by_id["io.direct_path"].status == "pass"
    assert proof.disagreement(io, facts) is None
    # the same proof with nvidia-fs not loaded contradicts the gather
    facts["nvfs"] = {**facts["nvfs"], "loaded": False}
    assert "nvidia-fs not loaded" in (proof.disagreement(io, facts) or "")


def test_weka_write_key_comes_from_the_nodes_cufile_json() -> None:
    doc = netfs_doc("wekafs", "rw,relatime", "default", WEKA_116,
                    cufile='{"properties": {"allow_compat_mode": false}, '
                           '"fs": {"weka": {"rdma_write_support": true}}}')
    ctx = iostats.netfs_context(build_facts(doc), "/mnt/gds")
    assert ctx is not None and ctx["writes_direct"] is True
    local = iostats.netfs_context(build_facts(nf.gather_doc(route="nvfs")), "/mnt/gds")
    assert local is None


# -- item 5: the modules nvidia-fs registered with ------------------------------------------------
MODULES = "nvme: (null)\nwekafsio: 1\nrpcrdma: (null)\n"


def _registered(doc: dict[str, Any], io: dict[str, Any]) -> Any:
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    result = iotest.evaluate(io, route=route, netfs=iostats.netfs_context(facts, "/mnt/gds"))
    _, results, compliant = checks.evaluate(facts, result, Policy.default(), route=route,
                                            io_path="/mnt/gds")
    return {c.id: c for c in results}["nvfs.registered"], compliant


def _with_modules(io: dict[str, Any], text: str | None) -> dict[str, Any]:
    io["attempts"][0]["nvfs_modules"] = text
    return io


def test_modules_file_names_what_nvidia_fs_registered_with() -> None:
    assert iostats.parse_modules(MODULES) == ["nvme", "rpcrdma", "wekafsio"]
    assert iostats.parse_modules("") == [] and iostats.parse_modules(None) is None
    assert iostats.parse_modules("$(reboot): x\n" + "a" * 5000) == []


def test_local_nvme_must_be_registered_with_nvidia_fs() -> None:
    doc = nf.gather_doc(route="nvfs")
    res, compliant = _registered(doc, _with_modules(nf.direct_nvfs_io(), MODULES))
    assert res.status == "pass" and compliant, res
    res, compliant = _registered(doc, _with_modules(nf.direct_nvfs_io(), "wekafsio: 1\n"))
    assert res.status == "fail" and not compliant
    assert "nvme" in res.expected and "#87" in res.message
    res, _ = _registered(doc, nf.direct_nvfs_io())  # not read: an older node script
    assert res.status == "skip"


def test_nfs_client_must_be_registered_and_wekafs_is_not_asked() -> None:
    nfs = netfs_doc("nfs", "rw,vers=3,proto=rdma,port=20049", "10.0.0.5:/e", {"NFS": "Supported"})
    res, _ = _registered(nfs, _with_modules(nf.direct_nvfs_io(), "nvme: (null)\n"))
    assert res.status == "fail" and "rpcrdma" in res.expected
    res, _ = _registered(nfs, _with_modules(nf.direct_nvfs_io(), MODULES))
    assert res.status == "pass"
    weka = netfs_doc("wekafs", "rw,relatime", "default", WEKA_116)
    res, _ = _registered(weka, _with_modules(nf.direct_userspace_io(), "nvme: (null)\n"))
    assert res.status == "skip" and "userspace RDMA" in res.message


# -- the node side: read while the attempt holds them open ---------------------------------------
def test_node_reads_gds_stats_of_its_own_process(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "gds_stats"  # TEST STAND-IN for gds-tools' gds_stats
    tool.write_text("#!/bin/sh\necho \"cuFile STATS VERSION : 3 args=$*\"\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    counters = node_iotest._counters  # what the I/O test runs: attest's gds_stats reader
    got = counters.run_gds_stats(4242, 15.0, limit=1 << 16)
    assert got["rc"] == 0 and got["tool"] == str(tool)
    assert "args=-p 4242 -l 3" in got["out"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(counters.glob, "glob", lambda _p: [])
    monkeypatch.setattr(counters.os, "access", lambda _p, _m: False)
    assert counters.run_gds_stats(1, 15.0)["err"] == "gds_stats not found (gds-tools)"
