"""The kernel gate (plugins/module_utils/kernel_gate.py) on stand-in module trees: genuine ELF
relocatable objects (tests/unit/kernel_gate_standins) under a temporary /lib/modules, never the
running kernel's. Upstream facts: tests/fixtures/kernel_gate/ and
tests/fixtures/kallsyms/nvfs-dma-modules-list.yml."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.unit.kernel_gate_standins import elf_module, write_module

ROOT = Path(__file__).resolve().parents[2]
DMA = yaml.safe_load((ROOT / "tests/fixtures/kallsyms/nvfs-dma-modules-list.yml").read_text())
I87 = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/issue87.yml").read_text())
GPL = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/gpl_exports.yml").read_text())


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kg = _load("gdsfleet_kernel_gate_utils", ROOT / "plugins/module_utils/kernel_gate.py")
ke = kg._elf  # plugins/module_utils/kernel_elf.py, as the gate loaded it from beside itself

K = "6.8.0-45-generic"
OLD = "6.8.0-40-generic"
V1 = DMA["tags"]["v2.25.7"]["nvme"][0]            # nvme_v1_register_nvfs_dma_ops
V2 = DMA["tags"]["v2.28.4"]["nvme"][0]            # nvme_v2_register_nvfs_dma_ops
UNREG2 = DMA["tags"]["v2.28.4"]["nvme"][2]        # nvme_v2_unregister_nvfs_dma_ops
OPEN, PROPRIETARY = "Dual MIT/GPL", "NVIDIA"


def vermagic(k: str) -> str:
    return f"{k} SMP preempt mod_unload modversions "


def node(tmp: Path, k: str = K, *, headers: bool = True, nvfs_looks: str = V1,
         nvme_exports: tuple[str, ...] = (V1,), driver_license: str = OPEN,
         nvfs_vermagic: str | None = None, nvme_dir: str = "updates/dkms",
         suffix: str = ".ko", nvme_export_kind: str = "gpl") -> Path:
    """A stand-in /lib/modules tree for kernel k, as DKMS leaves it after building nvidia-fs
    and mlnx-nvme (updates/dkms) next to the kernel's own modules (kernel/). The nvme module
    exports its registration names GPL-only (``nvme_export_kind``: gpl, plain, or strings: in
    __ksymtab_strings with no export table to say which)."""
    exported: dict[str, tuple[str, ...]] = {"plain_exports": ("nvme_init_ctrl",)}
    key = {"gpl": "gpl_exports", "plain": "plain_exports", "strings": "exports"}[nvme_export_kind]
    exported[key] = exported.get(key, ()) + nvme_exports
    root = tmp / "lib/modules"
    mdir = root / k
    mdir.mkdir(parents=True, exist_ok=True)
    if headers:
        (mdir / "build").mkdir(exist_ok=True)
    write_module(mdir / f"updates/dkms/nvidia-fs{suffix}", elf_module(
        name="nvidia_fs", vermagic=vermagic(nvfs_vermagic or k), license="GPL v2",
        rodata=("nvidia-fs", nvfs_looks, nvfs_looks.replace("_register_", "_unregister_"),
                "nvme_rdma_v1_register_nvfs_dma_ops")))
    write_module(mdir / f"{nvme_dir}/nvme{suffix}", elf_module(
        name="nvme", vermagic=vermagic(k), license="GPL", **exported))
    write_module(mdir / "kernel/drivers/nvme/host/nvme.ko", elf_module(
        name="nvme", vermagic=vermagic(k), license="GPL", gpl_exports=("nvme_init_ctrl",)))
    write_module(mdir / f"updates/dkms/nvidia{suffix}", elf_module(
        name="nvidia", vermagic=vermagic(k), license=driver_license))
    return root


def dkms(*kernels: str, nvme: bool = True, version: str = "2.25.7") -> str:
    lines = []
    for k in kernels:
        lines.append(f"nvidia-fs/{version}, {k}, x86_64: installed")
        if nvme:
            lines.append(f"mlnx-nvme/26.04.OFED.26.04.1.1.0.1, {k}, x86_64: installed")
    return "\n".join(lines) + "\n"


def gate(root: Path, k: str = K, text: str | None = None, **kw: object) -> dict:
    return kg.evaluate(k, dkms_text=dkms(k) if text is None else text,
                       modules_root=str(root), boot_dir=str(root.parent.parent / "boot"), **kw)


def failed(g: dict) -> dict[str, dict]:
    return {r["check"]: r for r in g["results"] if not r["ok"]}


# --- ELF reading ------------------------------------------------------------------------------

def test_standin_is_an_elf_that_readelf_reads_the_same_way(tmp_path: Path) -> None:
    if not shutil.which("readelf"):
        pytest.skip("no readelf")
    p = write_module(tmp_path / "m.ko", elf_module(vermagic=vermagic(K), exports=(V2,),
                                                   ksymtab_symbols=(V1,), rodata=(V1,)))
    out = subprocess.run(["readelf", "-W", "-s", "-p", "__ksymtab_strings", "-p", ".modinfo",
                          str(p)], capture_output=True, text=True, check=True).stdout
    assert f"__ksymtab_{V1}" in out and V2 in out and f"vermagic={K}" in out
    elf = kg.read_module(str(p))
    assert kg.exported_symbols(elf) == {V1, V2}
    assert kg.vermagic_kernel(elf) == K
    assert kg.nvme_lookups(elf) == [V1]


def test_compiled_object_from_cc_reads(tmp_path: Path) -> None:
    """A real compiler's object: .modinfo and the looked-up name as C would put them."""
    cc = shutil.which("cc")
    if not cc:
        pytest.skip("no cc")
    src = tmp_path / "standin.c"
    src.write_text(
        '/* TEST STAND-IN: shaped like nvidia-fs, not a module */\n'
        f'__attribute__((section(".modinfo"), used)) static const char vm[] = "vermagic={K} SMP";\n'
        f'const char *const lookup[] = {{ "{V2}", "{UNREG2}" }};\n')
    obj = tmp_path / "standin.ko"
    subprocess.run([cc, "-O2", "-c", "-o", str(obj), str(src)], check=True)
    elf = kg.read_module(str(obj))
    assert kg.vermagic_kernel(elf) == K
    assert kg.nvme_lookups(elf) == [V2]


