"""``/etc/os-release``."""

from __future__ import annotations

import re
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
        plain = _plain_word(value)
        if plain is not None:
            out[key.strip()] = plain
            continue
        try:
            parts = shlex.split(value)
            out[key.strip()] = parts[0] if parts else ""
        except ValueError:
            out[key.strip()] = value.strip().strip("\"'")
    return out


_SHELL_SPACE = re.compile(r"[ \t\r\n]+")  # shlex.split's whitespace, nothing else


def _plain_word(value: str) -> str | None:
    """What ``shlex.split(value)[0]`` gives for the usual values, without shlex's Python loop
    per character: a value with no quote and no backslash (its first word), or one quoted
    whole, in one pair of the same quotes with none inside and no backslash (its inside).
    None for anything else: shlex reads it. ``tests/unit/test_parse_system.py`` checks this
    against shlex for generated values."""
    if "\\" in value:
        return None
    if "'" not in value and '"' not in value:
        words = _SHELL_SPACE.split(value.strip(" \t\r\n"), maxsplit=1)
        return words[0]
    if (len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            and value[0] not in value[1:-1]):
        return value[1:-1]
    return None


def family(info: dict[str, str]) -> str:
    ids = {info.get("ID", "").lower(), *info.get("ID_LIKE", "").lower().split()}
    if ids & {"debian", "ubuntu"}:
        return "debian"
    if ids & {"rhel", "fedora", "centos", "rocky", "almalinux"}:
        return "redhat"
    if ids & {"sles", "suse", "opensuse"}:
        return "suse"
    return "unknown"
