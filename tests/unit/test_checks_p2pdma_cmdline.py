"""p2pdma.modprobe_config against what defeats modprobe.d (SYNTHETIC node states): kmod applies
the kernel command line's ``nvme_core.multipath=`` after every modprobe.d file, and a built-in
nvme_core never reads modprobe.d (tests/fixtures/kmod/ names kmod's sources). A node whose
modprobe.d is right but whose command line or built-in nvme_core defeats it must fail, naming
the kernel-argument fix; once the boot loader carries the fix and the reboot is pending, the
next boot is right."""

from __future__ import annotations

from typing import Any

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

BUILTIN = "kernel/drivers/nvme/host/nvme-core.ko\nkernel/drivers/ata/libata.ko\n"
GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX="{}"\n'
DROP_IN = ('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX nvme_core.multipath=N"\n'
           'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT nvme_core.multipath=N"\n')


def _ok(out: str) -> dict[str, Any]:
    return {"rc": 0, "out": out, "err": "", "kind": "file"}


def run(*, multipath: str = "Y", cmdline: str = "ro quiet", builtin: str = "",
        grub: str | None = None, grub_d: str | None = None, grubby: str | None = None,
        reboot: bool = False, registry: str | None = None) -> dict[str, CheckResult]:
    doc = nf.gather_doc(route="p2pdma", multipath=multipath, registry_dwords=registry,
                        reboot_reasons=["p2pdma: kernel arguments"] if reboot else None)
    items = doc["items"]
    items["cmdline"] = _ok(f"BOOT_IMAGE=/vmlinuz-6.8.0-31-generic root=UUID=0 {cmdline}\n")
    items["modules_builtin"] = _ok(builtin)
    items["grub_default"] = _ok(grub) if grub is not None else {"rc": None, "out": "",
                                                                 "err": "missing"}
    items["grub_default_d"] = (_ok('{"/etc/default/grub.d/99-gdsfleet-p2pdma.cfg": '
                                   + __import__("json").dumps(grub_d) + "}")
                               if grub_d is not None else {"rc": None, "out": "{}", "err": ""})
    items["grubby_info_default"] = (_ok(grubby) if grubby is not None
                                    else {"rc": None, "out": "", "err": "not found"})
    if not reboot:
        items["reboot_required"] = {"rc": None, "out": "", "err": "missing"}
    facts = build_facts(doc)
    route = checks.determine_route(facts)
    io = iotest.evaluate(nf.direct_p2pdma_io(), route=route)
    _route, results, _ok_ = checks.evaluate(facts, io, Policy(expected_route="p2pdma"),
                                            route=route, io_path="/mnt/gds")
    return {c.id: c for c in results}


def test_modprobe_d_alone_still_passes() -> None:
    conf = run(multipath="N", grub=GRUB.format(""))["p2pdma.modprobe_config"]
    assert conf.status == "pass", conf


def test_command_line_override_fails_naming_the_kernel_argument_fix() -> None:
    """modprobe.d says N, but GRUB puts nvme_core.multipath=Y on the command line: kmod applies
    it after every file, so the reboot the role records changes nothing."""
    by_id = run(cmdline="ro quiet nvme_core.multipath=Y",
                grub=GRUB.format("nvme_core.multipath=Y"))
    conf = by_id["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "kernel command line sets nvme_core.multipath=Y (/etc/default/grub)" in conf.message
    assert "99-gdsfleet-p2pdma.cfg" in conf.message and "grubby" in conf.message


def test_builtin_nvme_core_fails_without_the_kernel_argument() -> None:
    conf = run(builtin=BUILTIN, grub=GRUB.format(""))["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "built into the kernel" in conf.message
    assert "lacks nvme_core.multipath=N" in conf.message


def test_builtin_nvme_core_without_boot_loader_config_reads_proc_cmdline() -> None:
    conf = run(builtin=BUILTIN)["p2pdma.modprobe_config"]
    assert conf.status == "fail" and "(/proc/cmdline)" in conf.message
    ok = run(builtin=BUILTIN, multipath="N",
             cmdline="ro quiet nvme_core.multipath=N")["p2pdma.modprobe_config"]
    assert ok.status == "pass", ok


def test_fixed_boot_loader_with_the_reboot_pending_is_right_for_the_next_boot() -> None:
    by_id = run(builtin=BUILTIN, grub=GRUB.format(""), grub_d=DROP_IN, reboot=True)
    assert by_id["p2pdma.modprobe_config"].status == "pass", by_id["p2pdma.modprobe_config"]
    assert by_id["p2pdma.nvme_multipath"].status == "fail"  # still Y until the reboot


def test_command_line_from_outside_the_boot_loader_config_fails() -> None:
    """The boot loader gives N but /proc/cmdline still says Y and no reboot is pending: the
    reboot did not take (firmware, PXE or a built-in command line adds it)."""
    conf = run(cmdline="ro quiet nvme_core.multipath=N nvme_core.multipath=Y",
               grub=GRUB.format(""), grub_d=DROP_IN)["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "something outside the boot loader" in conf.message


def test_rhel_grubby_arguments_are_the_next_boot() -> None:
    info = ('index=0\nkernel="/boot/vmlinuz-5.14.0-427.el9.x86_64"\n'
            'args="ro crashkernel=1G-4G:192M rhgb quiet nvme-core.multipath=Y"\n'
            'root="/dev/mapper/rhel-root"\n')
    conf = run(grubby=info, grub=GRUB.format(""))["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "nvme_core.multipath=Y (grubby --info=DEFAULT)" in conf.message


def test_registry_dwords_on_the_command_line_replace_modprobe_d() -> None:
    conf = run(multipath="N", grub=GRUB.format('nvidia.NVreg_RegistryDwords=\\"A=1;\\"'),
               cmdline='ro nvidia.NVreg_RegistryDwords="A=1;"',
               registry="A=1;")["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "NVreg_RegistryDwords lacks RMForceStaticBar1=1" in conf.message
    assert "kernel command line" in conf.message


def test_grub_snippets_alone_are_the_boot_loader_config() -> None:
    """No /etc/default/grub, only the role's snippet: still the next boot's arguments."""
    conf = run(cmdline="ro quiet nvme_core.multipath=N nvme_core.multipath=Y",
               grub_d=DROP_IN)["p2pdma.modprobe_config"]
    assert conf.status == "fail"
    assert "something outside the boot loader" in conf.message
