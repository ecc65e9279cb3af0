"""The stand-in repository's signing leaves no gpg-agent running after lab teardown and prints
no "gpg: checking the trustdb" noise (issue 30 item 9). Runs the real gpg on a throw-away key
home, with the same calls and options as tests/harness/standin_repo/build.sh."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.lab import stop_repo_gpg_agent

BUILD = Path(__file__).resolve().parents[2] / "tests/harness/standin_repo/build.sh"

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not shutil.which("gpgconf"),
                                reason="needs GnuPG")


def _agent_alive(home: Path) -> bool:
    r = subprocess.run(["gpg-connect-agent", "--no-autostart", "/bye"], capture_output=True,
                       text=True, env={**os.environ, "GNUPGHOME": str(home)}, timeout=30,
                       check=False)
    return r.returncode == 0 and "no gpg-agent running" not in r.stderr


def test_build_sh_stops_its_agent_and_skips_the_trustdb_check() -> None:
    text = BUILD.read_text()
    assert "trap stop_agent EXIT" in text and "stop_agent' EXIT" in text
    assert 'gpg() { command gpg --no-auto-check-trustdb "$@"; }' in text


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder: gpg-agent's socket lives in GNUPGHOME when /run/user has none, and a
    Unix socket path holds 108 bytes, which pytest-xdist's tmp_path can pass."""
    base = Path(tempfile.mkdtemp(prefix="gg-", dir="/tmp"))
    yield base
    stop_repo_gpg_agent(base)
    shutil.rmtree(base, ignore_errors=True)


def test_signing_is_quiet_and_teardown_stops_the_agent(short_tmp: Path) -> None:
    tmp_path = short_tmp
    home = tmp_path / "standin-repo-gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--no-auto-check-trustdb", "--batch"]
    noise = ""
    for who in ("cuda", "debian"):  # build.sh's calls
        r = subprocess.run([*gpg, "--quiet", "--pinentry-mode", "loopback", "--passphrase", "",
                            "--quick-gen-key", f"stand-in {who} (TEST ONLY) <{who}@x.invalid>",
                            "ed25519", "sign", "1y"], env=env, capture_output=True, text=True,
                           timeout=60, check=True)
        noise += r.stderr
    r = subprocess.run([*gpg, "--list-keys", "debian@x.invalid"], env=env, capture_output=True,
                       text=True, timeout=60, check=True)
    noise += r.stderr
    (tmp_path / "Release").write_text("Origin: stand-in\n")
    r = subprocess.run([*gpg, "--yes", "--local-user", "debian@x.invalid", "--clearsign", "-o",
                        str(tmp_path / "InRelease"), str(tmp_path / "Release")], env=env,
                       capture_output=True, text=True, timeout=60, check=True)
    noise += r.stderr
    assert "checking the trustdb" not in noise
    assert _agent_alive(home)  # signing started one, as the lab's build does
    assert stop_repo_gpg_agent(tmp_path) is True
    assert not _agent_alive(home)
    assert stop_repo_gpg_agent(tmp_path / "nothing-here") is False
