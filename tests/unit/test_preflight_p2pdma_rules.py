"""Preflight refuses the p2pdma route where NVIDIA says it does not work, and warns where NVIDIA
says it can fail, before any change or reboot (issue 28, item 7).

The rules are data (roles/preflight/vars/p2pdma_rules.yml); the role's tasks/p2pdma_rules.yml
evaluates them on ``gds_preflight`` (what probe.yml records). It runs here for real, one
ansible-playbook for every case (tests/unit/playbatch.py), with ``gds_preflight`` as each case's
host variables. ``evaluate`` below is the same rule semantics in Python (what another consumer,
such as a conformance matrix, does with the YAML); the tests check that both agree.
Sources: tests/fixtures/preflight/p2pdma_nvidia_rules.md."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbatch import HostRun, run_cases

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "roles" / "preflight" / "vars" / "p2pdma_rules.yml"
FIXTURE = ROOT / "tests" / "fixtures" / "preflight" / "p2pdma_nvidia_rules.md"
TASKS = [{"name": "preflight's p2pdma rules",
          "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "p2pdma_rules.yml"}}]

RULES = yaml.safe_load(RULES_FILE.read_text())


def evaluate(facts: dict[str, str],
             accept: tuple[str, ...] | list[str] = ()) -> tuple[list[str], list[str]]:
    """(refused ids, warned ids): a rule holds when every ``when`` fact fully matches."""
    fired = [r for r in RULES["__preflight_p2pdma_rules"]
             if all(re.match(f"(?:{pat})$", facts.get(k, "")) for k, pat in r["when"].items())]
    refused = [r["id"] for r in fired if r["severity"] == "refuse" and r["id"] not in accept]
    return refused, [r["id"] for r in fired if r["id"] not in refused]


# -- STAND-IN nvidia-smi output, in nvidia-smi's formats ----------------------------------------
def _query(*names: str) -> str:
    return "".join(f"{i}, {n}\n" for i, n in enumerate(names))


def _memory(*sizes: tuple[int, int]) -> str:
    out = "\n==============NVSMI LOG==============\n\n"
    for i, (fb, bar1) in enumerate(sizes):
        out += (f"GPU 00000000:{0x18 + i:02X}:00.0\n"
                f"    FB Memory Usage\n        Total                             : {fb} MiB\n"
                f"        Reserved                          : 516 MiB\n"
                f"        Used                              : 0 MiB\n"
                f"    BAR1 Memory Usage\n        Total                             : {bar1} MiB\n"
                f"        Used                              : 1 MiB\n")
    return out


H100 = ("NVIDIA H100 80GB HBM3", (81559, 131072))


def _node(distribution: str = "Ubuntu 24.04", arch: str = "x86_64",
          cmdline: str = "BOOT_IMAGE=/vmlinuz ro nokaslr",
          gpus: tuple[tuple[str, tuple[int, int]], ...] = (H100, H100)) -> dict[str, Any]:
    return {"distribution": distribution, "arch": arch, "cmdline": cmdline,
            "gpu_query": _query(*(n for n, _ in gpus)),
            "gpu_memory": _memory(*(s for _, s in gpus))}


# name: (gds_preflight, accept, refused ids, warned ids, the facts evaluate() gets)
CASES: dict[str, tuple[dict[str, Any], list[str], list[str], list[str]]] = {
    "ubuntu2404-h100": (_node(), [], [], []),
    "kaslr-on": (_node(cmdline="ro quiet"), [], [], ["kaslr-x86"]),
    "kaslr-on-arm": (_node(arch="aarch64", cmdline="ro"), [], [], []),
    "rhel95": (_node("RedHat 9.5"), [], ["rhel95-x86"], []),
    "rocky95": (_node("Rocky 9.5"), [], ["rhel95-x86"], []),
    "rhel94": (_node("RedHat 9.4"), [], [], []),
    "rhel95-arm": (_node("RedHat 9.5", arch="aarch64"), [], [], []),
    "l40-not-l40s": (_node(gpus=(("NVIDIA L40", (46068, 65536)),)), [], ["gpu-not-listed"], []),
    "gh200-not-h200": (_node(gpus=(("NVIDIA GH200 480GB", (97871, 131072)),)), [],
                       ["gpu-not-listed"], []),
    "listed-gpus": (_node(gpus=(("NVIDIA A100-SXM4-80GB", (81920, 131072)),
                                ("NVIDIA L4", (23034, 32768)), ("NVIDIA L40S", (46068, 65536)),
                                ("NVIDIA B200", (183359, 262144)), ("NVIDIA A40", (46068, 65536)))),
                    [], [], []),
    "small-bar1": (_node(gpus=(H100, ("NVIDIA L40S", (46068, 256)))), [],
                   ["bar1-smaller-than-framebuffer"], []),
    "operator-no-smi": ({"distribution": "Ubuntu 22.04", "arch": "x86_64", "cmdline": "nokaslr",
                         "gpu_query": "", "gpu_memory": ""}, [], [], ["gpu-unknown"]),
    "accepted": (_node(gpus=(("NVIDIA L40", (46068, 65536)),)), ["gpu-not-listed"], [],
                 ["gpu-not-listed"]),
    "hostile": (_node(gpus=()) | {"gpu_query": "0, $(reboot)\n" + "x" * 20000,
                                  "gpu_memory": "BAR1 Memory Usage\n Total : 99999999999 MiB"},
                [], ["gpu-not-listed"], ["bar1-unknown"]),
    "no-memory-sections": (_node() | {"gpu_memory": "Attached GPUs : 2\n"}, [], [],
                           ["bar1-unknown"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    cases = {name: {"gds_route": "p2pdma", "gds_preflight": pre, "preflight_p2pdma_accept": acc}
             for name, (pre, acc, _r, _w) in CASES.items()}
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return run_cases(tmp_path_factory.mktemp("p2pdma_rules") / "batch", TASKS, cases, env)


@pytest.mark.parametrize("name", sorted(CASES))
def test_nvidias_p2pdma_rules_refuse_or_warn(runs: dict[str, HostRun], name: str) -> None:
    _pre, _accept, refused, warned = CASES[name]
    run = runs[name]
    assert run.rc == (2 if refused else 0), run.out
    for rule in refused:
        assert f"[{rule}]" in run.out and "nothing was changed" in run.out, run.out
    for rule in warned:
        assert f"WARNING (p2pdma rule {rule})" in run.out, run.out
    shown = set(re.findall(r"WARNING \(p2pdma rule ([a-z0-9-]+)\)", run.out))
    refused_shown = set(re.findall(r"\[([a-z0-9-]+)\] ", run.out)) if refused else set()
    assert shown == set(warned) and refused_shown == set(refused), run.out


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rules_read_in_python_agree_with_the_role(name: str) -> None:
    pre, accept, refused, warned = CASES[name]
    names = [m.group(1).strip() for m in re.finditer(r"^\s*[0-9]+\s*,\s*([^,]{1,80}?)\s*$",
                                                     pre["gpu_query"][:8192], re.M)]
    listed = "|".join(RULES["__preflight_p2pdma_gpus"])
    fb = [int(x) for x in re.findall(r"FB Memory Usage\s*\n\s*Total\s*:\s*([0-9]{1,9}) MiB",
                                     pre["gpu_memory"])]
    bar1 = [int(x) for x in re.findall(r"BAR1 Memory Usage\s*\n\s*Total\s*:\s*([0-9]{1,9}) MiB",
                                       pre["gpu_memory"])]
    facts = {"os": pre["distribution"], "arch": pre["arch"],
             "kaslr": "off" if "nokaslr" in pre["cmdline"].split() else "on",
             "gpu_probe": "ok" if names else "unavailable",
             "gpus_unlisted": "; ".join(n for n in names if not re.match(
                 rf"^.*(^|[^A-Za-z0-9])({listed})([^A-Za-z0-9]|$)", n)),
             "bar1_probe": "ok" if names and len(fb) == len(bar1) == len(names) else "unavailable",
             "bar1_small": "; ".join(n for n, f, b in zip(names, fb, bar1, strict=False)
                                     if len(fb) == len(bar1) == len(names) and b < f)}
    assert evaluate(facts, accept) == (refused, warned)


def test_every_rule_names_its_nvidia_source() -> None:
    ids = {r["id"] for r in RULES["__preflight_p2pdma_rules"]}
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", FIXTURE.read_text(), re.M))
    assert ids == documented
    for rule in RULES["__preflight_p2pdma_rules"]:
        assert rule["severity"] in ("refuse", "warn")
        assert rule["reason"] and rule["fix"] and rule["when"]
        for pattern in rule["when"].values():
            re.compile(pattern)
    # NVIDIA's list, exactly (troubleshooting guide 14.2)
    assert RULES["__preflight_p2pdma_gpus"] == ["A100", "A40", "L4", "L40S", "H100", "H200",
                                                "B100", "B200", "B300"]


def test_preflight_runs_the_rules_on_the_p2pdma_route_before_any_change() -> None:
    checks = yaml.safe_load((ROOT / "roles/preflight/tasks/checks.yml").read_text())
    task = next(t for t in checks if t.get("ansible.builtin.include_tasks") == "p2pdma_rules.yml")
    assert task["when"] == "gds_route == 'p2pdma'"
    main = yaml.safe_load((ROOT / "roles/preflight/tasks/main.yml").read_text())
    assert [t["ansible.builtin.import_tasks"] for t in main].index("checks.yml") < 3
