"""Fault injection: a hostile execution node's worker stream (issue 27, case 1).

ansible-runner's Processor (ansible/ansible-runner, src/ansible_runner/streaming.py, tag 2.4.3,
as installed) parses each line of the worker's stream as JSON and, for any object with a
``zipfile`` key, unpacks the base64 archive that follows with ``unstream_dir``, which recreates
the archive's symbolic links and then extracts through them. The coordinator's stream reader
(:class:`provisioner.rollout.executors.stream._BoundedReader`) used to skip only lines that
began with the bytes ``{"zipfile"``; the three headers below got past it, and the archive's
file was written outside the run's folder, with the shard reported successful.

The archives are the layout of ansible-runner 2.4.3's ``stream_dir``
(src/ansible_runner/utils/streaming.py, tag 2.4.3): a symbolic link ``link`` to a folder
outside the run, and a file ``link/pwned`` written through it.

The end-to-end test runs a real rollout through the CLI with ``--executor ssh``: the execution
node is this machine behind a real OpenSSH sshd on loopback, and its ``ansible-runner`` is a
stand-in (``_hostile_runner``) that runs the real worker and replaces its artifacts archive
with the hostile ones.
"""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from provisioner.rollout.executors.stream import MAX_LINE, _BoundedReader
from tests.unit import test_exec_nodes as base
from tests.unit.test_exec_nodes import (
    BIN,
    HOSTS,
    _exec_inventory,
    _outcomes,
    _rollout,
    hostile_archive,
    needs_sshd,
)

lab = base.lab  # two real sshd on loopback, the targets are ansible_connection: local hosts
env = base.env

# headers that parse to an object with a "zipfile" key without starting with {"zipfile"
HEADERS = {
    "leading-blank": ' {{"zipfile": {n}}}',
    "escaped-key": '{{"\\u007aipfile": {n}}}',
    "other-key-first": '{{"x": 1, "zipfile": {n}}}',
    "status-beside": '{{"zipfile": {n}, "status": "successful"}}',
}


def archive_lines(header: str, outside: Path) -> bytes:
    raw = hostile_archive(outside)
    return header.format(n=len(raw)).encode() + b"\n" + base64.b64encode(raw)


def _process(stream: bytes, pdd: Path, guarded: bool) -> tuple[list[str], Any]:
    statuses: list[str] = []
    reader = _BoundedReader(io.BytesIO(stream)) if guarded else io.BytesIO(stream)
    ansible_runner.run(streamer="process", _input=reader, private_data_dir=str(pdd),
                       ident="x", quiet=True,
                       status_handler=lambda d, runner_config=None: statuses.append(d["status"]),
                       cancel_callback=lambda: False)  # keep ansible-runner's signal handlers out
    return statuses, reader


