"""The inventory's start cost: reading an inventory, its variables and templating them (a lookup,
a filter) must not make ansible-core read its whole routing table
(lib/ansible/config/ansible_builtin_runtime.yml, 376 KB of YAML in ansible-core 2.19.14, about
0.1 CPU-s of every ``provisioner verify``). The collection loader reads it on the first new
``ansible.*`` import after it is installed, and for a fully qualified plugin name;
provisioner.ansible_inventory.ANSIBLE_PRELOAD imports those modules first (issue 14:
controller CPU per verified node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner.ansible_inventory import ANSIBLE_PRELOAD

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
import ansible.utils.collection_loader._collection_finder as finder
real = finder._meta_yml_to_dict
read = []
def spy(data, content_id):
    read.append(list(content_id))
    return real(data, content_id)
finder._meta_yml_to_dict = spy
from provisioner.inventory import load_inventory
inv = load_inventory(sys.argv[1])
nodes = {n.name: [n.address, n.port, n.user, n.vars.get("gds_route")] for n in inv.nodes}
print(json.dumps({"read": read, "nodes": nodes}))
"""


def _load_in_a_fresh_process(path: Path) -> dict:
    env = dict(os.environ, GDSFLEET_TEST_USER="opsuser")
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.splitlines()[-1])


YAML = (
    "all:\n"
    "  vars:\n"
    "    ansible_user: \"{{ lookup('env', 'GDSFLEET_TEST_USER') | default('root', true) }}\"\n"
    "  children:\n"
    "    gpu_nodes:\n"
    "      hosts:\n"
    "        gpu-1: {ansible_host: 10.0.0.1, ansible_port: 2201}\n"
    "        gpu-2: {ansible_host: 10.0.0.2}\n"
)
INI = (
    "[gpu_nodes]\n"
    "gpu-1 ansible_host=10.0.0.1 ansible_port=2201\n"
    "gpu-2 ansible_host=10.0.0.2\n"
    "[all:vars]\n"
    "ansible_user=\"{{ lookup('env', 'GDSFLEET_TEST_USER') | default('root', true) }}\"\n"
)


@pytest.mark.parametrize("name,text", [("hosts.yml", YAML), ("hosts.ini", INI),
                                       ("hosts", INI), ("inventory", YAML)])
def test_reading_a_templated_inventory_does_not_read_the_routing_table(
        tmp_path: Path, name: str, text: str) -> None:
    """YAML, INI, and a file without an extension (read as YAML, else INI, as ansible-core's
    default plugin order does): the same hosts and variables, and no routing table."""
    inv = tmp_path / name
    inv.write_text(text)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("gds_route: \"{{ 'p2p' ~ 'dma' }}\"\n")
    got = _load_in_a_fresh_process(inv)
    # what was read is right: the lookup, the filter, group_vars and their templating ran
    assert got["nodes"] == {"gpu-1": ["10.0.0.1", 2201, "opsuser", "p2pdma"],
                            "gpu-2": ["10.0.0.2", 22, "opsuser", "p2pdma"]}
    assert got["read"] == []


def test_the_probe_sees_the_routing_table_when_it_is_read(tmp_path: Path) -> None:
    """The spy above is not blind: an inventory that names ansible.builtin's yaml plugin in
    full (an inventory plugin's configuration file) has the loader read the table."""
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("all:\n  hosts:\n    gpu-1: {ansible_host: 10.0.0.1}\n")
    cfg = tmp_path / "gen.yml"
    cfg.write_text("plugin: ansible.builtin.generator\nhosts:\n  name: gpu-{{ n }}\n"
                   "layers:\n  n: ['7']\n")
    got = _load_in_a_fresh_process(cfg)
    assert list(got["nodes"]) == ["gpu-7"]
    assert ["ansible.builtin", "runtime.yml"] in got["read"]


UPSTREAM = REPO / "tests" / "fixtures" / "ansible-core" / "upstream.yml"


def test_no_preloaded_module_is_redirected_by_the_installed_ansible_core() -> None:
    """Importing these before the collection loader is installed gives the same modules only
    while ansible-core redirects none of them (its routing table's import_redirection): the
    list read at ansible-core v2.19.14 (tests/fixtures/ansible-core/upstream.yml) and the
    installed ansible-core's, which must agree when it is that version."""
    import ansible
    from ansible.release import __version__

    facts = yaml.safe_load(UPSTREAM.read_text(encoding="utf-8"))
    table = Path(ansible.__file__).parent / "config" / "ansible_builtin_runtime.yml"
    redirected = set(yaml.safe_load(table.read_text(encoding="utf-8"))["import_redirection"])
    assert redirected  # the key is there and lists names
    if __version__ == facts["ansible_core"]:
        assert redirected == set(facts["import_redirection"])
    assert not (redirected | set(facts["import_redirection"])) & set(ANSIBLE_PRELOAD)


