"""Property-based fuzzing of the trust boundaries (issue 45, item 6): what tests/faults/
test_fuzz.py did not generate.

* **Connection variables**: a host's ``ansible_connection`` (``local`` in every spelling),
  ports, ssh arguments, executables and key checking, hostile or not, through ``plan``:
  never exit 70, a local connection is always a problem unless ``--allow-local-connection``,
  nothing written outside the run's folders.
* **Time**: a worker stream that never ends (keepalives, an archive's endless base64, a line
  without its newline, trickled slowly) is cut at the coordinator's deadline
  (``executors.stream.Watchdog``); a node command that trickles output for ever ends at its
  deadline (``LocalRunner``, the same contract as the SSH runner).
* **Foreign-owned folders**: trees of ledger and runner folders with other owners (root only),
  wide modes, links and planted files: ``secure_beside_ledger`` either refuses and leaves the
  tree as it was, or what it returns is the caller's alone.
* **Role-side input**: netfs mount entries through the role's real validate tasks
  (ansible-playbook, one run for a drawn fleet of hosts) against the rules written out here;
  kernel releases through the kernel gate (``module_utils/kernel_gate.evaluate``), the
  verify side's parser of its state file, and the kernel hook's argument (the hook rendered
  from its template, the gate a TEST STAND-IN that records its arguments).

Seeds and example counts as in test_fuzz.py (``GDSFLEET_FUZZ_EXAMPLES``,
``GDSFLEET_FUZZ_RANDOM``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from provisioner.cli import main  # noqa: E402
from provisioner.exitcodes import Exit  # noqa: E402
from tests.faults.test_fuzz import files_under, fuzz, sandbox, text, values  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STRICT_KERNEL = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}\Z")


# ============================================================ connection variables
LOCALS = ["local", "ansible.builtin.local", "ansible.legacy.local", " local", "local ",
          "LOCAL", "Local"]
CONNECTION_VARS = {
    "ansible_connection": st.one_of(st.sampled_from(LOCALS + ["ssh", "smart", "paramiko",
                                                              "docker", "winrm", ""]), text),
    "ansible_port": st.one_of(st.integers(-5, 70000), text),
    "ansible_ssh_common_args": st.one_of(st.sampled_from([
        "-o ProxyCommand=nc %h %p", "-o StrictHostKeyChecking=no", "-J bastion",
        "-o UserKnownHostsFile=/dev/null", "-oProxyCommand=sh"]), text),
    "ansible_ssh_args": text, "ansible_ssh_executable": text,
    "ansible_host_key_checking": st.one_of(st.booleans(), text),
    "ansible_ssh_private_key_file": text, "ansible_user": text, "ansible_host": text,
    "ansible_python_interpreter": text,
}


@st.composite
def connection_hosts(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(CONNECTION_VARS)), min_size=1, max_size=4,
                          unique=True))
    hostvars: dict[str, Any] = {"ansible_host": "127.0.0.2"}
    for name in names:
        hostvars[name] = draw(st.one_of(CONNECTION_VARS[name], values))
    return hostvars


@fuzz(fast=12)
@given(hostvars=connection_hosts(), allow=st.booleans())
def test_fuzz_plan_connection_variables(hostvars: dict[str, Any], allow: bool,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("conn")
    inv = root / "inv.json"  # JSON is YAML: any value the draw made survives
    inv.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {
        "node01": {"ansible_host": "127.0.0.1"}, "node02": hostvars}}}}}))
    argv = ["plan", "-i", str(inv), "--ledger", str(root / "out" / "l.sqlite"), "--json",
            str(root / "out" / "plan.json")] + (["--allow-local-connection"] if allow else [])
    with sandbox(root):
        code = main(argv)
    assert code in (Exit.OK, Exit.USAGE, Exit.LEDGER), code
    conn = hostvars.get("ansible_connection")
    local = isinstance(conn, str) and conn.strip() in LOCALS[:3]
    doc = json.loads((root / "out" / "plan.json").read_text()) \
        if (root / "out" / "plan.json").exists() else None
    if doc is not None:
        named = any("ansible_connection=local" in p for p in doc["problems"])
        assert named == (local and not allow), (conn, allow, doc["problems"])
        assert code == (Exit.USAGE if doc["problems"] else Exit.OK)
    elif local and not allow:
        assert code == Exit.USAGE
    for rel in files_under(root):
        assert rel.parts[0] in ("inv.json", "out", "state"), rel


# ============================================================ time: endless worker streams
class TrickledPipe:
    """A pipe a writer thread fills with ``pieces`` in turn, ``gap`` seconds apart, for ever
    (``endless``) or once; :meth:`cut` closes the writing end, as killing ssh does."""

    def __init__(self, pieces: list[bytes], gap: float, endless: bool) -> None:
        self.r, self._w = os.pipe()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(pieces, gap, endless), daemon=True)
        self._t.start()

    def _run(self, pieces: list[bytes], gap: float, endless: bool) -> None:
        try:
            while not self._stop.is_set():
                for piece in pieces or [b""]:
                    if self._stop.is_set():
                        return
                    os.write(self._w, piece)
                    time.sleep(gap)
                if not endless:
                    break
        except OSError:
            pass
        finally:
            self.cut()

    def cut(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.close(self._w)


ENDLESS = [b'{"event": "keepalive"}\n', b'{"zipfile": 99999999999}\n' + b"QUFB" * 64,
           b"QUFB" * 256, b'{"event": "verbose", "stdout": "' + b"a" * 512, b"\n", b" ",
           b'{"status": "running"}\n']


@pytest.mark.filterwarnings("ignore")
@fuzz(fast=6)
@given(pieces=st.lists(st.one_of(st.sampled_from(ENDLESS), st.binary(max_size=64)),
                       min_size=1, max_size=5),
       gap=st.sampled_from([0.0, 0.01, 0.05]), endless=st.booleans())
def test_fuzz_an_endless_worker_stream_ends_at_the_deadline(
        pieces: list[bytes], gap: float, endless: bool,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    import ansible_runner

    from provisioner.rollout.executors.stream import Watchdog, _BoundedReader

    root = tmp_path_factory.mktemp("endless")
    pipe = TrickledPipe(pieces, gap, endless)
    deadline_s = 0.5
    dog = Watchdog(time.time() + deadline_s, pipe.cut)
    started = time.monotonic()
    try:
        with io.FileIO(pipe.r, "rb", closefd=True) as raw, io.BufferedReader(raw) as buf:
            ansible_runner.run(streamer="process", _input=_BoundedReader(buf),
                               private_data_dir=str(root / "pdd"), ident="x", quiet=True,
                               event_handler=lambda e: False,
                               status_handler=lambda d, runner_config=None: None,
                               settings={"suppress_output_file": True},
                               cancel_callback=lambda: False)
    finally:
        dog.cancel()
        pipe.cut()
    took = time.monotonic() - started
    assert took < deadline_s + 10, took  # a loaded 2-core machine; before the Watchdog: never
    for rel in files_under(root):
        assert rel.parts[0] == "pdd", rel


# ============================================================ time: a node that trickles
TRICKLE = r"""
import json, os, sys, time
steps, endless = json.loads(sys.argv[1]), sys.argv[2] == "1"
while True:
    for chunk, gap in steps:
        os.write(1, bytes.fromhex(chunk))
        time.sleep(gap)
    if not endless:
        break