@pytest.mark.parametrize("header", sorted(HEADERS))
@pytest.mark.parametrize("guarded", [True, False])
def test_every_archive_header_is_skipped_not_unpacked(tmp_path: Path, header: str,
                                                      guarded: bool) -> None:
    """Case 1: decided on the parsed object. Unguarded, the Processor writes through the link
    for every one of these headers (the reason for the guard); guarded, nothing is written
    outside and the eof after the archive is read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    stream = (b'{"status": "successful"}\n' + archive_lines(HEADERS[header], outside)
              + b'{"eof": true}\n')
    statuses, reader = _process(stream, tmp_path / "pdd", guarded)
    if guarded:
        assert not (outside / "pwned").exists()
        assert statuses == ["successful"] and reader.skipped_archives == 1
        assert reader.refused is None
    elif header != "status-beside":  # the Processor takes that one as a status line
        assert (outside / "pwned").exists()


@pytest.mark.parametrize(("line", "why"), [
    (b'"zipfile"\n', "a JSON str, not an object"),
    (b'["zipfile", "status"]\n', "a JSON list, not an object"),
    (b'{"zipfile": -1}\n', "without a valid length"),
    (b'{"zipfile": "12"}\n', "without a valid length"),
    (b'{"zipfile": true}\n', "without a valid length"),
    (b'{"zipfile": 1.5}\n', "without a valid length"),
    (b'{"status": "\xff"}\n', "not UTF-8"),
    (b"[" * 200_000 + b"\n", "nested too deeply"),
])
def test_lines_the_processor_would_crash_on_end_the_stream_with_the_reason(
        tmp_path: Path, line: bytes, why: str) -> None:
    """A JSON string or list makes the Processor test ``"zipfile" in`` on it (a string holding
    the word is taken for an archive header; a list with it crashes on ``data["zipfile"]``);
    bytes that are not UTF-8 raise an error it does not catch. Each ends the stream here with
    the reason, and the Processor reports an error instead of raising."""
    statuses, reader = _process(b'{"status": "starting"}\n' + line + b'{"eof": true}\n',
                                tmp_path / "pdd", True)
    assert reader.refused is not None and why in reader.refused
    assert statuses == ["starting", "error"]
    assert not any(p.is_file() for p in (tmp_path / "pdd").rglob("*"))


def test_a_line_over_the_cap_ends_the_stream(tmp_path: Path) -> None:
    big = b'{"event": "x", "stdout": "' + b"a" * MAX_LINE + b'"}\n'
    statuses, reader = _process(big + b'{"eof": true}\n', tmp_path / "pdd", True)
    assert reader.refused == f"a line longer than {MAX_LINE} bytes"
    assert statuses == ["error"]


def _hostile_runner(root: Path, outside: list[Path]) -> Path:
    """Stand-in ansible-runner for an execution node: ``worker`` runs the real one and sends
    its stream on, but in place of its artifacts archive sends one hostile archive per header
    above (each linking to its own folder of ``outside``), then the worker's eof; everything
    else (``--worker-info``) is the real one."""
    fake = root / "hostile-bin" / "ansible-runner"
    fake.parent.mkdir()
    real = BIN / "ansible-runner"
    payload = b"".join(archive_lines(HEADERS[h], o) for h, o in zip(sorted(HEADERS), outside,
                                                                  strict=True))
    blob = root / "hostile-bin" / "archives"
    blob.write_bytes(payload)
    fake.write_text(
        f"#!{sys.executable}\nimport subprocess, sys\nreal = {str(real)!r}\n"
        "if sys.argv[1:2] == ['worker'] and '--worker-info' not in sys.argv:\n"
        "    out = subprocess.run([real, *sys.argv[1:]], stdout=subprocess.PIPE).stdout\n"
        "    cut = out.find(b'\\n{\"zipfile\"')\n"
        "    head = out[:cut + 1] if cut >= 0 else out\n"
        f"    arch = open({str(blob)!r}, 'rb').read()\n"
        "    sys.stdout.buffer.write(head + arch + b'{\"eof\": true}\\n')\n"
        "    sys.exit(0)\n"
        "import os\nos.execv(real, [real, *sys.argv[1:]])\n")
    fake.chmod(0o755)
    for tool in BIN.iterdir():
        if tool.name != "ansible-runner":
            (fake.parent / tool.name).symlink_to(tool)
    return fake


@needs_sshd
def test_hostile_worker_archive_writes_nothing_on_the_coordinator(
        lab: dict[str, Any], env: None, tmp_path: Path) -> None:
    """Case 1, end to end: ``provisioner rollout --executor ssh`` against an execution node
    whose worker answers with every hostile header. Nothing is written outside the run, and
    the hosts' outcomes are those of the same rollout run locally (the events are the real
    worker's; only the archive, which gdsfleet never needed, is dropped)."""
    root: Path = lab["root"]
    outside = [tmp_path / f"outside-{h}" for h in sorted(HEADERS)]
    for o in outside:
        o.mkdir()
    fake = _hostile_runner(tmp_path, outside)
    exec_inv = _exec_inventory(root, lab["ports"][:1], str(fake), name="hostile.ini")
    rc_local = _rollout(lab, tmp_path / "local.sqlite")
    rc = _rollout(lab, tmp_path / "ssh.sqlite", "--executor", "ssh", "--exec-inventory",
                  str(exec_inv))
    for o in outside:
        assert list(o.iterdir()) == [], f"the worker wrote into {o.name}"
    assert not list(tmp_path.rglob("pwned"))  # nor inside the run's folders beside the ledger
    _, local = _outcomes(tmp_path / "local.sqlite")
    _, remote = _outcomes(tmp_path / "ssh.sqlite")
    assert remote == local and rc == rc_local, (remote, local)
    assert set(remote) == set(HOSTS)
