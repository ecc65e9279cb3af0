"""The waves line says how the spec collapsed on the fleet (issue 30 item 5): "3 wave(s)
(1,5,25%,100%)" for four entries on 8 nodes left the operator to guess which entries went."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.cli import main
from provisioner.errors import UsageError
from provisioner.exitcodes import Exit
from provisioner.rollout.planner import describe_waves, parse_wave_spec, wave_sizes


def test_eight_nodes() -> None:
    assert describe_waves("1,5,25%,100%", 8) == (
        "1,5,25%,100% on 8 nodes -> 3 waves of 1, 5, 2 (25% of 8 = 2; 100%: no node left)")


def test_two_nodes() -> None:
    assert describe_waves("1,5,25%,100%", 2) == (
        "1,5,25%,100% on 2 nodes -> 2 waves of 1, 1 (5: only 1 left; 25%, 100%: no node left)")


def test_nodes_after_the_last_entry() -> None:
    assert describe_waves("1,2", 10) == (
        "1,2 on 10 nodes -> 3 waves of 1, 2, 7 (the 7 node(s) after the last entry form a "
        "last wave)")


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100), st.booleans()), min_size=1, max_size=6),
       st.integers(1, 500))
def test_the_words_match_the_split(entries: list[tuple[int, bool]], total: int) -> None:
    spec = ",".join(f"{v}%" if pct else str(v) for v, pct in entries)
    first = parse_wave_spec(spec)[0]
    if total > 1 and first.resolve(total) >= total:  # the canary would be every node
        with pytest.raises(UsageError, match="a canary is never the whole fleet"):
            wave_sizes(spec, total)
        return
    sizes = wave_sizes(spec, total)
    text = describe_waves(spec, total)
    assert f" -> {len(sizes)} wave" in text
    assert f" of {', '.join(map(str, sizes))}" in text


@pytest.mark.parametrize("n, line", [
    (8, "rollout plan: 1,5,25%,100% on 8 nodes -> 3 waves of 1, 5, 2 (25% of 8 = 2; 100%: no "
        "node left)"),
    (2, "rollout plan: 1,5,25%,100% on 2 nodes -> 2 waves of 1, 1 (5: only 1 left; 25%, 100%: "
        "no node left)"),
])
def test_plan_says_how_the_spec_collapsed(n: int, line: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"gpu-{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in range(1, n + 1)))
    assert main(["plan", "-i", str(inv), "--ledger", str(tmp_path / "l.sqlite"),
                 "--waves", "1,5,25%,100%", "--allow-local-connection"]) == Exit.OK
    assert line in capsys.readouterr().out.splitlines()
