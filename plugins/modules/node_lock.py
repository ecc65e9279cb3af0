#!/usr/bin/python
# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""One gdsfleet play at a time on a node: a flock under /run, held by a small process."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_lock
short_description: Hold a node for one gdsfleet play at a time (a flock under /run)
description:
  - With I(state=held), takes an exclusive C(flock) on I(path) and leaves a small holder
    process on the node that keeps it until the play lets the node go (I(state=released)),
    until I(ttl) seconds have passed, or until it is killed. The kernel drops the lock the
    moment the holder ends, however it ends, so a stale file never blocks a node.
  - The holder carries the play's token in its environment (C(GDSFLEET_PLAYBOOK_TOKEN)), as
    every process a gdsfleet rollout starts does, and its details (token, run, pid, since)
    are written beside the lock.
  - A second play is refused, naming the holder. The one exception is a play of the same
    rollout run (the token's first dot-separated field); the rollout only starts one after it
    has fenced the earlier one (a resume after the coordinator died, a lost shard sent again),
    so that play takes the node over and the old holder is killed.
  - A fenced play's controller is gone, but the module it was running on this node may not be
    (a package install, a DKMS build). Before it takes over, the new play waits for every
    process on the node that carries the old token (site.yml puts the token in the environment
    of every task) to end by itself, for up to I(takeover_wait) seconds; what is left then is
    stopped (SIGTERM, then SIGKILL after 10 s). So the two plays never act on the node at
    once. A process that survives SIGKILL fails the task, naming it.
  - Every acquire, release, takeover and refusal is appended as one JSON line to I(log), so
    the intervals in which plays held the node can be checked afterwards.
  - Nothing of the node's configuration changes, so the result never reports C(changed). It
    locks in check mode too (a check run must not read a node another play is changing).
version_added: 0.2.0
author: gdsfleet developers (@gdsfleet)
options:
  state:
    description: C(held) to take the node, C(released) to let it go.
    type: str
    choices: [held, released]
    default: held
  token:
    description:
      - The play's token, C(<run>.<pid>.<hex>) from a rollout (its C(GDSFLEET_PLAYBOOK_TOKEN)).
      - Empty (a play run by hand) - a token of its own is made, C(manual.<hex>), and returned.
    type: str
    default: ''
  path:
    description: The lock file; its folder is made (mode 0700) when missing.
    type: path
    default: /run/gdsfleet/site.lock
  log:
    description: Where every acquire, release, takeover and refusal is appended (JSON lines).
    type: path
    default: /run/gdsfleet/site-lock.log
  ttl:
    description: Seconds after which the holder lets the node go by itself (a play whose
      controller died never releases it). Use the rollout's playbook timeout plus a margin.
    type: int
    default: 15000
  takeover_wait:
    description: On a takeover, seconds to wait for the old play's processes on the node to
      end by themselves before they are stopped. Waiting is the gentle choice (a package
      install cut in the middle leaves the package manager to repair); C(0) stops them at once.
    type: int
    default: 900
"""

EXAMPLES = r"""
- name: Hold the node for this play
  gdsfleet.gds.node_lock:
    token: "{{ lookup('ansible.builtin.env', 'GDSFLEET_PLAYBOOK_TOKEN') }}"
  check_mode: false
  register: node_lock

- name: Let the node go
  gdsfleet.gds.node_lock:
    state: released
    token: "{{ node_lock.token }}"
  check_mode: false
"""

RETURN = r"""
token:
  description: The token the node is held (or was released) with.
  type: str
  returned: always
holder:
  description: The holder's details - C(token), C(run), C(pid), C(since) (epoch seconds).
  type: dict
  returned: when I(state=held)
took_over:
  description:
    - The holder of the same run that this play replaced, if any, with C(waited_for) (the
      pids of the old play's processes that ended by themselves while this play waited),
      C(stopped) (those it had to stop) and C(waited_s).
  type: dict
  returned: when I(state=held) and a holder of the same run was replaced
"""

import contextlib  # noqa: E402
import errno  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

TOKEN_ENV = "GDSFLEET_PLAYBOOK_TOKEN"  # noqa: S105 - a variable name
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}(\.[A-Za-z0-9_-]{1,80}){0,3}$")
MAX_HOLDER_BYTES = 4096


def _run_of(token: str) -> str:
    first = token.split(".", 1)[0]
    return "" if first in ("manual", "adhoc") else first


def _read_holder(path: str) -> dict[str, Any]:
    try:
        with open(path + ".holder", "rb") as fh:
            raw = fh.read(MAX_HOLDER_BYTES)
        doc = json.loads(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    out: dict[str, Any] = {}
    for key in ("token", "run"):
        val = doc.get(key)
        out[key] = val if isinstance(val, str) and len(val) <= 256 else ""
    for key in ("pid", "since"):
        val = doc.get(key)
        out[key] = val if isinstance(val, (int, float)) and not isinstance(val, bool) else 0
    return out


def _carries(pid: int, token: str) -> bool:
    """Whether process ``pid`` carries ``token`` in its environment (so it is the holder)."""
    if pid <= 1 or not token:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read(1 << 20)
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in env.split(b"\0")


def _tagged(token: str, skip: set[int]) -> list[int]:
    """The pids of the processes on this node that carry ``token`` in their environment (a
    zombie's environment reads empty: it is gone), but those in ``skip``."""
    if not token:
        return []
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in skip and _carries(int(name), token):
            out.append(int(name))
    return out


def _settle(token: str, skip: set[int], wait: float) -> dict[str, Any]:
    """Wait up to ``wait`` seconds for the processes carrying ``token`` to end, then stop the
    rest (SIGTERM, SIGKILL after 10 s). Returns ``waited_for``, ``stopped``, ``left`` (pids
    that survive SIGKILL) and ``waited_s``."""
    t0 = time.monotonic()
    first = _tagged(token, skip)
    alive = first
    while alive and time.monotonic() - t0 < wait:
        time.sleep(0.2)
        alive = _tagged(token, skip)
    stopped = list(alive)
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        until = time.monotonic() + grace
        while alive and time.monotonic() < until:
            time.sleep(0.1)
            alive = _tagged(token, skip)
    return {"waited_for": [p for p in first if p not in stopped], "stopped": stopped,
            "left": alive, "waited_s": round(time.monotonic() - t0, 3)}


def _log(path: str, event: str, token: str, **extra: Any) -> None:
    line = json.dumps({"event": event, "token": token, "at": time.time(), **extra},
                      sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _kill_holder(holder: dict[str, Any], timeout: float = 10.0) -> bool:
    """SIGKILL the holder (only if it still carries its token); True once it is gone."""
    pid = int(holder.get("pid") or 0)
    token = str(holder.get("token") or "")
    if not _carries(pid, token):
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return True
        raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _carries(pid, token):
            return True
        time.sleep(0.05)
    return False


def _spawn_holder(fd: int, token: str, ttl: int) -> int:
    """A detached process that keeps ``fd`` (and its flock) for ``ttl`` seconds; its pid."""
    rfd, wfd = os.pipe()
    first = os.fork()
    if first == 0:  # pragma: no cover - runs in the child
        try:
            os.setsid()
            second = os.fork()
            if second:
                os.write(wfd, str(second).encode())
                os._exit(0)
            os.environ[TOKEN_ENV] = token
            os.set_inheritable(fd, True)  # through the exec below: it keeps the lock
            devnull = os.open(os.devnull, os.O_RDWR)
            for std in (0, 1, 2):
                os.dup2(devnull, std)
            keep = {fd, 0, 1, 2}
            for other in range(3, 1024):
                if other not in keep:
                    with contextlib.suppress(OSError):
                        os.close(other)
            # the token in the environment of a process that does nothing but wait: exec
            # sleep so the holder is visible as such (and carries the token in /proc)
            os.execve("/bin/sleep", ["sleep", str(int(ttl))], dict(os.environ))  # noqa: S606
        finally:
            os._exit(1)
    os.close(wfd)
    os.waitpid(first, 0)
    raw = os.read(rfd, 32)
    os.close(rfd)
    return int(raw or b"0")


def hold(module: AnsibleModule, path: str, log: str, token: str, ttl: int,
         takeover_wait: int) -> dict[str, Any]:
    took_over: dict[str, Any] | None = None
    deadline = time.monotonic() + 15
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_holder(path)
            if holder.get("token") == token:  # this play holds it already
                return {"token": token, "holder": holder}
            same_run = bool(_run_of(token)) and holder.get("run") == _run_of(token)
            if same_run and took_over is None:
                # the old play's work on this node first (its holder keeps the lock meanwhile)
                skip = {os.getpid(), int(holder.get("pid") or 0)}
                settled = _settle(str(holder.get("token") or ""), skip, takeover_wait)
                if settled["left"]:
                    _log(log, "refused", token, holder=holder, left=settled["left"])
                    module.fail_json(msg=f"this node is held by {holder.get('token')!r} of the "
                                         f"same run, and its processes {settled['left']} "
                                         f"survive SIGKILL; stop them, then run again",
                                     token=token)
                _log(log, "takeover", token, old=holder, **{
                    k: settled[k] for k in ("waited_for", "stopped", "waited_s")})
                if not _kill_holder(holder):
                    module.fail_json(msg=f"this node is held by {holder.get('token')!r} of the "
                                         f"same run, and its holder pid {holder.get('pid')} "
                                         f"survives SIGKILL; stop it, then run again",
                                     token=token)
                took_over = {**holder, **{
                    k: settled[k] for k in ("waited_for", "stopped", "waited_s")}}
                deadline = time.monotonic() + 15  # for the killed holder's lock to go
                continue
            if took_over is not None and time.monotonic() < deadline:
                time.sleep(0.1)  # the killed holder's lock is on its way out
                continue
            _log(log, "refused", token, holder=holder)
            since = holder.get("since") or 0
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if since else "?"
            module.fail_json(
                msg=f"another gdsfleet play holds this node: token {holder.get('token') or '?'}"
                    f" (run {holder.get('run') or 'none'}), pid {holder.get('pid') or '?'}, since"
                    f" {when}; wait for it to end (it lets go at its end, or after its ttl), or"
                    f" stop it, then run again",
                token=token, holder=holder)
        pid = _spawn_holder(fd, token, ttl)
        os.close(fd)  # the holder keeps the open file description, and so the lock
        holder = {"token": token, "run": _run_of(token), "pid": pid, "since": time.time()}
        tmp = path + ".holder.tmp"
        wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(wfd, json.dumps(holder).encode())
        finally:
            os.close(wfd)
        os.replace(tmp, path + ".holder")
        _log(log, "acquire", token, pid=pid)
        out: dict[str, Any] = {"token": token, "holder": holder}
        if took_over is not None:
            out["took_over"] = took_over
        return out


def release(path: str, log: str, token: str) -> dict[str, Any]:
    holder = _read_holder(path)
    if holder.get("token") == token:
        _kill_holder(holder)
        _log(log, "release", token)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + ".holder")
    return {"token": token}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "token": {"type": "str", "default": "", "no_log": False},
            "path": {"type": "path", "default": "/run/gdsfleet/site.lock"},
            "log": {"type": "path", "default": "/run/gdsfleet/site-lock.log"},
            "ttl": {"type": "int", "default": 15000},
            "takeover_wait": {"type": "int", "default": 900},
        },
        supports_check_mode=True,
    )
    p = module.params
    token = p["token"] or ""
    if not token:
        if p["state"] == "released":
            module.exit_json(changed=False, token="")
        token = f"manual.{secrets.token_hex(6)}"
    if not TOKEN_RE.match(token):
        module.fail_json(msg=f"token {token[:80]!r}: letters, digits, '_' and '-' in up to four "
                             f"dot-separated parts; give the rollout's token or none")
    if p["ttl"] < 1:
        module.fail_json(msg=f"ttl {p['ttl']}: give seconds, 1 or more")
    if p["takeover_wait"] < 0:
        module.fail_json(msg=f"takeover_wait {p['takeover_wait']}: give seconds, 0 or more")
    folder = os.path.dirname(p["path"]) or "."
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if p["state"] == "held":
            result = hold(module, p["path"], p["log"], token, p["ttl"], p["takeover_wait"])
        else:
            result = release(p["path"], p["log"], token)
    except OSError as exc:
        module.fail_json(msg=f"{p['path']}: {exc.strerror or exc}; check that the folder is "
                             f"writable by the play's user (become: true)", token=token)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
