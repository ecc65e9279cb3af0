"""nvfs.dkms.boot_kernel: verify warns when the kernel the node boots next has no nvidia-fs (or
no patched nvme driver) built by DKMS, since after that reboot GDS I/O drops silently to compat.

The boot kernel is `grubby --default-kernel` (RHEL family: `/boot/vmlinuz-<release>`) or the
newest /boot/vmlinuz-* (GRUB's default entry on Debian/Ubuntu with GRUB_DEFAULT=0). SYNTHETIC
node states from tests/unit/nodefacts.py; the dkms lines are dkms 3's format.
"""

from __future__ import annotations

from typing import Any

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.parsers import packages
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

NEXT = "6.1.0-19-amd64"


def check(*, boot: str | None, dkms: str, grubby: str | None = None,
          route: str = "nvfs") -> CheckResult:
    doc = nf.gather_doc(route=route)
    items: dict[str, Any] = doc["items"]
    items["boot_dir"] = ({"rc": 0, "out": boot, "err": ""} if boot is not None
                         else {"rc": None, "out": "", "err": "missing"})
    items["grubby_default_kernel"] = ({"rc": 0, "out": grubby, "err": ""} if grubby
                                      else {"rc": None, "out": "", "err": "not found"})
    items["dkms_status"] = {"rc": 0, "out": dkms, "err": ""}
    facts = build_facts(doc)
    route_seen = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_nvfs_io(), route=route_seen)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route_seen,
                                    io_path="/mnt/gds")
    return next(c for c in results if c.id == "nvfs.dkms.boot_kernel")


BUILT_RUNNING = (f"nvidia-fs/2.26.6, {nf.KERNEL}, x86_64: installed\n"
                 f"mlnx-nvme/24.10, {nf.KERNEL}, x86_64: installed\n")


def test_updated_kernel_without_nvidia_fs_warns() -> None:
    c = check(boot=f"config-{NEXT}\nvmlinuz-{nf.KERNEL}\nvmlinuz-{NEXT}\n", dkms=BUILT_RUNNING)
    assert c.status == "warn"
    assert c.observed.startswith(f"{NEXT} (newest /boot/vmlinuz-*): no nvidia-fs, mlnx-nvme")
    assert f"dkms autoinstall -k {NEXT}" in c.message
    assert f"linux-headers-{NEXT}" in c.message
    assert "compat" in c.message


def test_built_for_the_boot_kernel_passes() -> None:
    dkms = BUILT_RUNNING + (f"nvidia-fs/2.26.6, {NEXT}, x86_64: installed\n"
                            f"mlnx-nvme/24.10, {NEXT}, x86_64: installed\n")
    c = check(boot=f"vmlinuz-{nf.KERNEL}\nvmlinuz-{NEXT}\n", dkms=dkms)
    assert c.status == "pass", c


def test_only_the_nvme_driver_missing_is_named() -> None:
    dkms = BUILT_RUNNING + f"nvidia-fs/2.26.6, {NEXT}, x86_64: installed\n"
    c = check(boot=f"vmlinuz-{NEXT}\nvmlinuz-{nf.KERNEL}\n", dkms=dkms)
    assert c.status == "warn" and c.observed.endswith("no mlnx-nvme")


def test_running_kernel_is_the_boot_kernel() -> None:
    c = check(boot=f"vmlinuz-{nf.KERNEL}\n", dkms=BUILT_RUNNING)
    assert c.status == "pass"


def test_grubby_names_the_boot_kernel() -> None:
    # grubby's default is the running kernel although a newer one is installed: no warning
    c = check(boot=f"vmlinuz-{nf.KERNEL}\nvmlinuz-{NEXT}\n", dkms=BUILT_RUNNING,
              grubby=f"/boot/vmlinuz-{nf.KERNEL}\n")
    assert c.status == "pass" and "grubby" in c.observed


def test_no_boot_kernel_or_no_dkms_or_p2pdma_is_skipped() -> None:
    assert check(boot="", dkms=BUILT_RUNNING).status == "skip"  # e.g. the lent H100: empty /boot
    assert check(boot=None, dkms=BUILT_RUNNING).status == "skip"
    assert check(boot=f"vmlinuz-{NEXT}\n", dkms="").status == "skip"
    assert check(boot=f"vmlinuz-{NEXT}\n", dkms="", route="p2pdma").status == "skip"


def test_boot_kernel_parser_orders_versions() -> None:
    b = packages.boot_kernel("vmlinuz-6.8.0-9-generic\nvmlinuz-6.8.0-10-generic\nvmlinuz.old\n"
                             "vmlinuz-6.8.0-10-generic.efi.signed\ninitrd.img\n", None)
    assert b == {"kernels": ["6.8.0-9-generic", "6.8.0-10-generic"],
                 "default": "6.8.0-10-generic", "source": "newest /boot/vmlinuz-*"}
    g = packages.boot_kernel("", "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64\n")
    assert g["default"] == "5.14.0-427.13.1.el9_4.x86_64"
    assert packages.boot_kernel(None, None)["default"] is None
