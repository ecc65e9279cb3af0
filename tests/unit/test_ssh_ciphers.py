"""The transport's cipher order (issue 31): AES-GCM first, then paramiko's own order. Only the
order changes, never the set offered; against OpenSSH's default list the negotiation picks
GCM, and a server that offers no GCM still gets the aes-ctr it got before."""

from __future__ import annotations

from pathlib import Path

import paramiko
import yaml

from provisioner.ssh import connection

PARAMIKO: tuple[str, ...] = paramiko.Transport._preferred_ciphers  # type: ignore[attr-defined]
OURS: tuple[str, ...] = connection._Transport._preferred_ciphers  # type: ignore[attr-defined]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ssh" / "openssh_default_ciphers.yml"


def negotiate(client: tuple[str, ...], server: list[str]) -> str | None:
    """RFC 4253 7.1: the first cipher of the client's list that the server also offers."""
    return next((c for c in client if c in server), None)


def test_same_ciphers_as_paramiko_only_reordered() -> None:
    ours = OURS
    assert sorted(ours) == sorted(PARAMIKO)
    assert ours[:2] == ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
    rest = [c for c in PARAMIKO if "gcm" not in c]
    assert list(ours[2:]) == rest  # paramiko's order for everything else


def test_openssh_default_server_list_negotiates_gcm() -> None:
    doc = yaml.safe_load(FIXTURE.read_text())
    assert doc["source"]["repo"] == "openssh/openssh-portable"
    server = doc["server_ciphers"]
    assert negotiate(OURS, server) == "aes128-gcm@openssh.com"
    # what paramiko's own order picked from the same list
    assert negotiate(PARAMIKO, server) == "aes128-ctr"


def test_server_without_gcm_gets_aes_ctr() -> None:
    server = ["chacha20-poly1305@openssh.com", "aes256-ctr", "aes128-ctr"]
    assert negotiate(OURS, server) == "aes128-ctr"
