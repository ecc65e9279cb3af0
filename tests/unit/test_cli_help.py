"""Every sub-command's --help renders (argparse expands '%' in help strings at print time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.commands import COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: provisioner {command}")


def test_plan_help_shows_default_waves(capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.rollout.planner import DEFAULT_WAVES

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert f"(default {DEFAULT_WAVES})" in " ".join(capsys.readouterr().out.split())


def _fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter (sys.modules as a real command starts) and return
    its stdout."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=True)
    return r.stdout.strip()


def test_a_command_imports_only_its_own_module() -> None:
    # rollout's parser must not pull in verify's module (the verification and report
    # packages); without a command word none is imported, and build_parser() is complete
    out = _fresh_python(
        "import sys\n"
        "from provisioner.cli import build_parser\n"
        "build_parser('rollout').parse_args(['rollout', '-i', 'x'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('provisioner.commands.')))\n"
        "print('provisioner.verify.node' in sys.modules)\n"
        "build_parser('')\n"
        "print(len([m for m in sys.modules if m.startswith('provisioner.commands.')]))\n"
        "build_parser()\n"
        "print(sorted(m for m in sys.modules if m.startswith('provisioner.commands.')))\n")
    first, node, count, everything = out.splitlines()
    assert first == "['provisioner.commands.plan', 'provisioner.commands.rollout']"
    assert node == "False"
    assert count == "2"  # nothing more for a line without a command
    assert everything == str(sorted(f"provisioner.commands.{m}" for m in COMMANDS.values()))


def test_a_misspelt_command_is_still_refused_with_the_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["rollotu", "-i", "x"])
    assert exc.value.code == 64  # Exit.USAGE: argparse's 2 is UNREACHABLE here (issue 47)
    err = capsys.readouterr().err
    assert "invalid choice: 'rollotu'" in err and "'rollout'" in err


def test_the_program_exits_with_the_heap_frozen_and_main_leaves_it_alone(
        tmp_path: Path) -> None:
    # console_main (the installed program, python -m provisioner) freezes the heap after the
    # command so that the interpreter's exit skips collecting it; main (library callers)
    # does not
    ledger = tmp_path / "none.sqlite"
    out = _fresh_python(
        "import gc, sys\n"
        "from provisioner import cli\n"
        f"args = ['status', '--ledger', {str(ledger)!r}]\n"
        "code = cli.main(args)\n"
        "print(code, gc.get_freeze_count())\n"
        "sys.argv = ['provisioner', *args]\n"
        "code = cli.console_main()\n"
        "print(code, gc.get_freeze_count() > 0)\n")
    lib, prog = out.splitlines()
    lib_code, prog_code = lib.split()[0], prog.split()[0]
    assert lib_code == prog_code  # the same command, the same exit status
    assert lib.split()[1] == "0"
    assert prog.split()[1] == "True"


def _options(command: str) -> list[tuple[str, str | None]]:
    """(first option string, help) of every option of a sub-command's parser."""
    import argparse

    from provisioner.cli import build_parser

    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cmd = sub.choices[command]
    actions = list(cmd._actions)
    for a in cmd._actions:  # a command with sub-commands of its own (exec-nodes): theirs too
        if isinstance(a, argparse._SubParsersAction):
            actions += [x for p in a.choices.values() for x in p._actions]
    return [(a.option_strings[-1], a.help) for a in actions
            if a.option_strings and not a.required]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_a_help_text(command: str) -> None:
    """issue 30 item 4: --io-timeout, --ssh-config, --connect-timeout, --drain-timeout and
    --drain-poll had none in rollout --help."""
    bare = [opt for opt, text in _options(command) if not (text or "").strip()]
    assert bare == [], f"{command}: options without help: {bare}"


def test_every_rollout_option_names_its_default() -> None:
    import re

    bare = [opt for opt, text in _options("rollout")
            if opt != "--help" and not re.search(r"default", text or "")]
    assert bare == [], f"rollout options whose help gives no default: {bare}"


def test_rollout_help_leads_with_the_five_that_matter(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rollout", "--help"])
    out = capsys.readouterr().out
    group = out.split("the options that matter most:", 1)[1].split("\n\n", 1)[0]
    lead = [ln.split()[0].rstrip(",") for ln in group.splitlines()
            if ln.startswith("  -")]
    assert lead == ["-i", "--waves", "--max-failures", "--allow-reboot", "--ledger"]
    assert out.index("the options that matter most:") < out.index("gates and budgets:")
    policy = " ".join(out.rsplit("--policy FILE", 1)[1].split()[:12])
    assert "expected route" in policy  # says what the file holds, not only "policy YAML"
