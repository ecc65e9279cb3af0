"""The kernel_gate module's result, as an operator sees it (issue 47 item 6):
``ansible ... -m gdsfleet.gds.kernel_gate -C`` printed a green SUCCESS with ``"passed":
false``; a lab update printed ``hold: FAILED`` while ``apt-mark showhold`` listed both
packages held, with a literal ``\\x0a`` in a ~700-character message; check mode failed every
kernel not yet installed ("no headers"), which tells nothing.

The module runs for real through ``ansible`` on this machine (local connection, a kernel that
is not installed, the state file in a temporary folder: nothing of the machine is changed);
its helpers are imported from the checkout's file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".lab" / "collections"
ABSENT = "9.9.9-gdsfleet-test"  # no such kernel on any machine


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def kgm(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """plugins/modules/kernel_gate.py of this checkout, its ``ansible_collections...``
    module_utils import answered from sys.modules (ansible-core's collection finder, installed
    by an earlier test in the same process, would look elsewhere); restored afterwards."""
    base = "ansible_collections.gdsfleet.gds.plugins.module_utils"
    parts = base.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, ModuleType(name))
    utils = _load("gdsfleet_kernel_gate_utils_h47", ROOT / "plugins/module_utils/kernel_gate.py")
    monkeypatch.setitem(sys.modules, f"{base}.kernel_gate", utils)
    monkeypatch.setattr(sys.modules[base], "kernel_gate", utils, raising=False)
    return _load("gdsfleet_kernel_gate_module_h47", ROOT / "plugins/modules/kernel_gate.py")


def test_a_hold_apt_does_hold_is_done_and_every_detail_is_one_line(kgm: ModuleType) -> None:
    out = ("linux-image-6.1.0-29-amd64 set on hold.\nlinux-headers-6.1.0-29-amd64 set on "
           "hold.\nE: Can't select installed nor candidate version from package "
           "'linux-generic' as it has neither of them")
    actions = [
        {"action": "keep_default", "ok": True, "detail": "grub-set-default 'x>y'\n(saved)"},
        {"action": "hold", "ok": False,
         "detail": f"apt-mark hold linux-headers-6.1.0-29-amd64 linux-image-6.1.0-29-amd64: "
                   f"{out}"},
    ]
    kgm.settle_holds(actions, {"linux-image-6.1.0-29-amd64", "linux-headers-6.1.0-29-amd64"})
    assert actions[1]["ok"] is True
    assert actions[1]["detail"].startswith("apt-mark hold linux-headers-6.1.0-29-amd64 "
                                           "linux-image-6.1.0-29-amd64: held (apt-mark "
                                           "showhold lists them); apt-mark said: ")
    assert all("\n" not in a["detail"] and len(a["detail"]) <= 500 for a in actions)


def test_a_hold_apt_does_not_hold_stays_failed(kgm: ModuleType) -> None:
    actions = [{"action": "hold", "ok": False,
                "detail": "apt-mark hold linux-image-6.1.0-29-amd64: E: locked"}]
    kgm.settle_holds(actions, {"something-else"})
    assert actions[0]["ok"] is False
    kgm.settle_holds(actions, None)  # showhold could not be asked: the report stands
    assert actions[0]["ok"] is False


def test_the_failure_message_is_one_bounded_line(kgm: ModuleType) -> None:
    result: dict[str, Any] = {
        "kernel": "6.1.0-29-amd64", "next_boot": "6.1.0-28-amd64",
        "reason": "no headers for 6.1.0-29-amd64 (/lib/modules/6.1.0-29-amd64/build is "
                  "missing)\n" + "x" * 800,
        "fix": "install linux-headers-6.1.0-29-amd64, then `dkms autoinstall -k ...`",
        "actions": [{"action": "keep_default", "ok": True, "detail": "grub-set-default a"},
                    {"action": "hold", "ok": True, "detail": "apt-mark hold b"}],
    }
    msg = kgm.summary(result)
    assert "\n" not in msg and len(msg) <= kgm.MSG_MAX
    assert msg.startswith("kernel gate FAILED for 6.1.0-29-amd64: no headers for ")
    assert "keep_default: done" in msg and "hold: done" in msg


def _ansible(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not (COLLECTIONS / "ansible_collections" / "gdsfleet" / "gds").is_dir():
        pytest.skip("bash scripts/install_collection.sh first (scripts/test.sh does)")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-m",
         "gdsfleet.gds.kernel_gate", "-a",
         f"kernel={ABSENT} state_path={tmp / 'kernel-gate.json'}", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False)


def _result(out: str) -> dict[str, Any]:
    return dict(json.loads(out[out.index("=> {") + 3:]))


def test_check_mode_says_a_kernel_not_installed_cannot_be_gated_yet(tmp_path: Path) -> None:
    proc = _ansible(tmp_path, "-C")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = _result(proc.stdout)
    assert doc["pending"] is True and doc["passed"] is None
    assert doc["msg"].startswith(f"check mode: kernel {ABSENT} is not installed, so it cannot "
                                 f"be gated yet; a real run gates it once installed (headers")
    assert "no headers" not in proc.stdout  # not a verdict on a kernel that is not there
    assert not (tmp_path / "kernel-gate.json").exists()


def test_a_failed_gate_fails_the_task_with_one_line(tmp_path: Path) -> None:
    proc = _ansible(tmp_path)
    assert proc.returncode != 0, proc.stdout
    assert "FAILED!" in proc.stdout and "SUCCESS" not in proc.stdout
    doc = _result(proc.stdout)
    assert doc["passed"] is False
    assert doc["msg"].startswith(f"kernel gate FAILED for {ABSENT}: ")
    assert "no headers for" in doc["msg"] and "\n" not in doc["msg"]
    # the verdict is recorded, as before
    assert json.loads((tmp_path / "kernel-gate.json").read_text())["kernels"][ABSENT][
        "passed"] is False
