# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The kernel gate: may this node boot kernel K without losing GPUDirect Storage?

Pure standard library, so the same file serves the ``kernel_gate`` module and the kernel hook
the nvidia_fs role installs (``python3 kernel_gate.py --kernel K --protect``, with kernel_elf.py
beside it), which runs without Ansible when a package manager installs a kernel behind
gdsfleet's back.

Everything is read from files of the kernel in question, never from the running kernel:
``/lib/modules/<K>/build`` (headers), ``dkms status`` for K, the built modules' own ELF
sections (read by kernel_elf.py: ``.modinfo`` vermagic/license, the nvme registration name
nvidia-fs looks up in its ``.rodata``, the names the nvme module exports), ``/boot/config-<K>``.
Every byte read is bounded; a malformed ELF is a failed check that names the file, never a
crash. This file holds the policy: which checks a kernel must pass, which kernel boots next,
and what protection does when one fails.

Upstream facts (tests/fixtures/kernel_gate/README.md): nvidia-fs names the nvme symbol it looks
up as a string in its module table (NVIDIA/gds-nvidia-fs src/nvfs-dma.c ``modules_list``),
``nvme_v1_register_nvfs_dma_ops`` up to 2.27.x, ``nvme_v2_...`` from 2.28.2 when the kernel has
the blk DMA iterator API; a nvme module exporting the other name leaves nvidia-fs unregistered and
reads bounce through compat mode (gds-nvidia-fs issue #87).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # node Pythons older than 3.9 cannot evaluate list[str] at run time
    from collections.abc import Callable

    Runner = Callable[[list[str]], tuple[int, str]]


def _sibling(name: str) -> Any:
    """kernel_elf.py from beside this file: the kernel hook runs this file by itself and
    provisioner loads it by path. Inside Ansible this file sits in AnsiballZ's payload, where
    the collection import below finds the copy AnsiballZ shipped."""
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
else:
    from ansible_collections.gdsfleet.gds.plugins.module_utils import kernel_elf as _elf

Elf = _elf.Elf
GateError = _elf.GateError
MAX_DEP_BYTES = _elf.MAX_DEP_BYTES
NVME_SYMBOL_RE = _elf.NVME_SYMBOL_RE
exported_symbols = _elf.exported_symbols
exports = _elf.exports
find_module = _elf.find_module
modinfo = _elf.modinfo
nvme_lookups = _elf.nvme_lookups
read_module = _elf.read_module
vermagic_kernel = _elf.vermagic_kernel
_modname = _elf._modname

STATE_PATH = "/var/lib/gdsfleet/kernel-gate.json"
STATE_MAX_KERNELS = 16
KERNEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}$")
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
    return _result(check, True, text.replace(": since Linux", f"; kernel {kernel} is older than "
                   "6.6, where the rule is upstream's (stable backports, e.g. 6.1 and 6.5, "
                   "carry it too, so this may still not register): since Linux", 1))


