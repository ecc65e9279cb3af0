# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How cufile.json is read: the one copy of its comment stripping.

NVIDIA ships cufile.json as JSON with ``//`` and ``/* */`` comments and trailing commas. Three
readers need the same reading: the collection's filters (``plugins/filter/cufile.py``),
``provisioner verify`` (``provisioner/verify/parsers/cufile.py``, through the wheel's
build-time copy, setup.py) and the node-side I/O test (``provisioner/remote/iotest.py``, which
gets this file's source bundled in at send time, provisioner/remote/bundle.py).

- ``strip_comments(text)``: the text without ``//`` and ``/* */`` comments outside strings and
  without the trailing comma before a ``}`` or ``]`` outside strings; a block comment leaves
  its newlines, so ``json.loads`` reports the line of the original file.

Pure Python, standard library only, Python 3.8+ (it runs on the node too).
"""

from __future__ import annotations

__all__ = ["strip_comments"]


def strip_comments(text):
    """Remove // and /* */ comments outside strings, and trailing commas before } or ].

    One pass, walking the text as a tokenizer does: ``//`` inside a string (a path, a URL) is
    kept, an escaped quote does not end a string, and a closing } or ] outside a string drops
    the comma that precedes it (across whitespace and removed comments)."""
    out = []
    i = 0
    n = len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            # keep line numbers stable for error messages
            chunk = text[i: (n if j < 0 else j + 2)]
            out.append("\n" * chunk.count("\n"))
            i = n if j < 0 else j + 2
            continue
        if c in "}]":
            k = len(out) - 1
            while k >= 0 and (not out[k] or out[k].isspace()):
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
        out.append(c)
        i += 1
    return "".join(out)