@pytest.mark.parametrize("suffix", [".ko", ".ko.gz", ".ko.xz"])
def test_compressed_modules_read(tmp_path: Path, suffix: str) -> None:
    root = node(tmp_path, suffix=suffix)
    assert gate(root)["passed"], gate(root)


def test_zstd_modules_read_through_zstd(tmp_path: Path) -> None:
    zstd = shutil.which("zstd")
    if not zstd:
        pytest.skip("no zstd")
    root = node(tmp_path)
    for ko in (root / K / "updates/dkms").glob("*.ko"):
        subprocess.run([zstd, "-q", "--rm", str(ko)], check=True)
    g = gate(root)
    assert g["passed"], g


def test_big_endian_elf_reads() -> None:
    elf = kg.Elf(elf_module(vermagic=vermagic(K), exports=(V1,), big_endian=True,
                            ksymtab_symbols=("x",)))
    assert kg.vermagic_kernel(elf) == K and kg.exported_symbols(elf) == {V1, "x"}


def test_an_export_is_gpl_or_plain_by_the_table_its_ksymtab_symbol_lies_in(
        tmp_path: Path) -> None:
    """__ksymtab_strings holds both kinds' names (what the gate merged before issue 43);
    the __ksymtab_<name> symbol's section tells them apart (scripts/module.lds.S)."""
    assert GPL["layout"]["strings_section"] == "__ksymtab_strings"
    p = write_module(tmp_path / "m.ko", elf_module(
        vermagic=vermagic(K), gpl_exports=(V2,), plain_exports=(V1,), exports=("x",)))
    elf = ke.read_module(str(p))
    assert ke.exports(elf) == {V2: "gpl", V1: "plain", "x": "unknown"}
    assert ke.exported_symbols(elf) == {V1, V2, "x"}
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-W", "-S", "-s", str(p)], capture_output=True,
                             text=True, check=True).stdout
        index = {int(m.group(1)): m.group(2) for m in
                 re.finditer(r"\[\s*(\d+)\]\s+(\S+)", out)}
        ndx = {m.group(2): int(m.group(1)) for m in
               re.finditer(r"\s(\d+)\s+(__ksymtab_nvme\S+)$", out, re.M)}
        assert index[ndx[f"__ksymtab_{V2}"]] == "__ksymtab_gpl"
        assert index[ndx[f"__ksymtab_{V1}"]] == "__ksymtab"


