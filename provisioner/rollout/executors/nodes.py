"""The execution nodes of ``--exec-inventory``: group ``gdsfleet_exec`` of an Ansible
inventory, each reached with the usual connection variables (docs/scale.md)."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import UsageError

EXEC_GROUP = "gdsfleet_exec"
DEFAULT_RUNNER = "ansible-runner"
DEFAULT_WORKDIR = "~/.cache/gdsfleet-exec"
_RUNNER_RE = re.compile(r"^[A-Za-z0-9_./+~-]{1,255}\Z")  # \Z: "$" lets a "\n" in
_WORKDIR_RE = re.compile(r"^(~/)?[A-Za-z0-9_./+-]{1,200}\Z")


def _fix_inventory(path: str) -> str:
    return (f"give --exec-inventory an Ansible inventory file whose group {EXEC_GROUP} lists "
            f"the execution nodes (ansible_host, ansible_port, ansible_user, "
            f"ansible_ssh_private_key_file; docs/scale.md)")


def _shell_path(path: str) -> str:
    """A workdir for the remote shell: ``~/x`` as ``"$HOME"/x``, the rest quoted."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass(frozen=True)
class ExecNode:
    name: str
    host: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    runner: str = DEFAULT_RUNNER
    workdir: str = DEFAULT_WORKDIR
    collections_path: str | None = None  # exported as ANSIBLE_COLLECTIONS_PATH there

    @property
    def host_key_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def load_exec_inventory(path: str | os.PathLike[str]) -> list[ExecNode]:
    """The execution nodes of group ``gdsfleet_exec``; UsageError (one line, the fix) for a
    missing, unreadable or empty inventory, no such group, or a refused variable."""
    from provisioner.errors import InventoryError
    from provisioner.inventory import load_inventory

    p = Path(path).expanduser()
    shown = str(path)
    if not p.exists():
        raise UsageError(f"--exec-inventory {shown}: no such file; {_fix_inventory(shown)}")
    if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
        raise UsageError(f"--exec-inventory {shown}: not readable by this user; fix its "
                         f"permissions (chmod u+r) or run as its owner")
    if p.is_file() and p.stat().st_size == 0:
        raise UsageError(f"--exec-inventory {shown}: the file is empty; {_fix_inventory(shown)}")
    try:
        inv = load_inventory(p)
    except InventoryError as exc:
        raise UsageError(f"--exec-inventory {shown}: {str(exc)[:300]}; "
                         f"{_fix_inventory(shown)}") from None
    nodes = [n for n in inv.nodes if EXEC_GROUP in n.groups]
    if not nodes:
        raise UsageError(f"--exec-inventory {shown}: no group {EXEC_GROUP} (or it is empty); "
                         f"{_fix_inventory(shown)}")
    out: list[ExecNode] = []
    for n in nodes:
        runner = str(n.vars.get("gdsfleet_exec_runner") or DEFAULT_RUNNER)
        if not _RUNNER_RE.match(runner) or ".." in runner.split("/"):
            raise UsageError(f"--exec-inventory {shown}: {n.name}: gdsfleet_exec_runner must be "
                             f"a plain path or command name (letters, digits, ./_+~-)")
        workdir = str(n.vars.get("gdsfleet_exec_workdir") or DEFAULT_WORKDIR)
        if not _WORKDIR_RE.match(workdir) or ".." in workdir.split("/"):
            raise UsageError(f"--exec-inventory {shown}: {n.name}: gdsfleet_exec_workdir must "
                             f"be a plain path (optionally ~/...), without '..'")
        colls = n.vars.get("gdsfleet_exec_collections_path")
        if colls is not None and (not _WORKDIR_RE.match(str(colls))
                                  or ".." in str(colls).split("/")):
            raise UsageError(f"--exec-inventory {shown}: {n.name}: gdsfleet_exec_collections_"
                             f"path must be a plain path (optionally ~/...), without '..'")
        out.append(ExecNode(name=n.name, host=n.address, port=n.port, user=n.user,
                            key_file=n.key_file, runner=runner, workdir=workdir,
                            collections_path=str(colls) if colls is not None else None))
    return out
