"""Node text made safe to show: control characters escaped, sizes bounded.

Everything a node, an SSH port or an inventory says is hostile. Its raw bytes may be kept
(the ledger, the JSON report, where JSON's own escaping makes them inert), but before any of
it reaches a terminal, an XML or HTML file:

* :func:`printable` escapes C0 controls (all but tab, and newline where the text may span
  lines), DEL, C1 controls (ESC and CSI sequences can move the cursor, rewrite earlier lines,
  set the window title or hide text), Unicode bidirectional overrides, line and paragraph
  separators, lone surrogates and the code points XML 1.0 cannot hold. Each becomes a visible
  ``\\xNN`` / ``\\uNNNN``, so an operator sees what was sent instead of what it would do.
  A ``str.translate`` table: linear in the text, in C.
* :func:`printable_document` does the same to every string (and key) of a report document.

Rich markup (``[bold]``, ``[/x]``) in node text is never parsed: the terminal views print it
through :class:`rich.text.Text`, which takes text literally.

The limits on what the controller reads from a node are here too (see docs/security.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

# What one remote command may write before the controller stops reading and calls the node's
# answer "output too large" (the honest gather caps each item at 512 KiB on the node, and its
# whole document stays in single megabytes).
MAX_STDOUT_BYTES = 16 * 1024 * 1024
MAX_STDERR_BYTES = 4 * 1024 * 1024
# One item of the gather (the output of one node command) as the controller parses it:
# twice the node-side cap of provisioner/remote/gather.py.
MAX_ITEM_CHARS = 1024 * 1024
# One raw text stored in a report and the ledger (report["raw"][item]).
MAX_RAW_CHARS = 64 * 1024


class BoundedOutput:
    """What one command on a node writes to stdout and stderr, each kept up to its limit.

    The one rule both command runners (provisioner/local.py and provisioner/ssh/connection.py)
    read a node's output by: :meth:`take` each chunk as it arrives; the first byte past a
    stream's limit raises :class:`~provisioner.errors.OutputTooLarge` naming the node, the
    stream, the limit and the command (as the runner shows it), and the runner stops the
    command."""

    def __init__(self, node: str, command: str, *, max_stdout: int = MAX_STDOUT_BYTES,
                 max_stderr: int = MAX_STDERR_BYTES) -> None:
        self.node = node
        self.command = command
        self._limits = {"stdout": max_stdout, "stderr": max_stderr}
        self._bufs = {"stdout": bytearray(), "stderr": bytearray()}

    def take(self, stream: str, chunk: bytes) -> None:
        buf = self._bufs[stream]
        buf += chunk
        limit = self._limits[stream]
        if len(buf) > limit:
            from provisioner.errors import OutputTooLarge

            raise OutputTooLarge(
                f"{self.node}: output too large: the command wrote more than "
                f"{human_bytes(limit)} to {stream} (the limit of what the controller reads "
                f"from a node); it was stopped: {self.command}")

    def bytes_of(self, stream: str) -> bytes:
        return bytes(self._bufs[stream])


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _table(multiline: bool) -> dict[int, str]:
    t: dict[int, str] = {}
    for cp in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:
        t[cp] = f"\\x{cp:02x}"
    del t[0x09]  # tab
    if multiline:
        del t[0x0A]
    for cp in [0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029,
               0xFEFF, 0xFFFE, 0xFFFF, *range(0xD800, 0xE000)]:
        t[cp] = f"\\u{cp:04x}"
    return t


_ONE_LINE = _table(multiline=False)
_MULTI_LINE = _table(multiline=True)


def printable(text: Any, *, multiline: bool = False) -> str:
    """``text`` with every control character shown escaped (see the module docstring);
    newlines too unless ``multiline``."""
    s = text if isinstance(text, str) else str(text)
    return s.translate(_MULTI_LINE if multiline else _ONE_LINE)


def map_document(doc: Any, leaf: Callable[[Any], Any],
                 key: Callable[[Any], Any] = lambda k: k) -> Any:
    """A copy of a JSON-like document (mappings become dicts, tuples lists) with ``leaf``
    applied to every value that is not a container and ``key`` to every key.

    Iterative (an explicit stack, no recursion): a node document nested 700 levels made the
    recursive walk raise RecursionError, and the JUnit and HTML writers exit 70."""
    root: list[Any] = [None]
    # (a source container, the copy it goes into, the key or index there)
    stack: list[tuple[Any, Any, Any]] = [(doc, root, 0)]
    while stack:
        src, parent, slot = stack.pop()
        if isinstance(src, Mapping):
            out: Any = {}
            for k, v in src.items():
                nk = key(k)
                if isinstance(v, Mapping | list | tuple):
                    out[nk] = None
                    stack.append((v, out, nk))
                else:
                    out[nk] = leaf(v)
        elif isinstance(src, list | tuple):
            out = []
            for i, v in enumerate(src):
                if isinstance(v, Mapping | list | tuple):
                    out.append(None)
                    stack.append((v, out, i))
                else:
                    out.append(leaf(v))
        else:
            out = leaf(src)
        parent[slot] = out
    return root[0]


def printable_document(doc: Any, *, multiline: bool = True) -> Any:
    """A copy of a JSON-like document with every string and key through :func:`printable`
    (any depth: :func:`map_document`)."""
    table = _MULTI_LINE if multiline else _ONE_LINE

    def text(v: Any) -> Any:
        return v.translate(table) if isinstance(v, str) else v

    return map_document(doc, text, text)


def finite_document(doc: Any) -> Any:
    """A copy of a JSON-like document with NaN and infinities as None: what a strict JSON
    parser accepts (``json.dumps`` writes them as ``NaN``/``Infinity``, which is not JSON)."""
    def finite(v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return map_document(doc, finite)


# What no ledger text column can hold: a lone surrogate (UTF-8 cannot encode it, so SQLite's
# and PostgreSQL's drivers raise) and NUL (PostgreSQL's text type refuses it). Escaped visibly,
# as printable() shows them, so the record says what the node sent. (The JSON columns hold
# them as JSON's own ASCII escapes: provisioner.store.schema._dumps.)
_UNSTORABLE = {0x00: "\\x00", **{cp: f"\\u{cp:04x}" for cp in range(0xD800, 0xE000)}}


def storable(text: Any) -> str:
    """``text`` as any ledger can store it: NUL and lone surrogates escaped (``\\x00``,
    ``\\ud800``); every other character kept. Linear, in C (``str.translate``)."""
    s = text if isinstance(text, str) else str(text)
    return s.translate(_UNSTORABLE)


def clip(text: str, limit: int = MAX_RAW_CHARS) -> str:
    """``text`` cut to its last ``limit`` characters (the end of an output says most), with
    a line naming what was cut and the limit."""
    if len(text) <= limit:
        return text
    return (f"[gdsfleet: output too large: {len(text)} characters, the first "
            f"{len(text) - limit} cut (limit {human_bytes(limit)})]\n" + text[-limit:])


__all__ = ["MAX_ITEM_CHARS", "MAX_RAW_CHARS", "MAX_STDERR_BYTES", "MAX_STDOUT_BYTES", "clip",
           "finite_document", "human_bytes", "map_document", "printable", "printable_document",
           "storable"]