def headers_package(kernel: str, family: str) -> str:
    return f"kernel-devel-{kernel}" if family == "redhat" else f"linux-headers-{kernel}"


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

    # 1. headers
    have_headers = os.path.isdir(os.path.join(mdir, "build"))
    res.append(_result("headers", have_headers,
                       f"headers of {kernel} installed" if have_headers else
                       f"no headers for {kernel} ({mdir}/build is missing): DKMS cannot build "
                       "nvidia-fs for it",
                       f"install {hdr}, then `dkms autoinstall -k {kernel}`"))

    # 2. dkms installed for that kernel
    entries = parse_dkms(dkms_text or "") if dkms_text is not None else None
    wanted = []
    if route == "nvfs":
        wanted.append("nvidia-fs")
    if entries is None:
        if wanted:
            res.append(_result("dkms", False, "dkms is not installed (no `dkms status`)",
                               "install dkms and nvidia-fs-dkms (the nvidia_fs role does)"))
    else:
        names = {e["module"] for e in entries}
        if route == "nvfs" and (mlnx_nvme == "yes" or (mlnx_nvme == "auto"
                                                       and "mlnx-nvme" in names)):
            wanted.append("mlnx-nvme")
        for drv in ("nvidia", "nvidia-open"):
            if nvidia_dkms == "yes" or (nvidia_dkms == "auto" and drv in names):
                wanted.append(drv)
                break
        for name in wanted:
            mine = [e for e in entries if e["module"] == name]
            ok = [e for e in mine if e["kernel"] == kernel and e["state"] == "installed"]
            seen = ", ".join(f"{e['version']} {e['kernel']} {e['state']}" for e in mine
                             if e["kernel"] == kernel) or "no entry"
            res.append(_result(
                f"dkms.{name}", bool(ok),
                f"DKMS {name}/{ok[0]['version']} installed for {kernel}" if ok else
                f"DKMS has no {name} installed for {kernel} ({seen})",
                f"install {hdr}, run `dkms autoinstall -k {kernel}` and read "
                f"/var/lib/dkms/{name}/<version>/build/make.log; a newer kernel may need a newer "
                "nvidia-fs (2.26.6 for 6.11/6.14, 2.28.2 for 6.17)"))

    # 3. vermagic of what will load; 4. the nvme symbol
    mods = {}
    to_read = []
    if route == "nvfs":
        to_read.append(("nvidia_fs", "nvidia-fs"))
        if check_nvme_symbol:
            to_read.append(("nvme", "mlnx-nvme (DOCA-OFED's GDS-patched nvme, mlnx-nvme-dkms)"))
    to_read.append(("nvidia", "the NVIDIA driver"))
    for mod, owner in to_read:
        path, deps = find_module(mdir, mod)
        if path is None:
            builtin = _read(os.path.join(mdir, "modules.builtin"), MAX_DEP_BYTES) or ""
            if any(_modname(x) == mod for x in builtin.split()):
                res.append(_result(f"module.{mod}", False,
                                   f"{mod} is built into {kernel} (modules.builtin): a built-in "
                                   "module cannot be replaced by the GDS-patched one",
                                   f"use a kernel that builds {mod} as a module"))
                continue
            res.append(_result(f"module.{mod}", False, f"no {mod}.ko for {kernel} under {mdir}",
                               f"build {owner} for {kernel} (`dkms autoinstall -k {kernel}`) "
                               "or install its kernel module package"))
            continue
        try:
            elf = read_module(path)
        except GateError as exc:
            res.append(_result(f"module.{mod}", False, str(exc),
                               f"rebuild {owner} for {kernel}"))
            continue
        mods[mod] = (path, elf, deps)
        vk = vermagic_kernel(elf)
        res.append(_result(f"vermagic.{mod}", vk == kernel,
                           f"{path}: vermagic {vk}" if vk == kernel else
                           f"{path} was built for {vk or 'no vermagic'}, not {kernel}",
                           f"rebuild {owner} for {kernel} (`dkms install --force ... -k "
                           f"{kernel}`) and run depmod {kernel}"))

    if route == "nvfs" and check_nvme_symbol and "nvidia_fs" in mods and "nvme" in mods:
        nvfs_path, nvfs_elf = mods["nvidia_fs"][:2]
        nvme_path, nvme_elf, nvme_deps = mods["nvme"]
        looks = nvme_lookups(nvfs_elf)
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


# --- which kernel boots next -----------------------------------------------------------------

