"""The README an operator reads first (issue 30 items 7 and 8): the lab's follow-up commands
exactly as lab.sh prints them (teardown included), its figures the ones docs/testing.md
measured, its ledger commands each naming an inventory (so they read one ledger), no pointer
to notes outside the repository, and a changelog that reaches the collection's version."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.harness import lab_followups

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TESTING = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
# a time or a test count as the README writes one: "4 min 25 s", "31 min", "1,700 tests"
FIGURE = re.compile(r"\b\d[\d,.]*(?: min \d+ s| min(?:utes)?\b| s\b| seconds\b| tests\b)")


def test_readme_shows_the_lab_followups_as_lab_sh_prints_them() -> None:
    printed = lab_followups.render(0).splitlines()
    lines = README.splitlines()
    for line in printed[1:-2]:  # the commands, labels and teardown, not the status lines
        assert line in lines, line
    assert lab_followups.TEARDOWN in README
    lab_sh = (ROOT / "scripts" / "lab.sh").read_text(encoding="utf-8")
    assert "python -m tests.harness.lab_followups" in lab_sh
    # the block is printed from one place only: no second copy in the script to drift
    assert ".venv/bin/provisioner" not in lab_sh


def test_every_followup_names_the_lab_inventory_or_tears_down() -> None:
    for _, cmd in lab_followups.followups()[:-1]:
        assert f" -i {lab_followups.INVENTORY}" in cmd, cmd
        assert "--ledger" not in cmd  # one rule: the inventory names the ledger


def test_readme_figures_are_the_measured_ones() -> None:
    figures = FIGURE.findall(README)
    assert {"8 min 58 s", "12 min 57 s", "50 min"} <= set(figures)
    for fig in figures:
        assert fig in TESTING, f"README says {fig!r}, docs/testing.md does not"
    section = TESTING.split("## How long things take", 1)[1].split("\n## ", 1)[0]
    for fig in ("8 min 58 s", "510 s", "12 min 57 s", "50 min", "2,517 passed", "1,700 tests",
                "6.5 min", "CPU-bound on the host"):
        assert fig in section, fig
    assert "docs/testing.md#how-long-things-take" in README


def test_readme_ledger_commands_name_an_inventory() -> None:
    """A bare ``provisioner status`` reads the default ledger, not the fleet's: the README's
    commands each name the inventory (or the ledger) they mean."""
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", README, re.S | re.M))
    found = (re.search(r"(\.venv/bin/)?provisioner (status|history|report|export)\b.*", ln)
             for ln in code.splitlines())
    cmds = [m.group(0) for m in found if m]
    assert len(cmds) >= 6, cmds
    for cmd in cmds:
        assert re.search(r"\s-i \S+|--ledger \S+", cmd), cmd


def test_readme_points_only_inside_the_repository() -> None:
    assert "closing notes" not in README
    for target in re.findall(r"\]\(((?!https?://)[^)#]+)", README):
        assert (ROOT / target).exists(), target


def test_changelog_reaches_the_collection_version() -> None:
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    changelog = (ROOT / "CHANGELOG.rst").read_text(encoding="utf-8")
    assert re.search(rf"^v{re.escape(version)}\n=+$", changelog, re.M), version
    releases = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert version in releases


def test_followups_of_a_smaller_lab_carry_its_limit_and_quote_extra_args() -> None:
    """LAB_NODES=2 and a stand-in repository on another port: the rollout and verify lines
    select the nodes that exist, the extra variables come back quoted for a shell."""
    import shlex

    cmds = dict(lab_followups.followups("gdsfleet-lab-01:gdsfleet-lab-02",
                                        ["-e", "cuda_repo_base_url=http://127.0.0.1:8471/x y"]))
    rollout = cmds["run it again (reconcile, fast)"]
    assert shlex.split(rollout)[-4:] == ["--limit", "gdsfleet-lab-01:gdsfleet-lab-02", "-e",
                                         "cuda_repo_base_url=http://127.0.0.1:8471/x y"]
    assert cmds["verify the nodes yourself"].endswith(" --limit gdsfleet-lab-01:gdsfleet-lab-02")
    assert "--limit" not in cmds["the ledger, node by node"]
