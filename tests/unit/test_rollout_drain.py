"""Drain hooks: templating, quoting, refusing unknown fields, polling with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.errors import UsageError
from provisioner.rollout.drain import DrainHooks, check_template, render


def test_render_substitutes_and_quotes() -> None:
    t = 'scontrol update NodeName={node} State=DRAIN Reason="gdsfleet"'
    assert render(t, "gpu-01") == 'scontrol update NodeName=gpu-01 State=DRAIN Reason="gdsfleet"'
    # a hostile value (inventory already refuses these) still cannot break out
    assert render("echo {node}", "a;rm -rf /") == "echo 'a;rm -rf /'"
    assert render("ping {address}", "n1", "127.0.0.5") == "ping 127.0.0.5"
    assert render("ping {address}", "n1") == "ping n1"


@pytest.mark.parametrize("bad", ["echo {host}", "echo {node!r}", "echo {node:>9}", "echo {",
                                 "echo {0}", "echo {}"])
def test_bad_templates_are_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="--drain-cmd"):
        check_template(bad, "--drain-cmd")


def test_literal_braces_are_fine() -> None:
    assert render(check_template("echo {{x}} {node}", "--drain-cmd"), "n") == "echo {x} n"


def test_wait_needs_drain() -> None:
    with pytest.raises(UsageError, match="--drain-wait-cmd needs --drain-cmd"):
        DrainHooks.from_options(None, None, "true")


def test_drain_then_poll_until_drained(tmp_path: Path) -> None:
    flag = tmp_path / "drained-n1"
    counter = tmp_path / "polls"
    hooks = DrainHooks.from_options(
        drain_cmd=f"echo {{node}} >> {tmp_path}/log",
        resume_cmd=f"rm {tmp_path}/drained-{{node}}",
        wait_cmd=(f"echo x >> {counter}; test $(wc -l < {counter}) -ge 3 "
                  f"&& touch {tmp_path}/drained-{{node}}"),
        wait_timeout_s=30,
        poll_interval_s=0.01,
    )
    res = hooks.drain("n1")
    assert res.ok
    assert (tmp_path / "log").read_text() == "n1\n"
    assert len(counter.read_text().splitlines()) == 3
    assert flag.exists()
    assert hooks.resume("n1").ok and not flag.exists()


def test_failed_drain_reports_why(tmp_path: Path) -> None:
    hooks = DrainHooks.from_options("echo refusing {node} >&2; exit 3", None, None)
    res = hooks.drain("n2")
    assert not res.ok and res.exit_status == 3 and "refusing n2" in res.output


def test_wait_times_out() -> None:
    t = [0.0]

    def clock() -> float:
        return t[0]

    def sleep(s: float) -> None:
        t[0] += s

    hooks = DrainHooks.from_options("true", None, "false", wait_timeout_s=10, poll_interval_s=3)
    res = hooks.drain("n3", sleep=sleep, clock=clock)
    assert not res.ok and "not drained after 10s" in res.output
    assert t[0] == 9.0  # polled at 0, 3, 6, 9; the next poll would pass the deadline


def test_no_hooks_is_a_no_op() -> None:
    hooks = DrainHooks()
    assert not hooks.enabled
    assert hooks.drain("n").ok and hooks.resume("n").ok
