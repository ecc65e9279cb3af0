"""The README's "On real nodes" block is the safe path (issue 47 item 2): it began with
``ansible-playbook -i inventories/example gdsfleet.gds.site -e gds_route=nvfs``, the whole fleet
at once (no canary, no ledger) with an extra variable that overrode gpu-03's
``gds_route: p2pdma``. Now it leads with ``plan`` and ``rollout``, and plain ``ansible-playbook``
is an alternative for one node, without the override. Also (Low): ``pip install .`` then
``pytest tests/infra`` had neither pytest nor testinfra; the extra ``.[infra]`` brings both.

Here, without containers: the block's structure, every ``provisioner`` line through the real
parser, ``plan`` run for real on inventories/example (it touches no node), and the extra
against tests/infra's imports. tests/fleet/test_rollout.py
(``test_readme_real_node_block_in_order``) runs the whole block, in order, against a
rolled-out simulated fleet shaped as inventories/lab.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from provisioner.cli import build_parser, main
from provisioner.exitcodes import Exit

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section() -> str:
    return README.split("## On real nodes", 1)[1].split("\n## ", 1)[0]


def blocks() -> list[list[str]]:
    """The section's bash blocks, each as its command lines (comments dropped)."""
    out = []
    for body in re.findall(r"^```bash\n(.*?)^```", section(), re.S | re.M):
        lines = [ln.split("  #", 1)[0].strip() for ln in body.splitlines()]
        out.append([ln for ln in lines if ln and not ln.startswith("#")])
    return out


def readme_block() -> list[str]:
    """The block's commands in order (``a && b`` as two), as tests/fleet runs them."""
    out: list[str] = []
    for line in blocks()[0]:
        out.extend(part.strip() for part in line.split("&&"))
    return out


def test_the_block_leads_with_plan_and_rollout() -> None:
    cmds = readme_block()
    provisioner = [c for c in cmds if c.startswith("provisioner ")]
    assert [c.split()[1] for c in provisioner[:2]] == ["plan", "rollout"]
    first_change = next(i for i, c in enumerate(cmds)
                        if c.startswith(("provisioner rollout", "ansible-playbook")))
    assert cmds[first_change].startswith("provisioner rollout")
    assert not any(c.startswith("ansible-playbook") for c in cmds)  # the main path: waves


def test_plain_ansible_playbook_is_for_one_node_without_an_override() -> None:
    alternative = blocks()[1]
    assert len(alternative) == 1
    words = shlex.split(alternative[0])
    assert words[:4] == ["ansible-playbook", "-i", "inventories/example", "gdsfleet.gds.site"]
    limit = words[words.index("--limit") + 1]
    hosts = yaml.safe_load((ROOT / "inventories/example/hosts.yml").read_text())
    assert limit in hosts["all"]["children"]["gpu_nodes"]["hosts"]  # one node, by name
    assert "-e" not in words and "--extra-vars" not in words
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", README, re.S | re.M))
    assert "gds_route=" not in code  # no command of the README overrides the inventory's
    # the example's p2pdma node is still the inventory's to say
    assert hosts["all"]["children"]["gpu_nodes"]["hosts"]["gpu-03"]["gds_route"] == "p2pdma"


@pytest.mark.parametrize("line", [c for c in readme_block() if c.startswith("provisioner ")])
def test_every_provisioner_line_parses(line: str) -> None:
    words = shlex.split(line)[1:]
    args = build_parser(words[0]).parse_args(words)
    inventory = getattr(args, "inventory", None)
    assert inventory is None or (ROOT / inventory).exists(), inventory


def test_plan_runs_as_written_on_the_example(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    line = next(c for c in readme_block() if c.startswith("provisioner plan"))
    argv = [*shlex.split(line)[1:], "--ledger", str(tmp_path / "none.sqlite"), "--json", "-"]
    assert main(argv) == Exit.OK, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    # 1,10%,100% on the example's 3 nodes: a canary of one, then the rest
    assert [w["label"] for w in doc["waves"]][0] == "canary"
    assert len(doc["waves"][0]["nodes"]) == 1 and not doc["problems"]


# ------------------------------------------------------------------ pip install '.[infra]'
def _imports(path: Path) -> set[str]:
    """Top-level names ``path`` imports when it is loaded: not inside a function (the
    harness imports xdist only in xdist's own hook), not only if they are there (a ``try``
    that catches ImportError: tests/conftest.py's hypothesis profile)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lazy = {id(n) for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            for stmt in f.body for n in ast.walk(stmt)}
    optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                and any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                                       "ModuleNotFoundError")
                        for h in t.handlers)
                for stmt in t.body for n in ast.walk(stmt)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in optional or id(node) in lazy:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_infra_extra_brings_what_tests_infra_imports() -> None:
    import importlib.metadata as md

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {re.split(r"[<>=!~\[ ]", d, maxsplit=1)[0].lower()
              for d in project["dependencies"] + project["optional-dependencies"]["infra"]}
    assert {"pytest", "pytest-testinfra"} <= wanted
    # what pytest loads for tests/infra: its files, tests/conftest.py and the harness plugin
    files = [*(ROOT / "tests" / "infra").glob("*.py"), ROOT / "tests" / "conftest.py",
             ROOT / "tests" / "harness" / "fixtures.py", ROOT / "tests" / "harness" / "run.py",
             ROOT / "tests" / "harness" / "schedule.py"]
    third_party = set().union(*(_imports(f) for f in files)) - set(sys.stdlib_module_names) \
        - {"tests", "provisioner", "__future__", "conftest"}
    dists = md.packages_distributions()
    for module in sorted(third_party):
        provided = {d.lower() for d in dists.get(module, [])}
        assert provided & wanted, f"{module} (from {sorted(provided)}) is not in the extra"
    # and the README installs the extra before it runs the checks
    cmds = readme_block()
    assert cmds.index("pip install '.[infra]'") < next(
        i for i, c in enumerate(cmds) if c.startswith("pytest tests/infra"))