"""


@fuzz(fast=5)
@given(steps=st.lists(st.tuples(st.binary(max_size=4096).map(bytes.hex),
                                st.sampled_from([0.0, 0.01, 0.1])), min_size=1, max_size=4),
       endless=st.booleans())
def test_fuzz_a_trickling_node_command_ends_at_its_deadline(
        steps: list[tuple[str, float]], endless: bool, tmp_path: Path) -> None:
    import shlex

    from provisioner.errors import ConnectError
    from provisioner.local import LocalRunner

    script = tmp_path / "trickle.py"
    script.write_text(TRICKLE)
    cmd = " ".join(shlex.quote(a) for a in (sys.executable, str(script), json.dumps(steps),
                                            "1" if endless else "0"))
    timeout = 0.6
    started = time.monotonic()
    with LocalRunner("n1", max_stdout=1 << 20) as runner:
        try:
            res = runner.run(cmd, timeout=timeout)
            assert len(res.stdout) <= 4 << 20
        except ConnectError as exc:  # its deadline, or more output than is read
            assert "deadline" in str(exc) or "output too large" in str(exc), exc
    assert time.monotonic() - started < timeout + 8


# ============================================================ foreign-owned folders
NOBODY = 65534


def _snapshot(root: Path) -> list[tuple[str, int, int, bool]]:
    out = []
    for p in sorted([root, *root.rglob("*")]):
        st_ = p.lstat()
        out.append((str(p), stat.S_IMODE(st_.st_mode), st_.st_uid, p.is_symlink()))
    return out


@st.composite
def folder_trees(draw: Any) -> list[tuple[str, str, int, int]]:
    """(kind, path under the ledger folder, mode, owner) entries; "" is the ledger folder."""
    owners = [os.geteuid()] + ([NOBODY] if os.geteuid() == 0 else [])
    modes = st.sampled_from([0o700, 0o755, 0o750, 0o770, 0o775, 0o777, 0o1777, 0o711])
    out = [("dir", "", draw(modes), draw(st.sampled_from(owners)))]
    if draw(st.booleans()):
        out.append((draw(st.sampled_from(["dir", "link"])), "runner", draw(modes),
                    draw(st.sampled_from(owners))))
        for _ in range(draw(st.integers(0, 3))):
            name = draw(st.sampled_from(["events.jsonl", "artifacts", "artifacts/old",
                                         ".gdsfleet-gate-x.sh", "env", "env/extravars"]))
            out.append((draw(st.sampled_from(["file", "link", "dir"])), f"runner/{name}",
                        draw(modes), draw(st.sampled_from(owners))))
    return out


@fuzz(fast=30)
@given(tree=folder_trees())
def test_fuzz_foreign_or_wide_folders_are_refused_untouched(
        tree: list[tuple[str, str, int, int]], tmp_path_factory: pytest.TempPathFactory) -> None:
    from provisioner.errors import LedgerError, UsageError
    from provisioner.rollout.artifacts import secure_beside_ledger

    base = tmp_path_factory.mktemp("owners")
    base.chmod(0o700)
    outside = base / "outside"
    outside.mkdir()
    led = base / "led"
    for kind, rel, mode, owner in tree:
        p = led / rel if rel else led
        if p.exists() or p.is_symlink() or not p.parent.is_dir():
            continue
        if kind == "link":
            p.symlink_to(outside)
            continue
        if kind == "file":
            p.write_text("planted\n")
        else:
            p.mkdir()
        p.chmod(mode)
        os.lchown(p, owner, owner) if os.geteuid() == 0 else None
    before = _snapshot(base)
    try:
        runner = secure_beside_ledger(str(led / "ledger.sqlite"), create_runner=True)
    except (UsageError, LedgerError) as exc:
        assert _snapshot(base) == before  # refused: nothing created, chmod'ed or written
        assert str(led) in str(exc), exc
        return
    assert runner is not None and list(outside.iterdir()) == []
    me = os.geteuid()
    for p in (led, runner):
        st_ = p.lstat()
        assert not p.is_symlink() and st_.st_uid == me and not st_.st_mode & 0o022, p
    for p in runner.rglob("*"):
        assert not p.is_symlink() and p.lstat().st_uid == me, p


# ============================================================ role side: the kernel gate
releases = st.one_of(
    st.sampled_from(["6.8.0-50-generic", "5.14.0-503.el9.x86_64", "6.8.0-50-generic\n",
                     "../../etc", "-x", "", " 6.8.0", "6.8.0 ", "a" * 129, "6.8.0/../x",
                     "$(id)", "6.8.0\x00x", "6.8.0-\u202e"]),
    text)


@fuzz(fast=40)
@given(kernel=releases)
def test_fuzz_the_kernel_gate_takes_only_plain_releases(kernel: str, tmp_path: Path) -> None:
    """A release with anything but the plain characters (a trailing newline among them) is
    refused before any file is read; before, ``6.8.0-50-generic\\n`` passed the ``$``
    anchored check and went on to the packages it would hold."""
    from tests.unit.test_kernel_gate import kg as gate

    try:
        res = gate.evaluate(kernel, dkms_text="", modules_root=str(tmp_path),
                            boot_dir=str(tmp_path))
    except gate.GateError:
        assert not STRICT_KERNEL.match(kernel)
        return
    assert STRICT_KERNEL.match(kernel), repr(kernel)
    assert res["kernel"] == kernel


@fuzz(fast=40)
@given(release=releases, passed=st.one_of(st.booleans(), values))
def test_fuzz_verify_reads_only_plain_releases_from_the_gate_state(
        release: str, passed: Any) -> None:
    from provisioner.verify.parsers.kernel_gate import parse_state

    doc = {"gdsfleet_kernel_gate": 1, "running": release, "next_boot": release,
           "kernels": {release: {"passed": passed, "reason": release}}}
    out = parse_state(json.dumps(doc))
    for name in [out["running"], out["next_boot"], *out["kernels"]]:
        assert name is None or STRICT_KERNEL.match(name), repr(name)


@fuzz(fast=15)
@given(version=releases, style=st.sampled_from(["postinst", "install"]))
def test_fuzz_the_kernel_hook_passes_its_argument_as_one_word(
        version: str, style: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever the package manager passes, the hook exits 0 and hands the gate exactly that
    word (no splitting, globbing or command substitution); an empty one is not gated."""
    from tests.unit.test_kernel_gate_hook import hook

    if "\x00" in version:
        version = version.replace("\x00", "")  # an argv cannot hold NUL
    tmp = tmp_path_factory.mktemp("hook")
    where = ("kernel/postinst.d/zzz-gdsfleet-kernel-gate" if style == "postinst"
             else "kernel/install.d/99-gdsfleet-kernel-gate.install")
    path = hook(tmp, where)
    (tmp / "lib" / "kernel_gate.py").write_text(
        "# TEST STAND-IN for plugins/module_utils/kernel_gate.py: records its argv as JSON\n"
        "import json, sys, pathlib\n"
        f"pathlib.Path({str(tmp / 'argv.json')!r}).write_text(json.dumps(sys.argv[1:]))\n")
    args = [version, "/boot/vmlinuz"] if style == "postinst" else ["add", version, "/b", "/v"]
    try:
        proc = subprocess.run([str(path), *args], capture_output=True, timeout=30,
                              cwd=tmp, check=False)
    except ValueError:  # a lone surrogate cannot be an argv word
        return
    assert proc.returncode == 0
    got = tmp / "argv.json"
    if version == "":
        assert not got.exists()
    else:
        # postinst.d gates the installed image (trigger "image"), install.d its "install"
        trigger = "image" if style == "postinst" else "install"
        assert json.loads(got.read_text()) == ["--kernel", version, "--route", "nvfs",
                                               "--protect", "--trigger", trigger]
    assert sorted(p.name for p in tmp.iterdir()) == sorted(
        ["lib", "kernel", *(["argv.json"] if version else [])])


