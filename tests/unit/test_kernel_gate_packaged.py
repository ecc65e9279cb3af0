"""The kernel gate on kernels whose GDS modules DKMS did not build for them (issue 43, item 6):
RHEL kmod packages reached through weak-updates/ (the kABI decides, not the vermagic's release
word) and Ubuntu linux-nvidia kernels' prebuilt linux-modules-nvidia-fs-<K> (no DKMS state at
all). A good kernel must not fail: a failure holds it. Sources:
tests/fixtures/kernel_gate/weak_updates.yml, packaged_nvidia_fs.yml."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import yaml

from tests.unit.kernel_gate_standins import elf_module, write_module
from tests.unit.test_kernel_gate import OPEN, V1, dkms, failed, kg, node, vermagic

ROOT = Path(__file__).resolve().parents[2]
WEAK = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/weak_updates.yml").read_text())
PKG = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/packaged_nvidia_fs.yml").read_text())
K0, K1 = WEAK["stand_in"]["built_for"], WEAK["stand_in"]["booted"]
SUBPATH = WEAK["stand_in"]["subpath"]
# the CRCs a kmod nvme built for K0 imports (stand-in values; symbols of the kernel's nvme-core)
CRCS = (("nvme_init_ctrl", 0x1A2B3C4D), ("nvme_complete_rq", 0x0BADF00D), ("module_layout", 7))


def rhel_node(tmp: Path, *, versions: tuple[tuple[str, int], ...] = CRCS,
              symvers: dict[str, int] | None = None, flags: str = "SMP mod_unload modversions",
              kernel_flags: str = "SMP mod_unload modversions") -> Path:
    """K1's tree as RHEL leaves it: DKMS built nvidia-fs for K1 (extra/, RHEL's DKMS
    location), the NVIDIA driver in extra/, and DOCA's kmod nvme installed once for K0 and
    linked into K1's weak-updates/ by weak-modules; K1's own symvers in /boot."""
    root = tmp / "lib/modules"
    k1 = root / K1
    (k1 / "build").mkdir(parents=True)
    write_module(k1 / "extra/nvidia-fs.ko", elf_module(
        name="nvidia_fs", vermagic=f"{K1} {flags} ", license="GPL v2", rodata=(V1,)))
    write_module(k1 / "extra/nvidia.ko", elf_module(
        name="nvidia", vermagic=f"{K1} {flags} ", license=OPEN))
    write_module(k1 / "kernel/drivers/nvme/host/nvme-core.ko", elf_module(
        name="nvme_core", vermagic=f"{K1} {kernel_flags} ", license="GPL",
        gpl_exports=("nvme_init_ctrl", "nvme_complete_rq")))
    built = write_module(root / K0 / "extra" / SUBPATH, elf_module(
        name="nvme", vermagic=f"{K0} {flags} ", license="GPL", gpl_exports=(V1,),
        versions=versions))
    link = k1 / "weak-updates" / SUBPATH
    link.parent.mkdir(parents=True)
    os.symlink(built, link)
    (k1 / "modules.dep").write_text(
        f"weak-updates/{SUBPATH}: kernel/drivers/nvme/host/nvme-core.ko\n"
        "kernel/drivers/nvme/host/nvme-core.ko:\nextra/nvidia-fs.ko:\nextra/nvidia.ko:\n")
    boot = tmp / "boot"
    boot.mkdir()
    table = dict(CRCS) if symvers is None else symvers
    if table:
        text = "".join(f"0x{crc:08x}\t{sym}\tvmlinux\tEXPORT_SYMBOL\t\n"
                       for sym, crc in table.items())
        (boot / f"symvers-{K1}.gz").write_bytes(gzip.compress(text.encode()))
    return root


def rhel_gate(root: Path) -> dict:
    return kg.evaluate(K1, dkms_text=f"nvidia-fs/2.26.6, {K1}, x86_64: installed\n",
                       family="redhat", modules_root=str(root),
                       boot_dir=str(root.parent.parent / "boot"))


def test_a_kmod_module_reached_through_weak_updates_passes_on_its_kabi(tmp_path: Path) -> None:
    """Today's failure: every z-stream kernel was held on DOCA kmod nodes (vermagic K0)."""
    assert WEAK["kernel_loader"]["rule"].startswith("when the module has CRCs")
    g = rhel_gate(rhel_node(tmp_path))
    assert g["passed"], failed(g)
    vm = next(r for r in g["results"] if r["check"] == "vermagic.nvme")
    assert K0 in vm["reason"] and "weak-updates" in vm["reason"]
    assert f"symvers-{K1}.gz" in vm["reason"] and "3 symbol" in vm["reason"]


