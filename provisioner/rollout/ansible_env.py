"""SSH settings of the playbook runs ``provisioner rollout`` drives: pipelining and reuse.

Without pipelining, every task of a playbook costs several SSH round trips (make a remote
temporary directory, copy the module over, run it, remove the directory); with it, one (the
module goes through the command's stdin). Connection reuse (OpenSSH ``ControlMaster``) lets
those sessions, and the next playbook run against the same node within ``ControlPersist``,
share one authenticated connection instead of a new handshake each.

The settings go to the ``ansible-playbook`` child as environment variables (Ansible reads them
before ``ansible.cfg``), so the operator's own config file is not rewritten. A variable already
set in the provisioner's environment (``ANSIBLE_PIPELINING=False``, ``ANSIBLE_SSH_ARGS=...``)
is left as it is. Host-key checking stays strict: ``StrictHostKeyChecking=yes`` is part of the
SSH arguments (OpenSSH keeps the first value it is given for an option, and these come before
the inventory's ``ansible_ssh_common_args``; an operator's own ``ANSIBLE_SSH_ARGS`` gets it put
in front), ``ANSIBLE_HOST_KEY_CHECKING`` stays on, and the default transport is OpenSSH
(``ANSIBLE_TRANSPORT=ssh``, so an ``ansible.cfg`` that says ``transport = paramiko`` does not
apply). SSH arguments in the environment that weaken host-key checking
(``StrictHostKeyChecking=no``, ``UserKnownHostsFile=/dev/null`` ...) and another transport
are refused (exit 64), as the inventory's are (``provisioner.inventory``).

Pipelining needs ``sudo`` without ``requiretty`` on the nodes when a play uses ``become``
(Debian's and Ubuntu's default); ``provisioner rollout --no-pipelining`` turns both settings
off for fleets where that does not hold.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Mapping

from provisioner.errors import UsageError

# The SSH arguments of the playbook runs (Ansible's own default is
# "-C -o ControlMaster=auto -o ControlPersist=60s": kept, plus strict host keys).
SSH_ARGS = ("-C -o ControlMaster=auto -o ControlPersist=60s "
            "-o StrictHostKeyChecking=yes")
# Without reuse: every SSH session is a connection of its own (the comparison baseline).
SSH_ARGS_NO_REUSE = "-C -o ControlMaster=no -o ControlPath=none -o StrictHostKeyChecking=yes"
# A Unix socket path holds 108 bytes on Linux, 104 on macOS. Ansible names each socket with a
# 10-character hash of (host, port, user) and OpenSSH appends ".XXXXXXXXXXXXXXXX" while it
# binds: a folder name longer than this would make the ControlPath fail.
_MAX_DIR_LEN = 104 - 1 - 10 - 17

_control_dir: str | None = None
_STRICT = "-o StrictHostKeyChecking=yes"
# Environment variables holding OpenSSH arguments of the playbook runs (Ansible's ssh plugin).
_ARG_ENV = ("ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_COMMON_ARGS", "ANSIBLE_SSH_EXTRA_ARGS",
            "ANSIBLE_SCP_EXTRA_ARGS", "ANSIBLE_SFTP_EXTRA_ARGS")


def control_dir() -> str:
    """A private (0700) folder for this process's SSH control sockets, removed at exit.

    Short on purpose: a Unix socket's path is limited to about 100 bytes, and a long
    ``$TMPDIR`` (macOS) would make OpenSSH refuse the ControlPath.
    """
    global _control_dir
    if _control_dir is None or not os.path.isdir(_control_dir):
        base = tempfile.gettempdir()
        if len(base) > _MAX_DIR_LEN - 21 and os.path.isdir("/tmp"):
            base = "/tmp"
        path = tempfile.mkdtemp(prefix="gdsfleet-cp-", dir=base)  # mode 0700
        os.chmod(path, 0o700)
        _control_dir = path
        atexit.register(shutil.rmtree, path, True)
    return _control_dir


def connection_env(pipelining: bool = True,
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables for the playbook runs: pipelining and SSH connection reuse on
    (``pipelining=True``) or both off; keys already set in ``environ`` (default
    ``os.environ``) are left out so the operator's explicit choice wins."""
    environ = os.environ if environ is None else environ
    refuse_weak_environment(environ)
    if pipelining:
        # ssh's own spelling: only the ssh connection plugin reads it. ANSIBLE_PIPELINING would
        # pipeline `ansible_connection: local` hosts too, where it saves no round trip and costs
        # a lot: the local module process inherits ansible-runner's PYTHONUNBUFFERED and reads
        # the module from its stdin one byte per read(2) (174,000 reads a task, measured with
        # strace -c -f: docs/performance.md)
        env = {
            "ANSIBLE_SSH_PIPELINING": "True",
            "ANSIBLE_SSH_ARGS": SSH_ARGS,
            "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir(),
        }
    else:
        env = {"ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_PIPELINING": "False",
               "ANSIBLE_SSH_ARGS": SSH_ARGS_NO_REUSE}
    # both spellings Ansible reads (ssh takes the later one, ANSIBLE_SSH_PIPELINING, when both
    # are set): an operator's choice in either is left whole
    if "ANSIBLE_SSH_PIPELINING" in environ or "ANSIBLE_PIPELINING" in environ:
        env.pop("ANSIBLE_PIPELINING", None)
        env.pop("ANSIBLE_SSH_PIPELINING", None)
    env = {k: v for k, v in env.items() if k not in environ}
    if environ.get("ANSIBLE_SSH_ARGS"):  # the operator's, with strict host keys first
        env["ANSIBLE_SSH_ARGS"] = f"{_STRICT} {environ['ANSIBLE_SSH_ARGS']}"
    env["ANSIBLE_HOST_KEY_CHECKING"] = "True"  # never the operator's False (runner sets it too)
    env["ANSIBLE_TRANSPORT"] = "ssh"  # not an ansible.cfg's paramiko
    return env


def refuse_weak_environment(environ: Mapping[str, str]) -> None:
    """UsageError (exit 64) when the environment asks the playbook runs for weaker host-key
    checking: an OpenSSH option that turns it off or bypasses it, or another transport."""
    from provisioner.inventory import SSH_CONNECTIONS, weakening_ssh_options

    for var in _ARG_ENV:
        weak = weakening_ssh_options(environ.get(var) or "")
        if weak:
            raise UsageError(f"{var} holds {', '.join(weak)}, which weakens host-key checking "
                             f"of the playbook runs; unset it or remove that option")
    for var in ("ANSIBLE_SSH_EXECUTABLE", "ANSIBLE_SCP_EXECUTABLE", "ANSIBLE_SFTP_EXECUTABLE"):
        if environ.get(var):
            raise UsageError(f"{var} replaces the OpenSSH client the playbook runs' host-key "
                             f"checking relies on (a wrapper can turn it off); unset it")
    transport = (environ.get("ANSIBLE_TRANSPORT") or "ssh").strip()
    if transport not in SSH_CONNECTIONS:
        raise UsageError(f"ANSIBLE_TRANSPORT={transport!r}: the rollout's playbook runs use "
                         f"OpenSSH (host keys checked strictly); unset it")
