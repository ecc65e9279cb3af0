"""One atomic writer for every report file.

Each file is written to a temporary file in the target's own directory (so the rename never
crosses a filesystem), flushed and fsynced, given its mode, then renamed over the target: a
reader (a person, CI, node_exporter's textfile collector) sees the old file or the new one,
never half of one. ``-`` writes to stdout.

Modes: reports hold node names, addresses and error text, so they are created 0600. The
Prometheus textfile must be readable by node_exporter, which runs as its own user, so it is
0644. Either is narrowed by the process umask (never wider than the operator allows).

Secrets are masked in the document before it is serialized (:func:`safe_document`, called by
every writer of provisioner.reports): a secret given to this process (extra vars, a ledger
URL's password) never reaches a report, and the text is never rewritten after serializing (a
registered value replaced inside JSON once turned ``"compliant": false`` into
``"compliant": ***``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

PRIVATE = 0o600
WORLD_READABLE = 0o644


def umask_mode(mode: int = WORLD_READABLE) -> int:
    """``mode`` narrowed by the current umask (read without changing it for long)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mode & ~mask


def safe_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with every secret masked in its strings (provisioner.redact.redact_document)."""
    from provisioner.redact import redact_document

    return dict(redact_document(doc))


def atomic_write(path: str | os.PathLike[str], data: str, *, mode: int = PRIVATE) -> None:
    """Write ``data`` to ``path`` through a temp file + fsync + rename; ``-`` is stdout.
    ``data`` comes from a document already through :func:`safe_document`."""
    from provisioner.fsutil import write_atomic

    if str(path) == "-":
        sys.stdout.write(data)
        sys.stdout.flush()
        return
    write_atomic(path, data, mode=mode)


__all__ = ["PRIVATE", "WORLD_READABLE", "atomic_write", "safe_document", "umask_mode"]