# ============================================================ role side: netfs mount points
SEGMENTS = ["mnt", "data", "gds", "vast", ".", "..", ".hidden", "", "etc", "usr", "var",
            "home", "a b", "x\n", "-", "lib", "proc", "a,b", "\u202e", "tmp"]
OPTIONS = ["hard", "tcp", "udp", "rdma", "proto=tcp", "PROTO=rdma", "port=2049",
           "rdma=20049", "nconnect=4", "rsize=1048576", "mountproto=tcp", "ro,proto=tcp",
           "x\n", "Tcp"]
SYSTEM = {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
          "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys",
          "/tmp", "/usr", "/var", "/var/cache", "/var/lib", "/var/local", "/var/lock",
          "/var/log", "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp"}


def path_is_safe(path: str) -> bool:
    """The mount point rules of docs/network-filesystems.md, written out on their own."""
    if not re.fullmatch(r"/[A-Za-z0-9._/-]+", path) or path in SYSTEM:
        return False
    if "/." in path or "//" in path or path.endswith("/"):
        return False
    top = path.split("/")[1]
    return top not in {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                       "root", "run", "sbin", "sys", "usr"}


def options_are_safe(options: list[str]) -> bool:
    return all(re.fullmatch(r"[A-Za-z0-9._=:/+-]+", o)
               and not re.match(r"(?i)(proto|port|rdma)=|(tcp|udp|rdma)\Z", o)
               for o in options)


