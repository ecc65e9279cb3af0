"""A failed rollout explains each node in one line: what failed, where, what to do (issue 30
item 3); the failure kind is said once ("unreachable: unreachable:" before), the table cell is
never cut mid-word, and a rollout stopped only by unreachable nodes exits 2, not 3."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.exitcodes import Exit
from provisioner.rollout.explain import explain, short_reason
from provisioner.store import Ledger
from tests.unit.test_rollout_engine import FakeFleet, engine

# what ansible-runner's runner_on_unreachable said for a name that does not resolve
UNRESOLVABLE = ("unreachable: task 'Gathering Facts': Failed to connect to the host via ssh: "
                "ssh: Could not resolve hostname gds-nodex.example: Name or service not known")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.open(tmp_path / "ledger.sqlite")
    yield led
    led.close()


def test_an_unresolvable_host_is_one_line_with_the_fix() -> None:
    line = explain("gds-nodex", "unreachable", UNRESOLVABLE, "failed", "inventories/prod")
    assert "\n" not in line
    assert line.startswith("gds-nodex: unreachable in task 'Gathering Facts': its host name "
                           "does not resolve")
    assert "fix ansible_host (or the name) in the inventory, or DNS" in line
    assert line.endswith("run the same command again (it resumes)")
    assert "unreachable: unreachable" not in line


def test_the_kind_is_said_once() -> None:
    assert short_reason("unreachable", "unreachable: unreachable: x") == "unreachable: x"
    assert short_reason("failed", "failed: task 'T': boom") == "failed: task 'T': boom"
    assert short_reason(None, "verified") == "verified"


def test_a_verification_failure_names_the_checks_and_the_command() -> None:
    line = explain("n1", "failed", "verification: not compliant: gds.io_direct", "failed", "inv")
    assert line == ("n1: provisioned, but not compliant (gds.io_direct); `provisioner verify "
                    "-i inv --limit n1 --details` says what each check needs, then run the "
                    "same command again (it resumes)")


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.sampled_from(["unreachable", "failed", "drain", None]), st.text(max_size=300))
def test_any_reason_gives_one_line(failure: str | None, reason: str) -> None:
    from provisioner.sanitize import printable

    line = printable(explain("n", failure, reason, "failed"))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.startswith("n: ")


def test_a_canary_that_cannot_be_reached_exits_2_and_explains(ledger: Ledger) -> None:
    from provisioner.rollout.progress import summary_table

    f = FakeFleet(unreachable={"n1"})
    res = engine(ledger, f).run()
    assert res.status == "aborted" and res.exit_code is Exit.UNREACHABLE  # was 3
    assert "unreachable: unreachable" not in res.message
    out = io.StringIO()
    summary_table(res, out, inventory="inv")
    text = out.getvalue()
    assert ("n1: unreachable in task 'Gather': SSH connection refused (ssh: connect refused); "
            "start sshd on the node, or fix ansible_port in the inventory, then run the same "
            "command again (it resumes)") in text.splitlines()
    assert text.rstrip().endswith("exit 2")


def test_a_canary_that_failed_still_exits_3(ledger: Ledger) -> None:
    res = engine(ledger, FakeFleet(broken={"n1"})).run()
    assert res.exit_code is Exit.ABORTED


def test_a_long_reason_is_cut_at_a_word_in_the_table(ledger: Ledger) -> None:
    from provisioner.rollout.progress import summary_table

    f = FakeFleet(broken={"n1"})
    res = engine(ledger, f).run()
    res.nodes["n1"].reason = "failed: " + " ".join(["averyveryverylongword"] * 12)
    out = io.StringIO()
    summary_table(res, out)
    words = [w.strip(";,()") for w in out.getvalue().replace("│", " ").split()]
    # whole words only (the cell was cut at 160 characters, mid-word), then the cut's mark
    assert all(w == "averyveryverylongword" for w in words if w.startswith("avery"))
    assert "..." in words
    # the node's own line below the table carries the whole reason, on one line
    assert any(ln.count("averyveryverylongword") == 12 for ln in out.getvalue().splitlines())
