"""Leftovers of ansible-runner in the runner folder, scrubbed before a command uses it.

ansible-runner records each job's command line and full environment in
``artifacts/<ident>/command``; the rollout's runner masks its secrets when the playbook run
ends (``runner._scrub_artifacts``, in its ``finally``). A run killed with ``kill -9`` never gets
there: its ``command`` file keeps the operator's environment (a ``*_PASSWORD``, a ledger URL
with its password) until something scrubs it. :func:`scrub_artifacts` does, at the start of
every ``rollout`` and ``verify`` (one call each), so a leftover lives no longer than the next
command: secret-named values and URL passwords are masked (``provisioner.redact``), every file
and folder under the runner folder is narrowed to 0600/0700 (never widened; links and files of
other users are left alone).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

# the name of the runner folder beside a SQLite ledger (commands/rollout.py)
RUNNER_DIR = "runner"
# a command artifact is a small JSON document; a bigger file is not ansible-runner's
_MAX_COMMAND_BYTES = 16 << 20


def runner_dir_for(location: str | None) -> Path | None:
    """The runner folder the rollout keeps beside a SQLite ledger; None for a server URL."""
    if not location or "://" in location:
        return None
    return Path(location).expanduser().resolve().parent / RUNNER_DIR


def scrub_artifacts(pdd: str | os.PathLike[str] | None) -> int:
    """Mask secrets in every ``artifacts/*/command`` under ``pdd`` and narrow the modes of
    what is there; returns how many command files were rewritten. A missing folder is fine."""
    if pdd is None:
        return 0
    root = Path(pdd)
    if not root.is_dir() or root.is_symlink():
        return 0
    from provisioner.fsutil import write_private
    from provisioner.redact import redact_mapping

    for p in [root, *root.rglob("*")]:
        with contextlib.suppress(OSError):
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
                continue
            keep = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if stat.S_IMODE(st.st_mode) & ~keep:
                os.chmod(p, stat.S_IMODE(st.st_mode) & keep)
    changed = 0
    for cmd in root.glob("artifacts/*/command"):
        try:
            if cmd.is_symlink() or cmd.stat().st_size > _MAX_COMMAND_BYTES:
                continue
            doc = json.loads(cmd.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        clean = redact_mapping(doc)
        if clean != doc:
            write_private(cmd, json.dumps(clean, ensure_ascii=False))
            changed += 1
    return changed


def scrub_beside_ledger(location: str | None) -> int:
    """:func:`scrub_artifacts` of the runner folder beside the ledger ``location``."""
    return scrub_artifacts(runner_dir_for(location))


__all__ = ["RUNNER_DIR", "runner_dir_for", "scrub_artifacts", "scrub_beside_ledger"]
