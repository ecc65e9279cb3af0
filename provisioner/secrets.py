"""What the provisioner counts as a secret, and the registry of the values it must never show.

A secret reaches the provisioner by a few channels: extra variables (``-e k=v``,
``--extra-var=k=v``, ``-e @file``, ``-e '{"k": "v"}'``) whose names look secret (password,
passwd, passphrase, secret, token, credential, ``*_pass``, ``key``/``*_key``), credentials in URLs
(``scheme://user:PASSWORD@host``, and PostgreSQL's ``?password=`` query parameter) given
by ``--ledger`` or ``$GDSFLEET_LEDGER``, and private key material in error texts.

These are the rules: which names hold a secret (:func:`is_secret_name`,
:func:`is_secret_env`), which values could be one (:func:`looks_secret`), where a secret
stands in a text, a URL or a command line (:func:`secrets_in_text`, :func:`url_password_spans`),
and the registry of values to mask wherever they appear (:func:`register`,
:func:`register_argv`: the command line and environment are scanned once at start-up), with
the values it refuses to mask in free text and why (:func:`free_text_refusal`: a word every
report holds, an identifier the outputs carry, see :mod:`provisioner.identifiers`).
Where the rules are applied (free text, a command line, a document about to be written) is
:mod:`provisioner.redact`, which re-exports this module's public names.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
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


def _name_hides(name: str, sep: str) -> bool:
    # "name: value" is everywhere in messages; only the strong names hide a value after ":"
    return is_secret_name(name) if sep == "=" else _strongly_secret(name)



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


__all__ = [
    "EXTRA_VAR_OPTIONS", "MASK", "MIN_FREE_TEXT", "REDACTED", "REPORT_WORDS", "forget_all",
    "free_text_refusal", "is_secret_env", "is_secret_name", "looks_secret", "refusals",
    "register", "register_argv", "register_mapping", "register_mapping_values", "registered",
    "secrets_in_text", "url_password", "url_password_spans",
]
