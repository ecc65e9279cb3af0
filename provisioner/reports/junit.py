"""JUnit XML from a report document (verify or rollout).

verify: one ``<testsuite>`` per node, one ``<testcase>`` per check (``<failure>`` for fail,
``<skipped>`` for skip; warn passes with its message in ``<system-out>``); an unreachable node is
one ``<testcase name="reachable">`` with an ``<error>``.

rollout: one ``<testsuite>`` per wave, one ``<testcase>`` per node; a failed or unreachable
node is a ``<failure>``, a node that ended anywhere but compliant is ``<skipped>``.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from typing import Any

from provisioner.reports.model import is_simulated


def _seconds(value: Any) -> str:
    """A testcase's ``time``: the node's duration, or 0 when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "0.000"
    try:
        f = float(value)
    except OverflowError:
        return "0.000"
    return f"{f:.3f}" if math.isfinite(f) else "0.000"


def to_junit(doc: Mapping[str, Any]) -> str:
    if doc.get("kind") == "rollout":
        return rollout_junit(doc)
    return verify_junit(doc)


def _incomplete_suite(root: ET.Element, doc: Mapping[str, Any]) -> int:
    """A run that proves nothing (interrupted, open, empty) is one failing case of its own,
    so a CI that reads only failures sees it; 1 when it added one."""
    why = doc.get("incomplete")
    if not why:
        return 0
    suite = ET.SubElement(root, "testsuite", name="run", tests="1", failures="0", errors="1",
                          skipped="0")
    case = ET.SubElement(suite, "testcase", name="complete", classname="gdsfleet.run")
    err = ET.SubElement(case, "error", message=str(why)[:500], type="incomplete")
    err.text = str(why)
    return 1


def _xml_safe(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Every string of ``doc`` fit for XML 1.0: control characters (ESC, NUL...), lone
    surrogates and U+FFFE/U+FFFF shown escaped (provisioner.sanitize), so the file parses
    whatever a node answered."""
    from provisioner.sanitize import printable_document

    return dict(printable_document(doc, multiline=True))


def verify_junit(doc: Mapping[str, Any]) -> str:
    doc = _xml_safe(doc)
    nodes = list(doc.get("nodes") or [])
    root = ET.Element("testsuites", name="gdsfleet verify", tests="0", failures="0",
                      errors="0", skipped="0")
    totals = Counter[str]()
    for n in nodes:
        name = str(n.get("name"))
        suite = ET.SubElement(root, "testsuite", name=name,
                              timestamp=str(n.get("started_at") or doc.get("started_at") or ""),
                              time=_seconds(n.get("duration_s")))
        props = ET.SubElement(suite, "properties")
        for key in ("route", "compliant", "reachable"):
            ET.SubElement(props, "property", name=key, value=str(n.get(key)))
        ET.SubElement(props, "property", name="run_id", value=str(doc.get("run_id")))
        # the inventory's gdsfleet_simulated: a CI reading this file must not take the lab's
        # stand-in hardware for GPU nodes
        ET.SubElement(props, "property", name="simulated",
                      value="true" if is_simulated(n) else "false")
        counts = Counter[str]()
        checks = list(n.get("checks") or [])
        if not n.get("reachable") or n.get("internal_error"):
            case = ET.SubElement(suite, "testcase", name="reachable",
                                 classname=f"gdsfleet.verify.{name}")
            err = ET.SubElement(case, "error", message=str(n.get("error") or "unreachable"),
                                type="internal" if n.get("internal_error") else "unreachable")
            err.text = str(n.get("error") or "")
            counts["tests"] += 1
            counts["errors"] += 1
        for c in checks:
            cid = str(c.get("id"))
            case = ET.SubElement(suite, "testcase", name=cid, classname=f"gdsfleet.verify.{name}")
            counts["tests"] += 1
            status = c.get("status")
            detail = (
                f"expected: {c.get('expected', '')}\nobserved: {c.get('observed', '')}\n"
                f"{c.get('message', '')}"
            )
            if status == "fail":
                f = ET.SubElement(case, "failure", message=str(c.get("message") or cid),
                                  type="fail")
                f.text = detail
                counts["failures"] += 1
            elif status == "skip":
                ET.SubElement(case, "skipped", message=str(c.get("message") or ""))
                counts["skipped"] += 1
            elif status == "warn":
                out = ET.SubElement(case, "system-out")
                out.text = "WARNING\n" + detail
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
            totals[k] += counts[k]
    if _incomplete_suite(root, doc):
        totals["tests"] += 1
        totals["errors"] += 1
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(totals[k]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _label(index: Any) -> str:
    return "canary" if index == 0 else f"wave {index}"


def rollout_junit(doc: Mapping[str, Any]) -> str:
    doc = _xml_safe(doc)
    suites = ET.Element("testsuites", name=f"gdsfleet rollout {doc.get('run_id')}")
    by_wave: dict[Any, list[Mapping[str, Any]]] = {}
    for n in doc.get("nodes") or []:
        by_wave.setdefault(n.get("wave"), []).append(n)
    waves = [(w.get("index"), w.get("label") or _label(w.get("index")))
             for w in ((doc.get("plan") or {}).get("waves") or [])]
    known = {i for i, _ in waves}
    waves += [(i, _label(i)) for i in sorted(by_wave, key=lambda x: (x is None, x or 0))
              if i not in known]
    for index, label in waves:
        nodes = by_wave.get(index, [])
        suite = ET.SubElement(suites, "testsuite", name=label, tests=str(len(nodes)))
        fails = skipped = 0
        for n in nodes:
            case = ET.SubElement(suite, "testcase", classname=f"rollout.{label}",
                                 name=str(n.get("name")),
                                 time=_seconds(n.get("duration_s")))
            sim = n.get("simulated") is True or is_simulated(n.get("verification") or {})
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="simulated",
                          value="true" if sim else "false")
            failure, step, reason = n.get("failure"), n.get("step"), n.get("reason") or ""
            if failure or step == "failed":
                fails += 1
                el = ET.SubElement(case, "failure", message=f"{failure or step}: {reason}"[:500],
                                   type=str(failure or "failed"))
                el.text = json.dumps(dict(n), indent=1, default=str)
            elif step != "compliant":
                skipped += 1
                ET.SubElement(case, "skipped", message=f"{step}: {reason}"[:500])
        suite.set("failures", str(fails))
        suite.set("skipped", str(skipped))
    _incomplete_suite(suites, doc)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


__all__ = ["rollout_junit", "to_junit", "verify_junit"]
