# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The kernel gate: may this node boot kernel K without losing GPUDirect Storage?

Pure standard library, so the same file serves the ``kernel_gate`` module and the kernel hook
the nvidia_fs role installs (``python3 kernel_gate.py --kernel K --protect``, with kernel_elf.py
and kernel_boot.py beside it), which runs without Ansible when a package manager installs a
kernel behind gdsfleet's back.

Everything is read from files of the kernel in question, never from the running kernel:
``/lib/modules/<K>/build`` (headers), ``dkms status`` for K, the built modules' own ELF
sections (read by kernel_elf.py: ``.modinfo`` vermagic/license, the nvme registration name
nvidia-fs looks up in its ``.rodata``, the names the nvme module exports), ``/boot/config-<K>``.
Every byte read is bounded; a malformed ELF is a failed check that names the file, never a
crash. This file holds the policy, which checks a kernel must pass; kernel_boot.py finds the
kernel that boots next and does the protection (default boot entry, package holds, the
record) when one fails.

Upstream facts (tests/fixtures/kernel_gate/README.md): nvidia-fs names the nvme symbol it looks
up as a string in its module table (NVIDIA/gds-nvidia-fs src/nvfs-dma.c ``modules_list``),
``nvme_v1_register_nvfs_dma_ops`` up to 2.27.x, ``nvme_v2_...`` from 2.28.2 when the kernel has
the blk DMA iterator API; a nvme module exporting the other name leaves nvidia-fs unregistered and
reads bounce through compat mode (gds-nvidia-fs issue #87).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from typing import Any


def _sibling(name: str) -> Any:
    """kernel_elf.py / kernel_boot.py from beside this file: the kernel hook runs this file by
    itself and provisioner loads it by path. Inside Ansible this file sits in AnsiballZ's
    payload, where the collection imports below find the copies AnsiballZ shipped."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    key = "gdsfleet_" + name
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:  # pragma: no cover - broken install
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


if os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_elf.py")):
    _elf = _sibling("kernel_elf")
    _boot = _sibling("kernel_boot")
else:
    from ansible_collections.gdsfleet.gds.plugins.module_utils import kernel_boot as _boot
    from ansible_collections.gdsfleet.gds.plugins.module_utils import kernel_elf as _elf

Elf = _elf.Elf
GateError = _elf.GateError
MAX_DEP_BYTES = _elf.MAX_DEP_BYTES
NVME_SYMBOL_RE = _elf.NVME_SYMBOL_RE
exported_symbols = _elf.exported_symbols
exports = _elf.exports
modversions = _elf.modversions
read_symvers = _elf.read_symvers
symvers_exports = _elf.symvers_exports
reference_vermagic = _elf.reference_vermagic
find_module = _elf.find_module
modinfo = _elf.modinfo
nvme_lookups = _elf.nvme_lookups
read_module = _elf.read_module
vermagic_kernel = _elf.vermagic_kernel
_modname = _elf._modname

STATE_PATH = _boot.STATE_PATH
STATE_MAX_KERNELS = _boot.STATE_MAX_KERNELS
entry_kernel = _boot.entry_kernel
grub_default = _boot.grub_default
hold_argv = _boot.hold_argv
hold_packages = _boot.hold_packages
keep_default = _boot.keep_default
load_state = _boot.load_state
next_boot = _boot.next_boot
os_family = _boot.os_family
parse_grub_default = _boot.parse_grub_default
parse_saved_entry = _boot.parse_saved_entry
protect = _boot.protect
record = _boot.record
_read = _boot._read

KERNEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}\Z")  # \Z: "$" lets "K\n" in
OPEN_LICENSE = "Dual MIT/GPL"


# --- dkms status -----------------------------------------------------------------------------

_DKMS_RE = re.compile(r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+)"
                      r"(?:,\s*(?P<arch>[^:\s]+))?\s*:\s*(?P<state>[A-Za-z-]+)")


def parse_dkms(text: str) -> list[dict]:
    """``dkms status`` lines (2.x ``m, v, k, a: state`` and 3.x ``m/v, k, a: state``)."""
    out = []
    for line in text.splitlines()[:2000]:
        m = _DKMS_RE.match(line.strip())
        if m:
            out.append(m.groupdict())
    return out


# --- the gate --------------------------------------------------------------------------------

def _result(check: str, ok: bool, reason: str, fix: str = "") -> dict:
    return {"check": check, "ok": ok, "reason": reason, "fix": "" if ok else fix}


def release_numbers(kernel: str) -> tuple[int, ...]:
    """(major, minor) of a kernel release ("6.8.0-45-generic" -> (6, 8)); () if none."""
    m = re.match(r"^(\d+)\.(\d+)", kernel)
    return (int(m.group(1)), int(m.group(2))) if m else ()


# Linux 6.6 (commit 9011e49d54dc, "modules: only allow symbol_get of EXPORT_SYMBOL_GPL modules";
# also in the 6.1 and 6.5 stable series): __symbol_get() refuses a symbol not exported GPL-only,
# and nvidia-fs finds the storage drivers' registration functions through it
# (tests/fixtures/kernel_gate/gpl_exports.yml).
SYMBOL_GET_GPL_ONLY = (6, 6)
_GPL_SOURCES = "NVIDIA/NV-Kernels #10 (nvme) and #13 (NFS), ThinkParQ/beegfs#123"


def gpl_export_result(symbol: str, kind: str, path: str, kernel: str) -> dict:
    """``nvme.symbol.gpl``: the registration name nvidia-fs looks up must be exported
    GPL-only where the kernel's __symbol_get() demands it. Fails only on kernels from 6.6,
    where the rule is upstream's; elsewhere a plain export passes with a note."""
    check = "nvme.symbol.gpl"
    if kind == "gpl":
        return _result(check, True, f"{path} exports {symbol} with EXPORT_SYMBOL_GPL")
    if kind != "plain":
        return _result(check, True, f"could not tell how {path} exports {symbol} (no "
                       "__ksymtab/__ksymtab_gpl entry for it): not judged")
    ver = release_numbers(kernel)
    text = (f"{path} exports {symbol} with EXPORT_SYMBOL, not EXPORT_SYMBOL_GPL: since Linux "
            "6.6 __symbol_get() refuses such a symbol (commit 9011e49d54dc), so nvidia-fs never "
            "registers with this driver and GDS I/O goes through compat mode (kernel log: "
            f"\"failing symbol_get of non-GPLONLY symbol {symbol}\"; {_GPL_SOURCES})")
    if ver and ver >= SYMBOL_GET_GPL_ONLY:
        return _result(check, False, text,
                       "use a driver build that exports the nvfs registration functions with "
                       "EXPORT_SYMBOL_GPL (NV-Kernels #10 changed the linux-nvidia kernels'; "
                       "ask the driver's vendor for a fixed DOCA-OFED mlnx-nvme), or boot a "
                       "kernel older than 6.6")
    note = (f"; kernel {kernel} is older than 6.6, where the rule is upstream's (stable "
            "backports, e.g. 6.1 and 6.5, carry it too, so this may still not register): "
            "since Linux")
    return _result(check, True, text.replace(": since Linux", note, 1))


def headers_package(kernel: str, family: str) -> str:
    return f"kernel-devel-{kernel}" if family == "redhat" else f"linux-headers-{kernel}"


_REBUILD = "a newer kernel may need a newer nvidia-fs (2.26.6 for 6.11/6.14, 2.28.2 for 6.17)"


def _dkms_results(kernel: str, entries: list[dict] | None, wanted: list[str], hdr: str,
                  packaged: dict[str, str]) -> list[dict]:
    """``dkms.<module>``: DKMS has it ``installed`` for the kernel; or, for a module DKMS did
    not build (``packaged``: module -> why it stands in), the packaged one that loads."""
    res = []
    for name in wanted:
        mine = [e for e in entries or [] if e["module"] == name]
        ok = [e for e in mine if e["kernel"] == kernel and e["state"] == "installed"]
        if ok:
            res.append(_result(f"dkms.{name}", True,
                               f"DKMS {name}/{ok[0]['version']} installed for {kernel}"))
            continue
        if name in packaged:
            res.append(_result(f"dkms.{name}", True, packaged[name]))
            continue
        if entries is None:
            res.append(_result(f"dkms.{name}", False, "dkms is not installed (no `dkms status`)"
                               f" and no packaged {name} module for {kernel}",
                               "install dkms and nvidia-fs-dkms (the nvidia_fs role does), or "
                               f"the kernel's prebuilt module package (linux-modules-{name}-"
                               f"{kernel} on linux-nvidia kernels)"))
            continue
        seen = ", ".join(f"{e['version']} {e['kernel']} {e['state']}" for e in mine
                         if e["kernel"] == kernel) or "no entry"
        res.append(_result(
            f"dkms.{name}", False, f"DKMS has no {name} installed for {kernel} ({seen})",
            f"install {hdr}, run `dkms autoinstall -k {kernel}` and read "
            f"/var/lib/dkms/{name}/<version>/build/make.log; {_REBUILD}"))
    return res


def _headers_result(kernel: str, mdir: str, hdr: str, have: bool, dkms_res: list[dict]) -> dict:
    """``headers``: DKMS builds only with them (dkms_autoinstaller). They fail the kernel only
    when a module DKMS must build for it is missing; a kernel whose GDS modules are packaged
    (linux-modules-nvidia-fs-<K>, kmod packages) or already built needs none to boot."""
    if have:
        return _result("headers", True, f"headers of {kernel} installed")
    if all(r["ok"] for r in dkms_res):
        return _result("headers", True, f"no headers for {kernel} ({mdir}/build is missing); "
                       "not needed: no module DKMS must build for it is missing")
    return _result("headers", False, f"no headers for {kernel} ({mdir}/build is missing): DKMS "
                   "cannot build nvidia-fs for it", f"install {hdr}, then `dkms autoinstall -k "
                   f"{kernel}`")


def _vermagic_result(mod: str, owner: str, path: str, elf: Any, kernel: str, mdir: str,
                     boot_dir: str) -> dict:
    """``vermagic.<mod>``: built for this kernel; or, reached through weak-updates/ (RHEL
    kmod packages, linked by weak-modules), loadable as the kernel's loader judges it: the
    vermagic's flags equal the kernel's and every imported symbol's CRC equals the kernel's
    symvers (same_magic skips the release word when the module has CRCs;
    tests/fixtures/kernel_gate/weak_updates.yml)."""
    check = f"vermagic.{mod}"
    vk = vermagic_kernel(elf)
    fix = (f"rebuild {owner} for {kernel} (`dkms install --force ... -k {kernel}`) and run "
           f"depmod {kernel}")
    if vk == kernel:
        return _result(check, True, f"{path}: vermagic {vk}")
    if not os.path.relpath(path, mdir).startswith("weak-updates" + os.sep):
        return _result(check, False, f"{path} was built for {vk or 'no vermagic'}, not {kernel}",
                       fix)
    kabi_fix = (f"install {owner} built for {kernel}'s kABI (the kmod package of this RHEL "
                f"minor release) and run `weak-modules --add-kernel {kernel}`")
    where = f"{path} (weak-updates/, built for {vk})"
    crcs = modversions(elf)
    if not crcs:
        return _result(check, False, f"{where} has no __versions (symbol CRCs), so the "
                       f"kernel compares its whole vermagic and refuses a module built for {vk}",
                       kabi_fix)
    own = reference_vermagic(mdir)
    flags = " ".join((modinfo(elf).get("vermagic") or [""])[0].split()[1:])
    if own is not None and flags != own:
        return _result(check, False, f"{where}: vermagic flags '{flags}' differ from "
                       f"{kernel}'s '{own}': the kernel refuses it", kabi_fix)
    for symvers in _symvers_paths(kernel, mdir, boot_dir):
        table = read_symvers(symvers)
        if table:
            break
    else:
        return _result(check, True, f"{where}: kABI not re-checked here (no symvers of "
                       f"{kernel} in {boot_dir} or {mdir}); weak-modules links only modules "
                       f"whose CRCs match /boot/symvers-{kernel}.gz")
    bad = sorted(sym for sym, crc in crcs.items() if sym in table and table[sym] != crc)
    if bad:
        return _result(check, False, f"{where}: the CRC of {', '.join(bad[:8])} disagrees "
                       f"with {symvers}: the kernel refuses it (\"disagrees about version of "
                       "symbol\")", kabi_fix)
    known = sum(1 for sym in crcs if sym in table)
    return _result(check, True, f"{where}: kABI-compatible with {kernel}: {known} symbol "
                   f"CRC(s) match {symvers}, vermagic flags match")


def _packaged(mods: dict, kernel: str, mdir: str) -> dict[str, str]:
    """nvidia-fs modules DKMS did not build that load on the kernel with its vermagic: a
    linux-nvidia kernel's linux-modules-nvidia-fs-<K> (ubuntu/nvidia-fs/), a kmod package."""
    out = {}
    if "nvidia_fs" in mods:
        path, elf = mods["nvidia_fs"][:2]
        rel = os.path.relpath(path, mdir)
        if not rel.startswith("updates" + os.sep + "dkms" + os.sep) \
                and vermagic_kernel(elf) == kernel:
            out["nvidia-fs"] = (f"no DKMS nvidia-fs for {kernel}; the nvidia-fs that loads on it "
                                f"is not built by DKMS: {path} (vermagic {kernel}), a packaged "
                                f"module such as linux-modules-nvidia-fs-{kernel}")
    return out


def _symvers_paths(kernel: str, mdir: str, boot_dir: str) -> tuple[str, ...]:
    """Where a kernel's Module.symvers lies: RHEL's /boot/symvers-<K>.gz, a symvers.gz|xz in
    its module tree, the headers' Module.symvers (Debian/Ubuntu)."""
    return (os.path.join(boot_dir, f"symvers-{kernel}.gz"), os.path.join(mdir, "symvers.gz"),
            os.path.join(mdir, "symvers.xz"), os.path.join(mdir, "build", "Module.symvers"))


def _builtin_nvme(kernel: str, mdir: str, boot_dir: str) -> tuple[str, dict[str, str]] | None:
    """A built-in nvme that exports the nvfs registration itself (a kernel carrying the
    NV-Kernels #10 patch with CONFIG_BLK_DEV_NVME=y): its name and kinds, from the kernel's
    Module.symvers (module ``vmlinux``; nvidia-fs's __symbol_get() finds vmlinux's exports as
    well as a module's: tests/fixtures/kernel_gate/builtin_nvme.yml); None when none says so."""
    for path in _symvers_paths(kernel, mdir, boot_dir):
        table = symvers_exports(path)
        if table is not None:
            kinds = {sym: entry[2] for sym, entry in table.items()
                     if NVME_SYMBOL_RE.fullmatch(sym) and entry[1] == "vmlinux"}
            return (f"{kernel}'s built-in nvme ({path})", kinds) if kinds else None
    return None


def _builtin_result(mod: str, kernel: str, builtin_nvme: tuple | None) -> dict:
    """``module.<mod>`` for a module built into the kernel (modules.builtin): modprobe loads
    nothing then, so no GDS-patched module (mlnx-nvme) can take its place. A built-in nvme
    passes only when the kernel's symvers shows it exports the registration itself."""
    if mod == "nvme" and builtin_nvme:
        return _result("module.nvme", True, f"{builtin_nvme[0]} exports "
                       f"{', '.join(sorted(builtin_nvme[1]))} itself")
    return _result(f"module.{mod}", False, f"{mod} is built into {kernel} (modules.builtin): "
                   "a built-in module cannot be replaced by the GDS-patched one"
                   + (" and the kernel's Module.symvers (/boot/symvers-<K>.gz or the headers') "
                      "names no nvme_v*_register_nvfs_dma_ops it exports itself"
                      if mod == "nvme" else ""),
                   f"use a kernel that builds {mod} as a module")


def evaluate(kernel: str, *, dkms_text: str | None, route: str = "nvfs",
             family: str = "debian", modules_root: str = "/lib/modules",
             boot_dir: str = "/boot", mlnx_nvme: str = "auto", nvidia_dkms: str = "auto",
             check_nvme_symbol: bool = True) -> dict:
    """Gate ``kernel``: every check, passed only when all pass. Read-only."""
    if not KERNEL_RE.match(kernel or ""):
        raise GateError(f"not a kernel release: {kernel!r}")
    mdir = os.path.join(modules_root, kernel)
    hdr = headers_package(kernel, family)
    res = []

    # 1. headers (judged once DKMS's part is known, below)
    have_headers = os.path.isdir(os.path.join(mdir, "build"))

    # 2. the modules that will load: present, vermagic (or kABI through weak-updates/)
    mods: dict = {}
    to_read = []
    if route == "nvfs":
        to_read.append(("nvidia_fs", "nvidia-fs"))
        if check_nvme_symbol:
            to_read.append(("nvme", "mlnx-nvme (DOCA-OFED's GDS-patched nvme, mlnx-nvme-dkms)"))
    to_read.append(("nvidia", "the NVIDIA driver"))
    mod_results = []
    builtin_nvme: tuple[str, dict[str, str]] | None = None
    for mod, owner in to_read:
        path, deps = find_module(mdir, mod)
        if path is None:
            builtin = _read(os.path.join(mdir, "modules.builtin"), MAX_DEP_BYTES) or ""
            if any(_modname(x) == mod for x in builtin.split()):
                if mod == "nvme":
                    builtin_nvme = _builtin_nvme(kernel, mdir, boot_dir)
                mod_results.append(_builtin_result(mod, kernel, builtin_nvme))
                continue
            mod_results.append(_result(
                f"module.{mod}", False, f"no {mod}.ko for {kernel} under {mdir}",
                f"build {owner} for {kernel} (`dkms autoinstall -k {kernel}`) or install its "
                "kernel module package"))
            continue
        try:
            elf = read_module(path)
        except GateError as exc:
            mod_results.append(_result(f"module.{mod}", False, str(exc),
                                       f"rebuild {owner} for {kernel}"))
            continue
        mods[mod] = (path, elf, deps)
        mod_results.append(_vermagic_result(mod, owner, path, elf, kernel, mdir, boot_dir))

    # 3. DKMS has them installed for that kernel (or a packaged module stands in)
    entries = parse_dkms(dkms_text or "") if dkms_text is not None else None
    wanted = ["nvidia-fs"] if route == "nvfs" else []
    names = {e["module"] for e in entries or []}
    if route == "nvfs" and (mlnx_nvme == "yes" or (mlnx_nvme == "auto" and "mlnx-nvme" in names)):
        wanted.append("mlnx-nvme")
    for drv in ("nvidia", "nvidia-open"):
        if nvidia_dkms == "yes" or (nvidia_dkms == "auto" and drv in names):
            wanted.append(drv)
            break
    dkms_res = _dkms_results(kernel, entries, wanted, hdr, _packaged(mods, kernel, mdir))
    res += [_headers_result(kernel, mdir, hdr, have_headers, dkms_res)] + dkms_res + mod_results

    # 4. the nvme symbol
    if route == "nvfs" and check_nvme_symbol and "nvidia_fs" in mods and (
            "nvme" in mods or builtin_nvme):
        nvfs_path, nvfs_elf = mods["nvidia_fs"][:2]
        looks = nvme_lookups(nvfs_elf)
        if builtin_nvme:
            nvme_path, kinds = builtin_nvme
        else:
            nvme_path, nvme_elf, nvme_deps = mods["nvme"]
            kinds = {s: k for s, k in exports(nvme_elf).items() if NVME_SYMBOL_RE.fullmatch(s)}
            for dep in nvme_deps[:8]:
                with contextlib.suppress(GateError):
                    for s, k in exports(read_module(dep)).items():
                        if NVME_SYMBOL_RE.fullmatch(s) and kinds.get(s) in (None, "unknown"):
                            kinds[s] = k
        both = sorted(set(looks) & set(kinds))
        exp_text = ", ".join(sorted(kinds)) or "no nvme_v*_register_nvfs_dma_ops"
        res.append(_result(
            "nvme.symbol", bool(both),
            f"nvidia-fs looks up {both[0]}, exported by {nvme_path}" if both else
            f"nvidia-fs ({nvfs_path}) looks up {', '.join(looks) or 'no nvme symbol'} but the "
            f"nvme module that loads on {kernel} ({nvme_path}) exports {exp_text}: nvidia-fs "
            "would not register with nvme and GDS reads would go through compat mode",
            "use a GDS-patched nvme (DOCA-OFED mlnx-nvme-dkms) that exports the name this "
            "nvidia-fs looks up (DOCA-OFED 26.01 exports nvme_v2 on kernels without the blk DMA "
            "iterator API, fixed in 26.04: gds-nvidia-fs issue #87), or an nvidia-fs built for "
            "the same block-layer API (2.28.2+ on 6.17)"))
        if both:
            res.append(gpl_export_result(both[0], kinds[both[0]], nvme_path, kernel))

    if "nvidia" in mods:
        lic = (modinfo(mods["nvidia"][1]).get("license") or ["?"])[0]
        res.append(_result("driver.open", lic == OPEN_LICENSE,
                           f"{mods['nvidia'][0]}: license {lic} (open kernel module)"
                           if lic == OPEN_LICENSE else
                           f"{mods['nvidia'][0]} is the proprietary driver (license {lic}); "
                           "nvidia-fs and the p2pdma route need the open kernel module",
                           f"install the open driver flavour for {kernel} "
                           "(nvidia-open / nvidia-driver-XXX-open)"))

    # 5. p2pdma: the kernel's config
    if route == "p2pdma":
        cfg = os.path.join(boot_dir, f"config-{kernel}")
        try:
            with open(cfg, "rb") as fh:
                text = fh.read(4 * 1024 * 1024).decode("utf-8", "replace")
        except OSError:
            text = None
        has = text is not None and re.search(r"^CONFIG_PCI_P2PDMA=y\s*$", text, re.M) is not None
        res.append(_result("config.p2pdma", has,
                           f"{cfg}: CONFIG_PCI_P2PDMA=y" if has else
                           (f"{cfg} is missing" if text is None else
                            f"{cfg} has no CONFIG_PCI_P2PDMA=y"),
                           "the p2pdma route needs a kernel built with CONFIG_PCI_P2PDMA=y: "
                           "choose such a kernel or use the nvfs route"))

    failed = [r for r in res if not r["ok"]]
    return {
        "kernel": kernel,
        "route": route,
        "passed": not failed,
        "results": res,
        "reason": "; ".join(r["reason"] for r in failed),
        "fix": "; ".join(dict.fromkeys(r["fix"] for r in failed if r["fix"])),
    }


def dkms_status() -> str | None:
    dkms = shutil.which("dkms")
    if not dkms:
        return None
    try:
        return subprocess.run([dkms, "status"], capture_output=True, text=True, timeout=120,
                              check=False).stdout[:1024 * 1024]
    except (OSError, subprocess.SubprocessError):
        return None


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


# What ran the gate: the kernel hook of the kernel image (/etc/kernel/postinst.d), of its
# headers (/etc/kernel/header_postinst.d, Debian/Ubuntu only), of kernel-install (RHEL),
# "final" (the re-run once the package manager is done), or a person ("manual").
TRIGGERS = ("image", "headers", "install", "final", "manual")


def deferral(kernel: str, trigger: str, gate: dict, modules_root: str = "/lib/modules",
             boot_dir: str = "/boot") -> str | None:
    """Why the hook's failed verdict is not final yet (None: it is). DKMS hooks both
    /etc/kernel/postinst.d and /etc/kernel/header_postinst.d (dell/dkms Makefile) and builds
    only once the headers are in place (its dkms_autoinstaller looks for
    ``/lib/modules/<K>/build/include``; the gate's ``headers`` check for ``build``, which the
    same package brings): when the image is configured before its headers, the build, and so
    the gate, must wait for the headers' hook; when the headers come first, the image's hook
    gates."""
    if gate["passed"]:
        return None
    if trigger == "image" and not os.path.isdir(os.path.join(modules_root, kernel, "build")):
        return (f"the headers of {kernel} are not configured yet: DKMS builds when they are "
                "(/etc/kernel/header_postinst.d/dkms), and the gate runs again then")
    if trigger == "headers" and not os.path.exists(os.path.join(boot_dir, f"vmlinuz-{kernel}")):
        return (f"the image of {kernel} is not installed yet: the gate runs again when it is "
                "(/etc/kernel/postinst.d)")
    return None


def hook_actions(gate: dict, *, trigger: str, protect_on: bool, running: str, family: str,
                 rerun: list[str], modules_root: str = "/lib/modules", boot_dir: str = "/boot",
                 etc: str = "/etc", proc_root: str = "/proc") -> list[dict]:
    """What the hook does after the verdict: nothing on a pass; on a failure whose final
    verdict must wait (``deferral``), record "deferred" and, when a package manager ran the
    hook, gate again (``rerun``, with protection) once it has exited, so a kernel whose headers
    never come is still protected; else protect (inside dpkg/rpm the hold is deferred until
    the package manager lets go)."""
    why = deferral(gate["kernel"], trigger, gate, modules_root, boot_dir)
    if why and protect_on:
        gate["deferred"] = True
        gate["reason"] = f"DEFERRED ({why}): {gate['reason']}"
        pid = _boot.package_manager_pid(proc_root) if trigger == "image" else None
        if pid is None:
            return [{"action": "defer", "ok": True, "detail": why}]
        ok, what = _boot.regate_after(pid, rerun)
        return [{"action": "defer", "ok": ok, "detail": f"{why}; {what}"}]
    if not protect_on:
        return []
    return protect(gate, running=running, family=family, boot_dir=boot_dir, etc=etc,
                   defer_hold=trigger in ("image", "headers", "install"))


def cli(argv: list[str]) -> int:
    """The kernel hook's entry point: gate one kernel; with --protect keep the running kernel
    the default and hold the failing one (or defer, ``hook_actions``); always record the
    result. Exit 0 (a hook must not break the package manager), the verdict goes to stdout (the
    journal through the hook)."""
    import argparse

    ap = argparse.ArgumentParser(description="gdsfleet kernel gate")
    ap.add_argument("--kernel")
    ap.add_argument("--route", default="nvfs", choices=["nvfs", "p2pdma"])
    ap.add_argument("--protect", action="store_true")
    ap.add_argument("--trigger", default="manual", choices=list(TRIGGERS))
    ap.add_argument("--state", default=STATE_PATH)
    args = ap.parse_args(argv)
    running = os.uname().release
    family = os_family()
    nxt = next_boot()
    kernel = args.kernel or nxt.get("kernel") or running
    try:
        gate = evaluate(kernel, dkms_text=dkms_status(), route=args.route, family=family)
    except GateError as exc:
        _say(f"gdsfleet kernel gate: {exc}")
        return 0
    rerun = [sys.executable or "python3", os.path.abspath(__file__), "--kernel", kernel,
             "--route", args.route, "--protect", "--trigger", "final", "--state", args.state]
    actions = hook_actions(gate, trigger=args.trigger, protect_on=args.protect,
                           running=running, family=family, rerun=rerun)
    nxt = next_boot()
    record(gate, running=running, nxt=nxt, actions=actions, path=args.state)
    verdict = "DEFERRED" if gate.get("deferred") else "PASS" if gate["passed"] else "FAIL"
    why = "" if gate["passed"] else f": {gate['reason']}. To fix: {gate['fix']}"
    _say(f"gdsfleet kernel gate: {verdict} for kernel {kernel} (running {running}, next boot "
         f"{nxt.get('kernel')}){why}")
    for a in actions:
        state = "ok" if a["ok"] else "FAILED"
        _say(f"gdsfleet kernel gate: {a['action']}: {state}: {a['detail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(sys.argv[1:]))
