"""Every sub-command's --help renders (argparse expands '%' in help strings at print time)."""

from __future__ import annotations

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