def test_a_compiled_objects_unlinked_gpl_export_section_reads(tmp_path: Path) -> None:
    """A real compiler's object before the module link: ___ksymtab_gpl+<name>, as
    include/linux/export-internal.h names it (TEST STAND-IN source, not kernel code)."""
    cc = shutil.which("cc")
    if not cc:
        pytest.skip("no cc")
    src = tmp_path / "standin.c"
    src.write_text(
        "/* TEST STAND-IN: an export table entry shaped like EXPORT_SYMBOL_GPL's */\n"
        f'__attribute__((section("___ksymtab_gpl+{V2}"), used))\n'
        f"const int __ksymtab_{V2}[3];\n"
        f'__attribute__((section("___ksymtab+{V1}"), used))\n'
        f"const int __ksymtab_{V1}[3];\n")
    obj = tmp_path / "standin.ko"
    subprocess.run([cc, "-O2", "-c", "-o", str(obj), str(src)], check=True)
    assert ke.exports(ke.read_module(str(obj))) == {V2: "gpl", V1: "plain"}


def test_hostile_bytes_are_a_gate_error_never_a_crash() -> None:
    """Property test with a fixed seed (no Hypothesis in this venv): a stand-in with bytes
    overwritten anywhere, or junk, reads or raises GateError/ValueError, nothing else."""
    rnd = random.Random(29)  # noqa: S311  fixed-seed fuzzing, not crypto
    good = elf_module(vermagic=vermagic(K), exports=(V1,), rodata=(V1,), ksymtab_symbols=("a",),
                      gpl_exports=(V2,), plain_exports=("b",), versions=(("c", 7),))
    for _ in range(400):
        bad = bytearray(good)
        at = rnd.randrange(len(bad))
        bad[at:at + rnd.randint(1, 8)] = rnd.randbytes(rnd.randint(1, 8))
        junk = rnd.randbytes(rnd.randint(0, 600))
        for data in (bytes(bad), b"\x7fELF" + junk, junk, bytes(bad[:rnd.randrange(len(bad))])):
            try:
                elf = kg.Elf(data)
                kg.vermagic_kernel(elf), kg.exported_symbols(elf), kg.nvme_lookups(elf)
                ke.exports(elf), ke.modversions(elf)
            except (kg.GateError, ValueError):
                pass


# --- the gate ---------------------------------------------------------------------------------

def test_a_kernel_with_everything_built_passes(tmp_path: Path) -> None:
    g = gate(node(tmp_path))
    assert g["passed"], g
    assert {r["check"] for r in g["results"]} >= {
        "headers", "dkms.nvidia-fs", "dkms.mlnx-nvme", "vermagic.nvidia_fs", "vermagic.nvme",
        "vermagic.nvidia", "nvme.symbol", "nvme.symbol.gpl", "driver.open"}
    sym = next(r for r in g["results"] if r["check"] == "nvme.symbol")
    assert V1 in sym["reason"] and "updates/dkms/nvme.ko" in sym["reason"]


def test_a_kernel_without_headers_fails_and_says_which_package(tmp_path: Path) -> None:
    root = node(tmp_path, headers=False)
    g = gate(root, text="nvidia-fs/2.25.7, 6.8.0-40-generic, x86_64: installed\n")
    f = failed(g)
    assert not g["passed"] and {"headers", "dkms.nvidia-fs"} <= set(f)
    assert f"linux-headers-{K}" in f["headers"]["fix"]
    assert f"kernel-devel-{K}" in gate(root, text="", family="redhat")["fix"]


def test_issue_87_v2_only_nvme_and_v1_nvidia_fs_fail_naming_both(tmp_path: Path) -> None:
    assert I87["doca_ofed_26_01"]["exports"] == V2
    assert I87["nvidia_fs_without_blk_dma_iter"]["looks_up"] == V1
    g = gate(node(tmp_path, nvfs_looks=V1, nvme_exports=(V2,)))
    f = failed(g)
    assert set(f) == {"nvme.symbol"}, g
    reason = f["nvme.symbol"]["reason"]
    assert V1 in reason and V2 in reason and "compat" in reason
    assert "#87" in f["nvme.symbol"]["fix"]


