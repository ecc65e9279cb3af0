"""Fencing an execution node by the dispatch's token, and the worker side's own deadline.

Every process that a dispatch starts on an execution node carries the dispatch's token in its
environment (``GDSFLEET_PLAYBOOK_TOKEN``, the variable :mod:`provisioner.rollout.guard` uses to
find a dead rollout's children here): the ``ansible-runner worker`` is started with it, and
``ansible-playbook`` and its forks inherit it from the job's ``env/envvars``, even though
ansible-runner starts the playbook in a session of its own.

On the worker side (:func:`worker_script`) the worker runs under ``timeout --kill-after``:
when the shard's time is up it is stopped, and then, and whenever the worker ends for any
other reason (its stream cut, ssh gone), every process left with the token is killed and the
job's folder removed. So an execution node that the coordinator cannot reach has stopped the
shard's work by the dispatch's deadline, which the coordinator waits out before sending those
hosts anywhere else.

:func:`fence`: over SSH, kill every process on the execution node tagged with the token,
then look again (bounded retries); the answer is ``fenced`` (none left), ``still-running``
(some survived SIGKILL, e.g. stuck in the kernel) or ``unreachable`` (no answer).

The sweep on the execution node is a short stdlib-only Python program given on ``python3 -c``
(the execution node has Python, ansible-runner needs it; gdsfleet itself is not installed
there). Its command line holds the token, which is a tag, not a secret.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provisioner.rollout.guard import TOKEN_ENV

if TYPE_CHECKING:
    from provisioner.rollout.executors.nodes import ExecNode

KILL_AFTER_S = 5  # timeout --kill-after: SIGTERM, then SIGKILL this much later
SWEEP_MARGIN_S = 5  # the sweep after the worker's end, and clock granularity
FENCE_TRIES = 10  # looks (0.2 s apart) before the answer is still-running
_OUT_MAX = 4096
_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")  # \Z: a shell word, no "\n"

# argv: TOKEN TRIES CPDIR. Prints {"killed": N, "left": M}. A process is the job's when its
# environment carries the token, or when its command line names the job's ssh control folder:
# an ssh ControlPersist master rewrites its argv and environ area with its title ("ssh:
# <control path> [mux]"), so its environment no longer shows the token. Zombies have an empty
# environ and cmdline: not counted.
_SWEEP = (
    "import json,os,sys,time\n"
    f"n=(\"{TOKEN_ENV}=\"+sys.argv[1]+\"\\0\").encode()\n"
    "c=(\"/\"+sys.argv[3]+\"/\").encode()\n"
    "me=os.getpid()\n"
    "def r(d,w):\n"
    " with open(\"/proc/\"+d+\"/\"+w,\"rb\") as f:return f.read()\n"
    "def t():\n"
    " o=[]\n"
    " for d in os.listdir(\"/proc\"):\n"
    "  if d.isdigit() and int(d)!=me:\n"
    "   try:\n"
    "    e=r(d,\"environ\")+b\"\\0\"\n"
    "    if n in e or c in r(d,\"cmdline\"):o.append(int(d))\n"
    "   except OSError:continue\n"
    " return o\n"
    "k=set()\n"
    "for i in range(int(sys.argv[2])):\n"
    " a=t()\n"
    " if not a:break\n"
    " for p in a:\n"
    "  try:os.kill(p,9);k.add(p)\n"
    "  except OSError:pass\n"
    " time.sleep(0.2)\n"
    "print(json.dumps({\"killed\":len(k),\"left\":len(t())}))\n"
)


def check_token(token: str) -> str:
    """The token, after checking that it is safe in a shell word (it is ours, but it holds the
    run id); ValueError otherwise."""
    if not _TOKEN_RE.match(token):
        raise ValueError(f"dispatch token {token[:40]!r} has unexpected characters")
    return token


def job_folder_shell(base: str) -> str:
    """Shell that makes the job's fresh 0700 folder ``$D`` under ``base`` (a shell word).

    The folder holds the job's extra vars (secrets) until the worker's ``--delete``. When the
    whole execution node dies mid-job (killed, rebooted, powered off) nothing there removes
    it, so each job holds an ``flock`` on ``<folder>.lock`` while its wrapper or worker lives
    (the kernel drops it when they end, however they end; the file, not the folder, since
    ``worker --delete`` replaces the folder), and each new job first removes the folders whose
    lock is free: those whose job is gone, with the ssh control folder the lock file names.
    Creating a folder and locking it happen under a lock of the workdir, so a job starting
    beside another never takes the other's new folder for a dead one. Without ``flock``
    (util-linux) on the node, nothing is removed."""
    # a free lock: remove the folder, the ssh control folder its job named in the lock file
    # (worker_script; checked to be one of ours before it is removed) and the lock
    gone = ("sh -c 'c=$(head -c 64 \"$1\"); case $c in cp.*[!A-Za-z0-9_:-]*) ;; cp.?*) "
            "rm -rf \"${1%/*}/$c\";; esac; rm -rf \"${1%.lock}\" \"$1\"' _")
    return (f"umask 077 && mkdir -p {base} || exit 1; F=$(command -v flock) || F=; "
            + f"if [ -n \"$F\" ]; then exec 8>>{base}/.lock && \"$F\" 8 && for o in "
            + f"{base}/shard.*; do case $o in *.lock) [ -d \"${{o%.lock}}\" ] || \"$F\" -n "
            + f"\"$o\" {gone} \"$o\";; *) [ -d \"$o\" ] && \"$F\" -n \"$o.lock\" {gone} "
            + "\"$o.lock\";; esac; done; fi 2>/dev/null; "
            + f"D=$(mktemp -d {base}/shard.XXXXXXXX) || exit 1; "
            + "if [ -n \"$F\" ]; then exec 9>>\"$D.lock\" && \"$F\" -n 9; exec 8>&-; fi; ")


def control_dir(token: str) -> str:
    """The name of the job's ssh control folder (beside its job folder): Ansible's ssh
    ControlPersist masters of the job live on after its ansible-playbook, their sockets in
    there, and the sweep finds them by it. Short (the token's random part): a control socket's
    whole path must stay under the 108 bytes of a unix socket name."""
    return "cp." + check_token(token).rsplit(".", 1)[-1][-16:]


def sweep_command(token: str, tries: int = FENCE_TRIES) -> str:
    """Shell: kill every process carrying ``token`` (and the job's ssh control masters);
    prints the JSON answer."""
    return (f"python3 -c {shlex.quote(_SWEEP)} {shlex.quote(check_token(token))} {int(tries)} "
            f"{shlex.quote(control_dir(token))}")


def worker_script(run_worker: str, token: str, seconds: int | None) -> str:
    """Shell, after the job folder ``$D`` and ``$R`` are set: the worker tagged with
    ``token`` (under ``timeout`` when ``seconds``), then the sweep and the folder's removal
    whatever way the worker ended; exits with the worker's status."""
    tok = shlex.quote(check_token(token))
    limit = (f"timeout --kill-after={KILL_AFTER_S} {max(1, int(seconds))} " if seconds else "")
    # the job's own ssh control folder, beside its job folder (control_dir)
    # (named in the job's lock file too, so a later job removes it if this one dies unswept)
    cp = (f"C=\"${{D%/*}}/{control_dir(token)}\"; "
          f"echo {control_dir(token)} >>\"$D.lock\" 2>/dev/null; ")
    return (f"{cp}ANSIBLE_SSH_CONTROL_PATH_DIR=\"$C\" {TOKEN_ENV}={tok} {limit}{run_worker}; "
            f"rc=$?; {sweep_command(token, 3)} >/dev/null 2>&1; "
            f"rm -rf \"$D\" \"$D.lock\" \"$C\"; exit $rc")


def wait_margin_s(connect_timeout: float) -> float:
    """How long after (dispatch start + shard timeout) every tagged process of the shard is gone
    on an execution node the coordinator cannot reach: the worker's timer starts once ssh is
    connected (within the connect timeout), then --kill-after, then the sweep."""
    return float(connect_timeout) + KILL_AFTER_S + SWEEP_MARGIN_S


@dataclass(frozen=True)
class FenceResult:
    state: str  # "fenced" | "still-running" | "unreachable"
    killed: int = 0
    left: int = 0
    detail: str = ""

    def as_detail(self) -> dict[str, object]:
        return {"fence": self.state, "killed": self.killed, "left": self.left,
                "why": self.detail[:200]}


def _bounded_read(stream: object, out: list[bytes]) -> None:
    total = 0
    for chunk in iter(lambda: stream.read(4096), b""):  # type: ignore[attr-defined]
        if total < _OUT_MAX:
            out.append(chunk[:_OUT_MAX - total])
        total += len(chunk)


def fence(node: ExecNode, token: str, argv_of: Callable[[ExecNode, str], list[str]], *,
          connect_timeout: float = 10.0) -> FenceResult:
    """Kill every process on ``node`` tagged with ``token`` and confirm none is left.
    ``argv_of(node, remote)`` is the executor's ssh command line (its pinned host keys)."""
    from provisioner.sanitize import printable

    runner = node.runner
    if runner.startswith("~/"):
        from provisioner.rollout.executors.nodes import _shell_path

        r = _shell_path(runner)
    else:
        r = shlex.quote(runner)
    # the runner's folder first on PATH: its virtual environment's python3, else the system's
    remote = (f"R=$(command -v {r}) && PATH=\"${{R%/*}}:$PATH\"; export PATH; "
              f"exec {sweep_command(token)}")
    from provisioner.errors import UsageError

    try:
        proc = subprocess.Popen(argv_of(node, remote), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except (OSError, UsageError) as exc:
        return FenceResult("unreachable", detail=f"ssh did not start: {exc}")
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [threading.Thread(target=_bounded_read, args=(s, buf), daemon=True)
               for s, buf in ((proc.stdout, out), (proc.stderr, err))]
    for t in readers:
        t.start()
    try:
        rc = proc.wait(timeout=connect_timeout + FENCE_TRIES * 0.2 + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return FenceResult("unreachable", detail="no answer in time")
    finally:
        for t in readers:
            t.join(5)
        for s in (proc.stdout, proc.stderr):
            if s is not None:
                s.close()
    why = printable(b"".join(err).decode("utf-8", "replace").strip())[:200]
    if rc != 0:
        return FenceResult("unreachable", detail=f"ssh rc={rc}" + (f": {why}" if why else ""))
    try:
        doc = json.loads(b"".join(out).decode("utf-8", "replace").strip().splitlines()[-1])
        killed, left = int(doc["killed"]), int(doc["left"])
    except (ValueError, KeyError, TypeError, IndexError):
        return FenceResult("unreachable", detail="no answer from the sweep")
    return FenceResult("fenced" if left == 0 else "still-running", killed=max(0, killed),
                       left=max(0, left))
