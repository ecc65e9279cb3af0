"""Every command of docs/lifecycle.md runs as written (issue 47 item 6): its rollout lacked
``-i`` (exit 2), ``plan`` could not preview the kernel update's playbook, the ad-hoc gate needed
an ``ANSIBLE_COLLECTIONS_PATH`` the lab never named, and one line was a placeholder
(``playbooks/...``).

Each ``provisioner`` line goes through the real parser and names an inventory that exists;
each ``ansible``/``ansible-playbook`` line names an inventory, a module and a playbook the
collection has; the lab's block is what ``python -m tests.harness.lab kernel-standins`` prints;
and the ``plan --playbook`` lines run for real (they touch no node)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cli import build_parser, main
from provisioner.exitcodes import Exit
from tests.harness import kernel_standins

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "lifecycle.md").read_text(encoding="utf-8")
NEXT = "6.8.0-51-generic"


def commands() -> list[list[str]]:
    """Every command line of the page's code blocks, as words (env assignments and comments
    dropped, placeholders filled)."""
    out = []
    for block in re.findall(r"^```\n(.*?)^```", DOC, re.S | re.M):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip().replace("<next kernel>", NEXT)
            if not line:
                continue
            words = shlex.split(line)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)
            out.append(words)
    return out


def _prog(words: list[str]) -> str:
    return Path(words[0]).name


def test_the_page_has_the_commands_it_is_about() -> None:
    progs = [_prog(w) for w in commands()]
    assert progs.count("provisioner") >= 4 and progs.count("ansible") >= 3
    assert "ansible-playbook" in progs
    assert not any("..." in " ".join(w) for w in commands())  # no placeholder path left


@pytest.mark.parametrize("words", [w for w in commands() if _prog(w) == "provisioner"],
                         ids=lambda w: " ".join(w[1:4]))
def test_each_provisioner_line_parses_and_names_an_inventory(words: list[str]) -> None:
    argv = words[1:]
    args = build_parser(argv[0]).parse_args(argv)  # SystemExit (64) on a bad line
    if argv[0] in ("plan", "rollout"):
        assert args.inventory, words
    if getattr(args, "inventory", None):
        assert (ROOT / args.inventory).exists(), args.inventory


@pytest.mark.parametrize("words", [w for w in commands()
                                   if _prog(w) in ("ansible", "ansible-playbook")],
                         ids=lambda w: " ".join(w[:6]))
def test_each_ansible_line_names_what_the_collection_has(words: list[str]) -> None:
    assert "-i" in words, words
    assert (ROOT / words[words.index("-i") + 1]).exists(), words
    if "-m" in words:
        module = words[words.index("-m") + 1]
        assert module.startswith("gdsfleet.gds.")
        assert (ROOT / "plugins" / "modules" / f"{module.split('.')[-1]}.py").is_file()
    for w in words:
        if w.startswith("gdsfleet.gds.") and _prog(words) == "ansible-playbook":
            assert (ROOT / "playbooks" / f"{w.split('.')[-1]}.yml").is_file(), w
            assert f"kernel_target={NEXT}" in words  # the playbook refuses to run without it


def test_the_lab_block_is_what_the_lab_prints() -> None:
    lab = [c for c in commands() if "inventories/lab" in c]
    printed = [shlex.split(c.replace("<next kernel>", NEXT))
               for _, c in kernel_standins.lab_commands(NEXT)]
    printed = [[w for w in p if not re.match(r"^[A-Z_]+=", w)] for p in printed]
    assert lab == printed
    assert "ANSIBLE_COLLECTIONS_PATH=.lab/collections .venv/bin/ansible" in DOC
    assert "python -m tests.harness.lab kernel-standins" in DOC
    help_text = subprocess.run([sys.executable, "-m", "tests.harness.lab", "--help"],
                               capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    assert "kernel-standins" in help_text


@pytest.mark.parametrize("inventory", ["inventories/example", "inventories/lab"])
def test_plan_previews_the_kernel_update(inventory: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    if not (ROOT / ".lab" / "collections" / "ansible_collections" / "gdsfleet").is_dir():
        pytest.skip("bash scripts/install_collection.sh first (scripts/test.sh does)")
    code = main(["plan", "-i", str(ROOT / inventory), "--playbook", "gdsfleet.gds.kernel_update",
                 "--ledger", str(tmp_path / "none.sqlite"), "--json", "-"])
    assert code == Exit.OK, capsys.readouterr().err
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["playbook"] == "gdsfleet.gds.kernel_update"
    assert {n["action"] for w in doc["waves"] for n in w["nodes"]} == {"provision"}
    assert main(["plan", "-i", str(ROOT / inventory), "--playbook", "gdsfleet.gds.kernel_update",
                 "--ledger", str(tmp_path / "none.sqlite")]) == Exit.OK
    assert "every selected node is provisioned" in capsys.readouterr().out
