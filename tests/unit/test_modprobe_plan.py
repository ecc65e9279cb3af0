"""The p2pdma role's modprobe.d plan (plugins/filter/modprobe.py): NVreg_RegistryDwords merged
with the keys other files set, each key once, our parameters moved out of the other files in
/etc/modprobe.d, files outside /etc that would override ours reported, and a second run of the
plan over its own result asks for nothing more."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OWN = "/etc/modprobe.d/zz-gdsfleet-p2pdma.conf"
WANTED = {"nvme_core": {"multipath": "N"},
          "nvidia": {"NVreg_RegistryDwords": "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"}}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_modprobe_filter", ROOT / "plugins" / "filter" / "modprobe.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mp = _load()


def grep(files: dict[str, str]) -> str:
    """What `grep -HsE '^\\s*options\\s+(nvidia|nvme_core|nvme-core)\\s' FILES` prints."""
    out = []
    for path, text in files.items():
        for line in text.splitlines():
            if re.match(r"^\s*options\s+(nvidia|nvme_core|nvme-core)\s", line):
                out.append(f"{path}:{line}")
    return "\n".join(out)


def apply(files: dict[str, str], plan: dict[str, Any]) -> dict[str, str]:
    """What the role's copy + replace tasks do to the files."""
    out = dict(files)
    for edit in plan["edits"]:
        out[edit["path"]] = re.sub("(?m)^" + re.escape(edit["line"]) + "$", edit["replace"],
                                   out[edit["path"]])
    out[OWN] = "# managed\n" + "\n".join(plan["lines"]) + "\n"
    return out


def plan_for(files: dict[str, str]) -> dict[str, Any]:
    return mp.modprobe_plan(grep(files), list(files), OWN, WANTED)


def test_fresh_node_gets_both_options() -> None:
    plan = plan_for({})
    assert plan["lines"] == [
        "options nvme_core multipath=N",
        'options nvidia NVreg_RegistryDwords="RMForceStaticBar1=1;RmForceDisableIomapWC=1;"']
    assert plan["edits"] == [] and plan["conflicts"] == [] and plan["merged"] == {}


def test_operator_registry_keys_are_merged_and_moved_out() -> None:
    files = {
        "/etc/modprobe.d/nvidia.conf":
            "# operator\n"
            'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;rmforcestaticbar1=0;" '
            "NVreg_EnableStreamMemOPs=1\n",
        "/etc/modprobe.d/nvme.conf": "options nvme-core multipath=Y\n",
        "/etc/modprobe.d/other.conf": "options nvidia_uvm uvm_perf_prefetch_enable=0\n",
    }
    plan = plan_for(files)
    # one value, the operator's key kept, ours replacing its spelling of the same key
    assert plan["lines"][1] == ('options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;'
                                'RMForceStaticBar1=1;RmForceDisableIomapWC=1;"')
    assert plan["merged"]["NVreg_RegistryDwords"] == [
        "PeerMappingOverride=1 (from /etc/modprobe.d/nvidia.conf)",
        "rmforcestaticbar1=0 (from /etc/modprobe.d/nvidia.conf)"]
    after = apply(files, plan)
    assert re.search(r"(?m)^options nvidia NVreg_EnableStreamMemOPs=1$",
                     after["/etc/modprobe.d/nvidia.conf"])
    assert "options nvidia NVreg_RegistryDwords" not in after["/etc/modprobe.d/nvidia.conf"]
    assert not re.search(r"(?m)^options", after["/etc/modprobe.d/nvme.conf"])
    assert after["/etc/modprobe.d/other.conf"] == files["/etc/modprobe.d/other.conf"]
    setters = [ln for text in after.values() for ln in text.splitlines()
               if re.match(r"options .*(NVreg_RegistryDwords|multipath)=", ln)]
    assert len(setters) == 2
    # second run: the merged keys are read back from our own file, nothing else to do
    again = plan_for(after)
    assert again["lines"] == plan["lines"]
    assert again["edits"] == [] and again["merged"] == {}


def test_file_outside_etc_read_after_ours_is_a_conflict() -> None:
    files = {"/usr/lib/modprobe.d/zzz-vendor.conf": "options nvme_core multipath=Y\n",
             "/lib/modprobe.d/nvidia-vendor.conf": 'options nvidia NVreg_RegistryDwords="V=1"\n'}
    plan = plan_for(files)
    assert plan["conflicts"] == [
        "/usr/lib/modprobe.d/zzz-vendor.conf: options nvme_core multipath=Y"]
    # the earlier vendor file is read before ours: its key is merged, nothing to edit there
    assert "V=1;" in plan["lines"][1] and plan["edits"] == []
    # a file of the same name in /etc/modprobe.d hides the vendor file
    shadowed = plan_for({**files, "/etc/modprobe.d/zzz-vendor.conf": "# no options\n"})
    assert shadowed["conflicts"] == []


def test_quoted_values_with_blanks_stay_one_parameter() -> None:
    assert mp.tokenize('options nvidia NVreg_RegistryDwords="A=1; B=2" X=1') == [
        "options", "nvidia", 'NVreg_RegistryDwords="A=1; B=2"', "X=1"]
    assert mp.parse_registry(' "A=1; B=0x2;;" ') == [("A", "1"), ("B", "0x2")]
