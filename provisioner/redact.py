"""Where the secret rules apply: everything the provisioner writes or prints goes through here.

A secret reaches the provisioner by a few channels: extra variables (``-e k=v``,
``--extra-var=k=v``, ``-e @file``, ``-e '{"k": "v"}'``) whose names look secret (password,
passwd, passphrase, secret, token, credential, ``*_pass``, ``key``/``*_key``), credentials in URLs
(``scheme://user:PASSWORD@host``, and PostgreSQL's ``?password=`` query parameter) given
by ``--ledger`` or ``$GDSFLEET_LEDGER``, and private key material in error texts.

* :func:`redact_text` masks all of those in free text (error messages, tracebacks, report
  fields), and every value registered with :func:`register` (see :func:`register_argv`: the
  command line and environment are scanned once at start-up, so a secret is masked even where
  no pattern would recognise it, e.g. quoted back by a database driver's error).
* :func:`redact_argv` masks a command line, option by option.
* :func:`redact_mapping` masks a JSON-like document (ledger run arguments, reports): values of
  secret-named keys become ``<redacted>``, strings go through :func:`redact_text`.
* :func:`display_url` is a URL or path fit to print.

What counts as a secret, and the registry of registered values, are :mod:`provisioner.secrets`
(its public names are importable from here too); this module applies them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from provisioner.secrets import (  # noqa: F401 - the registry's names, importable from here too
    _KV_NAME,
    _KV_VALUE,
    _NOT_SECRET_VALUES,
    _PEM,
    _QUERY,
    EXTRA_VAR_OPTIONS,
    MASK,
    MIN_FREE_TEXT,
    REDACTED,
    REPORT_WORDS,
    _name_hides,
    _parse_extra,
    forget_all,
    free_text_refusal,
    is_secret_env,
    is_secret_name,
    looks_secret,
    refusals,
    register,
    register_argv,
    register_mapping,
    register_mapping_values,
    registered,
    secrets_in_text,
    url_password,
    url_password_spans,
)


def mask_spans(text: str, spans: Sequence[tuple[int, int]], mask: str = MASK) -> str:
    """``text`` with each (start, end) span replaced by ``mask`` (spans sorted, disjoint)."""
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for a, b in spans:
        out.append(text[pos:a])
        out.append(mask)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def mask_url_password(value: str) -> str:
    """A whole value (an argument, a recorded option) with its URL password masked, as
    ``urllib.parse`` delimits it: a password holding ``'`` or a blank is masked whole."""
    if "://" not in value:
        return value
    try:
        netloc = urlsplit(value.strip()).netloc
    except ValueError:
        return value
    userinfo, at, _host = netloc.rpartition("@")
    user, colon, raw = userinfo.partition(":")
    if not at or not colon or not raw:
        return value
    return value.replace(f"{userinfo}@", f"{user}:{MASK}@", 1)



# ------------------------------------------------------------------------------ text
def redact_known(text: str, *, keep: Collection[str] = ()) -> str:
    """``text`` with registered values, private keys and URL passwords masked: safe on a
    serialized document (JSON, XML), whose structure it keeps. A registered value whose
    lower case is in ``keep`` (the keys of the document ``text`` is from) is left alone."""
    if not text:
        return text
    for value in sorted(registered(), key=len, reverse=True):
        if value in text and value.lower() not in keep:
            text = text.replace(value, MASK)
    text = _PEM.sub("[REDACTED PRIVATE KEY]", text)
    text = mask_spans(text, url_password_spans(text))
    return _QUERY.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if is_secret_name(m.group(2))
        else m.group(0), text)