def test_a_plain_export_of_the_registration_name_fails_on_6_6_and_later(tmp_path: Path) -> None:
    """Linux 6.6's __symbol_get() refuses it: nvidia-fs never registers with nvme (NV-Kernels
    #10, the same for NFS in #13, BeeGFS in ThinkParQ/beegfs#123)."""
    assert GPL["rule"]["first_release"] == "6.6"
    g = gate(node(tmp_path, nvme_export_kind="plain"))
    f = failed(g)
    assert set(f) == {"nvme.symbol.gpl"}, g
    reason = f["nvme.symbol.gpl"]["reason"]
    assert V1 in reason and "EXPORT_SYMBOL_GPL" in reason and "6.6" in reason
    assert GPL["rule"]["commit"][:12] in reason and "compat" in reason
    assert "NV-Kernels" in f["nvme.symbol.gpl"]["fix"]


def test_a_plain_export_on_an_older_kernel_passes_and_says_the_rule_is_not_known_there(
        tmp_path: Path) -> None:
    old = "5.15.0-139-generic"
    g = gate(node(tmp_path, old, nvme_export_kind="plain"), old)
    assert g["passed"], g
    note = next(r for r in g["results"] if r["check"] == "nvme.symbol.gpl")["reason"]
    assert "EXPORT_SYMBOL" in note and "6.6" in note and "backport" in note


def test_gpl_and_unknown_exports_pass(tmp_path: Path) -> None:
    assert gate(node(tmp_path / "gpl"))["passed"]
    g = gate(node(tmp_path / "strings", nvme_export_kind="strings"))
    assert g["passed"], g
    note = next(r for r in g["results"] if r["check"] == "nvme.symbol.gpl")["reason"]
    assert "could not tell" in note


def test_v2_nvidia_fs_on_a_v2_nvme_passes_and_on_the_stock_nvme_fails(tmp_path: Path) -> None:
    assert gate(node(tmp_path / "a", nvfs_looks=V2, nvme_exports=(V2,)))["passed"]
    # no mlnx-nvme: the kernel's own nvme exports nothing nvidia-fs can register with
    root = node(tmp_path / "b")
    (root / K / "updates/dkms/nvme.ko").unlink()
    g = gate(root, text=dkms(K, nvme=False))
    reason = failed(g)["nvme.symbol"]["reason"]
    assert "kernel/drivers/nvme/host/nvme.ko" in reason and "exports no nvme_v" in reason


def test_modules_dep_decides_which_nvme_loads(tmp_path: Path) -> None:
    root = node(tmp_path)
    (root / K / "modules.dep").write_text(
        "kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko\n"
        "updates/dkms/nvidia-fs.ko:\nupdates/dkms/nvidia.ko:\n")
    g = gate(root)
    assert "kernel/drivers/nvme/host/nvme.ko" in failed(g)["nvme.symbol"]["reason"]


def test_a_module_built_for_another_kernel_fails_vermagic(tmp_path: Path) -> None:
    g = gate(node(tmp_path, nvfs_vermagic=OLD))
    f = failed(g)
    assert set(f) == {"vermagic.nvidia_fs"} and OLD in f["vermagic.nvidia_fs"]["reason"]


def test_dkms_state_other_than_installed_fails(tmp_path: Path) -> None:
    text = dkms(K).replace("mlnx-nvme/26.04.OFED.26.04.1.1.0.1, " + K + ", x86_64: installed",
                           "mlnx-nvme/26.04.OFED.26.04.1.1.0.1, " + K + ", x86_64: built")
    f = failed(gate(node(tmp_path), text=text))
    assert set(f) == {"dkms.mlnx-nvme"} and "built" in f["dkms.mlnx-nvme"]["reason"]


def test_the_driver_as_a_dkms_module_must_be_installed_too(tmp_path: Path) -> None:
    text = dkms(K) + f"nvidia/580.95.05, {OLD}, x86_64: installed\n"
    assert set(failed(gate(node(tmp_path), text=text))) == {"dkms.nvidia"}
    assert gate(node(tmp_path), text=text + f"nvidia/580.95.05, {K}, x86_64: installed\n")[
        "passed"]


