"""provisioner.redact and provisioner.fsutil: every secret form is masked; files are private."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner import redact
from provisioner.fsutil import append_private, private_dir, write_private
from provisioner.rollout.lock import FileLock
from provisioner.store import display_url


@pytest.fixture(autouse=True)
def _empty_registry() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.mark.parametrize(
    ("argv", "secret"),
    [
        (["-e", "cuda_repo_password=s3cr3tA"], "s3cr3tA"),
        (["-ecuda_repo_password=s3cr3tA"], "s3cr3tA"),
        (["--extra-var=api_token=s3cr3tB"], "s3cr3tB"),
        (["--extra-vars", "a=1 vault_pass=s3cr3tC"], "s3cr3tC"),
        (["-e", '{"db_secret": "s3cr3tD", "n": 1}'], "s3cr3tD"),
        (["-e", "{db_secret: s3cr3tD}"], "s3cr3tD"),
        (["-e", "ssh_key=s3cr3tE"], "s3cr3tE"),
        (["--ledger", "postgresql+psycopg://gds:s3cr3tF@db:5432/l"], "s3cr3tF"),
        (["--ledger=postgresql://gds@db/l?sslmode=require&password=s3cr3tG"], "s3cr3tG"),
        (["--db-password", "s3cr3tH"], "s3cr3tH"),
        (["--token=s3cr3tI"], "s3cr3tI"),
    ],
)
def test_every_command_line_form_is_masked_and_registered(argv: list[str], secret: str) -> None:
    shown = redact.redact_argv(["rollout", *argv, "-i", "inv"])
    assert secret not in " ".join(shown)
    assert shown[0] == "rollout" and shown[-2:] == ["-i", "inv"]
    redact.register_argv(argv, {})
    assert redact.redact_text(f"driver said: {secret!r} is wrong") == "driver said: '***' is wrong"


def test_ordinary_arguments_and_file_references_are_kept() -> None:
    argv = ["-e", "gds_route=p2pdma", "-e", "@vars/secret.yml", "--waves", "1,10%",
            "-e", "cuda_repo_key_url=https://example.test/key.asc"]
    assert redact.redact_argv(argv) == argv


def test_environment_secrets_are_registered() -> None:
    redact.register_argv([], {"GDSFLEET_LEDGER": "postgresql://u:envpass1@h/l",
                              "PGPASSWORD": "envpass2", "HOME": "/root",
                              "ANSIBLE_VAULT_PASSWORD_FILE": "/home/op/.vault"})
    text = redact.redact_text("envpass1 envpass2 /root /home/op/.vault")
    assert text == "*** *** /root /home/op/.vault"


def test_url_encoded_secret_is_masked_too() -> None:
    redact.register("p@ss/w0rd")
    assert redact.redact_text("postgresql://u:p%40ss%2Fw0rd@h/l") == "postgresql://u:***@h/l"


def test_mapping_redaction_keeps_structure_counts_and_locations() -> None:
    doc = {"ledger": "postgresql://u:pw12@h/l?password=pw34", "vault_password": "x",
           "summary": {"pass": 3, "fail": 0}, "cuda_repo_key_url": "https://k",
           "argv": ["-e", "api_token=tok123"], "extra_var": ["db_password=pw56"],
           "nested": [{"client_secret": {"a": 1}}]}
    out = redact.redact_mapping(doc)
    text = json.dumps(out)
    for s in ("pw12", "pw34", "tok123", "pw56"):
        assert s not in text
    assert out["vault_password"] == out["nested"][0]["client_secret"] == redact.REDACTED
    assert out["summary"] == {"pass": 3, "fail": 0}
    assert out["cuda_repo_key_url"] == "https://k"


def test_serialized_documents_stay_valid() -> None:
    redact.register("registered-secret")
    text = json.dumps({"pass": 1, "token_count": 2, "m": "x registered-secret y",
                       "u": "mysql://a:b@c/d"})
    doc = json.loads(redact.redact_known(text))
    assert doc == {"pass": 1, "token_count": 2, "m": "x *** y", "u": "mysql://a:***@c/d"}


def test_display_url_masks_userinfo_and_query_password() -> None:
    url = "postgresql+psycopg://gds:pw1@db:5432/ledger?password=pw2&connect_timeout=3"
    shown = display_url(url)
    assert "pw1" not in shown and "pw2" not in shown
    assert shown.startswith("postgresql+psycopg://gds:***@db:5432/ledger?")
    assert display_url("/var/lib/gdsfleet/ledger.sqlite") == "/var/lib/gdsfleet/ledger.sqlite"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o027])
def test_private_files_and_folders_are_never_wider_than_the_umask(
        tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        report = tmp_path / "a" / "b" / "report.json"
        write_private(report, "{}\n")
        append_private(tmp_path / "a" / "events.jsonl", "x\n")
        private_dir(tmp_path / "c")
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "c"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700 & ~umask
    for f in (report, tmp_path / "a" / "events.jsonl"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600 & ~umask
    assert report.read_text() == "{}\n"
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["report.json"]  # no temp


def test_private_dir_narrows_an_old_wide_folder_only_when_asked(tmp_path: Path) -> None:
    wide = tmp_path / "runner"
    wide.mkdir()
    os.chmod(wide, 0o755)  # noqa: S103 - the wide folder an older version left
    private_dir(wide)
    assert stat.S_IMODE(wide.stat().st_mode) == 0o755
    private_dir(wide, narrow=True)
    assert stat.S_IMODE(wide.stat().st_mode) == 0o700


def test_lock_file_is_private_and_names_the_run_not_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["provisioner", "rollout", "-e", "db_password=argv-secret"])
    path = tmp_path / "ledger.sqlite.rollout.lock"
    with FileLock(path, "fleet") as lock:
        lock.set_run_id("20261122T000000Z-abc123")
        info = json.loads(path.read_text())
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert "argv-secret" not in path.read_text() and "command" not in info
        assert info["run_id"] == "20261122T000000Z-abc123" and info["pid"] == os.getpid()
