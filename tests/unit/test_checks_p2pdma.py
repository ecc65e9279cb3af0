"""The p2pdma route's module-option checks over SYNTHETIC node states (tests/unit/nodefacts.py):
nvme_core multipath N or Y, RegistryDwords keys running or not, configured in modprobe.d but
not in effect (a reboot is needed), and the relaxed p2pdma.cufile rule (block.nvme key absent
is fine, explicitly false is not)."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

OWN = "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"
DWORDS = "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"
CONFIGURED = [f"{OWN}:options nvme_core multipath=N",
              f'{OWN}:options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;{DWORDS}"']


def run(**knobs: Any) -> tuple[str, dict[str, CheckResult], bool]:
    doc = nf.gather_doc(route="p2pdma", **knobs)
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_p2pdma_io(), route=route)
    route, results, compliant = checks.evaluate(facts, io, Policy(expected_route="p2pdma"),
                                                route=route, io_path="/mnt/gds")
    return route, {c.id: c for c in results}, compliant


def test_all_in_effect_and_configured_passes() -> None:
    _, by_id, compliant = run(modprobe_lines=CONFIGURED,
                              registry_dwords=f"PeerMappingOverride=1;{DWORDS}")
    for cid in ("p2pdma.nvme_multipath", "p2pdma.nvidia_registry", "p2pdma.modprobe_config",
                "p2pdma.cufile"):
        assert by_id[cid].status == "pass", by_id[cid]
    assert compliant
    assert by_id["p2pdma.modprobe_config"].observed == f"{OWN}; {OWN}"


def test_multipath_y_and_empty_registry_not_configured_says_run_the_role() -> None:
    _, by_id, compliant = run(multipath="Y", registry_dwords="", modprobe_lines=[])
    mp, reg, conf = (by_id["p2pdma.nvme_multipath"], by_id["p2pdma.nvidia_registry"],
                     by_id["p2pdma.modprobe_config"])
    assert (mp.status, reg.status, conf.status) == ("fail", "fail", "fail")
    assert mp.observed == "Y" and "gdsfleet.gds.p2pdma" in mp.message
    assert reg.observed == 'RegistryDwords: ""'  # as driver 580 prints it when unset
    assert "RMForceStaticBar1=1;RmForceDisableIomapWC=1" in reg.message
    assert "gdsfleet.gds.p2pdma" in reg.message and "reboot" in reg.message
    assert "nvme_core multipath=unset" in conf.observed
    assert "gdsfleet.gds.p2pdma" in conf.message
    assert not compliant


def test_configured_but_not_running_says_reboot() -> None:
    """Written to modprobe.d (and the initramfs rebuilt) but the node has not rebooted."""
    _, by_id, compliant = run(multipath="Y", registry_dwords="", modprobe_lines=CONFIGURED)
    mp, reg, conf = (by_id["p2pdma.nvme_multipath"], by_id["p2pdma.nvidia_registry"],
                     by_id["p2pdma.modprobe_config"])
    assert mp.status == "fail" and reg.status == "fail"
    assert f"configured N in {OWN}" in mp.observed
    assert "reboot the node" in mp.message and "reboot the node" in reg.message
    assert f"configured in {OWN}" in reg.observed
    assert conf.status == "pass"
    assert not compliant


def test_one_registry_key_missing_fails_naming_it() -> None:
    lines = [f"{OWN}:options nvme_core multipath=N",
             f'{OWN}:options nvidia NVreg_RegistryDwords="RMForceStaticBar1=1;"']
    _, by_id, _ = run(registry_dwords="RMForceStaticBar1=1;", modprobe_lines=lines)
    reg = by_id["p2pdma.nvidia_registry"]
    assert reg.status == "fail"
    assert "without RmForceDisableIomapWC=1" in reg.message
    conf = by_id["p2pdma.modprobe_config"]
    assert "RegistryDwords lacks RmForceDisableIomapWC=1" in conf.observed


def test_running_but_not_persisted_warns() -> None:
    _, by_id, compliant = run(modprobe_lines=[])
    assert by_id["p2pdma.nvidia_registry"].status == "pass"
    conf = by_id["p2pdma.modprobe_config"]
    assert conf.status == "warn" and "next boot loses them" in conf.message
    assert compliant


def test_off_route_and_non_x86_skip() -> None:
    doc = nf.gather_doc(route="nvfs")
    facts = build_facts(doc)
    io = iotest.evaluate(nf.direct_nvfs_io(), route="nvfs")
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route="nvfs")
    by_id = {c.id: c for c in results}
    assert by_id["p2pdma.nvidia_registry"].status == "skip"
    assert by_id["p2pdma.modprobe_config"].status == "skip"
    arm = nf.gather_doc(route="p2pdma", multipath="Y", registry_dwords="", modprobe_lines=[])
    arm["items"]["machine"] = {"rc": 0, "out": "aarch64", "err": ""}
    facts = build_facts(arm)
    _, results, _ = checks.evaluate(facts, iotest.evaluate(nf.direct_p2pdma_io(), route="p2pdma"),
                                    Policy(expected_route="p2pdma"), route="p2pdma")
    by_id = {c.id: c for c in results}
    for cid in ("p2pdma.nvme_multipath", "p2pdma.nvidia_registry", "p2pdma.modprobe_config"):
        assert by_id[cid].status == "skip", by_id[cid]


@pytest.mark.parametrize(
    ("cufile", "status", "observed"),
    [
        # NVIDIA's P2PDMA guide: only properties.use_pci_p2pdma
        ('{"properties": {"allow_compat_mode": false, "use_pci_p2pdma": true}}', "pass",
         "properties=True, block.nvme=unset"),
        # what the gdsfleet.gds.cufile role renders on p2pdma
        ('{"properties": {"allow_compat_mode": false, "use_pci_p2pdma": true}, '
         '"block": {"nvme": {"use_pci_p2pdma": true}}}', "pass",
         "properties=True, block.nvme=True"),
        ('{"properties": {"allow_compat_mode": false, "use_pci_p2pdma": true}, '
         '"block": {"nvme": {"use_pci_p2pdma": false}}}', "fail",
         "properties=True, block.nvme=False"),
        ('{"properties": {"allow_compat_mode": false}, '
         '"block": {"nvme": {"use_pci_p2pdma": true}}}', "fail",
         "properties=False, block.nvme=True"),
    ],
    ids=["guide-properties-only", "role-both-true", "block-explicitly-false", "no-properties"],
)
def test_p2pdma_cufile_rule(cufile: str, status: str, observed: str) -> None:
    _, by_id, _ = run(cufile=cufile)
    c = by_id["p2pdma.cufile"]
    assert (c.status, c.observed) == (status, observed), c
    if "block.nvme=False" in observed:
        assert "remove block.nvme.use_pci_p2pdma: false" in c.message


def test_route_evidence_accepts_properties_only() -> None:
    doc = nf.gather_doc(route="p2pdma",
                        cufile='{"properties": {"allow_compat_mode": false, '
                               '"use_pci_p2pdma": true}}')
    doc["items"]["gdscheck"] = {"rc": None, "out": "", "err": "not found"}
    assert checks.determine_route(build_facts(doc)) == "p2pdma"
    doc["items"]["cufile_json"]["out"] = (
        '{"properties": {"use_pci_p2pdma": true}, "block": {"nvme": {"use_pci_p2pdma": false}}}')
    assert checks.determine_route(build_facts(doc)) != "p2pdma"


def test_kernel_p2pdma_without_kallsyms_all_is_seen_by_the_exported_function() -> None:
    # issue 28 item 8: p2pdma_pgmap_ops is a data symbol, in /proc/kallsyms only with
    # CONFIG_KALLSYMS_ALL; pci_p2pdma_add_resource is exported (EXPORT_SYMBOL_GPL,
    # drivers/pci/p2pdma.c) and listed whenever CONFIG_PCI_P2PDMA is set
    doc = nf.gather_doc(route="p2pdma")
    doc["items"]["kallsyms"] = {"rc": 0, "err": "",
                                "out": "ffffffff81a2b3c0 T pci_p2pdma_add_resource"}
    facts = build_facts(doc)
    assert facts["kallsyms"]["p2pdma"] is True
    assert checks.route_evidence(facts)["p2pdma"] is True
    io = iotest.evaluate(nf.direct_p2pdma_io(), route="p2pdma")
    route, results, compliant = checks.evaluate(facts, io, Policy(expected_route="p2pdma"),
                                                route="p2pdma", io_path="/mnt/gds")
    by_id = {c.id: c for c in results}
    assert by_id["p2pdma.kernel"].status == "pass"
    assert by_id["p2pdma.kernel"].observed == "pci_p2pdma_add_resource"
    assert compliant, [c for c in results if c.status == "fail"]
    # neither symbol: still a failure
    doc["items"]["kallsyms"] = {"rc": 0, "err": "", "out": ""}
    facts = build_facts(doc)
    _, results, _ = checks.evaluate(facts, io, Policy(expected_route="p2pdma"),
                                    route="p2pdma", io_path="/mnt/gds")
    assert next(c for c in results if c.id == "p2pdma.kernel").status == "fail"