def test_the_proprietary_driver_fails(tmp_path: Path) -> None:
    f = failed(gate(node(tmp_path, driver_license=PROPRIETARY)))
    assert set(f) == {"driver.open"} and "open" in f["driver.open"]["fix"]


def test_p2pdma_needs_the_kernel_config_and_no_nvidia_fs(tmp_path: Path) -> None:
    root = node(tmp_path)
    for ko in ("nvidia-fs.ko", "nvme.ko"):
        (root / K / "updates/dkms" / ko).unlink()
    boot = tmp_path / "boot"
    boot.mkdir()
    f = failed(gate(root, text="", route="p2pdma"))
    assert set(f) == {"config.p2pdma"} and "missing" in f["config.p2pdma"]["reason"]
    (boot / f"config-{K}").write_text("# CONFIG_PCI_P2PDMA is not set\n")
    assert set(failed(gate(root, text="", route="p2pdma"))) == {"config.p2pdma"}
    (boot / f"config-{K}").write_text("CONFIG_PCI=y\nCONFIG_PCI_P2PDMA=y\n")
    assert gate(root, text="", route="p2pdma")["passed"]


def test_no_dkms_on_the_nvfs_route_fails(tmp_path: Path) -> None:
    g = kg.evaluate(K, dkms_text=None, modules_root=str(node(tmp_path)))
    assert "dkms is not installed" in failed(g)["dkms.nvidia-fs"]["reason"]


def test_a_kernel_name_that_is_not_a_release_is_refused() -> None:
    for bad in ("", "../../etc", "6.8; rm -rf /", "a" * 200):
        with pytest.raises(kg.GateError):
            kg.evaluate(bad, dkms_text="")


# --- the next boot, keeping the default, holding, recording -------------------------------------

def _boot(tmp: Path, *kernels: str) -> Path:
    boot = tmp / "boot"
    (boot / "grub").mkdir(parents=True, exist_ok=True)
    for k in kernels:
        (boot / f"vmlinuz-{k}").write_text("stand-in")
    return boot


# grub.cfg as grub-mkconfig writes it on Ubuntu (10_linux), trimmed to the entry lines
GRUB_CFG = "".join(
    ["menuentry 'Ubuntu' --class ubuntu $menuentry_id_option 'gnulinux-simple-UUID' {\n}\n",
     "submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-UUID' {\n"]
    + [f"\tmenuentry 'Ubuntu, with Linux {k}{title}' --class ubuntu "
       f"$menuentry_id_option 'gnulinux-{k}-{kind}-UUID' {{\n\t}}\n"
       for k, title, kind in ((K, "", "advanced"), (OLD, "", "advanced"),
                              (OLD, " (recovery mode)", "recovery"))]
    + ["}\n"])


class Recorder:
    def __init__(self, boot: Path, dpkg: str = "") -> None:
        self.calls: list[list[str]] = []
        self.boot, self.dpkg = boot, dpkg

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        if argv[0] == "grub-set-default":
            (self.boot / "grub/grubenv").write_text(f"# GRUB Environment Block\n"
                                                    f"saved_entry={argv[1]}\n")
        return 0, self.dpkg if argv[0] == "dpkg-query" else ""


