# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Reading a kernel's module files: what the kernel gate (kernel_gate.py beside it) judges.

- ``read_module(path)``: a module file (.ko, .ko.gz, .ko.xz, .ko.zst) as an ``Elf``, bounded in
  size; a malformed file is a ``GateError`` that names it, never a crash.
- ``modinfo``, ``vermagic_kernel``: the module's ``.modinfo`` strings and the kernel release its
  vermagic names.
- ``exports``: the names a module exports and how: ``gpl`` (EXPORT_SYMBOL_GPL), ``plain``
  (EXPORT_SYMBOL) or ``unknown``, from the section its ``__ksymtab_<name>`` symbol lies in
  (the kernel's scripts/module.lds.S gathers ``___ksymtab+<name>`` into ``__ksymtab`` and
  ``___ksymtab_gpl+<name>`` into ``__ksymtab_gpl``; ``__ksymtab_strings`` holds both kinds'
  names, so it alone cannot tell them apart); ``exported_symbols``: their names.
- ``nvme_lookups``: the nvme registration names nvidia-fs looks up (strings in its ``.rodata``,
  NVIDIA/gds-nvidia-fs src/nvfs-dma.c ``modules_list``).
- ``modversions``: the symbol CRCs a module was built against (``__versions``, CONFIG_MODVERSIONS);
  ``read_symvers``: a kernel's own CRCs (``/boot/symvers-<K>.gz``), what RHEL's weak-modules
  compares them with before it links a module built for one kernel into another's
  ``weak-updates/``.
