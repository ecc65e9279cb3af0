"""safe_document masks each distinct string of a report once (a fleet's report repeats most of
its strings node after node): the result must stay exactly redact_document's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.redact import MASK, forget_all, redact_document, register
from provisioner.reports import to_json
from provisioner.reports.files import safe_document

SECRET = "s3cr3t-canary-value"  # noqa: S105 - a test canary, not a credential


@pytest.fixture(autouse=True)
def _registry() -> Iterator[None]:
    forget_all()
    register(SECRET)
    yield
    forget_all()


def _node(i: int) -> dict[str, Any]:
    return {
        "name": f"node-{i:02d}",
        "reachable": True,
        "compliant": False,
        "duration_s": 1.5 + i,
        "checks": [{"id": "nvfs.loaded", "status": "fail", "expected": "loaded",
                    "observed": f"modprobe said {SECRET}", "message": "load nvidia_fs"}],
        "facts": {"cmdline": f"root=/dev/sda password={SECRET}", 7: None,
                  "tupled": ("tuple", SECRET, 3), "url": f"postgresql://u:{SECRET}@db/x",
                  "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE "
                         "KEY-----"},
        "raw": {"gather": "x" * 10},
    }


def test_same_document_as_redact_document() -> None:
    doc = {"run_id": "r1", "nodes": [_node(i) for i in range(5)], "policy": None,
           "summary": {"total": 5}}
    got = safe_document(doc)
    assert got == dict(redact_document(doc))
    assert to_json(got) == to_json(dict(redact_document(doc)))
    text = to_json(got)
    assert SECRET not in text and MASK in text
    # structure and types are kept: booleans, numbers, None, tuples, non-string keys
    n = got["nodes"][3]
    assert n["compliant"] is False and n["duration_s"] == 4.5 and 7 in n["facts"]
    assert n["facts"]["tupled"] == ("tuple", MASK, 3)


def test_a_secret_registered_between_two_reports_is_masked_in_the_second() -> None:
    doc = {"nodes": [{"name": "n1", "error": "late-secret-value here"}]}
    assert safe_document(doc)["nodes"][0]["error"] == "late-secret-value here"
    register("late-secret-value")
    assert safe_document(doc)["nodes"][0]["error"] == f"{MASK} here"


class _Tagged(str):
    """A str subclass, as Ansible's tagged strings are (a report may carry one from a role
    variable or an inventory value)."""


def test_str_subclasses_are_masked_as_values_and_keys_are_kept() -> None:
    """A key is never altered (issue 27, item 2: a secret once renamed the key ``nodes``);
    a value holding a secret is masked, str subclass or not."""
    doc = {"nodes": [{_Tagged("note"): _Tagged(f"value {SECRET}"),
                      "list": [_Tagged(SECRET), 1, None]}]}
    got = safe_document(doc)
    assert got == dict(redact_document(doc))
    assert SECRET not in to_json(got)
    assert got["nodes"][0] == {"note": f"value {MASK}", "list": [MASK, 1, None]}


def test_a_secret_spelled_like_a_key_is_not_masked_in_that_report() -> None:
    """Issue 27, item 2: a registered value that is one of the document's keys would rewrite
    the report's own words: it is left alone in that document (safe_document finds it after
    its walk and walks again), exactly as redact_document does."""
    register("kernel_release")
    doc = {"nodes": [{"facts": {"kernel_release": "6.8.0"},
                      "error": f"kernel_release unknown; {SECRET}"}]}
    got = safe_document(doc)
    assert got == dict(redact_document(doc))
    assert got["nodes"][0]["error"] == f"kernel_release unknown; {MASK}"
    assert safe_document({"x": "kernel_release"}) == {"x": MASK}