def test_failing_next_kernel_keeps_the_running_one_default_on_ubuntu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kg.shutil, "which", lambda name: None)
    boot, etc = _boot(tmp_path, OLD, K), tmp_path / "etc"
    (etc / "default").mkdir(parents=True)
    (etc / "default/grub").write_text('GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\n')
    (boot / "grub/grub.cfg").write_text(GRUB_CFG)
    assert kg.next_boot(str(boot), str(etc))["kernel"] == K
    run = Recorder(boot, dpkg=f"ii  linux-image-{K}\nii  linux-headers-{K}\n"
                              f"ii  linux-image-{OLD}\nii  linux-generic\n"
                              "ii  linux-image-generic\nun  linux-generic-hwe-24.04\n")
    g = {"kernel": K, "passed": False, "reason": "r", "fix": "f"}
    actions = kg.protect(g, running=OLD, family="debian", runner=run, boot_dir=str(boot),
                         etc=str(etc))
    assert all(a["ok"] for a in actions), actions
    assert ["update-grub"] in run.calls
    assert ["grub-set-default", f"gnulinux-advanced-UUID>gnulinux-{OLD}-advanced-UUID"] in run.calls
    hold = next(c for c in run.calls if c[0] == "apt-mark")
    assert hold == ["apt-mark", "hold", "linux-generic", f"linux-headers-{K}", f"linux-image-{K}",
                    "linux-image-generic"]
    assert kg.grub_default(str(etc)) == "saved"
    assert "GRUB_TIMEOUT=0" in (etc / "default/grub").read_text()  # the admin's file survives
    nxt = kg.next_boot(str(boot), str(etc))
    assert (nxt["kernel"], nxt["source"]) == (OLD, "GRUB saved_entry")
    state = tmp_path / "state/kernel-gate.json"
    doc = kg.record(g, running=OLD, nxt=nxt, actions=actions, path=str(state), now="T")
    assert json.loads(state.read_text()) == doc
    assert doc["next_boot"] == OLD and doc["kernels"][K]["passed"] is False


def test_rhel_uses_grubby_and_versionlock(tmp_path: Path) -> None:
    k, running = "5.14.0-503.el9.x86_64", "5.14.0-427.el9.x86_64"
    run = Recorder(tmp_path)
    actions = kg.protect({"kernel": k, "passed": False}, running=running, family="redhat",
                         runner=run)
    assert [a["ok"] for a in actions] == [True, True]
    assert run.calls[0] == ["grubby", f"--set-default=/boot/vmlinuz-{running}"]
    assert run.calls[1][:4] == ["dnf", "-y", "versionlock", "exclude"]
    assert f"kernel-core-{k}" in run.calls[1]


def test_nothing_is_touched_when_the_gate_passes_or_gates_the_running_kernel(
        tmp_path: Path) -> None:
    run = Recorder(tmp_path)
    for g, running in (({"kernel": K, "passed": True}, OLD), ({"kernel": K, "passed": False}, K)):
        assert kg.protect(g, running=running, family="debian", runner=run) == []
    assert run.calls == []


def test_a_failed_default_change_is_reported_not_hidden(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kg.shutil, "which", lambda name: None)
    boot, etc = _boot(tmp_path, OLD, K), tmp_path / "etc"
    (etc / "default").mkdir(parents=True)
    (etc / "default/grub").write_text("GRUB_DEFAULT=saved\n")
    actions = kg.protect({"kernel": K, "passed": False}, running=OLD, family="debian",
                         runner=Recorder(boot), boot_dir=str(boot), etc=str(etc))
    assert actions[0]["ok"] is False and "by hand" in actions[0]["detail"]


def test_state_keeps_a_bounded_history_and_survives_garbage(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text("{not json")
    for i in range(40):
        kg.record({"kernel": f"6.8.0-{i}-generic", "passed": True, "reason": "", "fix": ""},
                  running=K, nxt={"kernel": K}, actions=[], path=str(state), now="T")
    doc = json.loads(state.read_text())
    assert len(doc["kernels"]) == kg.STATE_MAX_KERNELS and "6.8.0-39-generic" in doc["kernels"]


def test_the_hook_defers_the_hold_until_the_package_manager_lets_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside dpkg/rpm the package lock is held: apt-mark/dnf would fail, so the hook's hold
    runs in a detached process that retries (here: recorded, not run)."""
    started: list[list[str]] = []

    class Popen:
        def __init__(self, argv: list[str], **kw: object) -> None:
            assert kw.get("start_new_session") is True
            started.append(argv)

    monkeypatch.setattr(kg.subprocess, "Popen", Popen)
    run = Recorder(tmp_path, dpkg=f"ii  linux-image-{K}\n")
    ok, what = kg.hold_packages(K, "debian", run, defer=True)
    assert ok and "scheduled" in what
    assert started[0][:2] == ["sh", "-c"] and started[0][-3:] == ["apt-mark", "hold",
                                                                  f"linux-image-{K}"]
    assert not any(c[0] == "apt-mark" for c in run.calls)  # not run inside the transaction
