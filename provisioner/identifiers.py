"""Identifiers are never masked (issue 45, item 3).

A secret registered for masking (:mod:`provisioner.redact`) becomes ``***`` wherever it shows
in free text. A secret equal to an identifier the outputs carry would hide that identifier:
``PGPASSWORD=gpu.driver.open`` turned that check's id into ``***`` in the JSON, the JUnit and
the Prometheus outputs, so an alert on ``check="gpu.driver.open"`` never fired. So, as a
verdict word is refused (``redact.free_text_refusal``), a secret equal to an identifier, or
part of one, is never masked in free text: it is withdrawn from the registry, and every later
registration of it is refused. One warning line names where the secret came from (never its
value) and why; the secret is still hidden where it is a URL password or a secret-named
field's value.

What is protected, and when:

* the label names and label values the outputs define (:data:`LABELS`) and every check id
  of the verification (``verify.checks``): :func:`protect_static`, at the start of every
  command that has a secret to mask (cli.main; the checks are imported only then);
* the node names: once a command knows them (:func:`protect`, after the inventory is read)
  and for every document a report writes (:func:`protect_document`: its nodes' names and its
  checks' ids, which may come from a ledger an older version wrote);
* the Prometheus metric names (reports.files, before a document is written).

This module is the registry's other half (the registry is :mod:`provisioner.secrets`): it
reads and edits the registry's state under its lock.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from provisioner import secrets

# label names and the label values the project itself defines (provisioner.reports.prom and
# the node_exporter textfile of attest); check statuses and routes are REPORT_WORDS already
LABELS = frozenset({
    "run_id", "kind", "node", "route", "io_path", "simulated", "status", "check", "direction",
    "attempt", "op", "transfer", "result", "path", "not_compliant", "compliant",
    "unreachable", "error", "write", "read", "direct", "compat", "skipped", "verify",
    "rollout", "nvfs", "p2pdma",
})
_MAX_DEPTH = 8  # a report's nodes and their checks are two or three levels down


def reason(what: str) -> str:
    return (f"it is {what}, or part of one, that the outputs carry (never masked, or an alert "
            f"or a lookup on it would no longer match)")


def warning(source: str, why: str) -> str:
    """The one line that tells the operator a secret is not masked in free text."""
    return (f"provisioner: warning: {source} is not masked in free text: {why}; it is still "
            f"hidden where it is a URL password or a secret-named field's value, but an "
            f"error message quoting it would show it: use a longer, uncommon secret")


def protect(names: Iterable[Any], what: str, *, say: bool = True) -> list[str]:
    """Never mask ``names`` (identifiers of kind ``what``, "a node name"): a registered secret
    equal to one or inside one is withdrawn from the registry (all its encoded forms), and
    refused when registered later. Returns the sources of the secrets withdrawn now; with
    ``say``, one warning line each on stderr."""
    low = {n.lower() for n in names if isinstance(n, str) and n}
    if not low:
        return []
    new: list[tuple[str, str]] = []
    with secrets._VALUES_LOCK:
        secrets._IDENTIFIERS.update(low)
        origin = secrets._ORIGIN
        hit = {origin.get(v, (v, None)) for v in secrets._VALUES
               if any(v.lower() in n for n in low)}
        values = {value for value, _source in hit}
        secrets._VALUES.difference_update(
            [v for v in secrets._VALUES if origin.get(v, (v, None))[0] in values])
        for _value, source in sorted(hit, key=lambda h: str(h[1])):
            entry = (source or "a secret", reason(what))
            if entry not in secrets._REFUSED:
                secrets._REFUSED.append(entry)
                new.append(entry)
    if say:
        from provisioner.sanitize import printable

        for source, why in new:
            print(printable(warning(source, why)), file=sys.stderr)
    return [source for source, _ in new]


def protect_static() -> None:
    """The identifiers the project defines, protected when a secret is registered (nothing
    to do, and nothing imported, otherwise). Quiet: cli.main prints every refusal next."""
    if not secrets.registered():
        return
    protect(LABELS, "a label name or value")
    from provisioner.verify.checks import REGISTRY

    protect(REGISTRY, "a check id")


def protect_document(doc: Any) -> None:
    """The node names and check ids of a report document (a verify or a rollout report, a
    ledger row's), protected before it is written."""
    if not secrets.registered() or not isinstance(doc, Mapping):
        return
    nodes: set[str] = set()
    checks: set[str] = set()
    stack: list[tuple[Any, int]] = [(doc.get("nodes"), 0)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            continue
        if isinstance(node, list):
            stack.extend((x, depth + 1) for x in node)
        elif isinstance(node, Mapping):
            for key in ("name", "node"):
                if isinstance(node.get(key), str):
                    nodes.add(node[key])
            for c in node.get("checks") or ():
                if isinstance(c, Mapping) and isinstance(c.get("id"), str):
                    checks.add(c["id"])
            if isinstance(node.get("verification"), Mapping):
                stack.append((node["verification"], depth + 1))
    protect(nodes, "a node name")
    protect(checks, "a check id")


__all__ = ["LABELS", "protect", "protect_document", "protect_static", "reason", "warning"]
