"""Checks and policy over SYNTHETIC node states (tests/unit/nodefacts.py): compliant nvfs and
p2pdma nodes, nvidia-fs missing, unpatched NVMe, wrong cufile.json, ext4 without data=ordered,
no GPU, no kvikio, and the real H100 case (no nvidia-fs, compat works)."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult, IoTestResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf


def run(doc: dict[str, Any], io: dict[str, Any], policy: Policy | None = None) -> tuple[
        str, dict[str, CheckResult], bool, IoTestResult]:
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    io_result = iotest.evaluate(io, route=route)
    route, results, compliant = checks.evaluate(facts, io_result, policy or Policy.default(),
                                                route=route, io_path="/mnt/gds")
    by_id = {c.id: c for c in results}
    assert len(by_id) == len(results)  # ids are unique per node
    return route, by_id, compliant, io_result


def failing(by_id: dict[str, CheckResult]) -> set[str]:
    return {k for k, c in by_id.items() if c.status == "fail"}


def test_compliant_nvfs_node() -> None:
    route, by_id, compliant, io = run(nf.gather_doc(route="nvfs"), nf.direct_nvfs_io())
    assert route == "nvfs"
    assert failing(by_id) == set()
    assert compliant is True
    assert io.path_taken == "direct" and io.evidence["proof"] == "nvfs_counters"
    assert io.write_gbps == round((1 << 30) / 0.25 / 1e9, 3)
    assert by_id["nvfs.nvme.patched"].status == "pass"
    assert by_id["p2pdma.kernel"].status == "skip"
    assert by_id["io.direct_path"].status == "pass"


def test_compliant_p2pdma_node() -> None:
    route, by_id, compliant, io = run(nf.gather_doc(route="p2pdma"), nf.direct_p2pdma_io())
    assert route == "p2pdma"
    assert failing(by_id) == set(), failing(by_id)
    assert compliant is True
    assert io.evidence["proof"] == "cufile_log"  # no nvidia-fs counters on this route
    assert by_id["nvfs.module.loaded"].status == "skip"
    assert by_id["p2pdma.cufile"].status == "pass"
    assert by_id["p2pdma.nvme_multipath"].status == "pass"


def test_nvidia_fs_missing_is_compat_and_says_what_to_do() -> None:
    doc = nf.gather_doc(route="nvfs", nvfs_loaded=False, gdscheck_nvme="compat")
    route, by_id, compliant, io = run(doc, nf.compat_io(), Policy(expected_route="nvfs"))
    assert route == "compat"
    assert compliant is False
    assert io.path_taken == "compat"
    assert {"nvfs.module.loaded", "gdscheck.nvme", "route.expected",
            "io.direct_path"} <= failing(by_id)
    assert "modprobe nvidia_fs" in by_id["nvfs.module.loaded"].message
    assert "POSIX" in by_id["io.direct_path"].message


def test_unpatched_nvme_means_compat() -> None:
    doc = nf.gather_doc(route="nvfs", patched_nvme=False, gdscheck_nvme="compat")
    route, by_id, compliant, _ = run(doc, nf.compat_io(with_stats=True))
    assert route == "compat"
    assert not compliant
    assert by_id["nvfs.nvme.patched"].status == "fail"
    assert "mlnx-nvme-dkms" in by_id["nvfs.nvme.patched"].message
    assert by_id["nvfs.module.loaded"].status == "pass"


def test_without_gdscheck_route_comes_from_kernel_evidence() -> None:
    doc = nf.gather_doc(route="nvfs", patched_nvme=False)
    doc["items"]["gdscheck"] = {"rc": None, "out": "", "err": "not found"}
    facts = build_facts(doc)
    assert checks.determine_route(facts) == "compat"
    doc2 = nf.gather_doc(route="nvfs")
    doc2["items"]["gdscheck"] = {"rc": None, "out": "", "err": "not found"}
    assert checks.determine_route(build_facts(doc2)) == "nvfs"
    doc3 = nf.gather_doc(route="p2pdma")
    doc3["items"]["gdscheck"] = {"rc": None, "out": "", "err": "not found"}
    assert checks.determine_route(build_facts(doc3)) == "p2pdma"


@pytest.mark.parametrize(
    ("cufile", "status", "check_id", "needle"),
    [
        ('{"properties": {"allow_compat_mode": true}}', "fail", "cufile.compat_mode",
         "allow_compat_mode false"),
        ('{"properties": {"allow_compat_mode": false, "force_compat_mode": true}}', "fail",
         "cufile.compat_mode", "force_compat_mode"),
        ('{"properties": {"allow_compat_mode": false', "fail", "cufile.json.valid",
         "not valid JSON"),
        ("MISSING", "fail", "cufile.json.valid", "does not exist"),
        ('{"properties": {"allow_compat_mode": false, "max_pinned_memory_size": 1}}', "warn",
         "cufile.json.valid", "max_device_pinned_mem_size_kb"),
        ('{"properties": {"allow_compat_mode": false, "io_batchsize": "128"}}', "warn",
         "cufile.json.valid", "properties.io_batchsize: expected an integer"),
        ('{"properties": {"allow_compat_mode": false}, "execution": {"max_batch_io_size": 8}}',
         "warn", "cufile.json.valid", "did you mean properties.io_batchsize?"),
    ],
)
def test_wrong_cufile_json(cufile: str, status: str, check_id: str, needle: str) -> None:
    _, by_id, compliant, _ = run(nf.gather_doc(route="nvfs", cufile=cufile), nf.direct_nvfs_io())
    assert by_id[check_id].status == status
    assert needle in by_id[check_id].observed + by_id[check_id].message
    assert compliant is (status == "warn")


def test_allow_compat_true_is_accepted_when_policy_allows_it() -> None:
    doc = nf.gather_doc(route="nvfs", cufile='{"properties": {"allow_compat_mode": true}}')
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io(),
                                 Policy(require_allow_compat_false=False))
    assert by_id["cufile.compat_mode"].status == "pass"
    assert compliant


def test_p2pdma_block_key_without_kernel_support_fails_on_nvfs_route() -> None:
    cf = '{"properties": {"allow_compat_mode": false}, "block": {"nvme": {"use_pci_p2pdma": true}}}'
    _, by_id, _, _ = run(nf.gather_doc(route="nvfs", cufile=cf), nf.direct_nvfs_io())
    assert by_id["p2pdma.cufile"].status == "fail"


def test_p2pdma_node_missing_prerequisites() -> None:
    doc = nf.gather_doc(route="p2pdma", multipath="Y", p2pdma_kernel=False,
                        gdscheck_nvme="compat",
                        cufile='{"properties": {"allow_compat_mode": false, '
                               '"use_pci_p2pdma": true}}')
    route, by_id, compliant, _ = run(doc, nf.compat_io(), Policy(expected_route="p2pdma"))
    assert route == "compat" and not compliant
    assert {"p2pdma.kernel", "p2pdma.nvme_multipath"} <= failing(by_id)
    # NVIDIA's P2PDMA guide sets only properties.use_pci_p2pdma: the block key may be absent
    assert by_id["p2pdma.cufile"].status == "pass"
    assert "block.nvme=unset" in by_id["p2pdma.cufile"].observed


@pytest.mark.parametrize(
    ("fstype", "opts", "status"),
    [("ext4", "rw,relatime", "fail"), ("ext4", "rw,relatime,data=ordered", "pass"),
     ("ext4", "rw,data=journal", "fail"), ("xfs", "rw,noatime", "pass")],
)
def test_ext4_needs_explicit_data_ordered(fstype: str, opts: str, status: str) -> None:
    doc = nf.gather_doc(route="nvfs", fstype=fstype, mount_opts=opts)
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    assert by_id["fs.mount.options"].status == status
    assert compliant is (status == "pass")


def test_unsupported_filesystem_and_missing_mount() -> None:
    _, by_id, _, _ = run(nf.gather_doc(fstype="btrfs"), nf.direct_nvfs_io())
    assert by_id["fs.mount.type"].status == "fail"
    assert "compat" in by_id["fs.mount.type"].message
    _, by_id, compliant, _ = run(nf.gather_doc(mounted=False), nf.direct_nvfs_io())
    assert by_id["fs.mount.present"].status == "fail"
    assert by_id["fs.mount.options"].status == "skip"
    assert not compliant


def test_no_gpu() -> None:
    doc = nf.gather_doc(route="nvfs", driver=None, gpus=0)
    route, by_id, compliant, io = run(
        doc, nf.skipped_io("gpu", "no usable CUDA GPU: cudaErrorNoDevice"))
    assert not compliant
    assert io.path_taken == "skipped" and "no usable CUDA GPU" in io.reason
    assert {"gpu.driver.loaded", "gpu.present", "io.direct_path"} <= failing(by_id)
    assert by_id["gpu.driver.open"].status == "skip"


def test_proprietary_driver_fails_with_the_fix() -> None:
    _, by_id, compliant, _ = run(nf.gather_doc(driver="proprietary"), nf.direct_nvfs_io())
    assert by_id["gpu.driver.open"].status == "fail"
    assert "open" in by_id["gpu.driver.open"].message.lower()
    assert not compliant


def test_no_kvikio_is_a_skip_with_reason_and_not_compliant() -> None:
    reason = "kvikio is not importable with /usr/bin/python3: No module named 'kvikio'"
    _, by_id, compliant, io = run(nf.gather_doc(), nf.skipped_io("kvikio", reason))
    assert io.path_taken == "skipped" and io.reason == reason
    assert by_id["io.direct_path"].status == "fail"
    assert reason in by_id["io.direct_path"].message
    assert by_id["io.data_integrity"].status == "skip"
    assert not compliant
    # a policy that does not require the I/O test accepts the node on its other evidence
    _, by_id, compliant, _ = run(nf.gather_doc(), nf.skipped_io("kvikio", reason),
                                 Policy(require_io_test=False))
    assert by_id["io.direct_path"].status == "skip"
    assert compliant


def test_h100_without_nvidia_fs_io_works_through_posix_only() -> None:
    # the real H100 machine: no nvidia-fs, no gds-tools, libcufile 1.15.1; compat I/O at 1.2-1.9
    doc = nf.gather_doc(route="none", nvfs_loaded=False, patched_nvme=False,
                        cufile="MISSING", packages="")
    doc["items"]["gdscheck"] = {"rc": None, "out": "", "err": "not found"}
    io = nf.compat_io("RuntimeError: cuFile error at: cuFileHandleRegister: GPUDirect Storage "
                      "not supported on current file")
    route, by_id, compliant, result = run(doc, io)
    assert route == "compat"  # libcufile is there, the direct route is not
    assert not compliant
    assert result.path_taken == "compat" and result.verified
    assert result.write_gbps and 1.0 < result.write_gbps < 2.0
    assert result.evidence["is_gds_available"] is False
    assert "not supported on current file" in result.reason


def test_counters_standing_still_on_nvfs_mean_compat() -> None:
    io = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats(mmap=3), after=nf.stats(mmap=3))
    _, by_id, compliant, result = run(nf.gather_doc(route="nvfs"), io)
    assert result.path_taken == "compat"
    assert by_id["io.direct_path"].status == "fail"
    assert not compliant


def test_iommu_policy_warn_or_fail() -> None:
    _, by_id, compliant, _ = run(nf.gather_doc(iommu="pt"), nf.direct_nvfs_io())
    assert by_id["iommu.state"].status == "warn" and compliant
    _, by_id, compliant, _ = run(nf.gather_doc(iommu="on"), nf.direct_nvfs_io(),
                                 Policy(iommu="fail"))
    assert by_id["iommu.state"].status == "fail" and not compliant


def test_reboot_pending() -> None:
    doc = nf.gather_doc(reboot_reasons=["nvidia_fs: initramfs rebuilt"])
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io())
    assert by_id["reboot.pending"].status == "fail"
    assert "initramfs" in by_id["reboot.pending"].observed
    assert not compliant
    _, by_id, compliant, _ = run(doc, nf.direct_nvfs_io(), Policy(reboot_pending="warn"))
    assert by_id["reboot.pending"].status == "warn" and compliant


def test_expected_route_mismatch() -> None:
    _, by_id, compliant, _ = run(nf.gather_doc(route="nvfs"), nf.direct_nvfs_io(),
                                 Policy(expected_route="p2pdma"))
    assert by_id["route.expected"].status == "fail"
    assert not compliant


def test_throughput_floor() -> None:
    _, by_id, compliant, _ = run(nf.gather_doc(), nf.direct_nvfs_io(),
                                 Policy(min_write_gbps=10.0))
    assert by_id["io.throughput"].status == "fail" and not compliant
    _, by_id, compliant, _ = run(nf.gather_doc(), nf.direct_nvfs_io(),
                                 Policy(min_write_gbps=2.0, min_read_gbps=2.0))
    assert by_id["io.throughput"].status == "pass" and compliant


def test_every_check_has_a_message_and_valid_status() -> None:
    _, by_id, _, _ = run(nf.gather_doc(route="nvfs", nvfs_loaded=False), nf.compat_io())
    for c in by_id.values():
        assert c.status in ("pass", "fail", "warn", "skip")
        assert c.message.strip(), c.id
        assert c.id.count(".") >= 1
