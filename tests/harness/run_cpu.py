"""The CPU a test command costs the machine: its own process tree and its simulated nodes.

    python -m tests.harness.run_cpu -- python -m pytest -q -n 0 tests/fleet/test_verify_fleet.py

TEST HARNESS TOOL (measurement only). The suite is CPU-bound on 2 cores (docs/testing.md,
"Speed"), so a cut is judged by CPU-seconds, which a shared, loaded machine changes far less
than wall time. ``/usr/bin/time`` sees only the command's process tree; a simulated node's
processes (apt, dpkg, the Ansible modules inside it) are children of podman's conmon, not of
the command. So this runs the command, samples every second the cgroup v1 CPU accounting
(``cpuacct.usage``) of each podman container that carries ``gdsfleet.pid=<a process of the
command's tree>`` (lab fleets, sim nodes and execution nodes set that label; molecule's
containers do not, so a molecule scenario's nodes are not counted), adds what each container
used across its simulated reboots (podman restarts it in a fresh cgroup), and prints:

    wall 213.8 s; command tree 61.3 CPU-s (user 42.4, sys 18.9); 8 containers 117.1 CPU-s;
    total 178.4 CPU-s

A container's last second before its removal can be missed (under 1 CPU-s each). Exit status:
the command's.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup/cpuacct/libpod_parent")


def _tree(root: int) -> set[int]:
    """``root`` and its descendants, from /proc (children of each process)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the second field, (comm), may hold spaces and parentheses: split after its end
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(parents.get(pid, []))
    return seen


def _label(cid: str) -> int | None:
    proc = subprocess.run(["podman", "inspect", "--format",
                           '{{ index .Config.Labels "gdsfleet.pid" }}', cid],
                          capture_output=True, text=True, timeout=30, check=False)
    value = proc.stdout.strip()
    return int(value) if proc.returncode == 0 and value.isdigit() else None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 64
    if not CGROUP.is_dir():
        print(f"run_cpu: no {CGROUP} (cgroup v1 cpuacct of podman's containers)",
              file=sys.stderr)
        return 69
    t0 = time.monotonic()
    child = subprocess.Popen(argv)
    owner: dict[str, int | None] = {}  # container id -> gdsfleet.pid label
    current: dict[str, int] = {}       # the cgroup's usage at the last sample (ns)
    before: dict[str, int] = {}        # what earlier cgroups of the container used (ns)
    ours: set[str] = set()
    while True:
        done = child.poll() is not None
        tree = _tree(child.pid) if not done else set()
        for cg in CGROUP.glob("libpod-*"):
            cid = cg.name.removeprefix("libpod-")
            if cid.startswith("conmon-"):
                continue
            try:
                usage = int((cg / "cpuacct.usage").read_text())
            except (OSError, ValueError):
                continue
            if cid not in owner:
                owner[cid] = _label(cid)
            if owner[cid] in tree:
                ours.add(cid)
            if usage < current.get(cid, 0):  # restarted (a simulated reboot): a new cgroup
                before[cid] = before.get(cid, 0) + current[cid]
            current[cid] = usage
        if done:
            break
        time.sleep(1)
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes = sum(before.get(c, 0) + current.get(c, 0) for c in ours) / 1e9
    tree_cpu = ru.ru_utime + ru.ru_stime
    print(f"wall {wall:.1f} s; command tree {tree_cpu:.1f} CPU-s (user {ru.ru_utime:.1f}, "
          f"sys {ru.ru_stime:.1f}); {len(ours)} containers {nodes:.1f} CPU-s; "
          f"total {tree_cpu + nodes:.1f} CPU-s", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    os.environ.setdefault("CONTAINERS_CONF", str(Path(__file__).with_name("containers.conf")))
    sys.exit(main(sys.argv[1:]))
