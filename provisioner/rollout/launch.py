"""What one ansible-playbook run of the rollout is started with (split from runner.py):
the ansible-playbook beside this Python, the guard wrapper that runs it, the run's own
extra-vars file, and the environment the runner records.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Environment variables ansible-playbook never needs that can hold a secret (a ledger URL with
# its password): left out of its environment and of the runner's ``command`` artifact.
_DROPPED_ENV = ("GDSFLEET_LEDGER",)


def _ansible_bin_dir() -> str | None:
    """The folder to put first on PATH so that ansible-runner runs the ansible-playbook of the
    ansible-core installed beside this Python (the one that resolved the collection playbook,
    see playbooks.resolve), even when the virtual environment is not activated; None when
    there is none beside it (PATH then decides)."""
    candidate = Path(sys.executable).parent / "ansible-playbook"
    if not candidate.exists():
        return None
    if shutil.which("ansible-playbook") == str(candidate):
        return None
    return str(candidate.parent)


def _guard_wrapper(pdd: Path, children_lock: str | os.PathLike[str] | None,
                   stdout_callback: str | None = None) -> Path | None:
    """An executable that runs ansible-playbook under the guard (ansible-runner's ``binary``;
    the runner then leaves the playbook off the command line: ``cmdline`` puts it first);
    None when ansible-playbook is not on PATH (the runner then reports that).
    ``stdout_callback``: the stdout callback plugin it names for ansible-playbook (ansible-runner
    sets its own, ``awx_display``, in the environment it starts this with)."""
    from provisioner.rollout import guard

    real = shutil.which("ansible-playbook")
    if real is None:
        return None
    lock = str(Path(children_lock).resolve()) if children_lock else "-"
    path = pdd / f".gdsfleet-guard-{os.getpid()}-{threading.get_ident()}.sh"
    name = (f"ANSIBLE_STDOUT_CALLBACK={shlex.quote(stdout_callback)}\n"
            "export ANSIBLE_STDOUT_CALLBACK\n") if stdout_callback else ""
    text = ("#!/bin/sh\n" + name +
            # -I -S: the guard is stdlib only; no site-packages to scan before the playbook
            f"exec {shlex.quote(sys.executable)} -I -S {shlex.quote(guard.__file__)} "
            f"{shlex.quote(lock)} {shlex.quote(real)} \"$@\"\n")
    # never through a link (issue 45); 0700 from the start, never readable by anyone else
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o700)
        fh.write(text)
    return path


def _write_extravars(pdd: Path, extravars: Mapping[str, Any], ident: str) -> Path | None:
    """Extra vars go to ansible-playbook as ``-e @<pdd>/env/extravars-<ident>``: a 0600 file
    in 0700 folders, never the command line that ``ps`` shows, one per run (two runs of a
    rollout can be alive at once: a wave's and the next one's, held; see
    :mod:`provisioner.rollout.prestart`), removed when its run ends. None (and no file) when
    there are none. ``env/extravars`` itself, which ansible-runner would add on its own, is
    never written (one left by an older version's killed run is removed, never reused)."""
    from provisioner.fsutil import private_dir, write_private

    env_dir = private_dir(pdd / "env")
    (env_dir / "extravars").unlink(missing_ok=True)
    if not extravars:
        return None
    path = env_dir / f"extravars-{ident}"
    write_private(path, json.dumps(dict(extravars)))
    return path


def _scrub_runner_env(status: Mapping[str, Any], runner_config: Any = None) -> None:
    """ansible-runner's status handler: at 'starting' (before the ``command`` artifact is
    written and ansible-playbook started) drop the variables of ``_DROPPED_ENV`` from the
    job's environment."""
    env = getattr(runner_config, "env", None)
    if status.get("status") == "starting" and isinstance(env, dict):
        for key in _DROPPED_ENV:
            env.pop(key, None)
