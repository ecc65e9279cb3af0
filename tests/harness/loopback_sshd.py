"""Stand-in execution nodes: real OpenSSH sshd daemons on loopback ports, started by a test or a
benchmark (no container), with this virtual environment's ansible-runner as the runner.

Shared by tests/unit/test_exec_nodes*.py and bench/bench_exec_scale.py. Nothing here knows the
orchestrator; it only writes what an operator would: host and client keys, a known_hosts file
naming each sshd's port, an ``--exec-inventory`` (group ``gdsfleet_exec``) and a stand-in
``gdsfleet.gds`` collection (its MANIFEST.json only) that the controller and the execution nodes
both see. Needs root (sshd's privilege separation) and OpenSSH's sshd, ssh and ssh-keygen.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
BIN = Path(sys.executable).parent


def missing_tools() -> list[str]:
    """What this module needs and the machine lacks (empty when all is there)."""
    out = [] if os.path.exists(SSHD) else ["sshd (openssh-server)"]
    out += [f"{t} (openssh-client)" for t in ("ssh", "ssh-keygen") if shutil.which(t) is None]
    if os.geteuid() != 0:
        out.append("root (sshd's privilege separation)")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True
    )


class Sshd:
    """One sshd on 127.0.0.1 at a free port, keys and config under ``root``."""

    def __init__(self, root: Path, host_key: Path, max_startups: int = 100,
                 extra_config: str = "") -> None:
        self.root = root
        self.extra_config = extra_config  # more sshd_config lines (a Ciphers list ...)
        self.port = free_port()
        self.host_key = host_key
        self.max_startups = max_startups
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cfg = self.root / f"sshd_config.{self.port}"
        cfg.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"PidFile {self.root}/sshd.{self.port}.pid\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "PermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
            f"MaxStartups {self.max_startups}\nLogLevel ERROR\n{self.extra_config}"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("sshd did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def stand_in_collection(base: Path, version: str) -> Path:
    """A stand-in gdsfleet.gds: only the MANIFEST.json the check reads (version, hash)."""
    top = base / "ansible_collections" / "gdsfleet" / "gds"
    top.mkdir(parents=True)
    (top / "MANIFEST.json").write_text(json.dumps({"collection_info": {
        "namespace": "gdsfleet", "name": "gds", "version": version}}))
    return base


def exec_inventory(root: Path, ports: list[int], runner: str | None = None,
                   name: str = "exec.ini", colls: Path | None = None) -> Path:
    """``--exec-inventory`` naming one execution node (e1, e2, ...) per sshd port."""
    inv = root / name
    lines = ["[gdsfleet_exec]"]
    for i, port in enumerate(ports):
        lines.append(
            f"e{i + 1} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
            f"ansible_ssh_private_key_file={root / 'client_key'} "
            f"gdsfleet_exec_runner={runner or BIN / 'ansible-runner'} "
            f"gdsfleet_exec_workdir={root / 'work'} "
            f"gdsfleet_exec_collections_path={colls or root / 'collections'}")
    inv.write_text("\n".join(lines) + "\n")
    return inv


class LoopbackExecNodes:
    """``count`` sshd on loopback sharing one host key, with the client key authorized,
    ``root/known_hosts`` naming every port, and ``root/collections`` (gdsfleet.gds
    ``version``). Use as a context manager; the daemons stop on exit."""

    def __init__(self, root: Path, count: int = 2, version: str = "0.2.0",
                 max_startups: int = 100) -> None:
        self.root = root
        keygen(root / "host_key")
        keygen(root / "client_key")
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        stand_in_collection(root / "collections", version)
        self.servers = [Sshd(root, root / "host_key", max_startups) for _ in range(count)]

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def __enter__(self) -> LoopbackExecNodes:
        try:
            for s in self.servers:
                s.start()
        except BaseException:
            self.stop()
            raise
        host_pub = (self.root / "host_key.pub").read_text().split()
        self.known_hosts.write_text("".join(
            f"[127.0.0.1]:{p} {host_pub[0]} {host_pub[1]}\n" for p in self.ports))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def keyed_sshd(root: Path) -> tuple[Sshd, Path]:
    """A started sshd under ``root`` with a host key, a client key (``client_key``) it
    accepts, and a ``known_hosts`` naming its port: the setup the SSH tests share. Returns the
    server (stop it) and the known_hosts file."""
    keygen(root / "host_key")
    keygen(root / "client_key")
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    server = Sshd(root, root / "host_key")
    server.start()
    host_pub = (root / "host_key.pub").read_text().split()
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {host_pub[0]} {host_pub[1]}\n")
    return server, known
