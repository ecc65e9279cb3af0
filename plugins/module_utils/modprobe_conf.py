# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How kmod reads modprobe.d: the one copy, shared by the collection and the provisioner.

The filter ``gdsfleet.gds.modprobe_plan`` (plugins/filter/modprobe.py) plans the options the
p2pdma role writes; ``provisioner verify`` (provisioner/verify/parsers/modprobe.py) reads back
what a node configures. Both need the same reading of the files, so it lives here; the
provisioner's wheel carries a build-time copy (setup.py), as for cufile_schema.py.

- ``MODPROBE_DIRS``: every directory some kmod reads, in the search order of kmod 32 and later
  (the order used when the node's kmod version is unknown).
- ``kmod_version(text)``: the major version from ``modprobe --version`` / ``kmod --version``
  (``kmod version 31`` -> 31), None when the text does not say.
- ``kmod_dirs(version)``: the directories that kmod version reads, in its search order
  (libkmod/libkmod.c ``default_config_paths``): before v32 /etc, /run, /usr/local/lib, /lib;
  from v32 /etc, /run, /usr/local/lib, /usr/lib (DISTCONFDIR, ``${prefix}/lib``), /lib.
- ``effective_files(paths, dirs=MODPROBE_DIRS)``: the files kmod reads, in its order: only
  files directly in ``dirs``, one per file name (a name in an earlier directory hides the same
  name later), sorted by name whatever the directory.
- ``logical_lines(text)``: kmod's lines: a backslash before the end of a line joins the next
  one (shared/util.c ``freadline_wrapped``) -> [(raw text, joined text), ...].
- ``options_entries(texts)``: ``{path: file text}`` -> ``{path: [(raw, joined), ...]}`` for the
  ``options`` lines.
- ``builtin_modules(text)``, ``kernel_param(cmdline, module, param)``, ``grub_cmdline(texts)``,
  ``grubby_args(text)``: what the kernel command line (now, and from the boot loader's
  configuration for the next boot) gives a module, and which modules are built in (they read
  only the command line).
- ``cmdline_options(text)``: the ``module.param=value`` entries of a kernel command line that
  kmod applies after every modprobe.d file (libkmod-config.c ``kmod_config_parse_kcmdline``)
  -> [(module with underscores, "param=value"), ...] in order.
- ``tokenize(text)``: split on blanks outside double quotes (``a="x y"`` stays one token).
- ``unquote(value)``: strip one pair of surrounding double quotes.
- ``parse_options_line(line)``: ``options <module> p=v ...`` -> (module, [tokens]) or None.
- ``param(token)``: ``name=value`` -> (name, unquoted value).
- ``parse_registry(value)``: ``"A=1;B=0x2;"`` (NVreg_RegistryDwords) -> [("A", "1"), ...].

Pure Python, standard library only.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "KMOD_DIRS_BEFORE_32",
    "KMOD_DIRS_FROM_32",
    "MODPROBE_DIRS",
    "builtin_modules",
    "cmdline_options",
    "effective_files",
    "grub_cmdline",
    "grubby_args",
    "kernel_param",
    "kmod_dirs",
    "kmod_version",
    "logical_lines",
    "options_entries",
    "param",
    "parse_options_line",
    "parse_registry",
    "tokenize",
    "unquote",
]

# kmod's search order (libkmod/libkmod.c default_config_paths): a file name found in an earlier
# directory hides the same name later. kmod before v32 never reads /usr/lib/modprobe.d (on a
# merged-/usr system it reaches those files through /lib); from v32 it reads DISTCONFDIR
# (``${prefix}/lib``, /usr/lib as distributions build it) before /lib.
# tests/fixtures/kmod/README.md names the sources.
KMOD_DIRS_BEFORE_32 = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
)
KMOD_DIRS_FROM_32 = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)
# Every directory some kmod reads; the order of the newest kmod (used when the version is unknown).
MODPROBE_DIRS = KMOD_DIRS_FROM_32
_VERSION_RE = re.compile(r"\bkmod\s+version\s+(\d{1,4})\b")


