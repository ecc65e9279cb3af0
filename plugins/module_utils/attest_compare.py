# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""attest, part two: what changed since ``verify`` recorded the node, and the fix for each.

``compare(record, now)`` takes the record ``verify`` left (attest_state.py) and a new snapshot
and returns one regression per thing that changed and can take I/O off the direct path
(pure: dicts in, dicts out). Each regression is ``{"id", "what", "expected", "observed",
"fix"}``; the ids are stable (docs/operations.md lists them). ``unverified`` is the one
regression of a node without a usable compliant record. Pure standard library, Python 3.8+.
"""

from __future__ import annotations

# typing is imported for the type checker only: a node pays for no import it does not need
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CUFILE_PATH = "/etc/cufile.json"


def _reg(rid: str, what: str, expected: Any, observed: Any, fix: str) -> dict[str, Any]:
    return {"id": rid, "what": what, "expected": str(expected)[:256],
            "observed": str(observed)[:256], "fix": fix}


def _ident(mod: dict[str, Any]) -> str:
    if not mod.get("loaded"):
        return "not loaded"
    parts = [str(mod.get("version") or "?")]
    if mod.get("srcversion"):
        parts.append(f"srcversion {str(mod['srcversion'])[:12]}")
    return " ".join(parts)


def _mount_text(m: dict[str, Any] | None) -> str:
    if not m or not m.get("target"):
        return "not mounted"
    return (f"{m.get('fstype')} {','.join(m.get('options') or [])} {m.get('source')} "
            f"({m.get('devno')})")


def unverified(observed: str, fix: str) -> dict[str, Any]:
    """The one regression of a node without a usable compliant record."""
    return _reg("attest.unverified", "last verify", "compliant", observed, fix)


VERIFY_FIX = "`provisioner verify` the node"


def compare(record: dict[str, Any], now: dict[str, Any]) -> list[dict[str, Any]]:
    """Every difference between the state ``verify`` recorded and ``now`` that can take I/O off
    the direct path, each with its fix (pure)."""
    was = record["state"]
    regs: list[dict[str, Any]] = []
    if was.get("kernel") != now.get("kernel"):
        regs.append(_reg("attest.kernel", "running kernel", was.get("kernel"), now.get("kernel"),
                         "boot the verified kernel, or " + VERIFY_FIX))
    wn, nn = was["nvfs"], now["nvfs"]
    if wn.get("loaded") and not nn.get("loaded"):
        regs.append(_reg("attest.nvfs.loaded", "nvidia-fs", "loaded", "not loaded",
                         "`modprobe nvidia_fs` (see `dkms status`), then " + VERIFY_FIX))
    elif not wn.get("loaded") and nn.get("loaded"):
        regs.append(_reg("attest.nvfs.loaded", "nvidia-fs", "not loaded (as verified)", "loaded",
                         "unload it, or " + VERIFY_FIX))
    elif wn.get("loaded") and (_ident(wn) != _ident(nn)
                               or wn.get("proc_version") != nn.get("proc_version")):
        regs.append(_reg("attest.nvfs.version", "nvidia-fs", _ident(wn), _ident(nn),
                         "roll out the pinned nvidia-fs, or " + VERIFY_FIX))
    changed = []
    for name, wmod in sorted((was.get("storage_modules") or {}).items()):
        if not isinstance(wmod, dict) or not wmod.get("loaded"):
            continue
        nmod = (now.get("storage_modules") or {}).get(name) or {"loaded": False}
        if _ident(wmod) != _ident(nmod):
            changed.append((name, _ident(wmod), _ident(nmod)))
    if changed:
        regs.append(_reg("attest.nvfs.modules", "storage modules",
                         "; ".join(f"{c[0]} {c[1]}" for c in changed),
                         "; ".join(f"{c[0]} {c[2]}" for c in changed),
                         "load the verified GDS build (mlnx-nvme), then " + VERIFY_FIX))
    wc, nc = was["cufile"], now["cufile"]
    if wc.get("present") != nc.get("present") or wc.get("sha256") != nc.get("sha256"):
        regs.append(_reg("attest.cufile.digest", f"{nc.get('path') or CUFILE_PATH}",
                         _digest(wc), _digest(nc),
                         "restore it (`provisioner rollout`), or " + VERIFY_FIX))
    if wc.get("allow_compat_mode") is False and nc.get("allow_compat_mode") is not False:
        seen = {True: "true", None: "unknown (" + str(nc.get("error") or "absent") + ")"}
        regs.append(_reg("attest.cufile.compat", "properties.allow_compat_mode", "false",
                         seen.get(nc.get("allow_compat_mode"), "true"),
                         'set properties.allow_compat_mode false (role cufile)'))
    wm, nm = was.get("mount"), now.get("mount")
    if wm and wm.get("target"):
        same = bool(nm) and nm.get("target") == wm.get("target") and all(
            nm.get(k) == wm.get(k) for k in ("fstype", "source", "options"))
        if same and str(wm.get("devno") or "").split(":", maxsplit=1)[0] not in ("0", ""):
            same = nm.get("devno") == wm.get("devno")
        if not same:
            observed = _mount_text(nm) if nm and nm.get("target") == wm.get("target") else (
                f"not mounted ({wm.get('target')} is on {(nm or {}).get('target') or '?'})")
            regs.append(_reg("attest.mount", f"GDS mount {wm.get('target')}", _mount_text(wm),
                             observed, "mount it as verified (`mount -a`), then " + VERIFY_FIX))
    wl, nl = was["libcufile"], now["libcufile"]
    if wl.get("real") and (wl.get("real") != nl.get("real") or wl.get("size") != nl.get("size")):
        regs.append(_reg("attest.libcufile", "the host's libcufile", _lib(wl),
                         _lib(nl) if nl.get("real") else "none",
                         "pin libcufile-X-Y, or " + VERIFY_FIX))
    return regs


def _digest(c: dict[str, Any]) -> str:
    if not c.get("present"):
        return "absent"
    return "sha256:" + str(c.get("sha256") or "unreadable")[:16]


def _lib(lib: dict[str, Any]) -> str:
    """``libcufile.so.1.15.1 (1234 bytes) in /usr/local/cuda-13.0/...``: the name first."""
    real = str(lib.get("real") or "")
    folder, name = real.rpartition("/")[::2]
    return f"{name} ({lib.get('size')} bytes) in {folder}"
