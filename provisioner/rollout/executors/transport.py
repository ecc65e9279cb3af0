"""How the coordinator reaches an execution node: OpenSSH's command line, the known_hosts file
pinned from gdsfleet's own host-key reader, and the remote shell command that starts
ansible-runner's worker under a dispatch's token (the sweep and the job folders it names are
:mod:`.fence`'s). The ``ssh`` executor (:mod:`.ssh`) runs what this builds; ``exec-nodes
check`` (:mod:`.check`) uses the same command line.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import UsageError
from provisioner.rollout.executors.fence import job_folder_shell, worker_script
from provisioner.rollout.executors.nodes import ExecNode, _shell_path


# ------------------------------------------------------------------------------ OpenSSH hop
@dataclass(frozen=True)
class SshOptions:
    known_hosts: tuple[str, ...] = ()  # --known-hosts files
    ssh_config: str | None = "~/.ssh/config"
    connect_timeout: float = 10.0
    alive_interval: int = 15
    alive_count: int = 4


def known_hosts_files(opts: SshOptions) -> list[str]:
    """The files a node's key is checked against (provisioner.ssh's order)."""
    from provisioner.ssh import SSHSettings, _known_hosts_files

    return _known_hosts_files(SSHSettings(known_hosts=opts.known_hosts), None)


def pinned_known_hosts(node: ExecNode, opts: SshOptions, dest: Path) -> Path:
    """Write ``dest`` (0600): the plain keys gdsfleet's known_hosts reader lists for the
    execution node, and every ``@revoked`` key. No key: UsageError naming the fix."""
    from provisioner.fsutil import write_private
    from provisioner.ssh import HostKeyError, known_host_keys

    files = known_hosts_files(opts)
    try:
        view = known_host_keys(files, node.host_key_name)
    except HostKeyError as exc:
        raise UsageError(f"execution node {node.name}: {exc}") from None
    if not view.keys:
        port = f"-p {node.port} " if node.port != 22 else ""
        raise UsageError(
            f"execution node {node.name}: no known host key for {node.host_key_name} in "
            f"{', '.join(f for f in files if os.path.isfile(f)) or 'any known_hosts file'}; "
            f"check its fingerprint out of band, then add it to ~/.ssh/known_hosts (ssh-keyscan "
            f"{port}{node.host}) or pass --known-hosts FILE")
    lines = [f"{node.host_key_name} {e.key.get_name()} {e.key.get_base64()}" for e in view.keys]
    lines += [f"@revoked * {e.key.get_name()} {e.key.get_base64()}" for e in view.revoked]
    write_private(dest, "\n".join(lines) + "\n")
    return dest


def ssh_argv(node: ExecNode, known_hosts: Path, opts: SshOptions, remote: str) -> list[str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise UsageError("--executor ssh needs OpenSSH's ssh client on PATH (openssh-client)")
    argv = [ssh, "-T"]
    cfg = opts.ssh_config
    if cfg is None or str(cfg).lower() == "none" or not os.path.isfile(os.path.expanduser(cfg)):
        argv += ["-F", "/dev/null"]
    else:
        argv += ["-F", os.path.expanduser(cfg)]
    # given first on the command line, these win over any ssh_config
    for key, value in (
        ("BatchMode", "yes"),
        ("StrictHostKeyChecking", "yes"),
        ("UserKnownHostsFile", str(known_hosts)),
        ("GlobalKnownHostsFile", "/dev/null"),
        ("UpdateHostKeys", "no"),
        ("CheckHostIP", "no"),
        ("ConnectTimeout", str(max(1, int(opts.connect_timeout)))),
        ("ServerAliveInterval", str(opts.alive_interval)),
        ("ServerAliveCountMax", str(opts.alive_count)),
        ("ForwardAgent", "no"),
        ("ForwardX11", "no"),
        ("PermitLocalCommand", "no"),
        ("ControlMaster", "no"),
        ("ControlPath", "none"),
        ("RequestTTY", "no"),
        ("LogLevel", "ERROR"),
    ):
        argv += ["-o", f"{key}={value}"]
    if node.key_file:
        argv += ["-o", "IdentitiesOnly=yes", "-i", os.path.expanduser(node.key_file)]
    if node.user:
        argv += ["-l", node.user]
    argv += ["-p", str(node.port), "--", node.host, remote]
    return argv


def _find_runner(node: ExecNode) -> str:
    """Shell: ``$R``, the runner's full path, and its folder first on PATH (ansible-runner runs
    the ``ansible-playbook`` found on PATH: the one of its own virtual environment); exit 127
    with a message when there is none."""
    r = _shell_path(node.runner) if node.runner.startswith("~/") else shlex.quote(node.runner)
    colls = ""
    if node.collections_path:
        colls = (f"ANSIBLE_COLLECTIONS_PATH={_shell_path(node.collections_path)}; "
                 f"export ANSIBLE_COLLECTIONS_PATH; ")
    return colls + (f"R=$(command -v {r}) || {{ echo 'gdsfleet: {node.runner} not found on the "
            f"execution node' >&2; exit 127; }}; PATH=\"${{R%/*}}:$PATH\"; export PATH; ")


def worker_command(node: ExecNode, token: str | None = None, seconds: int | None = None) -> str:
    """The remote shell command: a fresh 0700 folder under the workdir, then the worker, which
    unpacks the job there and removes the folder when it ends (--delete). With ``token``: the
    worker tagged with it, under ``timeout`` when ``seconds``, and a sweep of every process
    still tagged once it ends (executors.fence). The folders of jobs whose execution node died
    are removed by the next job there (executors.fence.job_folder_shell)."""
    base = _shell_path(node.workdir)
    run = "\"$R\" worker --private-data-dir \"$D\" --delete"
    head = _find_runner(node) + job_folder_shell(base)
    if token is None:
        return head + f"exec {run}"
    return head + worker_script(run, token, seconds)


def _copy_inventory(src: Path, pdd: Path) -> str:
    """The inventory into the job (``inventory/``): a directory as a whole; a file with the
    group_vars/ and host_vars/ folders beside it. Returns the path inside the job."""
    dest = pdd / "inventory"
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=False)
        return "inventory"
    dest.mkdir(mode=0o700)
    shutil.copy2(src, dest / src.name)
    for extra in ("group_vars", "host_vars"):
        if (src.parent / extra).is_dir():
            shutil.copytree(src.parent / extra, dest / extra, symlinks=False)
    return f"inventory/{src.name}"


__all__ = ["SshOptions", "known_hosts_files", "pinned_known_hosts", "ssh_argv", "worker_command"]
