"""Fault injection: a canary secret passed by every channel appears nowhere (issue 8, Secrets).

One module-scoped scenario on a 1-node simulated lab fleet and a throw-away PostgreSQL cluster:
each channel gets its own canary (``-e k=v``, ``--extra-var=k=v``, ``-e @file``, ``-e JSON``,
the ledger URL's password and its ``?password=`` parameter given by ``--ledger``, and a
ledger URL in ``$GDSFLEET_LEDGER``). ``plan``, ``rollout`` (a real ansible-playbook run over
SSH: a small TEST STAND-IN playbook that checks the variables arrived, without printing them),
``verify``, ``status``, ``history`` and error paths run as real processes with umask 022;
``ps -eww -o pid,args`` and the lock file are sampled while the playbook runs. The tests then
search every stream, every file the tool wrote (ledger and its -wal/-shm, lock, runner
artifacts, events log, reports, debug log), the PostgreSQL ledger's run rows and the ``ps``
snapshots for every canary, and check the file modes (0600 files, 0700 folders).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from provisioner.store import Ledger
from tests.faults.test_errors_ssh_inputs import closed_port
from tests.unit.test_store import pg_url  # noqa: F401 - the throw-away PostgreSQL cluster

REPO = Path(__file__).resolve().parents[2]

PLAYBOOK = """\
# TEST STAND-IN playbook: proves the extra variables reached the play (without printing
# them), then keeps ansible-playbook alive over SSH long enough for the ps snapshots.
- name: Secrets canary
  hosts: all
  gather_facts: false
  tasks:
    - name: The secret extra variables arrived
      ansible.builtin.assert:
        that:
          - cuda_repo_password | length == canary_len | int
          - api_token | length == canary_len | int
          - vault_password | length == canary_len | int
          - db_secret | length == canary_len | int
        quiet: true
      no_log: true
    - name: Stay on the node a moment
      ansible.builtin.command: sleep 3
      changed_when: false