- ``find_module(modules_dir, name)``: the file modprobe would load on that kernel
  (modules.dep, else depmod's default search order).

Pure standard library, Python 3.8+: the kernel hook runs it beside kernel_gate.py without
Ansible; inside Ansible, AnsiballZ ships it with the module that imports kernel_gate.py.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import re
import shutil
import struct
import subprocess

MAX_MODULE_BYTES = 256 * 1024 * 1024  # nvidia.ko (open) is ~100 MiB with debug info
MAX_SECTIONS = 65536
MAX_DEP_BYTES = 16 * 1024 * 1024
MAX_WALK = 20000
NVME_SYMBOL_RE = re.compile(r"nvme_v[0-9]{1,3}_register_nvfs_dma_ops")


class GateError(ValueError):
    """A file the gate reads is missing, too large or malformed."""


# --- ELF -------------------------------------------------------------------------------------

class Elf:
    """The sections and symbol names of an ELF relocatable object (a kernel module)."""

    def __init__(self, data: bytes) -> None:
        if len(data) < 52 or data[:4] != b"\x7fELF":
            raise GateError("not an ELF file")
        cls, enc = data[4], data[5]
        if cls not in (1, 2) or enc not in (1, 2):
            raise GateError("unknown ELF class or byte order")
        self.is64 = cls == 2
        e = "<" if enc == 1 else ">"
        self._e = e
        if self.is64:
            if len(data) < 64:
                raise GateError("truncated ELF header")
            shoff, = struct.unpack_from(e + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
            want = 64
        else:
            shoff, = struct.unpack_from(e + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x2E)
            want = 40
        if shnum == 0 or shnum > MAX_SECTIONS or shentsize < want:
            raise GateError(f"bad section table ({shnum} sections of {shentsize} bytes)")
        if shoff + shnum * shentsize > len(data):
            raise GateError("section table beyond the end of the file")
        self._data = data
        self._headers = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if self.is64:
                name, typ, _f, _a, soff, size, link, _i, _al, entsize = struct.unpack_from(
                    e + "IIQQQQIIQQ", data, off)
            else:
                name, typ, _f, _a, soff, size, link, _i, _al, entsize = struct.unpack_from(
                    e + "IIIIIIIIII", data, off)
            self._headers.append((name, typ, soff, size, link, entsize))
        if shstrndx >= shnum:
            raise GateError("section name table index out of range")
        shstr = self._raw(shstrndx)
        self._names = [_cstr(shstr, h[0]) for h in self._headers]
        self._index: dict[str, int] = {}
        for i, nm in enumerate(self._names):
            self._index.setdefault(nm, i)

    def _raw(self, i: int) -> bytes:
        _n, typ, off, size, _l, _e = self._headers[i]
        if typ == 8:  # SHT_NOBITS
            return b""
        if off + size > len(self._data):
            raise GateError(f"section {i} beyond the end of the file")
        return self._data[off:off + size]

    def section(self, name: str) -> bytes:
        i = self._index.get(name)
        return b"" if i is None else self._raw(i)

    def sections_starting(self, prefix: str) -> list[bytes]:
        return [self._raw(i) for nm, i in sorted(self._index.items()) if nm.startswith(prefix)]

    def section_name(self, index: int) -> str:
        """The name of section ``index`` ("" when there is no such section)."""
        return self._names[index] if 0 <= index < len(self._names) else ""

    def symbols(self) -> list[tuple[str, int]]:
        """(name, section index) of every named symbol in every SHT_SYMTAB section (resolved
        through its linked string table)."""
        out = []
        shndx_at = 6 if self.is64 else 14  # Elf64_Sym / Elf32_Sym st_shndx
        for i, (_n, typ, _o, size, link, entsize) in enumerate(self._headers):
            if typ != 2:
                continue
            want = 24 if self.is64 else 16
            if entsize < want or link >= len(self._headers):
                raise GateError("bad symbol table")
            tab, strtab = self._raw(i), self._raw(link)
            for k in range(min(size, len(tab)) // entsize):
                name, = struct.unpack_from(self._e + "I", tab, k * entsize)
                shndx, = struct.unpack_from(self._e + "H", tab, k * entsize + shndx_at)
                if name:
                    out.append((_cstr(strtab, name), shndx))
        return out

    def symbol_names(self) -> list[str]:
        """Names in every SHT_SYMTAB section."""
        return [name for name, _i in self.symbols()]


def _cstr(buf: bytes, off: int) -> str:
    if off >= len(buf):
        return ""
    end = buf.find(b"\0", off)
    return buf[off:end if end >= 0 else len(buf)].decode("utf-8", "replace")


def _strings(buf: bytes) -> list[str]:
    return [s.decode("utf-8", "replace") for s in buf.split(b"\0") if s]


def modinfo(elf: Elf) -> dict[str, list[str]]:
    """The module's .modinfo (key=value strings)."""
    out: dict[str, list[str]] = {}
    for s in _strings(elf.section(".modinfo")):
        k, sep, v = s.partition("=")
        if sep:
            out.setdefault(k, []).append(v)
    return out


def vermagic_kernel(elf: Elf) -> str | None:
    """The kernel release a module was built for: the first word of its vermagic."""
    vm = modinfo(elf).get("vermagic")
    return vm[0].split()[0] if vm and vm[0].split() else None


def _export_kind(section: str) -> str:
    """gpl | plain | unknown for the section an export's ``__ksymtab_<name>`` symbol lies in:
    the linked module's ``__ksymtab_gpl`` / ``__ksymtab``, or an object's unlinked
    ``___ksymtab_gpl+<name>`` / ``___ksymtab+<name>`` (include/linux/export-internal.h)."""
    if section == "__ksymtab_gpl" or section.startswith("___ksymtab_gpl+"):
        return "gpl"
    if section == "__ksymtab" or section.startswith("___ksymtab+"):
        return "plain"
    return "unknown"


def exports(elf: Elf) -> dict[str, str]:
    """Every name the module exports -> ``gpl`` | ``plain`` | ``unknown``. A name found only in
    ``__ksymtab_strings`` (no ``__ksymtab_<name>`` symbol to say which table it is in) is
    ``unknown``: never guessed, since a wrong ``plain`` would fail a good kernel."""
    out: dict[str, str] = {}
    for sym, shndx in elf.symbols():
        if sym.startswith("__ksymtab_") and sym != "__ksymtab_strings" and len(sym) > 10:
            kind = _export_kind(elf.section_name(shndx))
            name = sym[len("__ksymtab_"):]
            if out.get(name) in (None, "unknown"):
                out[name] = kind
    for name in _strings(elf.section("__ksymtab_strings")):
        out.setdefault(name, "unknown")
    return out


def exported_symbols(elf: Elf) -> set[str]:
    """Names the module exports (EXPORT_SYMBOL and EXPORT_SYMBOL_GPL alike)."""
    return set(exports(elf))


def modversions(elf: Elf) -> dict[str, int]:
    """Symbol -> CRC the module was built against: ``__versions``, an array of ``struct
    modversion_info {unsigned long crc; char name[64 - sizeof(unsigned long)];}``
    (include/linux/module.h), 64 bytes an entry."""
    data = elf.section("__versions")
    word = 8 if elf.is64 else 4
    out: dict[str, int] = {}
    for off in range(0, len(data) - 63, 64):
        crc, = struct.unpack_from(elf._e + ("Q" if word == 8 else "I"), data, off)
        name = _cstr(data[off + word:off + 64], 0)
        if name:
            out[name] = crc & 0xFFFFFFFF
    return out


def read_symvers(path: str) -> dict[str, int] | None:
    """A kernel's Module.symvers (``0x<crc> <symbol> <module> <export kind> [namespace]``,
    tab-separated; .gz, .xz or plain), symbol -> CRC; None when the file is missing."""
    table = symvers_exports(path)
    return None if table is None else {sym: entry[0] for sym, entry in table.items()}


def symvers_exports(path: str) -> dict[str, tuple[int, str, str]] | None:
    """Module.symvers as symbol -> (CRC, module, "gpl" | "plain" | "unknown"): the module is
    ``vmlinux`` for what is built into the kernel, the kind from EXPORT_SYMBOL_GPL /
    EXPORT_SYMBOL (scripts/mod/modpost.c writes both). None when the file is missing."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_DEP_BYTES + 1)
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                raw = gz.read(MAX_DEP_BYTES + 1)
        elif path.endswith(".xz"):
            raw = lzma.LZMADecompressor().decompress(raw, MAX_DEP_BYTES + 1)
    except (OSError, EOFError, lzma.LZMAError):
        return None
    out: dict[str, tuple[int, str, str]] = {}
    kinds = {"EXPORT_SYMBOL_GPL": "gpl", "EXPORT_SYMBOL": "plain"}
    for line in raw[:MAX_DEP_BYTES].decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"0x[0-9a-fA-F]{1,16}", parts[0]):
            out[parts[1][:200]] = (int(parts[0], 16) & 0xFFFFFFFF,
                                   parts[2][:200] if len(parts) > 2 else "",
                                   kinds.get(parts[3] if len(parts) > 3 else "", "unknown"))
    return out


def nvme_lookups(elf: Elf) -> list[str]:
    """The nvme registration names nvidia-fs looks up (strings in its read-only data)."""
    found = set()
    for sec in elf.sections_starting(".rodata"):
        for s in _strings(sec):
            if NVME_SYMBOL_RE.fullmatch(s):
                found.add(s)
    return sorted(found)


def read_module(path: str) -> Elf:
    """Read a module file (.ko, .ko.gz, .ko.xz, .ko.zst), bounded."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise GateError(f"cannot read {path}: {exc.strerror}") from exc
    if size > MAX_MODULE_BYTES:
        raise GateError(f"{path} is larger than {MAX_MODULE_BYTES} bytes")
    try:
        if path.endswith(".zst"):
            zstd = shutil.which("zstd")
            if not zstd:
                raise GateError(f"{path} is zstd-compressed and no zstd is installed: "
                                "install zstd")
            proc = subprocess.run([zstd, "-dcq", "--", path], capture_output=True,
                                  timeout=60, check=False)
            if proc.returncode != 0:
                raise GateError(f"zstd could not decompress {path}")
            data = proc.stdout
        else:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_MODULE_BYTES + 1)
            if path.endswith(".gz"):
                with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                    data = gz.read(MAX_MODULE_BYTES + 1)
            elif path.endswith(".xz"):
                data = lzma.LZMADecompressor().decompress(raw, MAX_MODULE_BYTES + 1)
            else:
                data = raw
    except (OSError, EOFError, lzma.LZMAError, subprocess.SubprocessError) as exc:
        raise GateError(f"cannot read {path}: {exc}") from exc
    if len(data) > MAX_MODULE_BYTES:
        raise GateError(f"{path} is larger than {MAX_MODULE_BYTES} bytes uncompressed")
    try:
        return Elf(data)
    except struct.error as exc:
        raise GateError(f"{path}: truncated ELF ({exc})") from exc
    except GateError as exc:
        raise GateError(f"{path}: {exc}") from exc


# --- which module loads on a kernel ----------------------------------------------------------

def reference_vermagic(modules_dir: str) -> str | None:
    """The vermagic flags (every word after the release) of the kernel's own modules: the first
    readable module under kernel/ (None when there is none)."""
    seen = 0
    for root, dirs, files in os.walk(os.path.join(modules_dir, "kernel")):
        dirs.sort()
        for f in sorted(files):
            seen += 1
            if seen > MAX_WALK:
                return None
            if re.search(r"\.ko(\.(gz|xz|zst))?$", f):
                try:
                    vm = modinfo(read_module(os.path.join(root, f))).get("vermagic")
                except GateError:
                    continue
                if vm:
                    return " ".join(vm[0].split()[1:])
    return None


def _modname(path: str) -> str:
    base = os.path.basename(path)
    base = re.sub(r"\.ko(\.(gz|xz|zst))?$", "", base)
    return base.replace("-", "_")


def find_module(modules_dir: str, name: str) -> tuple[str | None, list[str]]:
    """(path, dependency paths) of module ``name`` as modprobe would load it on that kernel:
    modules.dep when depmod wrote one (it already applied depmod.d's search order), else the
    first of updates/, extra/, ubuntu/, kernel/, weak-updates/ that has it (the search lines
    of Ubuntu's /etc/depmod.d/ubuntu.conf, ``updates ubuntu built-in``, and RHEL's dist.conf,
    ``updates extra built-in weak-updates``, merged)."""
    want = name.replace("-", "_")
    dep = os.path.join(modules_dir, "modules.dep")
    try:
        with open(dep, "rb") as fh:
            text = fh.read(MAX_DEP_BYTES).decode("utf-8", "replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        left, sep, right = line.partition(":")
        if sep and _modname(left.strip()) == want:
            path = os.path.join(modules_dir, left.strip())
            if os.path.isfile(path):
                return path, [os.path.join(modules_dir, d) for d in right.split()]
    seen = 0
    for sub in ("updates", "extra", "ubuntu", "kernel", "weak-updates"):
        top = os.path.join(modules_dir, sub)
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for f in sorted(files):
                seen += 1
                if seen > MAX_WALK:
                    return None, []
                if re.search(r"\.ko(\.(gz|xz|zst))?$", f) and _modname(f) == want:
                    return os.path.join(root, f), []
    return None, []
