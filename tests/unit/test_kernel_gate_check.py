"""verify's gate.boot_kernel: the kernel gate's record (/var/lib/gdsfleet/kernel-gate.json, as
plugins/module_utils/kernel_gate.py writes it) for the kernel the node really boots next."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.parsers import kernel_gate as parser
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gdsfleet_kernel_gate_utils_check",
                                               ROOT / "plugins/module_utils/kernel_gate.py")
assert _spec and _spec.loader
kg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kg)

RUNNING = nf.KERNEL
NEW = "6.1.0-28-amd64"
ENTRY = f"gnulinux-advanced-UUID>gnulinux-{RUNNING}-advanced-UUID"


def state(tmp: Path, passed: bool, deferred: bool = False) -> str:
    path = tmp / "kernel-gate.json"
    kg.record({"kernel": NEW, "passed": passed, "reason": "no headers for " + NEW,
               "fix": f"install linux-headers-{NEW}", "deferred": deferred}, running=RUNNING,
              nxt={"kernel": RUNNING, "source": "GRUB saved_entry"}, actions=[],
              path=str(path), now="2026-11-26T20:00:00Z")
    return path.read_text()


def gate_check(*, state_text: str | None, grub: str = "GRUB_DEFAULT=0",
               grubenv: str | None = None) -> CheckResult:
    doc: dict[str, Any] = nf.gather_doc(route="nvfs")
    items = doc["items"]
    items["boot_dir"] = {"rc": 0, "out": f"config-{RUNNING}\nvmlinuz-{RUNNING}\nvmlinuz-{NEW}\n"
                                       "grub\n", "err": ""}
    items["grubby_default_kernel"] = {"rc": None, "out": "", "err": "not found"}
    items["kernel_gate_state"] = ({"rc": 0, "out": state_text, "err": ""} if state_text
                                  is not None else {"rc": None, "out": "", "err": "missing"})
    items["grub_default_entry"] = {"rc": 0, "out": grub, "err": ""}
    items["grubenv"] = ({"rc": 0, "out": grubenv, "err": ""} if grubenv
                        else {"rc": None, "out": "", "err": "missing"})
    facts = build_facts(doc)
    io = iotest.evaluate(nf.direct_nvfs_io(), route="nvfs")
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route="nvfs")
    return next(c for c in results if c.id == "gate.boot_kernel")


def test_next_boot_kernel_that_failed_the_gate_fails(tmp_path: Path) -> None:
    c = gate_check(state_text=state(tmp_path, passed=False))
    assert c.status == "fail", c
    assert NEW in c.observed and "no headers" in c.message and f"linux-headers-{NEW}" in c.message


def test_pinned_running_kernel_is_what_boots_so_the_failure_does_not_fail(tmp_path: Path) -> None:
    c = gate_check(state_text=state(tmp_path, passed=False), grub="GRUB_DEFAULT=saved",
                   grubenv=f"# GRUB Environment Block\nsaved_entry={ENTRY}\n")
    assert (c.status, c.observed) == ("skip", f"{RUNNING} (GRUB saved_entry): the running kernel")


def test_saved_entry_is_ignored_unless_grub_default_is_saved(tmp_path: Path) -> None:
    c = gate_check(state_text=state(tmp_path, passed=False), grub="GRUB_DEFAULT=0",
                   grubenv=f"saved_entry={ENTRY}\n")
    assert c.status == "fail"


def test_a_deferred_verdict_warns_and_says_it_is_not_final(tmp_path: Path) -> None:
    """The image's hook ran before its headers (tests/fixtures/kernel_gate/dkms_hooks.yml): a
    package install in progress, not a failed kernel."""
    c = gate_check(state_text=state(tmp_path, passed=False, deferred=True))
    assert c.status == "warn", c
    assert "deferred" in c.observed and "gates again" in c.message


def test_next_boot_kernel_that_passed_passes(tmp_path: Path) -> None:
    c = gate_check(state_text=state(tmp_path, passed=True))
    assert c.status == "pass" and "2026-11-26T20:00:00Z" in c.observed


def test_never_gated_next_kernel_warns() -> None:
    c = gate_check(state_text=None)
    assert c.status == "warn" and "not gated" in c.observed and "kernel hook" in c.message


def test_garbage_state_warns_and_never_crashes() -> None:
    assert gate_check(state_text="{nope").status == "warn"
    assert gate_check(state_text='{"gdsfleet_kernel_gate": 2}').status == "warn"
    rnd = random.Random(29)  # noqa: S311  fixed-seed fuzzing, not crypto
    good = json.dumps({"gdsfleet_kernel_gate": 1, "kernels": {NEW: {"passed": False}}})
    for _ in range(300):
        text = list(good)
        for _ in range(rnd.randint(1, 4)):
            text[rnd.randrange(len(text))] = rnd.choice('{}[]":,0aX\\')
        doc = parser.parse_state("".join(text))
        assert set(doc) == {"present", "error", "running", "next_boot", "kernels"}
    doc = parser.parse_state(json.dumps({"gdsfleet_kernel_gate": 1, "kernels": {
        "../etc": {"passed": False}, NEW: {"passed": "no"}, "ok-1": {"passed": True,
                                                                     "reason": "x" * 10**5}}}))
    assert list(doc["kernels"]) == ["ok-1"] and len(doc["kernels"]["ok-1"]["reason"]) == 2000


def test_gather_items_do_not_overwrite_another_blocks() -> None:
    """gather.py merges every block's items into one dict: a name taken twice loses one."""
    from provisioner.remote import gather

    mine = set(gather.kernel_gate_items())
    assert not mine & set(gather.boot_args_items())
    assert mine == {"kernel_gate_state", "grub_default_entry", "grubenv"}
