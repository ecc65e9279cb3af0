"""The record ``verify`` leaves for ``attest`` is hostile input (issue 44): huge, symlinked, a
FIFO, not JSON, wrongly typed, someone else's, writable by others: each makes the node count as
never verified (exit 1, the reason on the line), never a crash, a hang or a pass. Hypothesis
feeds the validator and the mountinfo parser what no capture shows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.commands.attest import modules
from tests.unit import attestnode as an

STATE = modules()["attest_state"]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    an.build(tmp_path)
    an.write_record(tmp_path)
    return tmp_path


def _record_file(root: Path) -> Path:
    return root / "var/lib/gdsfleet/verified.json"


def _refused(root: Path, why: str) -> None:
    code, out, err = an.attest(root)
    assert code == 1 and not err, (out, err)
    assert out.startswith("attest.unverified: last verify, compliant -> untrusted record: "), out
    assert why in out, out


def test_the_record_is_written_atomically_0644(node: Path) -> None:
    path = _record_file(node)
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert not [p for p in os.listdir(path.parent) if p.startswith(".")]
    doc = json.loads(path.read_text())
    assert doc["schema"] == "gdsfleet.attest-record/1" and doc["compliant"] is True
    assert len(path.read_bytes()) < STATE.RECORD_MAX


def test_huge_record(node: Path) -> None:
    _record_file(node).write_text(" " * (STATE.RECORD_MAX + 10) + "{}")
    _refused(node, "larger than 65536 bytes")


def test_symlinked_record(node: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("forged") / "verified.json"
    path = _record_file(node)
    os.replace(path, elsewhere)
    path.symlink_to(elsewhere)
    _refused(node, "is a symbolic link")


def test_fifo_instead_of_a_record_never_hangs(node: Path) -> None:
    path = _record_file(node)
    path.unlink()
    os.mkfifo(path)
    _refused(node, "is not a regular file")


def test_a_directory_instead_of_a_record(node: Path) -> None:
    path = _record_file(node)
    path.unlink()
    path.mkdir()
    _refused(node, "not a regular file")


@pytest.mark.parametrize("text,why", [
    ("not json", "is not JSON"),
    ("[1, 2]", "is a JSON list, not an object"),
    ('{"schema": "gdsfleet.attest-record/9"}', "unknown record schema"),
    ("\xff\xfe", "is not JSON"),
    ("[" * 100000 + "]" * 100000, "larger than"),
])
def test_not_a_record(node: Path, text: str, why: str) -> None:
    _record_file(node).write_bytes(text.encode("latin-1"))
    _refused(node, why)


@pytest.mark.parametrize("field,value,why", [
    ("compliant", "yes", "record.compliant has the wrong type (str)"),
    ("compliant", 1, "record.compliant has the wrong type (int)"),
    ("verified_at", True, "record.verified_at has the wrong type (bool)"),
    ("verified_at", "2026", "record.verified_at has the wrong type (str)"),
    ("failing", "io.direct_path", "record.failing has the wrong type (str)"),
    ("failing", [1], "record.failing is not a list of check ids"),
    ("state", [], "record.state has the wrong type (list)"),
    ("node", None, "record.node has the wrong type (NoneType)"),
    ("labels", {"a": 1}, "record.labels is not a map"),
])
def test_wrong_types(node: Path, field: str, value: Any, why: str) -> None:
    path = _record_file(node)
    doc = json.loads(path.read_text())
    doc[field] = value
    path.write_text(json.dumps(doc))
    _refused(node, why)


@pytest.mark.parametrize("where,value,why", [
    (("nvfs", "loaded"), "true", "record.state.nvfs.loaded has the wrong type (str)"),
    (("cufile", "allow_compat_mode"), 0, "record.state.cufile.allow_compat_mode has the wrong"),
    (("mount", "options"), "rw", "record.state.mount.options has the wrong type (str)"),
    (("libcufile", "size"), 1.5, "record.state.libcufile.size has the wrong type (float)"),
    (("kernel",), 6, "record.state.kernel has the wrong type (int)"),
])
def test_wrong_types_in_the_state(node: Path, where: tuple[str, ...], value: Any,
                                  why: str) -> None:
    path = _record_file(node)
    doc = json.loads(path.read_text())
    target = doc["state"]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path.write_text(json.dumps(doc))
    _refused(node, why)


def test_nan_verified_at(node: Path) -> None:
    path = _record_file(node)
    path.write_text(path.read_text().replace('"verified_at": ', '"verified_at": NaN, "x": '))
    _refused(node, "not a finite number")


def test_record_writable_by_others(node: Path) -> None:
    _record_file(node).chmod(0o666)
    _refused(node, "writable by group or others (mode 0666)")


def test_record_owned_by_another_user(node: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file away")
    os.chown(_record_file(node), 65534, 65534)
    _refused(node, "owned by uid 65534, not root")


def test_a_forged_compliant_record_of_the_broken_state_is_caught_by_its_owner(
        node: Path) -> None:
    """The record is compared with the live state, so whoever may write it could make a broken
    node pass: only root (or the caller itself) may own it."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a file away")
    an.unlink_tree(node / "sys/module/nvidia_fs")
    an.write_record(node)  # "verified" without nvidia-fs, by someone else
    os.chown(_record_file(node), 1000, 1000)
    assert an.attest(node)[0] == 1


