"""Every report format of ``verify``, ``rollout`` and ``report RUN_ID``, from one place.

The documents (:mod:`.model`) are built from the records the ledger holds (or the same
records in memory during a live run); :func:`write_reports` renders them as JSON
(docs/report-schema.md), JUnit XML, one self-contained HTML page and a Prometheus textfile
(docs/reports.md), each written atomically by :func:`.files.atomic_write`; :mod:`.terminal`
prints a verify run's table.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provisioner.reports.files import atomic_write, safe_document, umask_mode


def to_json(doc: Mapping[str, Any]) -> str:
    """The report as JSON text: indented, but each entry of ``nodes`` on one line of its own.

    ``json.dumps`` with ``indent`` runs Python's pure-Python encoder (CPython's
    Lib/json/encoder.py, ``JSONEncoder.iterencode``, v3.11 and v3.12: the C
    ``c_make_encoder`` only when ``self.indent is None``): a 64-node verify report (5 MB)
    took 81 ms indented and 20 ms on one line, a fifth of the controller CPU that writing the
    report costs per node. One node per line also lets ``grep`` and ``diff`` work node by
    node; ``jq .`` indents it all."""
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        return json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n"
    parts = []
    for key, value in doc.items():
        name = json.dumps(key if isinstance(key, str) else str(key))
        if key == "nodes":
            lines = ",\n".join("    " + json.dumps(node, default=str) for node in nodes)
            parts.append(f"  {name}: [\n{lines}\n  ]")
        else:
            text = json.dumps(value, indent=2, sort_keys=False, default=str)
            parts.append(f"  {name}: " + text.replace("\n", "\n  "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_json(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """The JSON report (docs/report-schema.md) at ``path`` (``-``: stdout), secrets masked."""
    atomic_write(path, to_json(safe_document(doc)))


def write_junit(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """A verify run's JUnit XML at ``path``, secrets masked."""
    from provisioner.reports.junit import verify_junit

    atomic_write(path, verify_junit(safe_document(doc)))


def write_prom_textfile(directory: str | os.PathLike[str], doc: Mapping[str, Any],
                        *, now: float | None = None) -> Path:
    """``DIR/gdsfleet.prom`` for node_exporter's textfile collector, atomically (0644 & umask:
    node_exporter runs as its own user). Returns the file's path."""
    from provisioner.reports.prom import FILENAME, to_prometheus

    target = Path(directory).expanduser() / FILENAME
    atomic_write(target, to_prometheus(safe_document(doc), now=time.time() if now is None else now),
                 mode=umask_mode())
    return target


def write_reports(doc: Mapping[str, Any], *, json_path: str | None = None,
                  junit: str | None = None, html: str | None = None,
                  prom_dir: str | None = None) -> None:
    """Write each format asked for (``json_path`` may be ``-``: stdout); secrets are masked
    in the document first, never in the serialized text."""
    doc = safe_document(doc)
    if json_path:
        atomic_write(json_path, to_json(doc))
    if junit:
        from provisioner.reports.junit import to_junit

        atomic_write(junit, to_junit(doc))
    if html:
        from provisioner.reports.html import to_html

        atomic_write(html, to_html(doc))
    if prom_dir:
        write_prom_textfile(prom_dir, doc)  # safe_document again: idempotent


__all__ = ["atomic_write", "to_json", "write_json", "write_junit", "write_prom_textfile",
           "write_reports"]
