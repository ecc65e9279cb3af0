"""``/etc/os-release``."""

from __future__ import annotations

import shlex

MAX_VALUE_CHARS = 4096


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        # a real value is a short word; shlex takes quadratic time over a long one (a node
        # answering one 1 MiB line held verify for minutes), so only its start is read
        value = value[:MAX_VALUE_CHARS]
        try:
            parts = shlex.split(value)
            out[key.strip()] = parts[0] if parts else ""
        except ValueError:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def family(info: dict[str, str]) -> str:
    ids = {info.get("ID", "").lower(), *info.get("ID_LIKE", "").lower().split()}
    if ids & {"debian", "ubuntu"}:
        return "debian"
    if ids & {"rhel", "fedora", "centos", "rocky", "almalinux"}:
        return "redhat"
    if ids & {"sles", "suse", "opensuse"}:
        return "suse"
    return "unknown"
