"""Checks on a node whose driver and nvidia-fs come from the NVIDIA GPU Operator, over SYNTHETIC
gather documents (tests/unit/nodefacts.py, changed the way such a host looks: the module loaded
and visible in /proc and /sys, /run/nvidia/driver and /run/nvidia/validations present, no host
nvidia-fs/CUDA package, no DKMS, no gdscheck, no modinfo-visible .ko, no nvidia-smi)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

HOST_ONLY = ("nvfs.persist", "nvfs.dkms", "nvfs.dkms.boot_kernel", "libcufile.present",
             "packages.gds", "gdscheck.present")


def operator_doc(*, validations: str | None = "driver-ready\nnvidia-fs-ready\ntoolkit-ready",
                 driver_root: str | None = "lib\nusr", host_packages: str | None = None,
                 dkms: str = "", nvfs_loaded: bool = True) -> dict[str, Any]:
    doc = nf.gather_doc(route="nvfs", nvfs_loaded=nvfs_loaded, packages=host_packages or (
        "doca-ofed\t3.1.0-1\tii \nmlnx-nvme-dkms\t25.07-1\tii \n"))
    it = doc["items"]
    missing = {"rc": None, "out": "", "err": "missing"}
    not_found = {"rc": None, "out": "", "err": "not found"}
    it["nvfs_modules_load"] = missing
    it["modinfo_nvfs_version"] = {"rc": 1, "out": "", "err": "modinfo: ERROR: Module nvidia_fs "
                                  "not found."}
    it["modinfo_license"] = {"rc": 1, "out": "", "err": "modinfo: ERROR: Module nvidia not found."}
    it["nvidia_smi_L"] = not_found
    it["nvidia_smi_query"] = not_found
    it["nvidia_gpus_information"] = {"rc": 0, "err": "", "out": (
        "# /proc/driver/nvidia/gpus/0000:41:00.0/information\nModel: \t\t NVIDIA H100 80GB HBM3\n"
        "Bus Location: \t 0000:41:00.0\n")}
    it["dkms_status"] = {"rc": 0, "out": dkms, "err": ""} if dkms else not_found
    it["gdscheck"] = {"kind": "cmd", "rc": None, "out": "", "err": "not found"}
    it["libcufile"] = {"rc": None, "out": "", "err": "not found"}
    it["operator_driver_root"] = ({"rc": 0, "out": driver_root, "err": "",
                                   "path": "/run/nvidia/driver"} if driver_root is not None
                                  else dict(missing, path="/run/nvidia/driver"))
    it["operator_validations"] = ({"rc": 0, "out": validations, "err": "",
                                   "path": "/run/nvidia/validations"} if validations is not None
                                  else dict(missing, path="/run/nvidia/validations"))
    return doc


def evaluate(doc: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, CheckResult], bool]:
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_nvfs_io(), route=route)
    route, results, compliant = checks.evaluate(facts, io, Policy.default(), route=route,
                                                io_path="/mnt/gds")
    return facts, route, {c.id: c for c in results}, compliant


def test_operator_node_skips_host_checks_says_why_and_is_compliant_on_io_proof() -> None:
    facts, route, by_id, compliant = evaluate(operator_doc())
    assert facts["operator"]["managed"] is True
    assert facts["operator"]["nvfs_ready"] is True
    assert route == "nvfs"  # from nvidia_fs + the patched nvme symbol, no gdscheck needed
    for cid in HOST_ONLY:
        assert by_id[cid].status == "skip", (cid, by_id[cid])
        assert by_id[cid].message.startswith("operator-managed node: "), by_id[cid].message
    # what still applies is still judged
    for cid in ("gpu.driver.loaded", "gpu.driver.open", "gpu.present", "nvfs.module.loaded",
                "nvfs.version", "nvfs.nvme.patched", "cufile.json.valid", "route.expected"):
        assert by_id[cid].status == "pass", (cid, by_id[cid])
    assert "GPU Operator" in by_id["nvfs.module.loaded"].message
    assert compliant


def test_same_host_without_operator_marks_is_judged_as_a_host_install() -> None:
    _, _, by_id, compliant = evaluate(operator_doc(validations=None, driver_root=None))
    assert by_id["libcufile.present"].status == "fail"
    assert by_id["nvfs.persist"].status == "warn"
    assert by_id["gdscheck.present"].status == "warn"
    assert not compliant


def test_empty_driver_root_alone_is_no_operator_mark() -> None:
    facts, _, _, _ = evaluate(operator_doc(validations=None, driver_root=""))
    assert facts["operator"]["managed"] is False


def test_host_nvidia_fs_package_or_dkms_means_not_operator_managed() -> None:
    pkgs = "nvidia-fs-dkms\t2.25.7-1\tii \ndoca-ofed\t3.1.0-1\tii \n"
    facts, _, by_id, _ = evaluate(operator_doc(host_packages=pkgs))
    assert facts["operator"]["managed"] is False
    assert "host packages nvidia-fs-dkms" in facts["operator"]["evidence"]
    assert by_id["nvfs.persist"].status == "warn"
    facts, _, _, _ = evaluate(operator_doc(
        dkms=f"nvidia-fs/2.25.7, {nf.KERNEL}, x86_64: installed\n"))
    assert facts["operator"]["managed"] is False


def test_operator_node_without_nvidia_fs_fails_and_names_the_operator_fix() -> None:
    _, route, by_id, compliant = evaluate(operator_doc(
        nvfs_loaded=False, validations="driver-ready\ntoolkit-ready"))
    c = by_id["nvfs.module.loaded"]
    assert c.status == "fail"
    assert "gds.enabled" in c.message and "nvidia-fs-ready" in c.message
    assert not compliant


@pytest.mark.parametrize(("os_release", "supported"), [
    ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nVERSION_ID="24.04"\n', True),
    ('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n', True),
    ('PRETTY_NAME="Red Hat Enterprise Linux CoreOS 418"\nID="rhcos"\nVERSION_ID="4.18"\n', True),
    ('PRETTY_NAME="Red Hat Enterprise Linux 9.6 (Plow)"\nID="rhel"\nVERSION_ID="9.6"\n', False),
    ('PRETTY_NAME="Rocky Linux 9.6 (Blue Onyx)"\nID="rocky"\nVERSION_ID="9.6"\n', False),
])
def test_without_nvidia_fs_the_fix_depends_on_whether_nvidia_supports_the_operators_gds(
        os_release: str, supported: bool) -> None:
    """Issue 43: "enable gds.enabled" is the wrong fix where NVIDIA does not support it
    (tests/fixtures/gpu-operator/gds_support.yml: nvidia-fs-ctr crash-loops, the GPUs go)."""
    doc = operator_doc(nvfs_loaded=False, validations="driver-ready\ntoolkit-ready")
    doc["items"]["os_release"] = {"rc": 0, "out": os_release, "err": ""}
    c = evaluate(doc)[2]["nvfs.module.loaded"]
    assert c.status == "fail"
    assert ("not supported" in c.message) is not supported, c.message
    if not supported:
        assert "gpu-operator#2911" in c.message and "playbooks/site.yml" in c.message


def test_io_test_command_puts_the_driver_containers_libraries_first() -> None:
    from provisioner.verify.model import IoTestOptions

    lp = iotest.operator_library_path("/run/nvidia/driver")
    assert lp is not None and lp.split(":")[0] == "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    cmd = iotest.command(IoTestOptions(), "/mnt/gds", "/opt/gdsfleet/venv/bin/python", lp)
    assert cmd.startswith("env LD_LIBRARY_PATH=/run/nvidia/driver/usr/lib/x86_64-linux-gnu:")
    assert " /opt/gdsfleet/venv/bin/python - " in cmd
    assert iotest.operator_library_path(None) is None
    assert iotest.command(IoTestOptions(), "/mnt/gds", "python3").startswith("python3 - ")


VALIDATIONS = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-operator" / "validations"


def with_driver_ready(doc: dict[str, Any], text: str | None) -> dict[str, Any]:
    doc["items"]["operator_driver_ready"] = (
        {"kind": "file", "rc": 0, "out": text, "err": "",
         "path": "/run/nvidia/validations/driver-ready"} if text is not None else
        {"kind": "file", "rc": None, "out": "", "err": "missing",
         "path": "/run/nvidia/validations/driver-ready"})
    return doc


def test_host_installed_driver_with_the_validators_files_is_a_host_install() -> None:
    # the GPU Operator validates a host-installed driver too and writes driver-ready with
    # IS_HOST_DRIVER=true (no driver container, so /run/nvidia/driver is not populated)
    host = (VALIDATIONS / "driver-ready.host-driver").read_text()
    for root in (None, ""):
        doc = with_driver_ready(operator_doc(driver_root=root), host)
        facts, _, by_id, _ = evaluate(doc)
        assert facts["operator"]["managed"] is False, facts["operator"]
        assert facts["operator"]["host_driver"] is True
        assert "IS_HOST_DRIVER=true" in facts["operator"]["evidence"]
        for cid in HOST_ONLY:
            assert not by_id[cid].message.startswith("operator-managed node: "), (cid, root)
        assert by_id["nvfs.persist"].status == "warn"
        assert by_id["libcufile.present"].status == "fail"
    # even with a driver root listing, the validator's own word wins
    facts, _, _, _ = evaluate(with_driver_ready(operator_doc(), host))
    assert facts["operator"]["managed"] is False


def test_validations_without_a_populated_driver_root_are_no_operator_mark() -> None:
    # an older validator's empty driver-ready (or none): a populated /run/nvidia/driver decides
    for ready in ("", None):
        facts, _, _, _ = evaluate(with_driver_ready(operator_doc(driver_root=None), ready))
        assert facts["operator"]["managed"] is False, ready
        facts, _, _, _ = evaluate(with_driver_ready(operator_doc(), ready))
        assert facts["operator"]["managed"] is True, ready


def test_driver_container_per_the_validator_is_operator_managed() -> None:
    ctr = (VALIDATIONS / "driver-ready.driver-container").read_text()
    facts, _, by_id, compliant = evaluate(with_driver_ready(operator_doc(), ctr))
    assert facts["operator"]["managed"] is True and facts["operator"]["host_driver"] is False
    assert "IS_HOST_DRIVER=false" in facts["operator"]["evidence"]
    assert all(by_id[cid].status == "skip" for cid in HOST_ONLY)
    assert compliant
    # a host package still means a host install, whatever the validator says
    pkgs = "nvidia-fs-dkms\t2.25.7-1\tii \n"
    facts, _, _, _ = evaluate(with_driver_ready(operator_doc(host_packages=pkgs), ctr))
    assert facts["operator"]["managed"] is False


def test_driver_ready_is_parsed_bounded() -> None:
    from provisioner.verify.facts import parse_driver_ready

    assert parse_driver_ready((VALIDATIONS / "driver-ready.host-driver").read_text()) == {
        "IS_HOST_DRIVER": "true", "NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/host",
        "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "/host"}
    hostile = "IS_HOST_DRIVER=false\x1b[2J\n" + "junk line\n" * 100 + "x=1\nIS_HOST_DRIVER=true\n"
    assert parse_driver_ready(hostile) == {}
    assert parse_driver_ready("A=" + "v" * 300) == {}


def test_gather_reads_driver_ready_bounded(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.remote import gather

    ready = tmp_path / "driver-ready"
    monkeypatch.setattr(gather, "OPERATOR_DRIVER_READY", str(ready))
    assert gather.operator_driver_ready()["rc"] is None
    ready.write_text((VALIDATIONS / "driver-ready.host-driver").read_text() + "A" * 100_000)
    item = gather.operator_driver_ready()
    assert item["rc"] == 0 and len(item["out"]) == gather.OPERATOR_DRIVER_READY_MAX
    assert item["out"].startswith("IS_HOST_DRIVER=true\n")


# -- issue 28 item 1: the cuFile an operator node's workloads use --------------------------------
WHEEL_SO = "/opt/gdsfleet/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0"


def _wheel_only_io() -> dict[str, Any]:
    """The I/O document of an operator node: the host has no libcufile (the operator installs
    none), kvikio maps the runtime's nvidia-cufile wheel, nvidia-fs counters prove the path."""
    doc = nf.direct_nvfs_io()
    doc["libcufile"] = {"host": {"path": None, "real": None, "source": None, "version": None},
                        "wheel": {"distribution": "nvidia-cufile", "version": "1.15.1.6",
                                  "path": WHEEL_SO},
                        "prefer_host": True}
    for att in doc["attempts"]:
        att["libcufile_preload"] = {"path": None, "error": "no host libcufile"}
        att["libcufile_mapped"] = [WHEEL_SO]
    return doc


