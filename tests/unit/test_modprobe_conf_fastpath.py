"""modprobe_conf's shortcuts (issue 31: verify reads every modprobe.d file of every node) give
exactly what kmod's character-by-character reading gives: ``logical_lines`` without a
backslash, ``tokenize`` without a double quote, ``parse_options_line`` of a line that does not
start with ``options``. The references below are the loops the module keeps for the other
cases, written out here so that a change to the module cannot move both sides at once."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_modprobe_conf_fastpath", ROOT / "plugins" / "module_utils" / "modprobe_conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conf = _load()


def ref_logical_lines(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    buf: list[str] = []
    raw_start, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            out.append((text[raw_start:i], "".join(buf)))
            buf = []
            raw_start = i + 1
        elif ch == "\\":
            if i + 1 < n:
                if text[i + 1] != "\n":
                    buf.append(text[i + 1])
                i += 1
        else:
            buf.append(ch)
        i += 1
    if raw_start < n:
        out.append((text[raw_start:], "".join(buf)))
    return out


def ref_tokenize(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch.isspace() and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def ref_parse_options_line(line: str) -> tuple[str, list[str]] | None:
    tokens = ref_tokenize(line.strip())
    if len(tokens) < 2 or tokens[0] != "options":
        return None
    return tokens[1], tokens[2:]


# every kind of blank str.isspace knows (tab, vertical tab, form feed, the ASCII separators,
# NEL, no-break and ideographic spaces, line and paragraph separators), quotes, backslashes,
# newlines and the words a modprobe.d file holds
BLANKS = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u2029\u3000"
PIECES = st.sampled_from(["options", "nvidia", "nvme_core", "multipath=N", 'a="x y"', "#",
                          "blacklist", "install", "=", "\\", "\\\n", '"', "é", "\x00", "x",
                          "options nvidia", "\\ ", '\\"'])
TEXT = st.lists(st.one_of(PIECES, st.sampled_from(list(BLANKS))), max_size=40).map("".join)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(TEXT)
def test_logical_lines_same_as_kmods_reading(text: str) -> None:
    assert conf.logical_lines(text) == ref_logical_lines(text)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(TEXT)
def test_tokenize_same_as_the_quote_aware_loop(text: str) -> None:
    assert conf.tokenize(text) == ref_tokenize(text)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(TEXT)
def test_parse_options_line_same_as_before(text: str) -> None:
    for _raw, line in ref_logical_lines(text):
        assert conf.parse_options_line(line) == ref_parse_options_line(line)
    assert conf.parse_options_line(text) == ref_parse_options_line(text)


def test_the_shortcuts_keep_the_edges() -> None:
    """The cases a split() shortcut gets wrong when written carelessly."""
    for text in ("", "\n", "a\n", "a", "a\n\n", "\n\nb", "options\x0bnvidia\x1cx=1\n"):
        assert conf.logical_lines(text) == ref_logical_lines(text)
        assert conf.tokenize(text) == ref_tokenize(text)
    assert conf.parse_options_line("\u3000options nvidia a=1 ") == ("nvidia", ["a=1"])
    assert conf.parse_options_line("optionsnvidia a=1") is None
    assert conf.parse_options_line('"options" nvidia a=1') is None
    assert conf.parse_options_line("options") is None