def kmod_version(text):
    """``kmod version 31`` (first line of ``modprobe --version``) -> 31; None otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _VERSION_RE.search(str(text or "")[:4096])
    return int(match.group(1)) if match else None


def kmod_dirs(version):
    """The modprobe.d directories kmod ``version`` reads, in its order (unknown: the newest)."""
    version = kmod_version(version)
    if version is not None and version < 32:
        return KMOD_DIRS_BEFORE_32
    return KMOD_DIRS_FROM_32


def logical_lines(text):
    """kmod's reading of a configuration file: a backslash at the end of a line joins the next
    line (both removed); before any other character the backslash is dropped and the character
    kept. Returns [(raw physical text without the final newline, joined text), ...]."""
    if "\\" not in text:
        # no backslash: every physical line is its own logical line (what the loop below
        # gives, without a Python step per character: verify reads every modprobe.d file)
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the text ended with a newline (or was empty)
        return [(line, line) for line in lines]
    out = []
    raw_start = 0
    buf = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            out.append((text[raw_start:i], "".join(buf)))
            buf = []
            raw_start = i + 1
        elif ch == "\\":
            if i + 1 < n:
                if text[i + 1] != "\n":
                    buf.append(text[i + 1])
                i += 1
        else:
            buf.append(ch)
        i += 1
    if raw_start < n:
        out.append((text[raw_start:], "".join(buf)))
    return out


def options_entries(texts):
    """{path: file text} -> {normalised path: [(raw, joined), ...]} for the ``options`` lines."""
    out = {}
    for path, text in texts.items():
        rows = [(raw, line) for raw, line in logical_lines(str(text or ""))
                if parse_options_line(line) is not None]
        if rows:
            out.setdefault(os.path.normpath(str(path)), []).extend(rows)
    return out


def cmdline_options(text):
    """``module.param=value`` entries of /proc/cmdline in order, as kmod reads them: a
    ``modname.param`` word (a value may be double-quoted, with blanks inside the quotes), the
    module name with ``-`` turned into ``_``; words with a quote elsewhere, blanks outside the
    value's quotes or a second dot before ``=`` are ignored, as is ``modprobe.blacklist``."""
    out = []
    for word in tokenize(str(text or "")[:65536]):  # blanks inside quotes stay in a word
        if word.startswith('"') and word.count('"') == 2 and word.endswith('"'):
            word = word[1:-1]  # "mod.param=a b" as boot loaders pass it
        name, eq, value = word.partition("=")
        module, dot, param = name.partition(".")
        if not dot or not module or not param or "." in param or '"' in name:
            continue
        if module == "modprobe":
            continue
        out.append((module.replace("-", "_"), f"{param}{eq}{value}"))
    return out