def _release_order(release: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", release)[:12])


def _read(path: str, limit: int = 1024 * 1024) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def parse_grub_default(text: str | None) -> str | None:
    """The last GRUB_DEFAULT= assignment of /etc/default/grub then grub.d/*.cfg (as
    grub-mkconfig sources them in order)."""
    value = None
    for line in (text or "").splitlines():
        m = re.match(r"^\s*GRUB_DEFAULT=(['\"]?)(.*?)\1\s*$", line)
        if m:
            value = m.group(2)[:256]
    return value


def parse_saved_entry(grubenv: str | None) -> str | None:
    """saved_entry of a grubenv block."""
    for line in (grubenv or "").splitlines():
        if line.startswith("saved_entry="):
            return line[len("saved_entry="):].strip()[:512] or None
    return None


def grub_default(etc: str = "/etc") -> str | None:
    files = [os.path.join(etc, "default/grub")]
    files += sorted(glob.glob(os.path.join(etc, "default/grub.d/*.cfg")))
    return parse_grub_default("\n".join(_read(f) or "" for f in files))


def entry_kernel(entry: str | None, kernels: list[str]) -> str | None:
    """The kernel a GRUB entry (id ``gnulinux-<K>-advanced-...`` or title ``..., with Linux
    <K>``, possibly behind ``submenu>``) boots, if it names an installed one."""
    if not entry:
        return None
    last = entry.split(">")[-1]
    for k in sorted(kernels, key=len, reverse=True):
        if f"gnulinux-{k}-" in last or last.endswith(f"Linux {k}") or f"Linux {k} " in last:
            return k
    return None


def next_boot(boot_dir: str = "/boot", etc: str = "/etc") -> dict:
    """The kernel the node boots next: grubby's default (RHEL family); GRUB's saved entry when
    GRUB_DEFAULT=saved (how the gate keeps a kernel the default on Debian/Ubuntu); else the
    newest /boot/vmlinuz-* (GRUB_DEFAULT=0)."""
    try:
        names = os.listdir(boot_dir)
    except OSError:
        names = []
    kernels = sorted((n[8:] for n in names if n.startswith("vmlinuz-") and len(n) > 8
                      and not n.endswith((".old", ".bak", ".efi.signed"))), key=_release_order)
    grubby = shutil.which("grubby")
    if grubby:
        try:
            out = subprocess.run([grubby, "--default-kernel"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if "vmlinuz-" in out:
            return {"kernel": out.splitlines()[0].rsplit("vmlinuz-", 1)[1].strip(),
                    "source": "grubby --default-kernel", "kernels": kernels}
    if grub_default(etc) == "saved":
        k = entry_kernel(parse_saved_entry(_read(os.path.join(boot_dir, "grub/grubenv"), 4096)),
                         kernels)
        if k:
            return {"kernel": k, "source": "GRUB saved_entry", "kernels": kernels}
    return {"kernel": kernels[-1] if kernels else None, "source": "newest /boot/vmlinuz-*",
            "kernels": kernels}


# --- keeping a failing kernel from booting ----------------------------------------------------

GRUB_DROPIN = "/etc/default/grub.d/99-gdsfleet-kernel-gate.cfg"


def _grub_entry_id(kernel: str, grub_cfg: str) -> str | None:
    """``submenu-id>entry-id`` of kernel's normal (not recovery) entry in grub.cfg."""
    text = _read(grub_cfg, 4 * 1024 * 1024) or ""
    sub = None
    for line in text.splitlines():
        s = line.strip()
        m = re.search(r"\$menuentry_id_option\s+'([^']+)'", s)
        if not m:
            continue
        if s.startswith("submenu "):
            sub = m.group(1)
        elif s.startswith("menuentry ") and m.group(1).startswith(f"gnulinux-{kernel}-advanced-"):
            return f"{sub}>{m.group(1)}" if sub else m.group(1)
    return None


def _run(argv: list[str], runner: Runner) -> tuple[int, str]:
    try:
        rc, out = runner(argv)
    except OSError as exc:
        return 127, str(exc)
    return rc, out


def default_runner(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, (proc.stdout + proc.stderr)[-2000:]


def hold_argv(kernel: str, family: str, runner: Runner = default_runner) -> list[str] | None:
    """The command that holds the failing kernel's packages (and the installed meta packages
    that pull new kernels), or None when nothing of it is installed."""
    if family == "redhat":
        names = ("kernel", "kernel-core", "kernel-modules", "kernel-devel")
        return ["dnf", "-y", "versionlock", "exclude", *(f"{n}-{kernel}" for n in names)]
    rc, out = _run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\\n",
                    "linux-image-*", "linux-headers-*", "linux-modules-*", "linux-generic*",
                    "linux-virtual*", "linux-nvidia*"], runner)
    pkgs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("i"):
            name = parts[1]
            if kernel in name or not re.search(r"[0-9]+\.[0-9]+\.[0-9]+-", name):
                pkgs.append(name)
    pkgs = sorted(set(pkgs))[:64]
    return ["apt-mark", "hold", *pkgs] if pkgs else None


def hold_packages(kernel: str, family: str, runner: Runner = default_runner,
                  defer: bool = False) -> tuple[bool, str]:
    """Hold the failing kernel's packages. ``defer`` (the kernel hook, which runs inside the
    package manager's transaction and its lock): a detached process runs the hold once the
    package manager lets go (retrying for up to an hour)."""
    argv = hold_argv(kernel, family, runner)
    if argv is None:
        return False, f"no installed package of {kernel} found to hold"
    text = " ".join(argv)
    if defer:
        loop = ('for i in $(seq 360); do "$@" >/dev/null 2>&1 && exit 0; sleep 10; done; '
                'logger -t gdsfleet-kernel-gate "could not run: $*" 2>/dev/null; exit 1')
        try:
            subprocess.Popen(["sh", "-c", loop, "gdsfleet-kernel-gate-hold", *argv],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return False, f"{text}: {exc}"
        return True, f"{text} (scheduled: runs once the package manager lets go)"
    rc, out = _run(argv, runner)
    return rc == 0, text + ("" if rc == 0 else f": {out.strip()}")


def keep_default(running: str, family: str, runner: Runner = default_runner,
                 boot_dir: str = "/boot", etc: str = "/etc") -> tuple[bool, str]:
    """Make ``running`` (the running kernel, or a kernel that passed the gate) the one the node
    boots next."""
    if family == "redhat" or shutil.which("grubby"):
        rc, out = _run(["grubby", f"--set-default={boot_dir}/vmlinuz-{running}"], runner)
        return rc == 0, f"grubby --set-default {boot_dir}/vmlinuz-{running}" + (
            "" if rc == 0 else f": {out.strip()}")
    dropin = os.path.join(etc, "default/grub.d/99-gdsfleet-kernel-gate.cfg")
    if grub_default(etc) != "saved":
        os.makedirs(os.path.dirname(dropin), exist_ok=True)
        with open(dropin, "w", encoding="utf-8") as fh:
            fh.write("# Managed by gdsfleet kernel gate: boot the entry grub-set-default saved,\n"
                     "# so a kernel that failed the GDS gate is not booted.\nGRUB_DEFAULT=saved\n")
        rc, out = _run(["update-grub"], runner)
        if rc != 0:
            return False, f"update-grub failed: {out.strip()}"
    entry = _grub_entry_id(running, os.path.join(boot_dir, "grub/grub.cfg"))
    if entry is None:
        return False, (f"no GRUB entry for {running} in {boot_dir}/grub/grub.cfg: set it the "
                       "default by hand (grub-set-default '<submenu id>><entry id>')")
    rc, out = _run(["grub-set-default", entry], runner)
    return rc == 0, f"grub-set-default {entry}" + ("" if rc == 0 else f": {out.strip()}")


def load_state(path: str = STATE_PATH) -> dict:
    text = _read(path, 256 * 1024)
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def record(gate: dict, *, running: str, nxt: dict, actions: list[dict],
           path: str = STATE_PATH, now: str | None = None) -> dict:
    """Write the gate's result for its kernel into the node's state file (atomically)."""
    doc = load_state(path)
    old = doc.get("kernels")
    kernels: dict[str, Any] = old if isinstance(old, dict) else {}
    kernels[gate["kernel"]] = {
        "passed": gate["passed"],
        "reason": gate["reason"][:2000],
        "fix": gate["fix"][:2000],
        "checked_at": now or datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"),
        "actions": actions,
    }
    while len(kernels) > STATE_MAX_KERNELS:
        kernels.pop(next(iter(kernels)))
    doc = {"gdsfleet_kernel_gate": 1, "running": running, "next_boot": nxt.get("kernel"),
           "next_boot_source": nxt.get("source"), "kernels": kernels}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
    return doc


def protect(gate: dict, *, running: str, family: str, runner: Runner = default_runner,
            boot_dir: str = "/boot", etc: str = "/etc", defer_hold: bool = False) -> list[dict]:
    """After a failed gate for a kernel other than the running one: keep the running kernel
    the default and hold the failing kernel's packages. Returns what was done."""
    actions: list[dict] = []
    if gate["passed"] or gate["kernel"] == running:
        return actions
    ok, what = keep_default(running, family, runner, boot_dir, etc)
    actions.append({"action": "keep_default", "ok": ok, "detail": what})
    ok, what = hold_packages(gate["kernel"], family, runner, defer=defer_hold)
    actions.append({"action": "hold", "ok": ok, "detail": what})
    return actions


def os_family() -> str:
    text = _read("/etc/os-release", 65536) or ""
    ids = " ".join(re.findall(r"^(?:ID|ID_LIKE)=\"?([^\"\n]*)", text, re.M)).split()
    return "redhat" if any(i in ("rhel", "fedora", "centos", "rocky", "almalinux")
                           for i in ids) else "debian"


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


def cli(argv: list[str]) -> int:
    """The kernel hook's entry point: gate one kernel; with --protect keep the running kernel
    the default and hold the failing one; always record the result. Exit 0 (a hook must not
    break the package manager), the verdict goes to stdout (the journal through the hook)."""
    import argparse

    ap = argparse.ArgumentParser(description="gdsfleet kernel gate")
    ap.add_argument("--kernel")
    ap.add_argument("--route", default="nvfs", choices=["nvfs", "p2pdma"])
    ap.add_argument("--protect", action="store_true")
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
    # the hook runs inside dpkg/rpm: the package lock is held, so the hold is deferred
    actions = protect(gate, running=running, family=family,
                      defer_hold=True) if args.protect else []
    nxt = next_boot()
    record(gate, running=running, nxt=nxt, actions=actions, path=args.state)
    verdict = "PASS" if gate["passed"] else "FAIL"
    why = "" if gate["passed"] else f": {gate['reason']}. To fix: {gate['fix']}"
    _say(f"gdsfleet kernel gate: {verdict} for kernel {kernel} (running {running}, next boot "
         f"{nxt.get('kernel')}){why}")
    for a in actions:
        state = "ok" if a["ok"] else "FAILED"
        _say(f"gdsfleet kernel gate: {a['action']}: {state}: {a['detail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(sys.argv[1:]))