def test_a_crc_that_disagrees_with_the_kernels_symvers_fails_naming_it(tmp_path: Path) -> None:
    root = rhel_node(tmp_path, symvers={**dict(CRCS), "nvme_complete_rq": 0xDEADBEEF})
    f = failed(rhel_gate(root))
    assert set(f) == {"vermagic.nvme"}, f
    assert "nvme_complete_rq" in f["vermagic.nvme"]["reason"]
    assert "disagrees" in f["vermagic.nvme"]["reason"]


def test_vermagic_flags_other_than_the_kernels_fail(tmp_path: Path) -> None:
    f = failed(rhel_gate(rhel_node(tmp_path, flags="SMP preempt mod_unload modversions")))
    assert "vermagic.nvme" in f and "SMP preempt" in f["vermagic.nvme"]["reason"]


def test_a_weak_module_without_crcs_fails_as_the_loader_would(tmp_path: Path) -> None:
    f = failed(rhel_gate(rhel_node(tmp_path, versions=())))
    assert set(f) == {"vermagic.nvme"}, f
    assert "__versions" in f["vermagic.nvme"]["reason"]


def test_without_the_kernels_symvers_the_weak_modules_link_is_taken_and_said(
        tmp_path: Path) -> None:
    g = rhel_gate(rhel_node(tmp_path, symvers={}))
    assert g["passed"], failed(g)
    vm = next(r for r in g["results"] if r["check"] == "vermagic.nvme")
    assert "not re-checked" in vm["reason"] and "weak-modules" in vm["reason"]


def test_outside_weak_updates_another_kernels_module_still_fails(tmp_path: Path) -> None:
    k = "6.8.0-45-generic"
    g = kg.evaluate(k, dkms_text=dkms(k), modules_root=str(node(
        tmp_path, nvfs_vermagic="6.8.0-40-generic")))
    assert set(failed(g)) == {"vermagic.nvidia_fs"}


# --- linux-nvidia: nvidia-fs from linux-modules-nvidia-fs-<K> ----------------------------------

def nvidia_kernel_node(tmp: Path, k: str, *, nvfs_vermagic: str | None = None) -> Path:
    """A linux-nvidia kernel's tree: the kernel's own nvme exports the registration name
    (NV-Kernels #10), nvidia-fs prebuilt under ubuntu/nvidia-fs/, the open driver prebuilt
    (linux-modules-nvidia-*-open-<K>); no DKMS module at all."""
    root = tmp / "lib/modules"
    mdir = root / k
    (mdir / "build").mkdir(parents=True)
    rel = PKG["where_the_module_lands"]["path"].split("<kernel>/", 1)[1]
    write_module(mdir / rel, elf_module(name="nvidia_fs", vermagic=vermagic(nvfs_vermagic or k),
                                        license="GPL v2", rodata=(V1,)))
    write_module(mdir / "kernel/drivers/nvme/host/nvme.ko", elf_module(
        name="nvme", vermagic=vermagic(k), license="GPL", gpl_exports=(V1,)))
    write_module(mdir / "kernel/nvidia-580-open/nvidia.ko", elf_module(
        name="nvidia", vermagic=vermagic(k), license=OPEN))
    return root


K_NV = PKG["package_names"][0].removeprefix("linux-modules-nvidia-fs-")


def test_a_packaged_nvidia_fs_with_the_kernels_vermagic_stands_in_for_dkms(
        tmp_path: Path) -> None:
    root = nvidia_kernel_node(tmp_path, K_NV)
    for text in ("", None):  # DKMS installed but knows nothing of nvidia-fs; DKMS not installed
        g = kg.evaluate(K_NV, dkms_text=text, modules_root=str(root))
        assert g["passed"], failed(g)
        d = next(r for r in g["results"] if r["check"] == "dkms.nvidia-fs")
        assert "ubuntu/nvidia-fs/nvidia-fs.ko" in d["reason"] and "not built by DKMS" in d["reason"]