"""

CHANNELS = ("e_kv", "extra_var_eq", "at_file", "json", "url_userinfo", "url_query", "env_url")


def _canaries() -> dict[str, str]:
    # same length for all (the playbook checks it), distinct per channel, no URL-special chars
    return {ch: f"cnry{i}x{secrets.token_hex(8)}" for i, ch in enumerate(CHANNELS)}


def _forms(value: str) -> set[str]:
    return {value, quote(value, safe=""), quote_plus(value)}


def _pg_with(url: str, user_pw: str, query_pw: str) -> str:
    # trust authentication: the server ignores the password, the URL still carries it
    base = url.replace("gds@", f"gds:{user_pw}@", 1)
    return base + ("&" if "?" in base else "?") + f"password={query_pw}&connect_timeout=3"


class PsSampler(threading.Thread):
    """``ps -eww -o pid,args`` and the lock file, every 0.2 s, until stopped."""

    def __init__(self, lock: Path) -> None:
        super().__init__(daemon=True)
        self.lock = lock
        self.snapshots: list[str] = []
        self.locks: list[tuple[int, str]] = []
        self.modes: dict[str, set[int]] = {}  # files beside the ledger, while it is open
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            ps = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True,
                                check=False)
            self.snapshots.append(ps.stdout)
            with contextlib.suppress(OSError):
                mode = stat.S_IMODE(self.lock.stat().st_mode)
                self.locks.append((mode, self.lock.read_text()))
            for p in self.lock.parent.glob("*"):
                # (a -wal or -shm can go between the listing and the stat)
                with contextlib.suppress(OSError):
                    self.modes.setdefault(p.name, set()).add(stat.S_IMODE(p.stat().st_mode))
            time.sleep(0.2)


@pytest.fixture(scope="module")
def canary(lab_fleet: Any, pg_url: str,  # noqa: F811 - the imported fixture
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    fleet = lab_fleet(1)
    tmp = tmp_path_factory.mktemp("secrets")
    c = _canaries()
    operator = tmp / "operator"  # the operator's own files: not the tool's
    operator.mkdir()
    playbook = operator / "canary.yml"
    playbook.write_text(PLAYBOOK)
    varsfile = operator / "vars.yml"
    varsfile.write_text(f"vault_password: {c['at_file']}\n")
    out = tmp / "out"  # everything the tool writes goes below here (or to the state dir)
    state = tmp / "state"
    ledger = out / "led" / "ledger.sqlite"
    reports = out / "reports"
    pg = _pg_with(pg_url, c["url_userinfo"], c["url_query"])
    env_url = _pg_with(pg_url, c["env_url"], c["env_url"])
    env = dict(os.environ, XDG_STATE_HOME=str(state), PYTHONPATH=str(REPO),
               GDSFLEET_LEDGER=env_url, PYTHONUNBUFFERED="1")
    env.pop("GDSFLEET_DEBUG_LOG", None)
    inv = str(fleet.inventory)
    extra = ["-e", f"cuda_repo_password={c['e_kv']}", f"--extra-var=api_token={c['extra_var_eq']}",
             "-e", f"@{varsfile}", "-e", json.dumps({"db_secret": c["json"]}),
             "-e", f"canary_len={len(c['e_kv'])}"]
    streams: dict[str, str] = {}
    codes: dict[str, int] = {}

    def cli(name: str, *argv: str, environ: dict[str, str] | None = None) -> None:
        proc = subprocess.run([sys.executable, "-m", "provisioner.cli", *argv],
                              capture_output=True, text=True, env=environ or env, cwd=REPO,
                              timeout=300, check=False, umask=0o022)
        streams[name] = proc.stdout + proc.stderr
        codes[name] = proc.returncode

    # rollout on the SQLite ledger through a real ansible-playbook run, sampled by ps
    lock = ledger.with_name(ledger.name + ".rollout.lock")
    sampler = PsSampler(lock)
    sampler.start()
    argv = [sys.executable, "-m", "provisioner.cli", "rollout", "-i", inv, "--ledger",
            str(ledger), "--playbook", str(playbook), "--no-verify", "--plain", *extra,
            "--json", str(reports / "rollout.json"), "--junit", str(reports / "rollout.xml")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO, umask=0o022)
    so, se = proc.communicate(timeout=300)
    sampler.done.set()
    sampler.join()
    streams["rollout"], codes["rollout"] = so + se, proc.returncode
    # the operator typed the secret on the provisioner's own command line: its own ps line is
    # the operator's; every other process (ansible-playbook, ssh, ...) must not show it
    ps_lines = [ln for snap in sampler.snapshots for ln in snap.splitlines()
                if ln.strip() and ln.split(None, 1)[0] != str(proc.pid)]

    # the same on the PostgreSQL ledger (URL with a password and ?password=)
    cli("rollout_pg", "rollout", "-i", inv, "--ledger", pg, "--playbook", str(playbook),
        "--no-verify", "--plain", *extra, "--json", str(reports / "rollout-pg.json"))
    cli("plan", "plan", "-i", inv, "--ledger", pg, "--json", str(reports / "plan.json"))
    cli("plan_stdout", "plan", "-i", inv, "--ledger", pg, "--json", "-")
    cli("verify", "verify", "-i", inv, "--ledger", pg, "--io-size", "4M", "--retries", "0",
        "--connect-timeout", "5", "--ssh-config", "none", "--json",
        str(reports / "verify.json"), "--junit", str(reports / "verify.xml"))
    cli("status", "status", "--json")  # the ledger from $GDSFLEET_LEDGER
    cli("history", "history", fleet.names[0], "--ledger", pg, "--json")
    # error paths: an unreachable ledger server, a bad extra var, a bad JSON extra var
    dead = _pg_with(f"postgresql+psycopg://gds@127.0.0.1:{closed_port()}/ledger",
                    c["url_userinfo"], c["url_query"])
    cli("err_ledger", "rollout", "-i", inv, "--ledger", dead, "--playbook", str(playbook),
        "--no-verify", *extra)
    cli("err_status", "status", "--ledger", dead)
    cli("err_var", "rollout", "-i", inv, "--ledger", str(ledger), "--playbook",
        str(playbook), "-e", f"bad-name={c['e_kv']}")
    cli("err_json", "rollout", "-i", inv, "--ledger", str(ledger), "--playbook",
        str(playbook), "-e", "{" + f'"db_secret": "{c["json"]}"')
    with Ledger.open(pg_url) as led:
        pg_runs = json.dumps(led.runs(limit=100))
    return {"c": c, "streams": streams, "codes": codes, "ps": ps_lines,
            "locks": sampler.locks, "modes": sampler.modes, "out": out, "state": state,
            "ledger": ledger, "reports": reports, "pg_runs": pg_runs}


def _hits(blob: bytes | str, c: dict[str, str]) -> list[str]:
    data = blob if isinstance(blob, bytes) else blob.encode("utf-8", "replace")
    return [ch for ch, v in c.items() for f in _forms(v) if f.encode() in data]


def test_the_channels_really_carried_the_secrets(canary: dict[str, Any]) -> None:
    codes, streams = canary["codes"], canary["streams"]
    # the playbook's assert saw every secret extra var (no_log: it printed none)
    assert codes["rollout"] == 0, streams["rollout"]
    assert codes["rollout_pg"] == 0, streams["rollout_pg"]
    assert codes["plan"] == 0, streams["plan"]
    assert codes["status"] == 0, streams["status"]
    assert codes["history"] == 0, streams["history"]
    assert codes["verify"] in (0, 1), streams["verify"]  # compliant or not: it ran
    # the error paths failed as errors, in one line each
    assert codes["err_ledger"] == 74 and codes["err_status"] == 74
    assert codes["err_var"] == 64 and codes["err_json"] == 64
    for name in ("err_ledger", "err_status", "err_var", "err_json"):
        lines = [ln for ln in streams[name].splitlines() if ln.strip()]
        assert len(lines) == 1 and "error:" in lines[0], streams[name]
    assert "gds:***@" in streams["err_ledger"] and "password=***" in streams["err_ledger"]
    # the ps sampler saw ansible-playbook run, with its extra vars from a file
    pb = [ln for ln in canary["ps"] if "ansible-playbook" in ln and "canary.yml" in ln]
    assert pb, ("no ps snapshot caught ansible-playbook",
                [ln for ln in canary["ps"] if "ansible" in ln][:5])
    assert all("@" in ln and "env/extravars" in ln for ln in pb), pb
    assert canary["locks"], "the lock file was never sampled during the rollout"


def test_no_stream_holds_a_secret(canary: dict[str, Any]) -> None:
    for name, text in canary["streams"].items():
        assert not _hits(text, canary["c"]), (name, text)


def test_no_process_command_line_holds_a_secret(canary: dict[str, Any]) -> None:
    leaked = [ln for ln in canary["ps"] if _hits(ln, canary["c"])]
    assert not leaked, leaked


def test_the_lock_file_names_the_run_not_the_command(canary: dict[str, Any]) -> None:
    for mode, text in canary["locks"]:
        assert mode == 0o600
        assert not _hits(text, canary["c"]), text
        if text.strip():
            info = json.loads(text)
            assert "command" not in info and {"pid", "host", "started_at"} <= set(info)
    assert any(t.strip() and json.loads(t).get("run_id") for _, t in canary["locks"])


def test_no_file_the_tool_wrote_holds_a_secret(canary: dict[str, Any]) -> None:
    files = [p for root in (canary["out"], canary["state"]) if root.exists()
             for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    # the channels' files were really written: ledger (+ WAL), runner artifacts, reports
    assert {"ledger.sqlite", "events.jsonl", "command", "rollout.json", "rollout.xml",
            "plan.json", "verify.json", "verify.xml"} <= names, sorted(names)
    assert not any(p.name == "extravars" for p in files)  # removed after each run
    for p in files:
        assert not _hits(p.read_bytes(), canary["c"]), p
    assert not _hits(canary["pg_runs"], canary["c"])  # the PostgreSQL ledger's run rows


def test_files_are_private_and_never_wider_than_the_umask(canary: dict[str, Any]) -> None:
    out, ledger = canary["out"], canary["ledger"]
    for p in [out, *out.rglob("*")]:
        if p == out:
            continue
        mode = stat.S_IMODE(p.stat().st_mode)
        if p.is_dir():
            assert mode == 0o700, (p, oct(mode))
        else:
            assert mode == 0o600, (p, oct(mode))
    # while the rollout ran: the ledger, its WAL and shared memory, the lock, the runner dir
    seen = canary["modes"]
    wanted = {ledger.name: 0o600, ledger.name + "-wal": 0o600, ledger.name + "-shm": 0o600,
              ledger.name + ".rollout.lock": 0o600, "runner": 0o700}
    for name, mode in wanted.items():
        assert seen.get(name) == {mode}, (name, seen)
    log = canary["state"] / "gdsfleet" / "debug.log"
    if log.exists():
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
