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

:func:`secure_beside_ledger` comes first (issue 45): the ledger's folder and the runner folder
must be the caller's alone (``fsutil.owned_dir``), and nothing under the runner folder may be a
link or another user's file, or the command is refused before anything is written there.
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


def secure_beside_ledger(location: str | None, *, create_runner: bool) -> Path | None:
    """Check the folders a SQLite ``location`` writes beside itself before anything is
    written there, and return the runner folder (None for a server URL).

    The ledger's folder (links resolved, created 0700 when missing) and ``runner`` in it
    (never a link; created 0700 with ``create_runner``, checked when it exists) must be
    real folders of the caller that group and others cannot write, and no entry under the
    runner folder may be a link or another user's: the gate script and the guard wrapper run
    from there, ``events.jsonl`` is appended there. Anything else is refused with
    :class:`~provisioner.errors.UsageError` (exit 64) naming the path and the fix."""
    runner = runner_dir_for(location)
    if runner is None:
        return None
    from provisioner.errors import LedgerError, UsageError
    from provisioner.fsutil import UnsafeFolderError, owned_dir, private_dir

    try:
        owned_dir(runner.parent)
        if not create_runner and not os.path.lexists(runner):
            return runner
        owned_dir(runner, follow=False)
    except UnsafeFolderError as exc:
        raise UsageError(f"refusing to write beside the ledger: {exc.strerror}") from None
    except OSError as exc:
        raise LedgerError(f"cannot use the ledger's folder {exc.filename}: {exc.strerror}; "
                          f"pass --ledger PATH|URL or set GDSFLEET_LEDGER") from None
    planted = _foreign_entries(runner)
    if planted:
        raise UsageError(
            f"refusing to write beside the ledger: the runner folder {runner} holds "
            f"{'; '.join(planted)}, which the provisioner never makes (another user or "
            f"program put it there); remove it and run the same command again")
    private_dir(runner.parent)  # the project's own state folder: narrowed to 0700
    return runner


_MAX_REPORTED = 3


def _foreign_entries(root: Path) -> list[str]:
    """Entries under ``root`` that are links or not the caller's (at most a few, named)."""
    found: list[str] = []
    me = os.geteuid()
    for top, dirs, files in os.walk(root):  # links to folders are listed, never entered
        for name in (*dirs, *files):
            p = Path(top) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                found.append(f"{p} (a symbolic link)")
            elif st.st_uid != me:
                found.append(f"{p} (owned by uid {st.st_uid})")
            if len(found) >= _MAX_REPORTED:
                return found
    return found


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


def prepare_runner(location: str | None) -> tuple[Path | None, bool]:
    """The rollout's runner folder beside a SQLite ``location``, checked and created
    (:func:`secure_beside_ledger`) and scrubbed (:func:`scrub_artifacts`), and whether it was
    made just now (a rollout refused before anything ran removes it again); (None, False)
    for a server URL."""
    runner = runner_dir_for(location)
    fresh = runner is not None and not os.path.lexists(runner)
    pdd = secure_beside_ledger(location, create_runner=True)
    scrub_artifacts(pdd)
    return pdd, fresh


__all__ = ["RUNNER_DIR", "prepare_runner", "runner_dir_for", "scrub_artifacts",
           "secure_beside_ledger"]
