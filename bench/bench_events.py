"""Runner artifacts benchmark (not a test): files and bytes a playbook run leaves on disk.

For N hosts (``ansible_connection: local`` against 127.0.0.1, names in a temporary inventory)
and a 3-task play, the same run twice into a fresh runner folder:

* before: ``ansible_runner.run`` as gdsfleet drove it until issue 14 (every event kept by
  ansible-runner: one ``job_events/<n>-<uuid>.json`` per event, ``stdout``/``stderr``);
* after: :func:`provisioner.rollout.runner.run_playbook` (``events.jsonl`` + ``hosts.json``).

Printed: files and bytes under ``artifacts/`` for each, and the ratios after/before. Both runs
must end with every host changed; a run that does not is reported as such, with no figure.

    .venv/bin/python bench/bench_events.py --hosts 200 --forks 50
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PLAY = """\
- name: Three tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: One
      ansible.builtin.command: "true"
      changed_when: true
    - name: Two
      ansible.builtin.command: "true"
      changed_when: false
    - name: Three
      ansible.builtin.command: "true"
      changed_when: true
"""


class BenchFailed(Exception):
    """A measured run did not do what it measures: no figure may be printed."""


def tree(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def setup(work: Path, n: int) -> tuple[Path, Path, list[str]]:
    hosts = [f"h{i:05d}" for i in range(n)]
    inv = work / "hosts"
    inv.write_text("".join(
        f"{h} ansible_host=127.0.0.1 ansible_connection=local "
        f"ansible_python_interpreter={sys.executable}\n" for h in hosts))
    play = work / "play.yml"
    play.write_text(PLAY)
    return inv, play, hosts


def before(work: Path, inv: Path, play: Path, hosts: list[str], forks: int) -> dict[str, Any]:
    import ansible_runner

    stats: dict[str, Any] = {}

    def on_event(ev: dict[str, Any]) -> bool:
        if ev.get("event") == "playbook_on_stats":
            stats.update(ev.get("event_data") or {})
        return True  # the former handler: ansible-runner keeps every event as a file

    pdd = work / "before"
    pdd.mkdir()
    t0 = time.monotonic()
    r = ansible_runner.run(private_data_dir=str(pdd), playbook=str(play), inventory=str(inv),
                           forks=forks, quiet=True, event_handler=on_event,
                           suppress_env_files=True)
    wall = time.monotonic() - t0
    changed = set(stats.get("changed") or {})
    if r.status != "successful" or changed != set(hosts):
        raise BenchFailed(f"the 'before' run failed: status {r.status}, rc {r.rc}, "
                          f"{len(changed)}/{len(hosts)} host(s) changed")
    files, size = tree(pdd / "artifacts")
    return {"files": files, "bytes": size, "wall_s": wall}


def after(work: Path, inv: Path, play: Path, hosts: list[str], forks: int) -> dict[str, Any]:
    from provisioner.rollout.runner import HostStatus, run_playbook

    pdd = work / "after"
    t0 = time.monotonic()
    res = run_playbook(play, inv, hosts, forks=forks, private_data_dir=pdd)
    wall = time.monotonic() - t0
    bad = [h for h in hosts if res.hosts[h].status is not HostStatus.CHANGED]
    if res.error or bad:
        raise BenchFailed(f"the 'after' run failed: {res.error or ''} {len(bad)} host(s) not "
                          f"changed (first: {res.hosts[bad[0]].to_dict() if bad else None})")
    files, size = tree(pdd / "artifacts")
    return {"files": files, "bytes": size, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--forks", type=int, default=50)
    args = ap.parse_args(argv)
    if args.hosts < 1 or args.forks < 1:
        ap.error("--hosts and --forks must be at least 1")
    with tempfile.TemporaryDirectory(prefix="gdsfleet-bench-events-") as tmp:
        work = Path(tmp)
        inv, play, hosts = setup(work, args.hosts)
        try:
            b = before(work, inv, play, hosts, args.forks)
            a = after(work, inv, play, hosts, args.forks)
        except BenchFailed as exc:
            print(f"bench_events: FAILED, no figure: {exc}", file=sys.stderr)
            return 1
    print(f"{args.hosts} hosts, 3-task play, forks {args.forks}")
    print(f"  before (a JSON file per event): {b['files']:7d} files {b['bytes']:12,d} bytes "
          f"({b['wall_s']:.1f}s)")
    print(f"  after  (events.jsonl+hosts.json): {a['files']:5d} files {a['bytes']:12,d} bytes "
          f"({a['wall_s']:.1f}s)")
    print(f"  ratio after/before: files {a['files'] / b['files']:.4f}, "
          f"bytes {a['bytes'] / b['bytes']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
