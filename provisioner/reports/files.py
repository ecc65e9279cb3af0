"""One atomic writer for every report file.

Each file is written to a temporary file in the target's own directory (so the rename never
crosses a filesystem), flushed and fsynced, given its mode, then renamed over the target: a
reader (a person, CI, node_exporter's textfile collector) sees the old file or the new one,
never half of one. ``-`` writes to stdout.

Modes: reports hold node names, addresses and error text, so they are created 0600. The
Prometheus textfile must be readable by node_exporter, which runs as its own user, so it is
0644. Either is narrowed by the process umask (never wider than the operator allows).

A symlink is followed and never replaced; a character device, a FIFO or a file descriptor's
name (``/dev/stdout``, ``/dev/stderr``) is written directly, not atomically; other special
files are refused (``provisioner.fsutil.write_atomic``). A path refused that way is a usage
error (exit 64); a write that fails (a full disk, a read-only mount) exits 74 with one line
saying what to do (:class:`ReportWriteError`).

Secrets are masked in the document before it is serialized (:func:`safe_document`, called by
every writer of provisioner.reports): a secret given to this process (extra vars, a ledger
URL's password) never reaches a report, and the text is never rewritten after serializing (a
registered value replaced inside JSON once turned ``"compliant": false`` into
``"compliant": ***``).
"""

from __future__ import annotations

import errno
import math
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from provisioner.errors import ProvisionerError, UsageError

PRIVATE = 0o600
WORLD_READABLE = 0o644


class ReportWriteError(ProvisionerError):
    """A report file could not be written (full disk, read-only mount ...): exit 74, I/O."""

    exit_code = 74


def write_output(path: str | os.PathLike[str], data: str | bytes, *, mode: int = PRIVATE,
                 what: str = "report", recorded: bool = True) -> None:
    """:func:`provisioner.fsutil.write_atomic` with ``special_ok``, its errors turned into a
    one-line :class:`UsageError` (a path it refuses) or :class:`ReportWriteError` (I/O)."""
    from provisioner.fsutil import SpecialFileError, write_atomic

    try:
        write_atomic(path, data, mode=mode, special_ok=True)
    except SpecialFileError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}; choose another path") from None
    except OSError as exc:
        hint = ("free space there or choose another path"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "choose another path")
        kept = ("; what was recorded in the ledger is kept (`provisioner report` writes it "
                "again)" if recorded else "")
        raise ReportWriteError(
            f"{what} {path} could not be written ({exc.strerror or exc}); {hint}{kept}") from None


