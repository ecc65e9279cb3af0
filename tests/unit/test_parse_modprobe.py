"""Module options: /proc/driver/nvidia/params (real capture from driver 580 on an H100, and the
same capture with a RegistryDwords value set) and the modprobe.d options kmod would apply."""

from __future__ import annotations

import json

import pytest
from fixture_loader import load

from provisioner.verify.parsers import modprobe

PARAMS = load("nvidia_params")
DWORDS = "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"


@pytest.mark.parametrize(("name", "fx"), PARAMS, ids=[n for n, _ in PARAMS])
def test_nvidia_params_capture(name: str, fx: dict) -> None:
    params = modprobe.parse_nvidia_params(fx["text"])
    want = fx["expected"]
    assert len(params) == want["count"]
    for key in ("RegistryDwords", "EnableStreamMemOPs", "ResmanDebugLevel",
                "OpenRmEnableUnsupportedGpus"):
        assert params[key] == want[key]
    assert modprobe.parse_registry_dwords(params["RegistryDwords"]) == want["registry"]


def test_nvidia_params_with_registry_dwords_set() -> None:
    """The capture, with the line a driver loaded with NVreg_RegistryDwords prints (SYNTHETIC:
    the driver quotes string parameters, as the capture's empty value shows)."""
    text = PARAMS[0][1]["text"].replace('RegistryDwords: ""',
                                        f'RegistryDwords: "PeerMappingOverride=1;{DWORDS}"')
    params = modprobe.parse_nvidia_params(text)
    assert params["RegistryDwordsPerDevice"] == ""  # the other line is left alone
    reg = modprobe.parse_registry_dwords(params["RegistryDwords"])
    assert reg == {"PeerMappingOverride": "1", "RMForceStaticBar1": "1",
                   "RmForceDisableIomapWC": "1"}
    assert modprobe.registry_has(reg, "rmforcestaticbar1", "0x1")  # case, number base
    assert not modprobe.registry_has(reg, "RMForceStaticBar1", "0")
    assert not modprobe.registry_has({}, "RMForceStaticBar1", "1")


def _doc(files: list[str], options: list[str]) -> str:
    return json.dumps({"files": files, "options": options})


def test_configured_options_follow_kmod_order() -> None:
    doc = _doc(
        ["/etc/modprobe.d/nvidia.conf", "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf",
         "/lib/modprobe.d/nvme.conf", "/usr/lib/modprobe.d/zzz-vendor.conf",
         "/etc/modprobe.d/zzz-vendor.conf"],
        ["/lib/modprobe.d/nvme.conf:options nvme_core multipath=Y",
         '/etc/modprobe.d/nvidia.conf:options nvidia NVreg_RegistryDwords="A=1;" X=2',
         "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf:options nvme-core multipath=N",
         f'/etc/modprobe.d/zz-gdsfleet-p2pdma.conf:options nvidia NVreg_RegistryDwords="{DWORDS}"',
         # hidden by the empty /etc/modprobe.d/zzz-vendor.conf of the same name
         "/usr/lib/modprobe.d/zzz-vendor.conf:options nvme_core multipath=Y"])
    conf = modprobe.configured_options(doc)
    assert conf["nvme_core"]["multipath"] == {
        "value": "N", "file": "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"}
    assert conf["nvidia"]["NVreg_RegistryDwords"]["value"] == DWORDS
    assert conf["nvidia"]["X"]["value"] == "2"


def test_configured_options_last_file_by_name_wins() -> None:
    doc = _doc(["/etc/modprobe.d/a.conf", "/usr/lib/modprobe.d/b.conf"],
               ["/etc/modprobe.d/a.conf:options nvme_core multipath=N",
                "/usr/lib/modprobe.d/b.conf:options nvme_core multipath=Y"])
    assert modprobe.configured_options(doc)["nvme_core"]["multipath"]["value"] == "Y"


@pytest.mark.parametrize("bad", ["", "not json", "[]", None])
def test_configured_options_tolerates_missing_input(bad: str | None) -> None:
    assert modprobe.configured_options(bad) == {}
