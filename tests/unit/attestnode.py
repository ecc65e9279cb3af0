"""TEST STAND-IN for attest's unit tests: a conformance profile's simulated node tree
(tests/conformance/simnode.py, SYNTHETIC, every fact named there) completed with what attest
reads and the conformance gather does not: ``/proc/sys/kernel/{osrelease,hostname}``, the
``libcufile.so.0`` link a libcufile-X-Y package installs beside its versioned file, and a
``srcversion`` for nvidia_fs and nvme (the kernel's per-module source hash; values here are
made up). Then the record ``verify`` would leave, and attest run in this process."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import yaml

from provisioner.commands.attest import modules
from tests.conformance import simnode

PROFILES = Path(__file__).resolve().parents[1] / "conformance" / "profiles"
RECORD = "/var/lib/gdsfleet/verified.json"


def profile(pid: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((PROFILES / f"{pid}.yml").read_text())
    return doc


def build(root: Path, pid: str = "host-ubuntu2404-nvfs-local") -> dict[str, Any]:
    """The simulated node of profile ``pid`` under ``root``; its model."""
    m = simnode.build_root(profile(pid), root)
    put(root, "/proc/sys/kernel/osrelease", m["kernel"] + "\n")
    put(root, "/proc/sys/kernel/hostname", m["hostname"] + "\n")
    if m["libcufile"]:
        lib = root / m["libcufile"].lstrip("/")
        (lib.parent / "libcufile.so.0").symlink_to(lib.name)
        lib.write_bytes(b"\x7fELF stand-in libcufile " + m["libcufile"].encode())
    if m["nvfs"]:
        put(root, "/sys/module/nvidia_fs/srcversion", "6E1B2C3D4F5A6B7C8D9E0F1\n")
        put(root, "/proc/driver/nvidia-fs/modules", "wekafsio: 1\n")
    put(root, "/sys/module/nvme/srcversion", "A1B2C3D4E5F60718293A4B5\n")
    return m


def put(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def write_record(root: Path, *, node: str = "gds-01", compliant: bool = True,
                 route: str = "nvfs", mount: str | None = "/mnt/gds",
                 **verdict: Any) -> dict[str, Any]:
    """The record verify's node side writes, from the tree as it is now."""
    mods = modules()
    st = mods["attest_state"]
    n = st.Node(str(root))
    state = st.snapshot(n, mount, mods["cufile_json"].strip_comments)
    rec = st.new_record(node, {"compliant": compliant, "route": route, "path_taken": "direct",
                               "failing": [] if compliant else ["io.direct_path"],
                               "mount_path": mount, **verdict}, state)
    st.write_record(n, rec, RECORD)
    return dict(rec)


def attest(root: Path, *argv: str) -> tuple[int, str, str]:
    """``gdsfleet-attest --root ROOT ARGV...`` in this process: exit code, stdout, stderr."""
    mods = modules()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = mods["attest"].main(["--root", str(root), *argv], mods)
    return int(code), out.getvalue(), err.getvalue()


def unlink_tree(path: Path) -> None:
    """rm -r (a /sys/module/<name> directory: a module unloaded)."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for f in filenames:
            os.unlink(os.path.join(dirpath, f))
        for d in dirnames:
            os.rmdir(os.path.join(dirpath, d))
    os.rmdir(path)
