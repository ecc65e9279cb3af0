"""How ``provisioner export env`` writes a job's environment for its consumer (shell,
dotenv), and which values it refuses to write: every value comes from the ledger, i.e. from
a node or an inventory, so it is hostile (the rules are in the block below, docs/cli.md).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

# Quoting. Every value comes from the ledger, i.e. from a node or an inventory: hostile.
#
# shell:  `export K='v'` (shlex.quote: POSIX single quotes, nothing inside is interpreted);
#         for `eval "$(...)"`, `. FILE` and `bash -c 'set -a; . FILE'`.
# dotenv: the subset that bash (`set -a; . FILE`), python-dotenv and systemd's EnvironmentFile=
#         read alike: K=v unquoted when v is only [A-Za-z0-9_./:@%+,=-], else K='v' (single
#         quotes: literal in bash and systemd, literal in python-dotenv when v holds no
#         backslash or quote). A value holding ' or \ cannot be written so that all three read
#         it alike: refused. docker --env-file strips no quotes: only unquoted lines are read
#         the same there (a note on stderr says when a value was quoted).
# json:   json.dumps (ASCII escapes).
# Every format: a value must be printable text. NUL cannot be in an environment at all, and a
# newline, carriage return, escape or other control/format/separator character is never a
# legitimate path and would break a line-based consumer: refused.
_DOTENV_BARE = re.compile(r"[A-Za-z0-9_./:@%+,=-]*")
_SHOW_MAX = 60


def _printable(text: object, limit: int = 400) -> str:
    """Text safe for a terminal or a `#` comment line: non-printable characters escaped."""
    raw = str(text)
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in raw[:limit])
    return out + ("..." if len(raw) > limit else "")


def unsafe_value(value: str, fmt: str) -> str | None:
    """Why ``value`` cannot be exported in ``fmt`` safely (None: it can)."""
    for ch in value:
        if ch == "\0":
            return "a NUL byte (no environment variable can hold one)"
        if not ch.isprintable():
            name = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab",
                    "\x1b": "an escape character"}.get(ch, f"the character {ascii(ch)[1:-1]}")
            return f"{name} (not printable text)"
    if fmt == "dotenv" and not _DOTENV_BARE.fullmatch(value):
        bad = next((c for c in value if c in "'\\"), None)
        if bad is not None:
            return (f"{'a single quote' if bad == chr(39) else 'a backslash'}, which dotenv "
                    f"readers do not read alike (use --format shell or json)")
    return None


def safe_env(env: Mapping[str, str], fmt: str) -> tuple[dict[str, str], list[str]]:
    """The variables that can be exported in ``fmt``, and one line per refused one."""
    keep: dict[str, str] = {}
    refused: list[str] = []
    for key, value in env.items():
        why = unsafe_value(value, fmt)
        if why is None:
            keep[key] = value
        else:
            refused.append(f"{key} not exported: its value from the ledger "
                           f"({_printable(value, _SHOW_MAX)}) holds {why}; check the node and "
                           f"its inventory, then verify again")
    return keep, refused


def render_env(env: Mapping[str, str], fmt: str, *, header: Sequence[str] = ()) -> str:
    """``env`` in ``fmt`` (shell, dotenv); values must have passed :func:`safe_env`."""
    for value in env.values():
        if unsafe_value(value, fmt):
            raise ValueError(f"unsafe value for {fmt}: {value!r}")
    lines = [f"# {_printable(h)}" for h in header]
    if fmt == "shell":
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        return "\n".join(lines) + "\n"
    if fmt == "dotenv":
        lines += [f"{k}={v}" if _DOTENV_BARE.fullmatch(v) else f"{k}='{v}'"
                  for k, v in env.items()]
        return "\n".join(lines) + "\n"
    raise ValueError(fmt)
