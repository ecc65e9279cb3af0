"""The kernel gate's state file (/var/lib/gdsfleet/kernel-gate.json, written by
plugins/module_utils/kernel_boot.py for kernel_gate.py) and the GRUB settings that say which
entry boots next. Node bytes: sizes, types and counts are bounded; anything else is dropped."""

from __future__ import annotations

import json
import re
from typing import Any

from provisioner import collection_utils

MAX_KERNELS = 32
MAX_TEXT = 2000
_KERNEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}\Z")  # \Z: "$" lets "K\n" in


def _s(value: Any, limit: int = MAX_TEXT) -> str:
    return value[:limit] if isinstance(value, str) else ""


def parse_state(text: str | None) -> dict[str, Any]:
    """{present, error, running, next_boot, kernels: {release: {passed, deferred, reason, fix,
    checked_at, actions}}}."""
    out: dict[str, Any] = {"present": bool(text and text.strip()), "error": None,
                           "running": None, "next_boot": None, "kernels": {}}
    if not out["present"]:
        return out
    try:
        doc = json.loads(text or "")
    except ValueError as exc:
        out["error"] = f"not JSON: {exc}"[:200]
        return out
    if not isinstance(doc, dict) or doc.get("gdsfleet_kernel_gate") != 1:
        out["error"] = "not a gdsfleet kernel gate state (gdsfleet_kernel_gate: 1)"
        return out
    for key in ("running", "next_boot"):
        v = _s(doc.get(key), 128)
        out[key] = v if _KERNEL_RE.match(v) else None
    kernels = doc.get("kernels")
    if isinstance(kernels, dict):
        for release, r in list(kernels.items())[:MAX_KERNELS]:
            if not isinstance(release, str) or not _KERNEL_RE.match(release) \
                    or not isinstance(r, dict) or not isinstance(r.get("passed"), bool):
                continue
            raw = r.get("actions")
            actions: list[Any] = raw if isinstance(raw, list) else []
            out["kernels"][release] = {
                "passed": r["passed"], "deferred": r.get("deferred") is True,
                "reason": _s(r.get("reason")), "fix": _s(r.get("fix")),
                "checked_at": _s(r.get("checked_at"), 40),
                "actions": [{"action": _s(a.get("action"), 40), "ok": a.get("ok") is True,
                             "detail": _s(a.get("detail"), 500)}
                            for a in actions[:8] if isinstance(a, dict)],
            }
    return out


# One reading of GRUB's settings, shared with the gate itself (plugins/module_utils/kernel_boot.py)
_GATE = collection_utils.load("kernel_boot.py")
grub_default = _GATE.parse_grub_default
saved_entry = _GATE.parse_saved_entry
entry_kernel = _GATE.entry_kernel


def boot_kernel_after_gate(boot: dict[str, Any], default_text: str | None,
              grubenv: str | None) -> tuple[str | None, str | None]:
    """(kernel, source): grubby's default; GRUB's saved entry when GRUB_DEFAULT=saved;
    else the boot fact's (newest /boot/vmlinuz-*)."""
    if boot.get("source") == "grubby --default-kernel":
        return boot.get("default"), boot.get("source")
    if grub_default(default_text) == "saved":
        k = entry_kernel(saved_entry(grubenv), list(boot.get("kernels") or []))
        if k:
            return k, "GRUB saved_entry"
    return boot.get("default"), boot.get("source")
