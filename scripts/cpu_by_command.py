#!/usr/bin/env python3
"""Where a long command's CPU goes, by program name, from the kernel's process accounting.

    sudo python3 scripts/cpu_by_command.py -- bash .ci/run      # needs root (acct(2))
    python3 scripts/cpu_by_command.py --read FILE               # an accounting file already written

The test suite starts tens of thousands of short processes (ansible-playbook forks, one Python
per Ansible module inside the simulated nodes, ssh clients) that a sampler of /proc misses.
BSD process accounting (``acct(2)``, Linux ``CONFIG_BSD_PROCESS_ACCT``) writes one record for
every process that exits, with its user and system CPU, so the table adds up what every
program cost. Processes still alive when accounting stops are not in it. ``fork`` rows are
processes that forked and never exec'd (ansible-playbook's workers). A measuring tool, not
used by the tests or the provisioner.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float), utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01
AHZ = 100  # comp_t times are in AHZ ticks


def comp_t(value: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) as an integer."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def records(data: bytes) -> Iterator[tuple[str, bool, float]]:
    """(command name, forked without exec, CPU seconds) for each v3 record in ``data``."""
    for off in range(0, len(data) - RECORD.size + 1, RECORD.size):
        rec = RECORD.unpack_from(data, off)
        if rec[1] != 3:
            raise ValueError(f"record at {off}: accounting version {rec[1]}, not 3")
        comm = rec[-1].split(b"\0", 1)[0].decode("ascii", "replace")
        yield comm, bool(rec[0] & AFORK), (comp_t(rec[10]) + comp_t(rec[11])) / AHZ


def table(data: bytes, top: int = 25) -> str:
    cpu: dict[tuple[str, bool], float] = collections.defaultdict(float)
    count: collections.Counter[tuple[str, bool]] = collections.Counter()
    for comm, forked, seconds in records(data):
        cpu[comm, forked] += seconds
        count[comm, forked] += 1
    total = sum(cpu.values())
    lines = [f"{total:.1f} CPU-s in {sum(count.values())} exited processes",
             f"{'CPU s':>9} {'share':>6} {'procs':>7} {'s each':>7}  command"]
    for (comm, forked), seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[:top]:
        n = count[comm, forked]
        lines.append(f"{seconds:9.1f} {seconds / total:6.1%} {n:7d} {seconds / n:7.3f}  "
                     f"{comm}{' (fork)' if forked else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--read", metavar="FILE", help="print the table of an accounting file")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = ap.parse_args(argv)
    if args.read:
        with open(args.read, "rb") as fh:
            print(table(fh.read(), args.top))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give a command after --, or --read FILE")
    libc = ctypes.CDLL(None, use_errno=True)
    fd, path = tempfile.mkstemp(prefix="gdsfleet-acct-")
    os.close(fd)
    if libc.acct(path.encode()) != 0:
        err = ctypes.get_errno()
        os.unlink(path)
        print(f"cpu_by_command: acct({path}) failed: {os.strerror(err)} (needs root and a "
              "kernel with CONFIG_BSD_PROCESS_ACCT)", file=sys.stderr)
        return 1
    try:
        rc = subprocess.call(command)
    finally:
        libc.acct(None)
    with open(path, "rb") as fh:
        print(table(fh.read(), args.top))
    print(f"(accounting file kept: {path})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
