"""Why a playbook did not start, in Ansible's own words (issue 47 item 1).

A playbook that ansible-playbook cannot load (a module or action it cannot resolve, such as
``ansible.posix.mount`` when the collection was installed ``--no-deps`` on an offline site; a
missing role; a YAML error) ends before its first play: no host event, no stats, only the
error Ansible printed. That error is what the operator needs, so it is taken from the run's
output and becomes every host's message, the ledger's step detail and the reports' reason:

* ansible-core 2.19: ``[ERROR]: couldn't resolve module/action 'no.such.module'. ...`` then
  ``Origin: FILE:LINE:COLUMN`` and an excerpt of the file;
* ansible-core 2.16 (and the releases before 2.19): ``ERROR! couldn't resolve ...``, then
  ``The error appears to be in 'FILE': line N, column M, but may ...`` and the offending line.

Both as ansible-playbook prints them, coloured (ansible-runner's runs are) or not: captured
in tests/fixtures/ansible-core/start-errors/ (README.md there says how). The text is a
node-independent line of the run's own output; it is still bounded, stripped of its colour
sequences here and escaped by every writer (:mod:`provisioner.sanitize`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# CSI sequences (colours: ESC [ 0;31m ... ESC [ 0m) and other two-byte escapes
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")
_ERROR = re.compile(r"^(?:\[ERROR\]:|ERROR!)\s*")
_ORIGIN = re.compile(r"^Origin:\s*(\S.*)$")
_APPEARS = re.compile(r"^The error appears to be in '(.+)': line (\d+), column (\d+)")
# where Ansible's message ends and its excerpt of the file begins
_EXCERPT = re.compile(r"^(?:\d+\s|The offending line appears|\^ )")
MAX_LEN = 1000
MAX_MORE_LINES = 4


def strip_colour(text: str) -> str:
    return _ANSI.sub("", text)


def ansible_error(lines: Iterable[str]) -> str | None:
    """Ansible's error from a run's output lines: the ``[ERROR]:``/``ERROR!`` line, the few
    lines that continue it (a YAML error's reasons) and where it is (``Origin: FILE:L:C``),
    on one line of at most :data:`MAX_LEN` characters; None when the output holds none."""
    clean = [strip_colour(ln).strip() for ln in lines]
    for i, line in enumerate(clean):
        m = _ERROR.match(line)
        if not m:
            continue
        parts = [line]
        origin = None
        for nxt in clean[i + 1:i + 16]:
            found = _ORIGIN.match(nxt)
            appears = _APPEARS.match(nxt)
            if found:
                origin = found.group(1)
                break
            if appears:
                origin = f"{appears.group(1)}:{appears.group(2)}:{appears.group(3)}"
                break
            if _EXCERPT.match(nxt) or _ERROR.match(nxt):
                break
            if nxt and len(parts) <= MAX_MORE_LINES:
                parts.append(nxt)
        text = " ".join(" ".join(parts).split())
        if origin:
            text += f" (Origin: {origin})"
        return text[:MAX_LEN]
    return None


# a run ended before its first event by the rollout itself (its deadline, a cancel): not a
# playbook Ansible could not load, so its hosts fail as any cut run's do, never "not started"
STOPPED = frozenset({"timeout", "canceled"})


def stopped_before_start(status: str) -> bool:
    return status in STOPPED


def did_not_start(lines: Iterable[str], status: str, rc: int | None, where: str = "") -> str:
    """The message of every host of a run that never began: Ansible's error when it printed
    one, else the run's last lines (colour stripped)."""
    kept = list(lines)
    found = ansible_error(kept)
    if found is None:
        tail = " | ".join(s for s in (strip_colour(x).strip() for x in kept[-8:]) if s)
        found = tail[-MAX_LEN:] or f"ansible-playbook exited {rc} ({status})"
    if stopped_before_start(status):
        return f"the playbook did not run{where} ({status} before its first play, rc={rc})"
    return f"the playbook did not start{where}: {found}"


__all__ = ["MAX_LEN", "STOPPED", "ansible_error", "did_not_start", "stopped_before_start",
           "strip_colour"]
