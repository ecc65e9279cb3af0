"""Every bad command line is one line naming the sub-command and exits 64 (issue 47, Low):
no abbreviated option is taken for another (``--wave 1`` ran as ``--waves 1``), an unknown
option is refused by the sub-command that got it, a missing ``-i`` is the same code in
``verify``, ``plan`` and ``rollout``, and the one-line help of each command is its module's."""

from __future__ import annotations

import importlib

import pytest

from provisioner.cli import _HELP, build_parser, main
from provisioner.commands import COMMANDS
from provisioner.exitcodes import Exit


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("argv", [
    ["plan", "-i", "/nonexistent/inv", "--wave", "1"],
    ["rollout", "-i", "/nonexistent/inv", "--wave", "1"],
    ["verify", "-i", "/nonexistent/inv", "--no-io"],
    ["status", "--led", "x.sqlite"],
    ["export", "env", "--node", "n", "--allow-fall"],
])
def test_an_abbreviated_option_is_refused(argv: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit(argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err, err


def test_every_parser_refuses_abbreviations() -> None:
    import argparse

    todo = [build_parser()]
    seen = 0
    while todo:
        p = todo.pop()
        seen += 1
        assert p.allow_abbrev is False, p.prog
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo.extend(a.choices.values())
    assert seen >= len(COMMANDS) + 3  # the top level, each command, export's two


@pytest.mark.parametrize("command", ["status", "history x", "plan -i x", "report latest",
                                     "export env --node n", "export deepspeed --node n"])
def test_an_unknown_option_names_the_sub_command(command: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*command.split(), "--bogus"]
    assert _exit(argv) == Exit.USAGE
    first = capsys.readouterr().err.splitlines()[0]
    words = " ".join(w for w in command.split() if w in COMMANDS or w in ("env", "deepspeed"))
    assert first == f"provisioner {words}: error: unrecognized arguments: --bogus", first


@pytest.mark.parametrize("command", ["verify", "plan", "rollout"])
def test_a_missing_inventory_is_one_code(command: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit([command]) == Exit.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"provisioner {command}: error: ") and "-i" in err, err


def test_a_bad_value_exits_64_not_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's own 2 is Exit.UNREACHABLE here: a typo must not read as an unreachable node
    assert _exit(["verify", "--parallel", "x"]) == Exit.USAGE
    assert Exit.USAGE != Exit.UNREACHABLE


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_one_line_help_is_the_modules(command: str) -> None:
    """``exec-nodes --help`` said only "check" while the command also fences."""
    mod = importlib.import_module(f"provisioner.commands.{COMMANDS[command]}")
    assert _HELP[command] == mod.HELP
