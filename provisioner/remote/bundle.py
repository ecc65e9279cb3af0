"""Assemble a node-side script from its source and the shared modules it declares.

The scripts in provisioner/remote/ run on a node with the node's python3 (stdlib only, 3.8+),
fed on stdin, so they cannot import anything of gdsfleet. What they share with the controller
or with each other (a parser, a probe) still lives once: a script declares the modules it
needs, and :func:`bundle` puts their source into the script at send time, as Ansible's
AnsiballZ puts ``module_utils`` into a module.

The declaration, in the script (exactly one pair of these marker lines, around the import;
everything between them is replaced):

.. code-block:: python

    # gdsfleet:bundle-begin
    from provisioner.remote.bundle import shared as _shared  # controller side; bundle() inlines

    # gdsfleet:bundle-end
    _cufile_json = _shared("cufile_json.py")

- On the controller (unit tests import the scripts as modules) ``_shared(name)`` imports the
  shared module: ``provisioner/remote/<name>`` for code only nodes run (``_libcufile.py``,
  ``_nodefs.py``), else the collection's ``plugins/module_utils/<name>`` (through
  provisioner/collection_utils.py, the wheel's copy or the checkout's).
- Sent to a node, the block between the markers is replaced by the source of every module
  named in a ``_shared("<name>")`` call of the script (sorted by name) and a ``_shared`` that
  executes that source once per name into a fresh module. A shared module must not itself call
  ``_shared`` or import anything outside the standard library (tests/unit/test_remote_bundle.py).

The output depends only on the files (it is cached per process): the same script and modules
give the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from types import ModuleType

from provisioner import collection_utils

BEGIN = "# gdsfleet:bundle-begin"
END = "# gdsfleet:bundle-end"
REMOTE_DIR = Path(__file__).resolve().parent
_CALL = re.compile(r"""\b_shared\(\s*["']([A-Za-z0-9_]+\.py)["']\s*\)""")


class BundleError(RuntimeError):
    """A node-side script whose bundle declaration is malformed (a bug in gdsfleet)."""


def shared(filename: str) -> ModuleType:
    """The controller's copy of the shared module ``filename`` (what the bundle inlines)."""
    local = REMOTE_DIR / filename
    if local.is_file():
        return collection_utils.load_path(local, f"provisioner.remote._shared_{local.stem}")
    return collection_utils.load(filename)


def shared_source(filename: str) -> str:
    """Source of a shared module: provisioner/remote/<filename>, else the collection's copy."""
    local = REMOTE_DIR / filename
    if local.is_file():
        return local.read_text(encoding="utf-8")
    for path in collection_utils.candidates(filename):
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise BundleError(f"shared module {filename} not found in {REMOTE_DIR} or the collection's "
                      "module_utils: reinstall gdsfleet from a full checkout")


def declared(text: str) -> list[str]:
    """The shared modules a script's ``_shared("<name>")`` calls name, sorted, once each."""
    return sorted(set(_CALL.findall(text)))


def _inlined(modules: dict[str, str]) -> str:
    lines = [
        "# gdsfleet: shared modules bundled in at send time (provisioner/remote/bundle.py)",
        "_GDSFLEET_SHARED = {",
    ]
    for name in sorted(modules):
        digest = hashlib.sha256(modules[name].encode("utf-8")).hexdigest()[:16]
        lines.append(f"    # {name} sha256:{digest}")
        lines.append(f"    {name!r}: {modules[name]!r},")
    lines += [
        "}",
        "_GDSFLEET_LOADED = {}",
        "",
        "",
        "def _shared(filename):",
        "    loaded = _GDSFLEET_LOADED.get(filename)",
        "    if loaded is None:",
        "        import sys",
        "        import types",
        "",
        "        stem = filename[:-3] if filename.endswith('.py') else filename",
        "        loaded = types.ModuleType('gdsfleet_shared_' + stem)",
        "        loaded.__file__ = '<gdsfleet shared ' + filename + '>'",
        "        code = compile(_GDSFLEET_SHARED[filename], loaded.__file__, 'exec')",
        "        sys.modules[loaded.__name__] = loaded  # as an import would (dataclasses look)",
        "        exec(code, loaded.__dict__)  # noqa: S102 - gdsfleet's own module, sent with it",
        "        _GDSFLEET_LOADED[filename] = loaded",
        "    return loaded",
    ]
    return "\n".join(lines) + "\n"


def bundle_text(text: str, name: str = "<script>") -> str:
    """``text`` with its bundle block replaced by the shared modules it declares; unchanged when
    it declares none and has no block."""
    names = declared(text)
    lines = text.splitlines(keepends=True)
    begins = [i for i, ln in enumerate(lines) if ln.rstrip("\n") == BEGIN]
    ends = [i for i, ln in enumerate(lines) if ln.rstrip("\n") == END]
    if not begins and not ends and not names:
        return text
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise BundleError(f"{name}: needs exactly one '{BEGIN}' line, then one '{END}' line")
    modules: dict[str, str] = {}
    for module in names:
        source = shared_source(module)
        if _CALL.search(source):
            raise BundleError(f"{name}: shared module {module} calls _shared itself; bundles "
                              "are one level deep")
        modules[module] = source
    return "".join(lines[:begins[0]]) + _inlined(modules) + "".join(lines[ends[0] + 1:])


@functools.cache
def bundle(name: str) -> bytes:
    """provisioner/remote/<name>, bundled, as bytes ready to send on stdin (cached)."""
    text = (REMOTE_DIR / name).read_text(encoding="utf-8")
    return bundle_text(text, name).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    """``python -m provisioner.remote.bundle iotest.py`` prints the bundled script."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or "/" in args[0] or not (REMOTE_DIR / args[0]).is_file():
        names = sorted(p.name for p in REMOTE_DIR.glob("*.py") if not p.name.startswith("_")
                       and p.name != "bundle.py")
        sys.stderr.write("usage: python -m provisioner.remote.bundle SCRIPT  (one of "
                         + ", ".join(names) + ")\n")
        return 64
    sys.stdout.buffer.write(bundle(args[0]))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