def test_every_line_of_a_hostile_record_is_escaped_and_bounded(node: Path) -> None:
    path = _record_file(node)
    doc = json.loads(path.read_text())
    doc["compliant"] = False
    doc["failing"] = ["\x1b[31mred\x07" * 10] * 200
    path.write_text(json.dumps(doc))
    code, out, _ = an.attest(node)
    assert code == 1 and "\x1b" not in out and "\\x1b[31mred\\x07" in out
    assert all(len(line) <= 200 for line in out.splitlines())


# --- Hypothesis --------------------------------------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=30)


@settings(deadline=None)
@given(doc=_json)
def test_validate_record_takes_any_json(doc: Any) -> None:
    try:
        STATE.validate_record(doc)
    except STATE.RecordError as exc:
        assert str(exc)


@settings(deadline=None)
@given(key=st.sampled_from(["schema", "node", "verified_at", "compliant", "route", "failing",
                            "simulated", "state", "labels", "mount_path"]), value=_json)
def test_one_field_of_a_valid_record_replaced(key: str, value: Any) -> None:
    rec = STATE.new_record("n", {"compliant": True}, {
        "kernel": "6.8", "boot_id": None, "nvfs": {"loaded": False, "version": None,
                                                   "srcversion": None},
        "storage_modules": {}, "cufile": {"present": False, "sha256": None,
                                          "allow_compat_mode": None},
        "libcufile": {"path": None, "real": None, "version": None, "size": None},
        "mount": None})
    STATE.validate_record(rec)
    rec[key] = value
    try:
        STATE.validate_record(rec)
    except STATE.RecordError:
        return


@settings(deadline=None)
@given(text=st.text(max_size=400))
def test_mountinfo_parser_takes_any_text(text: str) -> None:
    for m in STATE.mount_entries(text):
        assert set(m) == {"target", "devno", "fstype", "source", "options"}
        assert all("=***" in o or "pass" not in o.split("=")[0].lower() for o in m["options"])


def test_mountinfo_masks_secret_looking_options() -> None:
    line = ("40 22 0:55 / /mnt/cifs rw,relatime shared:3 - cifs //srv/share "
            "rw,username=u,password=hunter2,credentials=/root/c\n")
    (m,) = STATE.mount_entries(line)
    assert "password=***" in m["options"] and "credentials=***" in m["options"]
    assert not any("hunter2" in o for o in m["options"])
    assert m["target"] == "/mnt/cifs" and m["devno"] == "0:55"


def test_mountinfo_unescapes_spaces() -> None:
    (m,) = STATE.mount_entries("36 22 259:0 / /mnt/gds\\040data rw - xfs /dev/nvme0n1 rw\n")
    assert m["target"] == "/mnt/gds data"


@settings(deadline=None)
@given(lines=st.lists(st.tuples(st.text("abc/\\ 0", min_size=1, max_size=8),
                                st.sampled_from(["259:0", "0:50", "8:1"]),
                                st.sampled_from(["xfs", "nfs", "ext4"]),
                                st.text("abcd/:.", min_size=1, max_size=8)), max_size=5))
def test_mount_entries_agree_with_verifys_mountinfo_parser(
        lines: list[tuple[str, str, str, str]]) -> None:
    from provisioner.verify.parsers import storage

    esc = "\\040"
    text = "".join(f"{i} 1 {dev} / /{t.replace(' ', esc)} rw,noatime shared:1 - {fs} {src} rw\n"
                   for i, (t, dev, fs, src) in enumerate(lines))
    mine = [{k: m[k] for k in ("target", "devno", "fstype", "source")}
            for m in STATE.mount_entries(text)]
    theirs = [{k: m[k] for k in ("target", "devno", "fstype", "source")}
              for m in storage.parse_mountinfo(text)]
    assert mine == theirs
