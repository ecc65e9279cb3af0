"""One line per node that a rollout did not bring to compliance: what failed, where, and what
to do (issue 30 item 3), as ``verify`` words a node.

The reason comes from a node or a playbook (hostile text): it is kept to one line and escaped
by the caller (``provisioner.sanitize.printable``); nothing of it is ever run.
"""

from __future__ import annotations

import re
from typing import Any

# what ssh/Ansible says, and what the operator does about it
_UNREACHABLE_FIXES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"could not resolve hostname|name or service not known|nodename nor servname"
                r"|temporary failure in name resolution", re.I),
     "its host name does not resolve",
     "fix ansible_host (or the name) in the inventory, or DNS"),
    (re.compile(r"connect(ion)? refused", re.I),
     "SSH connection refused",
     "start sshd on the node, or fix ansible_port in the inventory"),
    (re.compile(r"timed out|no route to host|network is unreachable", re.I),
     "SSH timed out",
     "check the address in the inventory and that the node is up and reachable"),
    (re.compile(r"permission denied|authentication", re.I),
     "SSH login refused",
     "check ansible_user and the SSH key (ssh -v to the node says which)"),
    (re.compile(r"host key", re.I),
     "its SSH host key is unknown or changed",
     "check the host key and add it to known_hosts"),
)

_AGAIN = "then run the same command again (it resumes)"


def _strip_prefix(reason: str, *words: str) -> str:
    """``unreachable: unreachable: x`` -> ``x``: the status word is said once, by us."""
    text = reason.strip()
    changed = True
    while changed:
        changed = False
        for w in words:
            if text.lower().startswith(w + ":"):
                text = text[len(w) + 1:].strip()
                changed = True
    return text


def short_reason(failure: str | None, reason: str) -> str:
    """The table cell: the failure kind and the node's reason, the kind said once."""
    rest = _strip_prefix(reason, *(w for w in (failure or "", "failed", "unreachable") if w))
    return f"{failure}: {rest}" if failure and rest else (failure or rest)


def explain(name: str, failure: str | None, reason: str, step: str = "",
            inventory: str | None = None) -> str:
    """``NODE: what failed, where; what to do`` on one line."""
    limit = f" --limit {name}"
    inv = f" -i {inventory}" if inventory else ""
    where = ""
    m = re.search(r"task '([^']*)'", reason)
    if m:
        where = f" in task '{m.group(1)}'"
    detail = _strip_prefix(reason, "unreachable", "failed")
    if m:
        detail = detail.replace(m.group(0) + ":", "").strip()
    if failure == "unreachable":
        for pattern, what, fix in _UNREACHABLE_FIXES:
            if pattern.search(reason):
                return f"{name}: unreachable{where}: {what} ({detail}); {fix}, {_AGAIN}"
        return (f"{name}: unreachable{where}: {detail or 'no answer over SSH'}; check the "
                f"node's address and SSH access, {_AGAIN}")
    if reason.startswith("verification:"):
        checks = _strip_prefix(reason[len("verification:"):], "not compliant")
        return (f"{name}: provisioned, but not compliant ({checks}); `provisioner verify{inv}"
                f"{limit} --details` says what each check needs, {_AGAIN}")
    if failure == "not_started":
        return (f"{name}: {detail or 'the playbook did not start'}; nothing ran on it: fix "
                f"the playbook, or install the collection or role Ansible names (`ansible-galaxy "
                f"collection install ansible.posix community.general` for gdsfleet.gds's own), "
                f"then run the same command again")
    if failure == "drain":
        return f"{name}: not drained ({detail}); drain it or fix --drain-cmd, {_AGAIN}"
    if step == "reboot_pending":
        return (f"{name}: waits for a reboot; pass --allow-reboot (or reboot it yourself), "
                f"{_AGAIN}")
    return (f"{name}: failed{where}: {detail or 'no message'}; the playbook's log for this "
            f"node says more (runner/events.jsonl beside the ledger), fix it, {_AGAIN}")


def explain_nodes(nodes: Any, inventory: str | None = None) -> list[str]:
    """The lines for every node of a result that failed or waits (NodeResult-like objects);
    the nodes a playbook that did not start left alike share one line (Ansible's error is the
    run's, not a node's: it was said once per node before, 8 times on 8 nodes)."""
    out: list[str] = []
    alike: dict[str, list[str]] = {}
    for n in nodes:
        if n.failure == "not_started":
            alike.setdefault(n.reason, []).append(n.name)
        elif n.failure or n.step == "reboot_pending":
            out.append(explain(n.name, n.failure, n.reason, n.step, inventory))
    for reason, names in alike.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        out.insert(0, explain(shown, "not_started", reason, "failed", inventory))
    return out