WORDS = ["vast", "gds", "a-1", "x_y", "scratch", "n0"]


def drawn_mounts(seed: int, count: int = 24) -> list[tuple[str, list[str]]]:
    """``count`` mount entries from ``seed``, a quarter of each kind: a system folder, a path
    of hostile segments, a plain path with a hostile tail, a plain path (options drawn for all
    of them): one ansible-playbook run judges the lot."""
    import random

    r = random.Random(seed)  # noqa: S311 - a reproducible draw, no secret
    out = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            path = r.choice(sorted(SYSTEM)) + r.choice(["", "", "/x"])
        elif kind == 1:
            path = "/" + "/".join(r.choice(SEGMENTS) for _ in range(r.randint(1, 4)))
        elif kind == 2:
            path = r.choice(["/mnt/", "/data/"]) + r.choice(WORDS) + r.choice(
                ["\n", "/", "/.", "/..", "//x", "/.x", " ", "\t"])
        else:
            path = r.choice(["/mnt/", "/data/", "/srv/", "/var/lib/"]) + r.choice(WORDS)
        opts = [r.choice(OPTIONS) for _ in range(r.choice([0, 0, 1, 2]))]
        out.append((path, opts))
    return out


@fuzz(fast=1)
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzz_netfs_validate_never_accepts_an_unsafe_mount(
        seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One ansible-playbook run of the role's real validate tasks for 24 drawn hosts: a host
    whose mount point or options break the rules is refused with the role's own message
    (never an error of another kind), and one that keeps them is accepted (the plain folders
    drawn do not exist here). Before: system folders, dot paths and a trailing newline were
    accepted."""
    entries = drawn_mounts(seed)
    tmp = tmp_path_factory.mktemp("netfs_fuzz")
    hosts = {f"h{i:02d}": {"ansible_connection": "local", "netfs_nfs_mounts": [
        {"path": p, "server": "192.0.2.10", "export": "/gds", "options": o}]}
        for i, (p, o) in enumerate(entries)}
    (tmp / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    play = [{"name": "Validate", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate the mounts", "ansible.builtin.include_role": {
            "name": "netfs", "tasks_from": "validate.yml"}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_FORKS="10")
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i",
                           str(tmp / "inventory.json"), str(tmp / "play.yml")],
                          capture_output=True, text=True, timeout=400, env=env, check=False)
    doc = json.loads(proc.stdout)
    failed: dict[str, str] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, res in task["hosts"].items():
            if res.get("failed"):
                failed[host] = json.dumps(res)
    for i, (p, o) in enumerate(entries):
        name = f"h{i:02d}"
        safe = path_is_safe(p) and options_are_safe(o)
        if name in failed:
            assert "Refusing to mount, nothing was changed" in failed[name], (p, o, failed[name])
        assert (name not in failed) == safe, (repr(p), o, failed.get(name, "accepted"))


# ============================================================ the same hole, elsewhere
def test_every_safety_pattern_refuses_a_trailing_newline(tmp_path: Path) -> None:
    """The kernel gate's release check (found by the fuzzer above) was anchored with ``$``,
    which matches before a final newline; so were the dispatch token a fence puts in a shell
    word (read back from the ledger), an execution node's runner and folders, and an NFD label
    value. Each now refuses ``<good value>\\n``."""
    from provisioner.errors import UsageError
    from provisioner.rollout.executors import fence
    from provisioner.rollout.executors.nodes import load_exec_inventory
    from provisioner.verify import nfd

    with pytest.raises(ValueError):
        fence.check_token("20261129T000000Z-abcdef:0:1\n")
    assert fence.check_token("20261129T000000Z-abcdef:0:1") == "20261129T000000Z-abcdef:0:1"
    assert nfd._VALUE_RE.match("2.26.6") and not nfd._VALUE_RE.match("2.26.6\n")
    for var in ("gdsfleet_exec_runner", "gdsfleet_exec_workdir",
                "gdsfleet_exec_collections_path"):
        inv = tmp_path / f"{var}.json"
        inv.write_text(json.dumps({"all": {"children": {"gdsfleet_exec": {"hosts": {
            "e1": {"ansible_host": "127.0.0.1", var: "/opt/x\n"}}}}}}))
        with pytest.raises(UsageError, match=var):
            load_exec_inventory(inv)
