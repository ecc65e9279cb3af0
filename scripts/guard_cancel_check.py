"""A canceled (SIGINT) and a timed-out playbook through ``run_playbook`` on this machine: nothing
of theirs is alive when run_playbook's own sweep begins (the guard ended them) nor after.

    python scripts/guard_cancel_check.py      (a venv with the provisioner installed)

Prints one line per fact and ``RESULT ok``; exit 1 otherwise. The playbook is a 120 s ``sleep``
on ``node1`` over the local connection; nothing on the machine is changed.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from provisioner import interrupts
from provisioner.rollout import guard
from provisioner.rollout.runner import run_playbook


def mine(tag: str) -> list[tuple[int, str]]:
    """This process's playbook processes of run ``tag`` (by their token)."""
    needle = f"{guard.TOKEN_ENV}={tag}.{os.getpid()}.".encode()
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{p}/environ").read_bytes():
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:80]
                out.append((int(p), cmd.decode(errors="replace")))
        except OSError:
            continue
    return out


def main() -> int:
    seen: list[list[tuple[int, str]]] = []
    real = guard.sweep

    def recording(token: str, **kw: Any) -> list[int]:
        seen.append(mine(token.split(".")[0]))
        return real(token, **kw)

    guard.sweep = recording  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-guard-check-"))
    pb = tmp / "pb.yml"
    pb.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                  "    - ansible.builtin.command: sleep 120\n      changed_when: false\n")
    inv = tmp / "hosts"
    inv.write_text(f"node1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    ok = True
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    with interrupts.handling():
        timer.start()
        t0 = time.monotonic()
        try:
            run_playbook(pb, inv, ["node1"], private_data_dir=tmp / "r1", run_tag="sigint")
            print("sigint: run_playbook returned without Interrupted")
            ok = False
        except interrupts.Interrupted as exc:
            print(f"sigint: Interrupted exit {exc.exit_code} after {time.monotonic() - t0:.1f} s")
        timer.join()
    print(f"sigint: alive when run_playbook's sweep began: {seen[-1]}; alive after: "
          f"{mine('sigint')}")
    ok = ok and seen[-1] == [] and mine("sigint") == []
    interrupts.reset()  # the SIGINT recorded above
    t0 = time.monotonic()
    res = run_playbook(pb, inv, ["node1"], private_data_dir=tmp / "r2", run_tag="tmo", timeout=3)
    print(f"timeout: status {res.status} rc {res.rc} after {time.monotonic() - t0:.1f} s; "
          f"host ok={res.hosts['node1'].succeeded}")
    print(f"timeout: alive when run_playbook's sweep began: {seen[-1]}; alive after: "
          f"{mine('tmo')}")
    ok = ok and seen[-1] == [] and mine("tmo") == [] and res.status == "timeout"
    print("RESULT", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
