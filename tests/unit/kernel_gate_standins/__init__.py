"""TEST STAND-INS for the kernel gate: genuine ELF relocatable objects (ET_REL, x86-64) shaped
like kernel modules, carrying only the sections the gate reads (.modinfo, .rodata.str1.1,
__ksymtab_strings, .symtab/.strtab, __ksymtab/__ksymtab_gpl, __versions). They are not real
modules: no code, no relocations."""

from __future__ import annotations

import gzip
import lzma
import struct
from pathlib import Path


def elf_module(*, vermagic: str | None = None, license: str | None = None,
               rodata: tuple[str, ...] = (), exports: tuple[str, ...] = (),
               ksymtab_symbols: tuple[str, ...] = (), big_endian: bool = False,
               name: str = "standin", gpl_exports: tuple[str, ...] = (),
               plain_exports: tuple[str, ...] = (),
               versions: tuple[tuple[str, int], ...] = ()) -> bytes:
    """Bytes of a 64-bit ELF relocatable object. ``exports`` go to __ksymtab_strings only (no
    table says how they are exported); ``ksymtab_symbols`` become ``__ksymtab_<name>`` symbols
    in no export table (older layouts); ``gpl_exports`` / ``plain_exports`` are exported as a
    linked module exports them: the name in __ksymtab_strings and a ``__ksymtab_<name>``
    symbol in ``__ksymtab_gpl`` / ``__ksymtab`` (scripts/module.lds.S); ``versions`` is the
    ``__versions`` table (symbol, CRC) of CONFIG_MODVERSIONS."""
    e = ">" if big_endian else "<"
    info = [f"name={name}"]
    if vermagic is not None:
        info.append(f"vermagic={vermagic}")
    if license is not None:
        info.append(f"license={license}")
    names = [".modinfo", ".rodata.str1.1", "__ksymtab_strings", ".symtab", ".strtab"]
    if plain_exports:
        names.append("__ksymtab")
    if gpl_exports:
        names.append("__ksymtab_gpl")
    if versions:
        names.append("__versions")
    idx = {n: i + 1 for i, n in enumerate(names)}
    strtab = b"\0"
    syms = [b"\0" * 24]

    def symbol(sym: str, shndx: int) -> None:
        nonlocal strtab
        off = len(strtab)
        strtab += sym.encode() + b"\0"
        # st_name, st_info (GLOBAL OBJECT), st_other, st_shndx, value, size
        syms.append(struct.pack(e + "IBBHQQ", off, 0x11, 0, shndx, 0, 12))

    for s in ksymtab_symbols:
        symbol(f"__ksymtab_{s}", idx["__ksymtab_strings"])
    for table, exported in (("__ksymtab", plain_exports), ("__ksymtab_gpl", gpl_exports)):
        for s in exported:
            symbol(f"__ksymtab_{s}", idx[table])
    all_names = (*exports, *plain_exports, *gpl_exports)
    data = {
        ".modinfo": (1, b"\0".join(x.encode() for x in info) + b"\0", 0, 0),
        ".rodata.str1.1": (1, b"\0".join(x.encode() for x in rodata) + b"\0", 0, 0),
        "__ksymtab_strings": (1, b"\0".join(x.encode() for x in all_names) + b"\0", 0, 0),
        ".symtab": (2, b"".join(syms), idx[".strtab"], 24),
        ".strtab": (3, strtab, 0, 0),
        "__ksymtab": (1, b"\0" * 12 * len(plain_exports), 0, 0),
        "__ksymtab_gpl": (1, b"\0" * 12 * len(gpl_exports), 0, 0),
        "__versions": (1, b"".join(struct.pack(e + "Q", crc) + v.encode().ljust(56, b"\0")
                                   for v, crc in versions), 0, 0),
    }
    sections = [(n, *data[n]) for n in names]
    shstr = b"\0"
    offsets_names = []
    for sname in [*names, ".shstrtab"]:
        offsets_names.append(len(shstr))
        shstr += sname.encode() + b"\0"
    sections.append((".shstrtab", 3, shstr, 0, 0))
    body = b""
    offsets = []
    base = 64
    for _n, _t, blob, _l, _es in sections:
        offsets.append(base + len(body))
        body += blob + b"\0" * ((-len(blob)) % 8)
    shoff = base + len(body)
    ident = b"\x7fELF" + bytes([2, 2 if big_endian else 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack(e + "HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                                 len(sections) + 1, len(sections))
    shdrs = b"\0" * 64
    for i, (_n, typ, blob, link, entsize) in enumerate(sections):
        shdrs += struct.pack(e + "IIQQQQIIQQ", offsets_names[i], typ, 0, 0, offsets[i],
                             len(blob), link, 1 if typ == 2 else 0, 1, entsize)
    return header + body + shdrs


def write_module(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".xz"):
        data = lzma.compress(data)
    path.write_bytes(data)
    return path


def grub_cfg(*kernels: str) -> str:
    """grub.cfg as Debian's grub-mkconfig (10_linux) writes its entries (TEST STAND-IN): the
    first, simple entry boots the first (newest) kernel, then an advanced submenu with one
    entry per kernel; each entry's `linux` line names the image it loads (the simulated boot
    loader, gdsfleet_sim.grub_boot_kernel, reads it)."""
    def body(k: str, indent: str) -> list[str]:
        return [f"{indent}\tlinux\t/boot/vmlinuz-{k} root=UUID=5b2a7c9e ro quiet",
                f"{indent}\tinitrd\t/boot/initrd.img-{k}", f"{indent}}}"]
    out = ["# TEST STAND-IN: grub.cfg entries as grub-mkconfig writes them",
           "menuentry 'Debian GNU/Linux' $menuentry_id_option 'gnulinux-simple-UUID' {"]
    out += body(kernels[0], "") if kernels else ["}"]
    out.append("submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option "
               "'gnulinux-advanced-UUID' {")
    for k in kernels:
        out.append(f"\tmenuentry 'Debian GNU/Linux, with Linux {k}' $menuentry_id_option "
                   f"'gnulinux-{k}-advanced-UUID' {{")
        out += body(k, "\t")
    return "\n".join(out + ["}"]) + "\n"