def test_ini_files_are_given_to_the_plugins_that_would_read_them(tmp_path: Path) -> None:
    from provisioner.ansible_inventory import _ini_readers

    default = ["host_list", "script", "auto", "yaml", "ini", "toml"]
    exts = [".yml", ".yaml", ".json"]
    ini, bare, script = tmp_path / "hosts.ini", tmp_path / "hosts", tmp_path / "inv.sh"
    for f in (ini, bare, script):
        f.write_text("[gpu]\nn1\n")
    script.chmod(0o755)
    assert _ini_readers(str(ini), default, exts) == ["ini"]
    assert _ini_readers(str(bare), default, exts) == ["yaml", "ini"]  # ansible-core's order
    assert _ini_readers(str(ini), ["ansible.builtin.ini", "ansible.builtin.yaml"], exts) == [
        "ansible.builtin.ini"]  # the names as configured
    # left to ansible-core: a script, a directory, TOML or YAML names, a custom plugin enabled
    assert _ini_readers(str(script), default, exts) == []
    assert _ini_readers(str(tmp_path), default, exts) == []
    for name in ("hosts.toml", "hosts.json", "hosts.yaml"):
        (tmp_path / name).write_text("")
        assert _ini_readers(str(tmp_path / name), default, exts) == []
    assert _ini_readers(str(ini), [*default, "community.general.nmap"], exts) == []
    assert _ini_readers(str(tmp_path / "hosts.cfg"), default, [".cfg"]) == []  # missing file


# Anchors shared between hosts, templated and plain values of every kind, an ssh argument
# string shared by a group, a '#jinja2:' header that names other delimiters.
SHARED = (
    "all:\n"
    "  vars:\n"
    "    ansible_ssh_common_args: -o StrictHostKeyChecking=yes -o ConnectTimeout=7\n"
    "    gds_mount: \"{{ '/mnt/' ~ 'gds' }}\"\n"
    "    gds_raid_devices: &devs [/dev/nvme0n1, /dev/nvme1n1]\n"
    "    gds_verify_io_size: 8M\n"
    "    gds_flag: true\n"
    "    gds_count: 3\n"
    "    gds_note: \"#jinja2: variable_start_string:'[%', variable_end_string:'%]'\\n"
    "[% 1 + 1 %]\"\n"
    "  children:\n"
    "    gpu_nodes:\n"
    "      hosts:\n"
    "        gpu-1: {ansible_host: 10.0.0.1, nvme_devices: *devs}\n"
    "        gpu-2: {ansible_host: 10.0.0.2, nvme_devices: *devs, gds_mount: /data/plain}\n"
)


def _nodes(path: Path) -> list[tuple]:
    from provisioner.inventory import load_inventory

    return [(n.name, n.address, n.port, n.user, n.ssh_options, n.verify_io_size,
             json.dumps(n.vars, sort_keys=True, default=str)) for n in load_inventory(path).nodes]


def test_the_uncopied_loader_and_the_templating_shortcut_read_what_ansible_core_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """provisioner.ansible_inventory.data_loader (no deep copy of a parse kept nowhere) and
    template_value (no templar call for a value that cannot hold a template) against
    ansible-core's own DataLoader and Templar.template, on the same inventory."""
    from ansible.parsing.dataloader import DataLoader

    import provisioner.ansible_inventory as ai
    import provisioner.inventory as inventory

    path = tmp_path / "hosts.yml"
    path.write_text(SHARED)
    ours = _nodes(path)
    monkeypatch.setattr(inventory, "data_loader", DataLoader)
    monkeypatch.setattr(inventory, "template_value", lambda templar, v: templar.template(v))
    stock = _nodes(path)
    assert ours == stock
    by_name = {n[0]: json.loads(n[6]) for n in ours}
    assert by_name["gpu-1"]["gds_mount"] == "/mnt/gds"  # still templated
    assert by_name["gpu-2"]["gds_mount"] == "/data/plain"
    assert str(by_name["gpu-1"]["gds_note"]) == "2"  # the header's delimiters: templated
    assert by_name["gpu-1"]["nvme_devices"] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert ours[0][4] == (("StrictHostKeyChecking", "yes"), ("ConnectTimeout", "7"))
    # the loader returns the parse itself only for a load that no cache keeps
    loader = ai.data_loader()
    first = loader.load_from_file(str(path), cache="all")
    assert loader.load_from_file(str(path), cache="all") is not first  # a copy, as before


@pytest.mark.parametrize("value", ["plain", "", "a}b", 7, 2.5, True, None])
def test_values_that_cannot_hold_a_template_are_not_templated(value: object) -> None:
    from provisioner.ansible_inventory import template_value

    class Refuse:
        def template(self, _v: object) -> object:
            raise AssertionError("templated")

    assert template_value(Refuse(), value) is value


@pytest.mark.parametrize("value", ["{{ x }}", "a{%b", "{# c #}", "#jinja2: x\n", ["l"], {"d": 1}])
def test_values_that_may_hold_a_template_go_to_the_templar(value: object) -> None:
    from provisioner.ansible_inventory import template_value

    class Mark:
        def template(self, v: object) -> object:
            return ("templated", v)

    assert template_value(Mark(), value) == ("templated", value)