def umask_mode(mode: int = WORLD_READABLE) -> int:
    """``mode`` narrowed by the current umask (read without changing it for long)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mode & ~mask


def safe_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` made safe to serialize: :func:`provisioner.redact.redact_document`'s copy
    (secrets masked in values, never in keys, enumerated values or numbers; nesting cut at
    ``MAX_DEPTH``; NaN, infinities and integers past ``BIG`` null), each distinct string
    masked once. A fleet's report repeats most of its strings node after node (every key,
    check id, expected value and fix), and masking them one by one was most of what writing
    a 64-node report cost. Its node names, check ids and the metric names are identifiers
    no secret may mask (:mod:`provisioner.identifiers`, issue 45)."""
    from provisioner.identifiers import protect, protect_document
    from provisioner.reports.prom import METRICS

    protect_document(doc)
    protect(METRICS, "a metric name")
    from provisioner.redact import (
        BIG,
        MAX_DEPTH,
        REPORT_WORDS,
        field_kind,
        mask_whole,
        redact_known,
        registered,
        too_deep,
    )

    keep: frozenset[str] = frozenset()  # registered values spelled like a key of doc
    seen: set[Any] = set()  # every key of the document, collected by the walk
    masked: dict[str, str] = {}  # this call's: the registered secrets do not change during it
    kinds: dict[Any, str] = {}  # key -> field_kind(key)
    plain = (int, float, bool, type(None))

    def text(value: str) -> str:
        out = masked.get(value)
        if out is None:
            out = masked[value] = redact_known(value, keep=keep)
        return out

    def special(kind: str, value: str) -> str:
        if kind == "secret":
            return mask_whole(value)
        if kind == "enum" and value.strip().lower() in REPORT_WORDS:
            return value
        return masked[value] if value in masked else text(value)

    # A report is plain dicts, lists, strings and numbers: those are told apart by their
    # exact type inside the loops below (no call for a string or a number; a 64-node report
    # holds about 90,000 values, and one Python call each was most of this function's time);
    # any other type goes through walk's general case.
    def walk_values(values: Iterable[Any], depth: int) -> Any:
        if depth > MAX_DEPTH:
            return too_deep()
        out = []
        for v in values:
            kind = type(v)
            if kind is str:
                v = masked[v] if v in masked else text(v)
            elif kind is float:
                v = v if v - v == 0.0 else None  # NaN and infinities: null (strict JSON)
            elif kind is int:
                v = v if -BIG < v < BIG else None  # past any float: no writer can show it
            elif kind is dict:
                v = walk_dict(v, depth + 1)
            elif kind is list:
                v = walk_values(v, depth + 1)
            elif kind not in plain:
                v = walk(v, depth + 1)
            out.append(v)
        return out

    def walk_dict(node: dict[Any, Any], depth: int) -> Any:
        if depth > MAX_DEPTH:
            return too_deep()
        seen.update(node)
        out = {}
        for k, v in node.items():
            kind = type(v)
            if kind is str or (kind not in plain and isinstance(v, str)):
                fk = kinds.get(k)
                if fk is None:
                    fk = kinds[k] = field_kind(k) if isinstance(k, str) else "text"
                v = (masked[v] if v in masked else text(v)) if fk == "text" else special(fk, v)
            elif kind is float:
                v = v if v - v == 0.0 else None
            elif kind is int:
                v = v if -BIG < v < BIG else None
            elif kind is dict:
                v = walk_dict(v, depth + 1)
            elif kind is list:
                v = walk_values(v, depth + 1)
            elif kind not in plain:
                v = walk(v, depth + 1)
            out[k] = v
        return out

    def walk(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH and isinstance(node, Mapping | list | tuple):
            return too_deep()
        kind = type(node)
        if kind is dict:
            return walk_dict(node, depth)
        if kind is list:
            return walk_values(node, depth)
        if kind is str:
            return text(node)
        if isinstance(node, Mapping):
            return walk_dict(dict(node), depth)
        if isinstance(node, list):
            return walk_values(node, depth)
        if isinstance(node, tuple):
            out = walk_values(node, depth)
            return tuple(out) if isinstance(out, list) else out
        if isinstance(node, str):
            return text(node)
        if isinstance(node, float) and not math.isfinite(node):
            return None
        if type(node) is int and not -BIG < node < BIG:
            return None
        return node

    out = dict(walk(doc, 0))
    if not registered():
        return out
    # a secret spelled like one of the document's keys is not masked in its text (it would
    # rewrite the report's own words): rare, so found after the walk, and the walk redone
    secrets = {v.lower() for v in registered()}
    hits = frozenset(k.lower() for k in seen if isinstance(k, str) and k.lower() in secrets)
    if not hits:
        return out
    keep, masked = hits, {}
    return dict(walk(doc, 0))


def atomic_write(path: str | os.PathLike[str], data: str, *, mode: int = PRIVATE) -> None:
    """Write ``data`` to ``path`` through a temp file + fsync + rename; ``-`` is stdout.
    ``data`` comes from a document already through :func:`safe_document`."""

    if str(path) == "-":
        sys.stdout.write(data)
        sys.stdout.flush()
        return
    write_output(path, data, mode=mode)


__all__ = ["PRIVATE", "WORLD_READABLE", "ReportWriteError", "atomic_write", "safe_document",
           "umask_mode", "write_output"]
