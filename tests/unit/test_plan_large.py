"""``provisioner plan`` of a large inventory: one parse of the source, a summary by default.

Figures (plan vs ``ansible-inventory --list`` of a 10,000-host YAML inventory) are in
bench/bench_rollout.py part 4; these tests check the behaviour that makes them possible.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.ansible_inventory import _plain_yaml_file
from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.inventory import load_inventory, selection_problems

N = 60  # above plan's FULL_TABLE_MAX (50)


def _inventory(tmp_path: Path, n: int = N, extra: dict | None = None) -> Path:
    hosts = {f"gpu-{i:03d}": {"ansible_host": f"10.0.0.{i + 1}"} for i in range(n)}
    children: dict = {"gpu_nodes": {"hosts": hosts, "vars": {"gds_route": "p2pdma"}}}
    children.update(extra or {})
    doc = {"all": {"vars": {"ansible_user": "root"}, "children": children}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record each parse: the inventory plugins enabled while it ran."""
    from ansible import constants as C
    from ansible.inventory.manager import InventoryManager

    seen: list[list[str]] = []
    real = InventoryManager.parse_sources

    def spy(self: InventoryManager, cache: bool = False) -> None:
        seen.append(list(C.INVENTORY_ENABLED))
        real(self, cache=cache)

    monkeypatch.setattr(InventoryManager, "parse_sources", spy)
    return seen


def test_one_parse_only_the_yaml_plugin_and_the_limit_ignored_by_the_target_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = {"other": {"hosts": {"login-1": {"ansible_host": "10.0.1.1"}}}}
    path = _inventory(tmp_path, 3, outside)
    seen = _parses(monkeypatch)
    inv = load_inventory(path, "gpu-001:login-1")
    assert inv.names() == ["gpu-001", "login-1"]
    assert inv.nodes[0].vars["gds_route"] == "p2pdma" and inv.nodes[0].user == "root"
    problems = selection_problems(inv)
    # login-1 is outside gpu_nodes, found on the manager already loaded (no second parse)
    assert len(problems) == 1 and problems[0].startswith("login-1 not in 'gpu_nodes'")
    assert seen == [["yaml"]]  # the name as ansible-core configures it by default
    from ansible import constants as C

    assert "auto" in C.INVENTORY_ENABLED  # restored for everything else


def test_plugin_configs_and_other_formats_keep_every_plugin(tmp_path: Path) -> None:
    cfg = tmp_path / "cloud.yml"
    cfg.write_text("plugin: ansible.builtin.constructed\nstrict: true\n")
    assert not _plain_yaml_file(str(cfg))
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text('{"plugin": "ansible.builtin.constructed"}\n')
    assert not _plain_yaml_file(str(quoted))
    ini = tmp_path / "hosts"
    ini.write_text("[gpu_nodes]\nn1 ansible_host=10.0.0.1\n")
    assert not _plain_yaml_file(str(ini)) and not _plain_yaml_file(str(tmp_path))
    assert _plain_yaml_file(str(_inventory(tmp_path)))
    # a plugin config still goes through 'auto' (constructed with no sources: zero hosts)
    with pytest.raises(Exception, match="holds no hosts"):
        load_inventory(cfg)


def test_large_plan_prints_a_summary_and_every_node_on_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _inventory(tmp_path)
    ledger = tmp_path / "none.sqlite"
    base = ["plan", "-i", str(path), "--ledger", str(ledger), "--waves", "1,5,100%"]
    assert main(base) == Exit.OK
    out = capsys.readouterr().out
    assert "gpu-000" in out and "gpu-059" not in out
    assert "54 provision + verify" in out and "(+49)" in out and "--all-nodes" in out
    assert main([*base, "--all-nodes"]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    rows = [ln for ln in lines if ln.startswith(("canary", "wave "))][1:]  # after the header
    assert len(rows) == N and rows[-1].split()[:4] == ["wave", "2", "gpu-059", "provision"]
    assert main([*base, "--json", "-"]) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert sum(len(w["nodes"]) for w in doc["waves"]) == N
    assert not ledger.exists()


def test_small_plan_still_lists_every_node(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = _inventory(tmp_path, 4)
    assert main(["plan", "-i", str(path), "--ledger", str(tmp_path / "l.sqlite")]) == Exit.OK
    out = capsys.readouterr().out
    assert all(f"gpu-00{i}" in out for i in range(4)) and "--all-nodes" not in out


def test_a_refusal_about_thousands_of_hosts_names_ten_and_counts_the_rest(
        tmp_path: Path) -> None:
    """2,000 hosts outside the site playbook's group, and 2,000 sharing one address: the
    refusal stays a few readable lines (it named every host, a 30 KB line, before)."""
    stray = {"other": {"hosts": {f"login-{i:04d}": {"ansible_host": "10.9.9.9"}
                                 for i in range(2000)}}}
    inv = load_inventory(_inventory(tmp_path, 3, stray), None)
    problems = selection_problems(inv)
    outside = [p for p in problems if "not in 'gpu_nodes'" in p]
    assert len(outside) == 1 and len(outside[0]) < 400, outside
    assert outside[0].startswith("login-0000, login-0001, ")
    assert "login-0009 and 1,990 more (2,000 hosts) not in 'gpu_nodes'" in outside[0]
    same = [p for p in problems if "same address and port" in p
            or "with the address and port of another" in p]
    assert len(same) == 11 and same[-1].startswith("and 1,989 more host(s)")
    assert sum(len(p) for p in problems) < 3000


def test_vars_are_ansible_cores_own_with_empty_facts_left_uncleaned(tmp_path: Path) -> None:
    """load_inventory skips ansible-core's cleaning of EMPTY cached facts (half its time at
    2,000 hosts): every host's variables, from the inventory, group_vars/ and host_vars/,
    stay what VariableManager.get_vars gives without the skip; facts that exist are still
    cleaned by ansible-core."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars import manager as ansible_vars
    from ansible.vars.clean import clean_facts
    from ansible.vars.manager import VariableManager

    from provisioner.inventory import facts_cleaned_only_when_present

    path = _inventory(tmp_path, 4)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("gds_route: nvfs\nnvme_devices: [a]\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu-002.yml").write_text("ansible_port: 2222\ngds_mount: /x\n")
    inv = load_inventory(path, None)
    assert inv.manager is not None
    plain = VariableManager(loader=DataLoader(), inventory=inv.manager)
    for node in inv.nodes:
        expect = plain.get_vars(host=inv.manager.get_host(node.name), include_hostvars=False)
        for key, value in node.vars.items():
            assert expect[key] == value, (node.name, key)
    g2 = next(n for n in inv.nodes if n.name == "gpu-002")
    assert g2.port == 2222 and g2.vars["gds_mount"] == "/x" and g2.vars["gds_route"] == "nvfs"
    facts = {"ansible_host": "10.6.6.6", "ansible_ssh_pass": "x", "distribution": "Ubuntu"}
    with facts_cleaned_only_when_present():
        assert ansible_vars.clean_facts({}) == {}
        assert ansible_vars.clean_facts(facts) == clean_facts(facts)
        assert "ansible_host" not in ansible_vars.clean_facts(facts)  # still cleaned
    assert ansible_vars.clean_facts is clean_facts  # put back
