"""Fault injection: hostile or unlucky files (issue 17, items 6, 9, 11, 12, 13).

known_hosts files with marker lines, report paths that are symlinks or devices, modes under a
wide umask, a full disk, corrupt ledger rows. Each test names what happened before the fix.
Cases that mount a filesystem need root and skip without it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from provisioner.errors import HostKeyError
from provisioner.inventory import Node
from provisioner.ssh import SSHRunner, SSHSettings, fingerprint


# ============================================================ 11: known_hosts marker lines
class _Server(paramiko.ServerInterface):
    """A stand-in node: any public key authenticates, ``exec`` answers ``ok``."""

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        def answer() -> None:
            time.sleep(0.2)  # after paramiko has sent the exec request's success reply
            channel.sendall(b"ok\n")
            channel.send_exit_status(0)
            channel.close()

        threading.Thread(target=answer, daemon=True).start()
        return True


class ParamikoNode:
    """A real SSH server (paramiko) on a loopback port with one ECDSA host key."""

    def __init__(self) -> None:
        self.host_key = paramiko.ECDSAKey.generate()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.transports: list[paramiko.Transport] = []
        self._stop = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Server())
            except (paramiko.SSHException, EOFError, OSError):
                continue

    @property
    def name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def line(self, key: paramiko.PKey | None = None, host: str | None = None) -> str:
        k = key or self.host_key
        return f"{host or self.name} {k.get_name()} {k.get_base64()}"

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for t in self.transports:
            t.close()


@pytest.fixture(scope="module")
def pnode() -> Iterator[ParamikoNode]:
    server = ParamikoNode()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("client") / "id_ecdsa"
    paramiko.ECDSAKey.generate().write_private_key_file(str(path))
    return path


def _run(pnode: ParamikoNode, client_key: Path, known: Path, tmp_path: Path,
         **kw: Any) -> str:
    settings = SSHSettings(
        managed_known_hosts=str(tmp_path / "managed_known_hosts"),
        user_known_hosts=str(tmp_path / "no_user_known_hosts"),
        system_known_hosts=str(tmp_path / "no_system_known_hosts"),
        ssh_config=None, connect_timeout=3.0, retry_delay_s=0.01, **kw)
    node = Node(name="n1", address="127.0.0.1", port=pnode.port, user="root",
                key_file=str(client_key), ssh_options=(("UserKnownHostsFile", str(known)),))
    with SSHRunner(node, settings) as r:
        return r.run("true", timeout=10).stdout


OTHER_KEY = paramiko.ECDSAKey.generate()
CA_LINE = f"@cert-authority * {OTHER_KEY.get_name()} {OTHER_KEY.get_base64()}"


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_cert_authority_line_is_skipped_and_plain_entries_still_checked(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"# fleet CA\n{CA_LINE}\n{pnode.line()}\n")
    # before: HostKeyError "known_hosts file ... cannot be read: Invalid key ...
    # (Incorrect padding)": every node unreachable
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"
    err = capsys.readouterr().err
    assert "@cert-authority line skipped" in err and "line 2" in err


def test_cert_authority_line_does_not_let_an_unknown_key_in(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{CA_LINE}\n{pnode.line(OTHER_KEY)}\n")
    with pytest.raises(HostKeyError, match="CHANGED"):
        _run(pnode, client_key, known, tmp_path)
    known.write_text(f"{CA_LINE}\n")
    with pytest.raises(HostKeyError, match="is not known"):
        _run(pnode, client_key, known, tmp_path)


def test_revoked_key_is_refused_even_if_listed_plainly(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"{pnode.line()}\n@revoked * {k.get_name()} {k.get_base64()}\n")
    with pytest.raises(HostKeyError) as ei:
        _run(pnode, client_key, known, tmp_path)
    # before: "cannot be read: ... Incorrect padding" (and, had paramiko read the line, the
    # plain entry would have let the revoked key in)
    assert "REVOKED" in str(ei.value) and fingerprint(k) in str(ei.value)
    assert "line 2" in str(ei.value)


def test_revoked_key_with_another_key_of_its_type_listed(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"@revoked {pnode.name} {k.get_name()} {k.get_base64()}\n"
                     f"{pnode.line(OTHER_KEY)}\n")
    with pytest.raises(HostKeyError, match="REVOKED"):
        _run(pnode, client_key, known, tmp_path)


def test_revoked_key_is_never_accepted_as_new(pnode: ParamikoNode, client_key: Path,
                                              tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    k = pnode.host_key
    known.write_text(f"@revoked * {k.get_name()} {k.get_base64()}\n")
    with pytest.raises(HostKeyError, match="REVOKED"):
        _run(pnode, client_key, known, tmp_path, accept_new_host_keys=True)
    assert not (tmp_path / "managed_known_hosts").exists()


@pytest.mark.parametrize("form", ["hashed", "wildcard", "list", "negated"])
def test_hashed_and_pattern_host_names_keep_working(
        pnode: ParamikoNode, client_key: Path, tmp_path: Path, form: str) -> None:
    known = tmp_path / "known_hosts"
    host = {"hashed": _hashed(pnode.name), "wildcard": "[127.0.0.?]:*",
            "list": f"gpu-01,{pnode.name}", "negated": f"{pnode.name},!gpu-01"}[form]
    known.write_text(f"{CA_LINE}\n{pnode.line(host=host)}\n")
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"


def test_negated_pattern_excludes_the_host(pnode: ParamikoNode, client_key: Path,
                                           tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{pnode.line(host=f'[127.0.0.*]:*,!{pnode.name}')}\n")
    with pytest.raises(HostKeyError, match="is not known"):
        _run(pnode, client_key, known, tmp_path)


def test_malformed_lines_are_skipped(pnode: ParamikoNode, client_key: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"garbage\n{pnode.name} ssh-ed25519 not-base64!!\n@bogus x y z\n"
                     f"{pnode.line()}\n")
    assert _run(pnode, client_key, known, tmp_path) == "ok\n"
    assert "line 2" in capsys.readouterr().err