def _verify(gather_doc: dict[str, Any]) -> Any:
    from provisioner.verify import IoTestOptions, verify_node
    from tests.unit.test_checks_report_schema import ScriptedRunner

    return verify_node(ScriptedRunner(gather_doc, _wheel_only_io()), "gpu-01", Policy.default(),
                       IoTestOptions())


def test_operator_node_judges_the_workloads_cufile_and_is_compliant() -> None:
    report = _verify(operator_doc())
    by_id = {c.id: c for c in report.checks}
    assert report.facts["operator"]["managed"] is True
    assert report.io_test.evidence["proof"] == "nvfs_counters", report.io_test.reason
    assert report.io_test.evidence["libcufile"]["judged"] == "workload"
    lib = by_id["io.libcufile"]
    assert lib.status == "pass", lib
    # it says which cuFile was judged
    assert "nvidia-cufile 1.15.1.6" in lib.message and "operator" in lib.expected.lower()
    assert by_id["io.direct_path"].status == "pass"
    assert report.compliant, [c for c in report.checks if c.status == "fail"]
    # what the issue saw downstream: the NFD label said compliant=false
    from datetime import datetime, timezone

    from provisioner.verify import nfd

    labels = nfd.labels(report.to_dict(), datetime(2026, 11, 26, tzinfo=timezone.utc))
    assert labels[f"{nfd.LABEL_NS}/compliant"] == "true"
    assert labels[f"{nfd.LABEL_NS}/operator-managed"] == "true"


def test_host_install_without_host_libcufile_still_fails_on_the_wheel() -> None:
    # the same I/O on a host install (no operator marks): the wheel proves nothing for the
    # host's DeepSpeed/gdsio, as before
    report = _verify(operator_doc(validations=None, driver_root=None))
    by_id = {c.id: c for c in report.checks}
    assert by_id["io.libcufile"].status == "fail"
    assert report.io_test.evidence["proof"] is None
    assert not report.compliant
