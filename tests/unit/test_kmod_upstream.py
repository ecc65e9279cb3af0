"""How kmod reads modprobe.d, checked against kmod's sources (tests/fixtures/kmod/): which
directories each kmod version reads and in which order, lines continued with a backslash, the
kernel command line applied after every file. One reading serves the p2pdma role's plan
(plugins/filter/modprobe.py) and `provisioner verify` (provisioner/verify/parsers/modprobe.py);
both are tested on the same cases, and the gather, the role and the stand-in modprobe list the
same directories."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from provisioner.remote import gather
from provisioner.verify.parsers import modprobe

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = yaml.safe_load((ROOT / "tests/fixtures/kmod/kmod_upstream.yml").read_text())
OWN = "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"
WANTED = {"nvme_core": {"multipath": "N"}}
SIM = ROOT / "tests/harness/node/usr/local/lib/gdsfleet-sim/gdsfleet_sim.py"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plan_mod = _load("gdsfleet_modprobe_filter_kmod", ROOT / "plugins/filter/modprobe.py")
conf = _load("gdsfleet_modprobe_conf_kmod", ROOT / "plugins/module_utils/modprobe_conf.py")
CASES = FIXTURE["cases"]


@pytest.mark.parametrize("tag", sorted(FIXTURE["default_config_paths"]))
def test_directories_per_kmod_version(tag: str) -> None:
    want = tuple(FIXTURE["default_config_paths"][tag])
    assert conf.kmod_dirs(f"kmod version {tag[1:]}\n+ZSTD") == want
    assert conf.kmod_dirs(int(tag[1:])) == want


def test_unknown_version_reads_every_directory_in_the_newest_order() -> None:
    newest = tuple(FIXTURE["default_config_paths"][max(FIXTURE["default_config_paths"])])
    assert conf.kmod_dirs(None) == conf.kmod_dirs("garbage") == newest == conf.MODPROBE_DIRS


def test_every_lister_looks_in_every_directory() -> None:
    """The gather and the role list every directory some kmod reads (the parser then keeps
    those of the node's version)."""
    newest = list(FIXTURE["default_config_paths"]["v34"])
    assert list(gather.MODPROBE_DIRS) == newest
    role_vars = yaml.safe_load((ROOT / "roles/p2pdma/vars/main.yml").read_text())
    assert role_vars["_p2pdma_modprobe_dirs"] == newest


def _gather_doc(case: dict[str, Any]) -> str:
    return json.dumps({"files": list(case["files"]), "texts": case["files"],
                       "kmod_version": case["kmod_version"]})


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_verify_reads_modprobe_d_as_kmod(case: dict[str, Any]) -> None:
    got = modprobe.configured_options(_gather_doc(case), case.get("cmdline"))
    assert got["nvme_core"]["multipath"] == case["multipath"]


@pytest.mark.parametrize("case", [c for c in CASES if not c.get("cmdline")],
                         ids=[c["name"] for c in CASES if not c.get("cmdline")])
def test_older_gather_records_follow_the_version_too(case: dict[str, Any]) -> None:
    """Records from before the texts were gathered: one `path:line` per options line."""
    if "\\\n" in "".join(case["files"].values()):
        pytest.skip("the older records hold single lines only")
    rows = [f"{p}:{ln}" for p, t in case["files"].items() for ln in t.splitlines()
            if ln.startswith("options")]
    doc = json.dumps({"files": list(case["files"]), "options": rows,
                      "kmod_version": case["kmod_version"]})
    assert modprobe.configured_options(doc)["nvme_core"]["multipath"] == case["multipath"]


@pytest.mark.parametrize("case", [c for c in CASES if not c.get("cmdline")],
                         ids=[c["name"] for c in CASES if not c.get("cmdline")])
def test_role_plan_reads_modprobe_d_as_kmod(case: dict[str, Any]) -> None:
    """The plan sees the same winner: a file outside /etc that kmod reads after ours and that
    sets multipath is a conflict; one this kmod never reads is not; an /etc file's (continued)
    line is moved out."""
    plan = plan_mod.modprobe_plan(case["files"], list(case["files"]), OWN, WANTED,
                                  kmod_version=case["kmod_version"])
    winner = case["multipath"]["file"]
    outside = [p for p in case["files"] if not p.startswith("/etc/")]
    if winner.startswith("/etc/") or case["multipath"]["value"] == "N":
        assert not [c for c in plan["conflicts"] if "multipath=Y" in c]
    else:
        assert plan["conflicts"] == [f"{winner}: options nvme_core multipath=Y"]
    for path in outside:
        if path != winner and case["multipath"]["value"] == "Y":
            assert not any(c.startswith(path) for c in plan["conflicts"])


def test_continued_line_in_etc_is_moved_out_whole() -> None:
    files = {"/etc/modprobe.d/b.conf":
             "# keep\noptions nvme_core \\\n    multipath=Y io_timeout=30\nblacklist x\n"}
    plan = plan_mod.modprobe_plan(files, list(files), OWN, WANTED, kmod_version="kmod version 31")
    assert len(plan["edits"]) == 1
    edit = plan["edits"][0]
    assert edit["line"] == "options nvme_core \\\n    multipath=Y io_timeout=30"
    # what ansible.builtin.replace does with the role's regexp (MULTILINE)
    new = re.sub("(?m)^" + re.escape(edit["line"]) + "$", edit["replace"], files[edit["path"]])
    assert "multipath" not in new.replace("moved multipath", "")
    assert "options nvme_core io_timeout=30" in new and "blacklist x" in new
    files[edit["path"]] = new
    files[OWN] = "\n".join(plan["lines"]) + "\n"
    again = plan_mod.modprobe_plan(files, list(files), OWN, WANTED, kmod_version=31)
    assert again["edits"] == [] and again["lines"] == plan["lines"]
    assert modprobe.configured_options(json.dumps(
        {"files": list(files), "texts": files, "kmod_version": "kmod version 31"}),
    )["nvme_core"]["multipath"] == {"value": "N", "file": OWN}


def test_slurp_results_are_read_like_texts() -> None:
    import base64
    case = next(c for c in CASES if c["name"] == "usr_lib_read_from_v32")
    results = [{"source": p, "content": base64.b64encode(t.encode()).decode(), "item": p}
               for p, t in case["files"].items()]
    results.append({"failed": True, "item": "/etc/modprobe.d/dangling.conf"})
    plan = plan_mod.modprobe_plan(results, list(case["files"]), OWN, WANTED,
                                  kmod_version=case["kmod_version"])
    assert plan["conflicts"] == ["/usr/lib/modprobe.d/zz-vendor.conf: "
                                 "options nvme_core multipath=Y"]


@pytest.mark.parametrize("case", FIXTURE["cmdline_cases"])
def test_kernel_command_line_options(case: dict[str, Any]) -> None:
    assert [list(o) for o in conf.cmdline_options(case["cmdline"])] == case["options"]


def test_stand_in_modprobe_is_kmod_30() -> None:
    """The simulated node's stand-in modprobe reports kmod 30 and reads kmod 30's directories."""
    tree = ast.parse(SIM.read_text())
    dirs = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "KMOD_DIRS")
    assert list(dirs) == FIXTURE["default_config_paths"]["v30"]
    stand_in = (ROOT / "tests/harness/node/usr/local/sbin/modprobe").read_text()
    assert "kmod version 30 " in stand_in
