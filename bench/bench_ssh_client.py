"""What one ssh client to an execution node costs the coordinator (not a test).

``--executor ssh`` starts OpenSSH clients on the coordinator: one per execution node for the
version check, one per shard for the job. This bench measures the CPU (user + sys, from the
children's rusage) of one such client, built by the executor's own ``ssh_argv``, against a
real sshd on loopback (``tests/harness/loopback_sshd.py``) running ``true``:

* ``default``: the command as the executor runs it, with the key exchange the two OpenSSH
  versions agree on by default (printed: OpenSSH 9.x picks the post-quantum hybrid
  ``sntrup761x25519-sha512``, 10.0 and later ``mlkem768x25519-sha256``);
* ``curve25519``: the same with ``KexAlgorithms=curve25519-sha256`` (classical only), to show
  what of the cost is the key exchange;
* ``mux``: a client through a connection that a master (``ControlMaster=yes``, started once,
  its CPU counted apart) already holds: what a client costs when it does no handshake.

Prints the median of ``--repeat`` runs per kind and its ratio to ``default``, measured in the
same run. The executor does not change the key exchange: that stays the operator's choice
(an ``ssh_config`` given with ``--ssh-config``); docs/performance.md has the figures.

    .venv/bin/python bench/bench_ssh_client.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.rollout.executors.nodes import ExecNode  # noqa: E402
from provisioner.rollout.executors.ssh import SshOptions, ssh_argv  # noqa: E402
from tests.harness.loopback_sshd import LoopbackExecNodes, missing_tools  # noqa: E402


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def client_cpu(argv: list[str]) -> float:
    """CPU seconds of one client run to its end; fails loudly if it does not succeed."""
    before = _children_cpu()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                       check=False)
    if r.returncode != 0:
        raise SystemExit(f"bench_ssh_client FAILED (no figure): rc {r.returncode}: "
                         f"{r.stderr.decode(errors='replace')[-400:]}")
    return _children_cpu() - before


def with_options(argv: list[str], *options: str) -> list[str]:
    """``argv`` with ``-o`` options placed first: for OpenSSH the first value given wins."""
    extra = [x for opt in options for x in ("-o", opt)]
    return [argv[0], *extra, *argv[1:]]


def negotiated_kex(argv: list[str]) -> str:
    r = subprocess.run(with_options(argv, "LogLevel=DEBUG"), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=60, check=False)
    m = re.search(r"kex: algorithm: (\S+)", r.stderr.decode(errors="replace"))
    return m.group(1) if m else "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    if not 3 <= args.repeat <= 1000:
        print("bench_ssh_client: --repeat 3..1000", file=sys.stderr)
        return 64
    lacking = missing_tools()
    if lacking:
        print(f"bench_ssh_client: this machine lacks {', '.join(lacking)}", file=sys.stderr)
        return 69
    with tempfile.TemporaryDirectory(prefix="gdsfleet-sshbench-") as tmp:
        root = Path(tmp)
        with LoopbackExecNodes(root, count=1) as nodes:
            node = ExecNode("e1", "127.0.0.1", nodes.ports[0],
                            key_file=str(root / "client_key"))
            base = ssh_argv(node, nodes.known_hosts, SshOptions(ssh_config="none"), "true")
            control = root / "mux"  # short: a socket path is limited to about 100 bytes
            if base[-3:] != ["--", node.host, "true"]:
                raise SystemExit(f"bench_ssh_client: unexpected ssh_argv tail {base[-3:]}")
            # the master: the same options, no command (-N), holding the connection
            master_argv = with_options([*base[:-3], "-N", "--", node.host],
                                       "ControlMaster=yes", f"ControlPath={control}")
            kinds = {
                "default": base,
                "curve25519": with_options(base, "KexAlgorithms=curve25519-sha256"),
                "mux": with_options(base, "ControlMaster=no", f"ControlPath={control}"),
            }
            kex = negotiated_kex(base)
            before = _children_cpu()
            master = subprocess.Popen(master_argv, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while not control.exists():
                if master.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("bench_ssh_client FAILED (no figure): the master did "
                                     "not start")
                time.sleep(0.02)
            samples: dict[str, list[float]] = {k: [] for k in kinds}
            try:
                for _ in range(args.repeat):  # the kinds interleaved, each run alike
                    for kind, cmd in kinds.items():
                        samples[kind].append(client_cpu(cmd))
            finally:
                master.terminate()
                master.wait(timeout=30)
            master_s = _children_cpu() - before - sum(sum(v) for v in samples.values())
    version = subprocess.run(["ssh", "-V"], capture_output=True, text=True,
                             check=False).stderr.strip()
    print(f"{version}; {os.cpu_count()} cores; key exchange by default: {kex}")
    print(f"{'client':12s} {'median CPU ms':>14s} {'/ default':>10s}   runs")
    ref = statistics.median(samples["default"])
    for kind, vals in samples.items():
        med = statistics.median(vals)
        print(f"{kind:12s} {med * 1000:14.1f} {med / ref:10.3f}   {len(vals)}")
    print(f"the master itself, for its {args.repeat} mux clients: {master_s * 1000:.1f} ms "
          f"(its handshake once, then relaying)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