def unquote(value):
    """``"x y"`` -> ``x y``; anything else unchanged (surrounding blanks dropped)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def tokenize(text):
    """Split on blanks outside double quotes (kmod keeps ``a="x y"`` as one parameter)."""
    if '"' not in text:
        return text.split()  # no quotes: the same split (str.split's blanks are isspace's)
    out = []
    cur = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch.isspace() and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse_options_line(line):
    """``options <module> p=v ...`` -> (module as written, [param tokens]); None otherwise."""
    line = line.strip()
    if not line.startswith("options"):
        return None  # a first token of "options" starts the stripped line (no quote in it)
    tokens = tokenize(line)
    if len(tokens) < 2 or tokens[0] != "options":
        return None
    return tokens[1], tokens[2:]


def param(token):
    """``name=value`` or ``name="a b"`` -> (name, value without the quotes)."""
    name, _sep, value = token.partition("=")
    return name, unquote(value)


def parse_registry(value):
    """``"A=1;B=2;"`` -> [("A", "1"), ("B", "2")] in order (empty entries dropped)."""
    out = []
    for part in unquote(value or "").split(";"):
        key, _sep, val = part.partition("=")
        if key.strip():
            out.append((key.strip(), val.strip()))
    return out


def effective_files(files, dirs=MODPROBE_DIRS):
    """The files kmod reads, in its order: only files directly in ``dirs`` (a kmod version's
    directories, kmod_dirs()), one per name (earlier directory wins), sorted by name."""
    dirs = tuple(dirs)
    by_name = {}
    for path in files:
        directory, name = os.path.split(os.path.normpath(str(path)))
        if directory not in dirs or not name.endswith(".conf"):
            continue
        rank = dirs.index(directory)
        if name not in by_name or rank < by_name[name][0]:
            by_name[name] = (rank, path)
    return [by_name[name][1] for name in sorted(by_name)]


# -- Kernel parameters that defeat modprobe.d ----------------------------------------------------
# A built-in module (modules.builtin of the kernel) never reads modprobe.d: its parameters come
# only from the kernel command line. For a loadable module kmod appends the command line's
# ``module.param=`` after every modprobe.d file, so the command line wins.

def builtin_modules(text):
    """modules.builtin (``kernel/drivers/nvme/host/nvme-core.ko`` per line) -> module names
    with underscores (``nvme_core``)."""
    out = set()
    for line in str(text or "").splitlines()[:100000]:
        name = os.path.basename(line.strip())
        for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
            if name.endswith(suffix):
                out.add(name[: -len(suffix)].replace("-", "_"))
                break
    return sorted(out)


def kernel_param(cmdline, module, name):
    """The value the kernel command line gives ``module.name`` (the last one wins); None when
    it does not set it. ``module`` and ``name`` are compared with ``-`` and ``_`` alike."""
    want_mod = module.replace("-", "_")
    want_param = name.replace("-", "_")
    value = None
    for mod, token in cmdline_options(cmdline):
        key, val = param(token)
        if mod == want_mod and key.replace("-", "_") == want_param:
            value = val
    return value


_GRUB_VAR = re.compile(r"^\s*(?:export\s+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(.*)$")
_GRUB_REF = re.compile(
    r"\$(?:\{(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\}|(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\b)")


def grub_cmdline(texts):
    """The kernel arguments GRUB's normal entries get (``GRUB_CMDLINE_LINUX``, then
    ``GRUB_CMDLINE_LINUX_DEFAULT``) from /etc/default/grub and then /etc/default/grub.d/*.cfg
    (``texts``: their contents in that order), as grub-mkconfig sources them: the last
    assignment wins, ``$GRUB_CMDLINE_LINUX[_DEFAULT]`` expands to the value so far. Returns
    the arguments, or None when no text sets either variable. A value with other shell
    expansions is taken literally."""
    values = {"GRUB_CMDLINE_LINUX": "", "GRUB_CMDLINE_LINUX_DEFAULT": ""}
    seen = False
    for text in texts:
        for line in str(text or "").splitlines()[:10000]:
            match = _GRUB_VAR.match(line)
            if not match:
                continue
            name, rest = match.groups()
            rest = _GRUB_REF.sub(lambda m: values[m.group(1) or m.group(2)], rest)
            values[name] = " ".join(_shell_words(rest))
            seen = True
    if not seen:
        return None
    return " ".join(w for w in (values["GRUB_CMDLINE_LINUX"],
                                values["GRUB_CMDLINE_LINUX_DEFAULT"]) if w)


def _shell_words(text):
    """A shell assignment's value (its first shell word, quotes removed) split into words:
    ``"a b" # note`` -> [a, b]; ``x cmd`` -> [x]."""
    cur = []
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch.isspace():
            break
        else:
            cur.append(ch)
    return "".join(cur).split()


def grubby_args(text):
    """``args="ro quiet ..."`` from ``grubby --info=DEFAULT`` -> ``ro quiet ...``; None when
    absent."""
    value = None
    for line in str(text or "").splitlines()[:1000]:
        key, sep, rest = line.partition("=")
        if sep and key.strip() == "args":
            value = unquote(rest)
    return value