def redact_text(text: str) -> str:
    """``text`` with private keys, URL passwords, secret ``name=value`` pairs and registered
    values masked (messages, log lines, command-line words)."""
    if not text:
        return text
    text = redact_known(text)
    out: list[str] = []
    pos = 0
    while True:
        m = _KV_NAME.search(text, pos)
        if not m:
            break
        v = _KV_VALUE.match(text, m.end()) if _name_hides(m.group(2), m.group(4)) else None
        if v and not v.group(0).startswith((MASK, REDACTED)):
            out.append(text[pos:m.end()] + MASK)
            pos = v.end()
        else:
            out.append(text[pos:m.end()])
            pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def display_url(url_or_path: str) -> str:
    """A ledger path or URL fit to print: the password and ``password=`` masked."""
    return redact_text(mask_url_password(str(url_or_path)))


# ------------------------------------------------------------------------------ argv
def _redact_extra(value: str) -> str:
    v = value.strip()
    if v.startswith("@"):
        return redact_text(value)  # a file: its path is not a secret
    doc = _parse_extra(v)
    if isinstance(doc, (Mapping, list)) and v[:1] in "{[":
        return json.dumps(redact_mapping(doc), separators=(",", ":"))
    if isinstance(doc, Mapping):
        return " ".join(f"{k}={REDACTED}" if is_secret_name(str(k)) else
                        f"{k}={redact_text(str(x))}" for k, x in doc.items())
    return redact_text(value)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with every secret masked, option by option."""
    out: list[str] = []
    pending: str | None = None
    for arg in argv:
        if pending == "extra":
            out.append(_redact_extra(arg))
            pending = None
            continue
        if pending == "secret-option":
            out.append(REDACTED)
            pending = None
            continue
        if arg in EXTRA_VAR_OPTIONS:
            out.append(arg)
            pending = "extra"
            continue
        opt, eq, val = arg.partition("=")
        if eq and opt in EXTRA_VAR_OPTIONS[1:]:
            out.append(f"{opt}={_redact_extra(val)}")
            continue
        if arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            out.append("-e" + _redact_extra(arg[2:]))
            continue
        if arg.startswith("--") and is_secret_name(opt[2:]):
            if eq:
                out.append(f"{opt}={REDACTED}")
            else:
                out.append(arg)
                pending = "secret-option"
            continue
        if eq and "://" in val:
            out.append(f"{opt}={redact_text(mask_url_password(val))}")
            continue
        out.append(redact_text(mask_url_password(arg)))
    return out


# ------------------------------------------------------------------------------ mappings
def redact_mapping(doc: Any) -> Any:
    """A copy of a JSON-like document with secret-named values ``<redacted>`` and every
    string through :func:`redact_text` (``argv``/``extra_var`` lists through
    :func:`redact_argv` semantics)."""
    if isinstance(doc, Mapping):
        out: dict[Any, Any] = {}
        for k, v in doc.items():
            if is_secret_name(str(k)) and isinstance(v, (str, Mapping, list)) and v \
                    and not (isinstance(v, str) and v.strip().lower() in _NOT_SECRET_VALUES):
                # numbers and flags ("pass": 3, "..._token": "false") are not secrets
                out[k] = REDACTED
            elif str(k) in ("extra_var", "extra_vars", "extravars") and isinstance(v, list):
                out[k] = [_redact_extra(x) if isinstance(x, str) else redact_mapping(x)
                          for x in v]
            elif str(k) == "argv" and isinstance(v, list) and all(isinstance(x, str) for x in v):
                out[k] = redact_argv(v)
            else:
                out[k] = redact_mapping(v)
        return out
    if isinstance(doc, list):
        return [redact_mapping(x) for x in doc]
    if isinstance(doc, tuple):
        return tuple(redact_mapping(x) for x in doc)
    if isinstance(doc, str):
        return redact_text(mask_url_password(doc))
    return doc


# ------------------------------------------------------------------------------ documents
# How deep a report document may nest: a node's document nested 700 levels (a hostile
# nvme_topology output) made the JUnit and HTML writers exit 70 (RecursionError) after the
# ledger and the JSON report were written. Below this depth a value is replaced by a note.
MAX_DEPTH = 64
# integers a report keeps: any larger (a node's 10**400) becomes null, since no float holds it
BIG = 10 ** 300
# fields whose value is one of a few words (a check's status, a node's route, the I/O test's
# path, a rollout step): never masked when it is one of them
ENUM_FIELDS = frozenset({"status", "route", "path_taken", "io_path", "kind", "step", "failure",
                         "result"})


def mask_whole(value: str) -> str:
    """The value of a secret-named field: ``<redacted>`` unless empty or a flag."""
    v = value.strip()
    return REDACTED if v and v.lower() not in _NOT_SECRET_VALUES else value


def too_deep() -> str:
    return f"[gdsfleet: nested deeper than {MAX_DEPTH} levels; cut]"


def field_kind(key: str) -> str:
    """How a report field's string value is masked: ``secret`` (whole: a secret-named
    field), ``enum`` (kept when it is one of its words) or ``text`` (secrets in it masked)."""
    if key in ENUM_FIELDS:
        return "enum"
    if is_secret_name(key):
        return "secret"
    return "text"


def document_keys(doc: Any) -> frozenset[str]:
    """The registered values that are keys of ``doc`` (lower case): a secret spelled like a
    key of the report is not masked in that report's text (it would rewrite the report's own
    words; :func:`free_text_refusal` refuses the usual ones up front). Iterative, bounded by
    ``MAX_DEPTH``."""
    values = {v.lower() for v in registered()}
    if not values:
        return frozenset()
    found: set[str] = set()
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            continue
        if isinstance(node, Mapping):
            for k, v in node.items():
                if isinstance(k, str) and k.lower() in values:
                    found.add(k.lower())
                if isinstance(v, Mapping | list | tuple):
                    stack.append((v, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((x, depth + 1) for x in node if isinstance(x, Mapping | list | tuple))
    return frozenset(found)


def redact_document(doc: Any) -> Any:
    """A copy of a report document made safe to serialize: every string value through
    :func:`redact_known` (a secret spelled like one of the document's keys excepted), the
    whole value of a secret-named field ``<redacted>``, keys, numbers, booleans and the
    words of enumerated fields (``ENUM_FIELDS``) never altered (``PGPASSWORD=fail`` once
    turned every failed check into ``***`` and JUnit's failures into 0), nesting cut at
    ``MAX_DEPTH``, NaN and infinities null. JSON, XML and HTML keep their structure
    whatever was registered."""
    keep = document_keys(doc)

    def walk(node: Any, depth: int, key: Any = None) -> Any:
        if isinstance(node, Mapping | list | tuple) and depth > MAX_DEPTH:
            return too_deep()
        if isinstance(node, Mapping):
            return {k: walk(v, depth + 1, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(x, depth + 1) for x in node]
        if isinstance(node, tuple):
            return tuple(walk(x, depth + 1) for x in node)
        if isinstance(node, str):
            kind = field_kind(key) if isinstance(key, str) else "text"
            if kind == "secret":
                return mask_whole(node)
            if kind == "enum" and node.strip().lower() in REPORT_WORDS:
                return node
            return redact_known(node, keep=keep)
        if isinstance(node, float) and not math.isfinite(node):
            return None  # NaN and infinities: null (strict JSON parsers refuse them)
        if type(node) is int and not -BIG < node < BIG:
            return None  # a node's 10**400: no float holds it, no writer could show it
        return node

    return walk(doc, 0)


__all__ = [
    "BIG", "ENUM_FIELDS", "MASK", "MAX_DEPTH", "MIN_FREE_TEXT", "REDACTED", "REPORT_WORDS",
    "document_keys", "field_kind", "mask_whole", "free_text_refusal", "refusals",
    "too_deep", "display_url", "forget_all", "is_secret_env", "is_secret_name",
    "looks_secret", "mask_spans", "mask_url_password", "redact_argv", "redact_document",
    "redact_known", "redact_mapping", "redact_text", "register", "register_argv",
    "register_mapping", "registered", "url_password", "url_password_spans"
]
