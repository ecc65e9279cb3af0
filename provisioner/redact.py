"""One place that keeps secrets out of everything the provisioner writes or prints.

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

One piece: the registry of secrets, the linear scans that find them in text and the walk
that masks them in documents share one registry and one rule for what may be masked (keys,
enumerated words and numbers never); split, a writer could take one half without the other.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

REDACTED = "<redacted>"  # a whole value hidden by its name (mappings, extra vars)
MASK = "***"  # a value hidden inside free text

# the extra-var options of `provisioner rollout` and of ansible-playbook
EXTRA_VAR_OPTIONS = ("-e", "--extra-var", "--extra-vars")

# "token" and "secret" as words (not TOKENIZERS_PARALLELISM, not secretary)
_STRONG = re.compile(
    r"pass(?:word|wd|phrase)|secret(?![a-z])|token(?![a-z])|credential|(?:^|[_\-.])pass$|"
    r"^pass(?:$|[_\-.])",
    re.IGNORECASE,
)
# a name about a secret, not holding one: a switch (HF_HUB_DISABLE_TOKEN, ...NO_PASSWORD) or a
# setting named by its last word (ANSIBLE_HOST_KEY_CHECKING, TOKEN_TTL, SSH_KEY_TYPE)
_SETTING = re.compile(
    r"(?:^|[_\-.])(?:disable|disabled|enable|enabled|no|use|skip|allow|require|ask)[_\-.]|"
    r"[_\-.](?:checking|check|checks|parallelism|policy|algorithms?|bits|length|ttl|timeout|"
    r"lifetime|expiry|count|mode|format|required|enabled|disabled|prompt)$",
    re.IGNORECASE,
)
_KEYISH = re.compile(r"(?:^|[_\-.])(?:api|access|private|secret|ssh|auth|signing|encryption|"
                     r"client|license)?[_\-.]?key(?:$|[_\-.])|apikey", re.IGNORECASE)
# a key-ish name that names where a key is, not the key itself
_KEY_LOCATION = re.compile(r"[_\-.](?:url|path|file|dir|id|name|type|size|server|host|"
                           r"fingerprint)$", re.IGNORECASE)

_PEM = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(-----END \1PRIVATE KEY-----|\Z)", re.S
)
# a parameter's value ends at the next parameter, a blank, a quote, or punctuation closing
# the sentence it is quoted in ("...?password=x: read failed")
_QUERY = re.compile(r"([?&;])([A-Za-z_][A-Za-z0-9_.\-]*)=([^&\s#'\"]*?)"
                    r"(?=$|[&\s#'\"]|[:,;.)](?:\s|$))")
_KV_NAME = re.compile(
    r"(?<![A-Za-z0-9_.\-])([\"']?)([A-Za-z_][A-Za-z0-9_.\-]*)\1(\s*)([=:])(\s*)"
)
_KV_VALUE = re.compile(r"\"[^\"]*\"|'[^']*'|[^\s,;&'\"]+")

_VALUES: set[str] = set()
_VALUES_LOCK = threading.Lock()
_MIN_REGISTERED = 4  # shorter values are not secrets at all (a flag, a count)
# A registered value is masked wherever it appears in free text, so a short one or a word a
# report is made of would mask report words: PGPASSWORD=fail once turned every check status
# "fail" into "***" (0 JUnit failures on a NOT COMPLIANT node), PGPASSWORD=node renamed the
# JSON key "nodes". Such a value is refused for free text (:func:`refusals` says why, the
# CLI prints it); secret-named fields and URL passwords are still masked whole.
MIN_FREE_TEXT = 6
# the words every report is made of: check statuses, node results, routes, I/O paths, rollout
# steps and the report's own top-level keys (provisioner.verify.model, provisioner.reports)
REPORT_WORDS = frozenset({
    "pass", "warn", "skip", "fail", "passed", "failed", "skipped", "warning", "error",
    "errors", "compliant", "not compliant", "not_compliant", "unreachable", "reachable",
    "nvfs", "p2pdma", "compat", "none", "unknown", "direct", "nodes", "node", "checks",
    "check", "status", "summary", "total", "routes", "route", "paths", "path", "exit_code",
    "io_test", "gdsio", "gdscheck", "facts", "raw", "policy", "ledger", "fleet", "run_id",
    "kind", "verify", "rollout", "schema_version", "started_at", "finished_at",
    "generated_at", "message", "expected", "observed", "evidence", "drift", "interrupted",
    "running", "pending", "provisioned", "verified", "rebooted", "waves", "wave", "step",
    "reason", "failure", "name", "duration_s", "path_taken", "internal_error", "test",
    "testsuite", "testsuites", "testcase", "properties", "property", "system-out",
    "gdsfleet",
})
_REFUSED: list[tuple[str, str]] = []
_IDENTIFIERS: set[str] = set()  # never masked, nor anything inside them (identifiers.py)
_ORIGIN: dict[str, tuple[str, str | None]] = {}  # registered form -> (value, its source)
# settings, never secrets, whatever the variable is called (TOKENIZERS_PARALLELISM=false,
# HF_HUB_DISABLE_TOKEN=1, ANSIBLE_HOST_KEY_CHECKING=False): masking them would hide every
# "false" of a report
_NOT_SECRET_VALUES = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "unset", "enabled",
     "disabled", "enable", "disable", "auto", "default", "required", "optional", "ignore",
     "accept-new", "ask"})
# an environment variable holds a secret when its name ends in one of these words
# (PGPASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, VAULT_PASS) and its value looks like one;
# a word in the middle names a setting about the secret (ANSIBLE_HOST_KEY_CHECKING,
# HF_HUB_DISABLE_TOKEN), and a prefix in _PUBLIC_KEY names a key that is public by definition
# (the Python images' GPG_KEY is a release manager's OpenPGP fingerprint)
_ENV_SECRET_SUFFIX = re.compile(
    r"(?:pass(?:word|wd|phrase)|secret|token|credentials?|(?:^|_)pass|_pwd?|"
    r"(?:^|_)(?:api|access|private|secret|ssh|auth|signing|encryption|client|license)?_?key"
    r"|apikey)\Z", re.IGNORECASE)
_PUBLIC_KEY = re.compile(r"(?:^|_)(?:gpg|pgp|gnupg|public|pub|host)(?:_|\Z)", re.IGNORECASE)

# URL userinfo, as ``scheme://user:PASSWORD@`` (the scheme a letter then letters, digits,
# "+", ".", "-"): found by a scan (str.find plus one pass per run) instead of an unanchored
# regex, which backtracked quadratically over a long run of letters (100,000 characters of
# SSH banner took 11 s, holding the GIL and with it Ctrl-C)
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_USER_STOP = re.compile(r"[/\s:@'\"]")
_PW_STOP = re.compile(r"[@\s'\"]")


def url_password_spans(text: str, *, user_stop: re.Pattern[str] = _USER_STOP,
                       pw_stop: re.Pattern[str] = _PW_STOP, min_user: int = 0,
                       ) -> list[tuple[int, int]]:
    """(start, end) of every password in ``scheme://user:PASSWORD@`` in ``text``: the spans
    a leftmost-longest regex would find, in linear time (each character is looked at a
    bounded number of times, whatever the text)."""
    spans: list[tuple[int, int]] = []
    n = len(text)
    floor = 0  # a match never starts inside the previous one
    pw_stop_at = -1  # cache: the first password terminator at or after the last lookup
    pos = text.find("://")
    while pos != -1:
        i = pos
        while i > floor and text[i - 1] in _SCHEME_CHARS:
            i -= 1
        has_letter = any(c.isascii() and c.isalpha() for c in text[i:pos])
        user_start = pos + 3
        m = user_stop.search(text, user_start)
        user_end = m.start() if m else n
        if has_letter and user_end - user_start >= min_user and user_end < n \
                and text[user_end] == ":":
            pw_start = user_end + 1
            if pw_stop_at < pw_start:
                m = pw_stop.search(text, pw_start)
                pw_stop_at = m.start() if m else n
            if pw_stop_at < n and text[pw_stop_at] == "@":
                spans.append((pw_start, pw_stop_at))
                floor = pw_stop_at + 1
                pos = text.find("://", floor)
                continue
        pos = text.find("://", pos + 1)
    return spans


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


def url_password(value: str) -> str | None:
    """The password of a URL as ``urllib.parse`` reads it (quotes, blanks and all), or None."""
    if "://" not in value:
        return None
    try:
        parts = urlsplit(value.strip())
        pw = parts.password
    except ValueError:
        return None
    if not pw:
        return None
    return str(pw)


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


def looks_secret(value: str) -> bool:
    """Could ``value`` be a secret? Not a flag, a number or a word shorter than 4."""
    v = value.strip()
    if len(v) < _MIN_REGISTERED or v.lower() in _NOT_SECRET_VALUES:
        return False
    try:
        float(v)
    except ValueError:
        return True
    return len(v) >= 8  # a long number can be a PIN or an account key; a short one is a count


def is_secret_env(name: str, value: str) -> bool:
    """An environment variable that holds a secret: a secret word ends its name (not a
    location: ``*_FILE``, ``*_PATH``...; not a public key: ``GPG_KEY``) and its value looks
    like a secret (never ``true``/``false``/``0``/``1``)."""
    if not _ENV_SECRET_SUFFIX.search(name) or _KEY_LOCATION.search(name) \
            or _SETTING.search(name):
        return False
    if name.upper().endswith("KEY") and _PUBLIC_KEY.search(name):
        return False
    return looks_secret(value)


def is_secret_name(name: str) -> bool:
    """True for a variable, option or parameter name that holds a secret."""
    n = name.strip().strip("\"'").lstrip("-")
    if not n:
        return False
    if _SETTING.search(n):
        return False
    if _STRONG.search(n):
        return True
    return bool(_KEYISH.search(n)) and not _KEY_LOCATION.search(n)


def _strongly_secret(name: str) -> bool:
    n = name.strip().strip("\"'")
    return bool(_STRONG.search(n)) and not _SETTING.search(n)


# ------------------------------------------------------------------------------ registry
def free_text_refusal(value: str) -> str | None:
    """Why ``value`` cannot be masked safely in free text (too short, or a word every
    report holds), or None when it can."""
    v = value.strip()
    if len(v) < MIN_FREE_TEXT:
        return (f"it is too short ({len(v)} characters; {MIN_FREE_TEXT} or more can be "
                f"masked in free text without masking ordinary words)")
    if v.lower() in REPORT_WORDS or v.lower() in _NOT_SECRET_VALUES:
        return "it is a word every report is made of (a key, a status or a verdict)"
    if any(v.lower() in n for n in _IDENTIFIERS):
        return "it is an identifier the outputs carry (a check id, a node or label name)"
    return None


def register(value: Any, source: str | None = None) -> None:
    """Mask ``value`` (and its URL-encoded forms) wherever :func:`redact_text` sees it.

    A value :func:`free_text_refusal` refuses is not registered; the refusal, naming
    ``source`` (a variable or option, never the value), is kept for :func:`refusals`."""
    if not isinstance(value, str) or len(value) < _MIN_REGISTERED \
            or value.strip().lower() in _NOT_SECRET_VALUES:
        return  # a flag is never masked: it would hide every "false" of a report
    reason = free_text_refusal(value)
    if reason is not None:
        with _VALUES_LOCK:
            entry = (source or "a secret", reason)
            if entry not in _REFUSED:
                _REFUSED.append(entry)
        return
    forms = [value, unquote(value)]
    # the URL-encoded forms of the bytes the value stands for: an environment value that is
    # not UTF-8 holds lone surrogates (os.environ's surrogateescape), which UTF-8 cannot
    # encode; quote() raised UnicodeEncodeError and every command died at start-up
    for errors in ("strict", "surrogateescape"):
        try:
            forms += [quote(value, safe="", errors=errors),
                      quote_plus(value, safe="", errors=errors)]
            break
        except UnicodeEncodeError:
            continue
    with _VALUES_LOCK:
        for v in forms:
            if len(v) >= _MIN_REGISTERED:
                _VALUES.add(v)
                _ORIGIN.setdefault(v, (value, source))


def registered() -> frozenset[str]:
    with _VALUES_LOCK:
        return frozenset(_VALUES)


def refusals() -> list[tuple[str, str]]:
    """(source, reason) of each secret :func:`register` refused to mask in free text."""
    with _VALUES_LOCK:
        return list(_REFUSED)


def forget_all() -> None:
    """Empty the registry (tests)."""
    with _VALUES_LOCK:
        for registry in (_VALUES, _REFUSED, _IDENTIFIERS, _ORIGIN):
            registry.clear()


def secrets_in_text(text: str) -> list[str]:
    """The secret values :func:`redact_text` would mask by pattern in ``text``."""
    found = [text[a:b] for a, b in url_password_spans(text)]
    found += [unquote_plus(m.group(3)) for m in _QUERY.finditer(text) if is_secret_name(m.group(2))]
    pos = 0
    while True:
        m = _KV_NAME.search(text, pos)
        if not m:
            break
        pos = m.end()
        # the name first: matching the value of every "word:" would rescan the text's
        # rest from each of them (quadratic in a long run of "a:b:c:...")
        if not _name_hides(m.group(2), m.group(4)):
            continue
        v = _KV_VALUE.match(text, m.end())
        if v:
            found.append(v.group(0).strip("\"'"))
            pos = v.end()
    return [f for f in found if f]


def register_mapping(doc: Any) -> None:
    """Register the values of secret-named keys in a nested mapping (extra-vars files)."""
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            if is_secret_name(str(k)):
                if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                    register(str(v), f"the extra variable {str(k)[:64]}")
                else:
                    register_mapping_values(v, f"the extra variable {str(k)[:64]}")
            else:
                register_mapping(v)
    elif isinstance(doc, (list, tuple)):
        for item in doc:
            register_mapping(item)
    elif isinstance(doc, str):
        for s in secrets_in_text(doc):
            register(s, "a secret on the command line")


def register_mapping_values(doc: Any, source: str | None = None) -> None:
    if isinstance(doc, Mapping):
        for v in doc.values():
            register_mapping_values(v, source)
    elif isinstance(doc, (list, tuple)):
        for item in doc:
            register_mapping_values(item, source)
    elif isinstance(doc, (str, int, float)) and not isinstance(doc, bool):
        register(str(doc), source)


def register_argv(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> None:
    """Register the secrets of a command line (extra vars, URL passwords, ``--*-password``
    options) and of the environment (secret-named variables, URL passwords in values)."""
    for _kind, value in _walk_argv(argv):
        if value is None:
            continue
        for s in secrets_in_text(value):
            register(s, "a secret on the command line")
        register(url_password(value), "a URL password on the command line")
        if _kind == "extra":
            register_mapping(_parse_extra(value))
        elif _kind == "secret-option":
            register(value, "a secret option on the command line")
    for k, v in (environ or {}).items():
        name = f"${k[:64]}"
        if is_secret_env(k, v):
            register(v, name)
        if "://" in v:
            for s in secrets_in_text(v):
                register(s, name)
            register(url_password(v), f"the URL password in {name}")


# ------------------------------------------------------------------------------ text
def _name_hides(name: str, sep: str) -> bool:
    # "name: value" is everywhere in messages; only the strong names hide a value after ":"
    return is_secret_name(name) if sep == "=" else _strongly_secret(name)


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
def _parse_extra(value: str) -> Any:
    """An extra-var argument as ansible reads it: JSON/YAML, or ``k=v k2=v2``; ``@file``
    is a path (returned as is)."""
    v = value.strip()
    if v.startswith("@"):
        return None
    if v[:1] in "{[":
        try:
            return json.loads(v)
        except ValueError:
            try:
                import yaml

                return yaml.safe_load(v)
            except Exception:  # noqa: BLE001 - not YAML either: treat as text
                return v
    import shlex

    try:
        words = shlex.split(v)
    except ValueError:
        words = v.split()
    out: dict[str, str] = {}
    for w in words:
        k, sep, val = w.partition("=")
        if sep:
            out[k] = val
    return out or v


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


def _walk_argv(argv: Sequence[str]) -> Iterable[tuple[str, str | None]]:
    """(kind, value) per argument: kind is 'extra', 'secret-option' or 'plain'."""
    pending: str | None = None
    for arg in argv:
        if pending is not None:
            yield pending, arg
            pending = None
            continue
        if arg in EXTRA_VAR_OPTIONS:
            pending = "extra"
            yield "plain", None
            continue
        opt, eq, val = arg.partition("=")
        if eq and opt in EXTRA_VAR_OPTIONS[1:]:
            yield "extra", val
            continue
        if arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            yield "extra", arg[2:]
            continue
        if arg.startswith("--") and is_secret_name(opt[2:]):
            if eq:
                yield "secret-option", val
            else:
                pending = "secret-option"
                yield "plain", None
            continue
        yield "plain", arg


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
