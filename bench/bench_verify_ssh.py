"""The SSH part of a verified node's coordinator CPU, per step and per transport setting (not a
test; issue 31).

One connection after another (serial, so paramiko's reader thread's work falls into the step
that waits for it) to the SIMULATED lab's bare nodes (tests/harness: containers, sshd on
loopback): connect, the gather (its bundled script in, its output out), a command fed the
I/O test's bundled script (``cat >/dev/null``: the script's transfer, not its run), close. The
process's CPU (getrusage, user + system) around each step, the modes interleaved connection by
connection, so the machine's load falls on all of them alike:

* ``old``: paramiko's cipher order (aes-ctr + hmac-sha2 on OpenSSH) and the private key parsed
  at every connect, as before issue 31;
* ``gcm``: AES-GCM first (provisioner.ssh.connection.PREFERRED_CIPHERS), key parsed per connect;
* ``gcm+key``: AES-GCM and the key parsed once per run (what ``verify`` does now).

    .venv/bin/python bench/bench_verify_ssh.py                 # 8 bare nodes, 30 rounds
    .venv/bin/python bench/bench_verify_ssh.py --rounds 60 --modes gcm+key,gcm,old
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STEPS = ("connect", "gather", "iotest script", "close", "total")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def measure(inventory: Path, modes: list[str], rounds: int) -> dict[str, dict[str, list[float]]]:
    from provisioner.inventory import load_inventory
    from provisioner.remote import load_script
    from provisioner.ssh import SSHSettings, runner_factory
    from provisioner.ssh import connection as conn
    from provisioner.verify.iotest import SCRIPT
    from provisioner.verify.node import GATHER_COMMAND, GATHER_SCRIPT

    nodes = load_inventory(str(inventory)).nodes
    make = runner_factory(SSHSettings(ssh_config=None))
    gather, iotest = load_script(GATHER_SCRIPT), load_script(SCRIPT)
    real_key = conn._private_key

    def no_key_cache(_path: str) -> None:
        return None

    settings: dict[str, tuple[tuple[str, ...], Callable[[str], Any]]] = {
        "old": (conn._PARAMIKO_CIPHERS, no_key_cache),
        "gcm": (conn.PREFERRED_CIPHERS, no_key_cache),
        "gcm+key": (conn.PREFERRED_CIPHERS, real_key),
    }
    out: dict[str, dict[str, list[float]]] = {m: {s: [] for s in STEPS} for m in modes}
    try:
        for i in range(rounds):
            for mode in modes:
                ciphers, key = settings[mode]
                conn._Transport._preferred_ciphers = ciphers  # type: ignore[attr-defined]
                conn._private_key = key  # type: ignore[assignment]
                c0 = _cpu()
                runner = make(nodes[i % len(nodes)])
                runner.connect()
                c1 = _cpu()
                g = runner.run(GATHER_COMMAND, timeout=120, stdin=gather)
                c2 = _cpu()
                s = runner.run("cat >/dev/null; echo '{}'", timeout=120, stdin=iotest)
                c3 = _cpu()
                runner.close()
                time.sleep(0.02)  # the reader thread's last wake
                c4 = _cpu()
                if g.exit_status != 0 or '"gdsfleet_gather"' not in g.stdout or s.exit_status:
                    raise SystemExit(f"bench_verify_ssh: FAILED, no figure: {mode}: gather "
                                     f"exit {g.exit_status}, script exit {s.exit_status}")
                for step, v in zip(STEPS, (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c4 - c0),
                                   strict=True):
                    out[mode][step].append(v)
    finally:
        conn._Transport._preferred_ciphers = conn.PREFERRED_CIPHERS  # type: ignore[attr-defined]
        conn._private_key = real_key  # type: ignore[assignment]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30, help="connections per mode")
    ap.add_argument("--modes", default="old,gcm,gcm+key")
    ap.add_argument("--inventory", help="an inventory of running lab nodes (else 8 are started)")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("old", "gcm", "gcm+key") for m in modes):
        ap.error("--modes: a comma-separated list of old, gcm, gcm+key")
    sys.path.insert(0, str(REPO / "bench"))
    import bench_verify as bv

    os.environ.update({k: v for k, v in bv._env().items() if k not in os.environ})
    lab = None
    try:
        if args.inventory:
            inv = Path(args.inventory)
        else:
            from tests.harness import lab as labmod

            work = Path(tempfile.mkdtemp(prefix="gdsfleet-bench-verify-ssh-"))
            lab = labmod.Lab(work / "lab", prefix=f"gdsfleet-bs-{secrets.token_hex(2)}",
                             port_base=bv._free_port_base(bv.MAX_PER_NODE))
            nodes = lab.up(bv.MAX_PER_NODE)
            inv = lab.inventory(work / "inv" / "hosts.yml", nodes)
        load0 = os.getloadavg()[0]
        res = measure(inv, modes, args.rounds)
        load1 = os.getloadavg()[0]
    finally:
        if lab is not None:
            lab.down()
    print("coordinator CPU ms per node (median of "
          f"{args.rounds}; serial; modes interleaved):")
    print(f"{'mode':<8} " + " ".join(f"{s:>14}" for s in STEPS))
    for m in modes:
        print(f"{m:<8} " + " ".join(f"{1e3 * statistics.median(res[m][s]):14.2f}"
                                    for s in STEPS))
    print(f"(load average {load0:.1f} at the start, {load1:.1f} at the end, on "
          f"{os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
