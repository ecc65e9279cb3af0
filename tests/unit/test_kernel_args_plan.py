"""The p2pdma role's kernel-argument plan (filter gdsfleet.gds.kernel_args_plan): where
modprobe.d cannot set nvme_core's multipath - a built-in nvme_core reads only the kernel
command line, and kmod applies the command line's nvme_core.multipath= after every modprobe.d
file (tests/fixtures/kmod/) - the argument must go on the command line; the plan says why,
whether the boot loader already gives it (idempotence) and what grubby must drop."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gdsfleet_modprobe_filter_kargs",
                                               ROOT / "plugins/filter/modprobe.py")
assert _spec and _spec.loader
mp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mp)

CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=0 ro quiet"
BUILTIN = "kernel/drivers/nvme/host/nvme-core.ko\n"
GRUB = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="{}"\n'
SNIPPET = ('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} nvme_core.multipath=N"\n'
           'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} nvme_core.multipath=N"\n')


def slurp(text: str) -> dict[str, str]:
    return {"content": base64.b64encode(text.encode()).decode(), "source": "/x"}


def test_loadable_module_without_override_needs_nothing() -> None:
    plan = mp.kernel_args_plan(slurp(CMDLINE), slurp("kernel/x/libata.ko\n"),
                               grub=[slurp(GRUB.format(""))])
    assert not plan["needed"] and plan["reasons"] == []


def test_builtin_nvme_core_needs_the_argument_until_the_boot_loader_gives_it() -> None:
    plan = mp.kernel_args_plan(slurp(CMDLINE), slurp(BUILTIN), grub=[slurp(GRUB.format(""))])
    assert plan["needed"] and plan["builtin"] and not plan["bootloader_ok"]
    assert "built into the kernel" in plan["reasons"][0]
    done = mp.kernel_args_plan(slurp(CMDLINE), slurp(BUILTIN),
                               grub=[slurp(GRUB.format("")), slurp(SNIPPET)])
    assert done["bootloader_ok"] and done["next"] == "N"


def test_command_line_override_is_named_with_its_source() -> None:
    plan = mp.kernel_args_plan(CMDLINE + " nvme_core.multipath=Y", "",
                               grub=[GRUB.format("nvme-core.multipath=Y")])
    assert plan["needed"] and plan["running"] == "Y" and plan["next"] == "Y"
    assert plan["reasons"] == ["/proc/cmdline sets nvme_core.multipath=Y, which kmod applies "
                               "after every modprobe.d file"]
    # the snippet comes after /etc/default/grub: the next boot gets N
    assert mp.kernel_args_plan(CMDLINE + " nvme_core.multipath=Y", "",
                               grub=[GRUB.format("nvme-core.multipath=Y"), SNIPPET]
                               )["bootloader_ok"]


def test_grubby_drops_other_values_then_adds_ours() -> None:
    info = 'index=0\nargs="ro rhgb quiet nvme-core.multipath=Y nvme_core.multipath=1"\n'
    plan = mp.kernel_args_plan(CMDLINE, BUILTIN, grubby=info)
    assert plan["source"] == "grubby --info=DEFAULT"
    assert plan["remove"] == ["nvme-core.multipath=Y", "nvme_core.multipath=1"]
    assert not plan["bootloader_ok"]
    fixed = mp.kernel_args_plan(CMDLINE, BUILTIN,
                                grubby='args="ro rhgb quiet nvme_core.multipath=N"\n')
    assert fixed["bootloader_ok"] and fixed["remove"] == []


def test_registry_dwords_on_the_command_line_are_reported() -> None:
    plan = mp.kernel_args_plan(CMDLINE + ' nvidia.NVreg_RegistryDwords="A=1;"', "")
    assert plan["registry_on_cmdline"] == ['nvidia.NVreg_RegistryDwords=A=1; (/proc/cmdline)']
