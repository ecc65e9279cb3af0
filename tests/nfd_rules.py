"""A validator of Node Feature Discovery local feature files, written from NFD's documentation
and sources (tests/fixtures/nfd/README.md names them). Used by the unit and fleet tests to check
what `provisioner verify --nfd` writes; independent of provisioner/verify/nfd.py."""

from __future__ import annotations

import re
from datetime import datetime

MAX_FILE_BYTES = 65536
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DIRECTIVES = ("expiry-time", "no-label", "no-feature")


def _subdomain_ok(ns: str) -> bool:
    return 0 < len(ns) <= 253 and all(_DNS_LABEL.match(p) for p in ns.split("."))


def namespace_allowed(ns: str) -> bool:
    if ns == "kubernetes.io" or ns.endswith(".kubernetes.io"):
        return ns in ("feature.node.kubernetes.io", "profile.node.kubernetes.io") or ns.endswith(
            (".feature.node.kubernetes.io", ".profile.node.kubernetes.io"))
    return True


def label_errors(key: str, value: str) -> list[str]:
    errors = []
    ns, sep, name = key.rpartition("/")
    if not sep:
        errors.append(f"{key}: no namespace (unprefixed names are deprecated)")
    elif not _subdomain_ok(ns):
        errors.append(f"{key}: namespace {ns!r} is not a DNS subdomain")
    elif not namespace_allowed(ns):
        errors.append(f"{key}: namespace {ns!r} is denied by nfd-master")
    if not (len(name) <= 63 and _NAME.match(name)):
        errors.append(f"{key}: name {name!r} is not a qualified name")
    if value and not (len(value) <= 63 and _NAME.match(value)):
        errors.append(f"{key}: value {value!r} is not a valid label value")
    return errors


def parse(text: str) -> tuple[dict[str, str], list[str], datetime | None]:
    """(labels, errors, last expiry time) of a feature file's text, by the documented rules."""
    errors: list[str] = []
    if len(text.encode()) > MAX_FILE_BYTES:
        errors.append(f"file over {MAX_FILE_BYTES} bytes: NFD ignores it")
    labels: dict[str, str] = {}
    expiry: datetime | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                key, _, value = line[3:].partition("=")
                if key not in _DIRECTIVES:
                    errors.append(f"unknown directive {key!r}")
                elif key == "expiry-time":
                    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?"
                                        r"(Z|[+-]\d\d:\d\d)", value.strip()):
                        errors.append(f"expiry-time {value!r} is not RFC3339")
                    else:
                        expiry = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            continue
        key, _, value = line.partition("=")
        value = value if "=" in line else "true"
        errors += label_errors(key, value)
        labels[key] = value
    return labels, errors, expiry
