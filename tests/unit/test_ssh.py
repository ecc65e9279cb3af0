"""SSH transport logic without a server: config translation, retries, redaction, host keys."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import paramiko
import pytest

from provisioner.errors import ConnectError, HostKeyError
from provisioner.inventory import Node
from provisioner.ssh import (
    SSHSettings,
    Target,
    _changed_key_error,
    _HostKeyPolicy,
    classify,
    describe_error,
    fingerprint,
    parse_jump,
    redact,
    resolve_target,
    with_retries,
)

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def _settings(tmp_path: Path) -> SSHSettings:
    return SSHSettings(
        managed_known_hosts=str(tmp_path / "managed"),
        user_known_hosts=str(tmp_path / "user_kh"),
        system_known_hosts=str(tmp_path / "sys_kh"),
    )


@pytest.mark.parametrize(
    ("text", "must_not_contain", "must_contain"),
    [
        (f"bad key: {PEM} end", "b3BlbnNzaC1rZXkt", "[REDACTED PRIVATE KEY]"),
        ("login failed password=hunter2 for root", "hunter2", "password=***"),
        ("ansible_ssh_pass: 's3cr3t value'", "s3cr3t", "ansible_ssh_pass: ***"),
        ("postgresql+psycopg://gds:topsecret@db/ledger", "topsecret", "gds:***@db"),
        ("passphrase = abc123, next", "abc123", "passphrase = ***"),
    ],
)
def test_redact(text: str, must_not_contain: str, must_contain: str) -> None:
    out = redact(text)
    assert must_not_contain not in out
    assert must_contain in out


def test_redact_leaves_ordinary_text() -> None:
    msg = "gpu-07 (root@10.0.0.7:22): connection refused"
    assert redact(msg) == msg


@pytest.mark.parametrize(
    ("spec", "hops"),
    [
        ("bastion", [(None, "bastion", None)]),
        ("ops@bastion:2222", [("ops", "bastion", 2222)]),
        ("a,ops@b:23", [(None, "a", None), ("ops", "b", 23)]),
        ("ssh://u@[fe80::1]:2200", [("u", "fe80::1", 2200)]),
    ],
)
def test_parse_jump(spec: str, hops: list[tuple[str | None, str, int | None]]) -> None:
    assert parse_jump(spec) == hops


def test_parse_jump_refuses_bad_port() -> None:
    with pytest.raises(ConnectError):
        parse_jump("host:99999")


def test_resolve_target_from_ssh_config(tmp_path: Path) -> None:
    cfg = paramiko.SSHConfig.from_text(
        "Host gpu-*\n  HostName %h.dc1.example\n  Port 2222\n  User ops\n"
        "  IdentityFile ~/.ssh/fleet_ed25519\n  UserKnownHostsFile /etc/gds/kh ~/kh2\n"
        "  ProxyJump jumper@bastion:2022\n"
        "Host bastion\n  HostName 192.0.2.10\n  IdentityFile /keys/bastion\n"
    )
    node = Node(name="gpu-07", address="gpu-07")
    t = resolve_target(node, _settings(tmp_path), cfg)
    assert (t.hostname, t.port, t.user) == ("gpu-07.dc1.example", 2222, "ops")
    assert t.key_files[0].endswith("/.ssh/fleet_ed25519")
    assert t.known_hosts[:2] == ("/etc/gds/kh", str(Path("~/kh2").expanduser()))
    assert t.host_key_name == "[gpu-07.dc1.example]:2222"
    assert len(t.jumps) == 1
    j = t.jumps[0]
    assert (j.hostname, j.port, j.user, j.key_files) == ("192.0.2.10", 2022, "jumper",
                                                          ("/keys/bastion",))
    assert t.proxy_command is None


def test_inventory_values_win_over_ssh_config(tmp_path: Path) -> None:
    cfg = paramiko.SSHConfig.from_text(
        "Host 127.0.0.1\n  Port 2222\n  User ops\n  ProxyCommand nc %h %p\n"
    )
    node = Node(name="n", address="127.0.0.1", port=2201, user="root", key_file="/k",
                ssh_options=(("UserKnownHostsFile", "/lab/kh"),))
    t = resolve_target(node, _settings(tmp_path), cfg)
    assert (t.port, t.user, t.key_files) == (2201, "root", ("/k",))
    assert t.known_hosts[0] == "/lab/kh"
    assert t.proxy_command == "nc 127.0.0.1 2201"


def test_inventory_proxyjump_option(tmp_path: Path) -> None:
    node = Node(name="n", address="10.1.2.3", ssh_options=(("ProxyJump", "ops@127.0.0.1:2299"),))
    t = resolve_target(node, _settings(tmp_path), None)
    assert [(j.user, j.hostname, j.port) for j in t.jumps] == [("ops", "127.0.0.1", 2299)]
    assert "via ops@127.0.0.1:2299" in t.describe()


def test_known_hosts_order(tmp_path: Path) -> None:
    s = SSHSettings(known_hosts=("/cli/kh",), managed_known_hosts="/m",
                    user_known_hosts="/u", system_known_hosts="/s")
    node = Node(name="n", address="h", ssh_options=(("UserKnownHostsFile", "/inv/kh"),))
    assert resolve_target(node, s, None).known_hosts == ("/cli/kh", "/inv/kh", "/m", "/u", "/s")


def _refused() -> paramiko.ssh_exception.NoValidConnectionsError:
    return paramiko.ssh_exception.NoValidConnectionsError(
        {("127.0.0.1", 22): OSError(errno.ECONNREFUSED, "refused")}
    )


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (paramiko.SSHException("Error reading SSH protocol banner[Errno 104] reset"), True),
        (_refused(), True),
        (ConnectionResetError(errno.ECONNRESET, "reset"), True),
        (TimeoutError("timed out"), True),
        (paramiko.AuthenticationException("Authentication failed."), False),
        (paramiko.BadHostKeyException("h", paramiko.RSAKey.generate(1024),
                                      paramiko.RSAKey.generate(1024)), False),
        (HostKeyError("unknown"), False),
        (socket.gaierror(-2, "Name or service not known"), False),
        (paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)"), False),
        (OSError(errno.EACCES, "denied"), False),
    ],
)
def test_classify(exc: BaseException, transient: bool) -> None:
    assert classify(exc) is transient


def test_with_retries_retries_transient_with_growing_jittered_delays() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise paramiko.SSHException("Error reading SSH protocol banner")
        return "ok"

    assert with_retries(flaky, retries=3, base_delay=1.0, max_delay=30, sleep=sleeps.append) == "ok"
    assert len(calls) == 3
    assert len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1.5 and 1.0 <= sleeps[1] <= 3.0


def test_with_retries_gives_up_after_budget() -> None:
    sleeps: list[float] = []

    def refused() -> None:
        raise _refused()

    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError):
        with_retries(refused, retries=2, base_delay=0.1, max_delay=1, sleep=sleeps.append)
    assert len(sleeps) == 2


def test_with_retries_never_retries_auth() -> None:
    calls: list[int] = []

    def auth() -> None:
        calls.append(1)
        raise paramiko.AuthenticationException("Authentication failed.")

    with pytest.raises(paramiko.AuthenticationException):
        with_retries(auth, retries=5, base_delay=0.0, max_delay=0, sleep=lambda s: None)
    assert calls == [1]


def test_describe_error_is_readable_and_redacted() -> None:
    t = Target(name="gpu-07", hostname="127.0.0.1", port=2207, user="root", key_files=("/k",))
    e = describe_error("gpu-07", t, paramiko.AuthenticationException(f"bad {PEM}"))
    assert "authentication as 'root' failed" in str(e)
    assert "PRIVATE KEY-----" not in str(e)
    assert not e.transient
    r = describe_error("gpu-07", t, _refused())
    assert "connection refused" in str(r) and r.transient


def test_unknown_key_policy_message(tmp_path: Path) -> None:
    key = paramiko.RSAKey.generate(1024)
    t = Target(name="n", hostname="127.0.0.1", port=2201, user="root",
               known_hosts=(str(tmp_path / "lab_kh"),))
    policy = _HostKeyPolicy(t, _settings(tmp_path), "gdsfleet-lab-01")
    with pytest.raises(HostKeyError) as ei:
        policy.missing_host_key(paramiko.SSHClient(), "[127.0.0.1]:2201", key)
    msg = str(ei.value)
    assert f"ssh-keyscan -p 2201 127.0.0.1 >> {tmp_path / 'lab_kh'}" in msg
    assert fingerprint(key) in msg
    assert key.get_base64() not in msg


def test_accept_new_policy_appends_to_managed_file(tmp_path: Path) -> None:
    key = paramiko.RSAKey.generate(1024)
    s = SSHSettings(accept_new_host_keys=True, managed_known_hosts=str(tmp_path / "d" / "kh"))
    t = Target(name="n", hostname="127.0.0.1", port=22, user="root")
    _HostKeyPolicy(t, s, "n").missing_host_key(paramiko.SSHClient(), "127.0.0.1", key)
    hk = paramiko.HostKeys(str(tmp_path / "d" / "kh"))
    assert hk.check("127.0.0.1", key)


def test_changed_key_message_names_the_file_holding_the_old_key(tmp_path: Path) -> None:
    old, new = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:2205 {old.get_name()} {old.get_base64()}\n")
    t = Target(name="n", hostname="127.0.0.1", port=2205, user="root",
               known_hosts=(str(tmp_path / "none"), str(kh)))
    err = _changed_key_error("n", t, paramiko.BadHostKeyException("[127.0.0.1]:2205", new, old))
    assert f"ssh-keygen -R '[127.0.0.1]:2205' -f {kh}" in str(err)
    assert fingerprint(old) in str(err) and fingerprint(new) in str(err)