def test_a_packaged_nvidia_fs_built_for_another_kernel_fails(tmp_path: Path) -> None:
    root = nvidia_kernel_node(tmp_path, K_NV, nvfs_vermagic="6.17.0-1011-nvidia")
    f = failed(kg.evaluate(K_NV, dkms_text="", modules_root=str(root)))
    assert {"dkms.nvidia-fs", "vermagic.nvidia_fs"} <= set(f), f


def test_no_nvidia_fs_at_all_still_fails_on_dkms(tmp_path: Path) -> None:
    root = nvidia_kernel_node(tmp_path, K_NV)
    (root / K_NV / "ubuntu/nvidia-fs/nvidia-fs.ko").unlink()
    f = failed(kg.evaluate(K_NV, dkms_text="", modules_root=str(root)))
    assert {"dkms.nvidia-fs", "module.nvidia_fs"} <= set(f)


def test_without_headers_a_kernel_whose_modules_are_all_packaged_passes(tmp_path: Path) -> None:
    """The headers matter because DKMS builds only with them (dkms_autoinstaller,
    tests/fixtures/kernel_gate/dkms_hooks.yml). Before, their absence failed, and so held, a
    linux-nvidia kernel whose nvidia-fs and driver are prebuilt packages: no upstream rule
    asks for headers a kernel's modules do not need."""
    root = nvidia_kernel_node(tmp_path, K_NV)
    (root / K_NV / "build").rmdir()
    for text in ("", None):
        g = kg.evaluate(K_NV, dkms_text=text, modules_root=str(root))
        assert g["passed"], failed(g)
        h = next(r for r in g["results"] if r["check"] == "headers")
        assert "not needed" in h["reason"]
    (root / K_NV / "ubuntu/nvidia-fs/nvidia-fs.ko").unlink()  # DKMS must build it: headers count
    assert {"headers", "dkms.nvidia-fs"} <= set(failed(kg.evaluate(
        K_NV, dkms_text="", modules_root=str(root))))


def builtin_nvme_node(tmp: Path, symvers: str | None) -> Path:
    """nvidia_kernel_node with nvme built in (modules.builtin; ASSUMPTION: no source read shows
    a linux-nvidia kernel with CONFIG_BLK_DEV_NVME=y, the NV-Kernels #10 patch is what makes
    such a kernel exporting the registration possible) and the headers' Module.symvers."""
    root = nvidia_kernel_node(tmp, K_NV)
    mdir = root / K_NV
    (mdir / "kernel/drivers/nvme/host/nvme.ko").unlink()
    (mdir / "modules.builtin").write_text("kernel/drivers/nvme/host/nvme.ko\n")
    if symvers is not None:
        (mdir / "build/Module.symvers").write_text(
            "0x12345678\tnvme_init_ctrl\tvmlinux\tEXPORT_SYMBOL_GPL\t\n" + symvers)
    return root


def test_a_built_in_nvme_that_exports_the_registration_itself_passes(tmp_path: Path) -> None:
    """Before: any built-in nvme failed (and held) the kernel, though nvidia-fs's
    __symbol_get() finds a name vmlinux exports as well as a module's (src/nvfs-mod.c,
    tests/fixtures/kernel_gate/builtin_nvme.yml); only a built-in nvme without the name cannot
    be replaced by the GDS-patched one."""
    gpl = f"0x0badf00d\t{V1}\tvmlinux\tEXPORT_SYMBOL_GPL\t\n"
    g = kg.evaluate(K_NV, dkms_text="", modules_root=str(builtin_nvme_node(tmp_path, gpl)))
    assert g["passed"], failed(g)
    sym = next(r for r in g["results"] if r["check"] == "nvme.symbol")
    assert "built-in nvme" in sym["reason"] and "Module.symvers" in sym["reason"]


def test_a_built_in_nvme_without_the_registration_or_exported_plain_fails(
        tmp_path: Path) -> None:
    for i, (text, check) in enumerate(((None, "module.nvme"), ("", "module.nvme"), (
            f"0x0badf00d\t{V1}\tvmlinux\tEXPORT_SYMBOL\t\n", "nvme.symbol.gpl"))):
        root = builtin_nvme_node(tmp_path / str(i), text)
        f = failed(kg.evaluate(K_NV, dkms_text="", modules_root=str(root)))
        assert set(f) == {check}, f
