"""testinfra fixtures for checking GDS nodes, simulated or real.

Runs against any Ansible inventory, for operators as well as molecule:

    pytest tests/infra --hosts='ansible://gpu_nodes' \
        --ansible-inventory=inventories/<fleet>/hosts.yml

The expected state comes from the same variables the roles read (gds_route, cuda_version,
cuda_nvidia_fs_version, mofed_flavor, nvidia_fs_module_params, ...), taken from the inventory,
with the roles' own defaults (roles/*/defaults/main.yml) where the inventory does not set them.
Tests that belong to one route skip themselves on nodes of the other route.

Connection: testinfra's ansible backend hands SSH nodes to its SSH backend with the inventory's
variables as written, so a templated ``ansible_ssh_private_key_file: "{{ inventory_dir }}/..."``
reaches ssh literally ("Could not resolve hostname inventory_dir"); ``--force-ansible`` works
but runs one ad-hoc Ansible command per check. Here the inventory is read the way the
provisioner reads it (ansible-core's own inventory and templating, provisioner/inventory.py),
and the node gets testinfra's SSH backend with the resolved address, port, user, key and
``-o`` options (strict host-key checking as the inventory says, one ControlMaster connection).
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

ROOT = Path(__file__).resolve().parents[2]
_PODMAN_CONNECTIONS = {"podman", "containers.podman.podman"}


def _role_defaults() -> dict[str, Any]:
    """Literal defaults of the collection's roles (templated ones are derived below)."""
    merged: dict[str, Any] = {}
    for path in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        for key, value in data.items():
            if isinstance(value, str) and "{{" in value:
                continue
            merged.setdefault(key, value)
    return merged


def _literal(value: Any) -> bool:
    return not (isinstance(value, str) and "{{" in value)


@dataclass(frozen=True)
class GdsExpectation:
    """What a node provisioned by playbooks/site.yml should carry."""

    name: str
    route: str
    cuda_version: str
    nvidia_fs_version: str
    mofed_flavor: str
    doca_ofed_version: str
    mlnx_ofed_version: str
    install_toolkit: bool
    module_params: dict[str, Any] = field(default_factory=dict)

    @property
    def series(self) -> str:
        return self.cuda_version.replace(".", "-")

    @property
    def cuda_dir(self) -> str:
        return f"/usr/local/cuda-{self.cuda_version}"


def _doca_ofed_version(doca_version: str, explicit: Any) -> str:
    """mofed_doca_ofed_version, or the mofed role's table entry for the DOCA release."""
    if explicit:
        return str(explicit)
    table = yaml.safe_load((ROOT / "roles/mofed/vars/main.yml").read_text())
    return str(table["_mofed_doca_ofed_versions"].get(doca_version, ""))


def _expectation(name: str, hostvars: dict[str, Any]) -> GdsExpectation:
    defaults = _role_defaults()

    def get(key: str) -> Any:
        value = hostvars.get(key)
        return value if value is not None and _literal(value) else defaults.get(key)

    route = str(get("gds_route") or "nvfs")
    flavor = get("mofed_flavor") or ("none" if route == "p2pdma" else "doca")
    return GdsExpectation(
        name=name,
        route=route,
        cuda_version=str(get("cuda_version")),
        nvidia_fs_version=str(get("cuda_nvidia_fs_version")),
        mofed_flavor=str(flavor),
        doca_ofed_version=_doca_ofed_version(str(get("mofed_doca_version")),
                                             get("mofed_doca_ofed_version")),
        mlnx_ofed_version=str(get("mofed_mlnx_ofed_version")),
        install_toolkit=bool(get("cuda_install_toolkit")),
        module_params=dict(get("nvidia_fs_module_params") or {}),
    )


@functools.lru_cache(maxsize=8)
def _resolved_nodes(inventory: str) -> dict[str, Any]:
    """Nodes of ``inventory`` with templated connection variables (provisioner's reader);
    empty when the provisioner refuses the inventory (then testinfra's own reading is used)."""
    from provisioner.errors import InventoryError
    from provisioner.inventory import load_inventory

    try:
        return {n.name: n for n in load_inventory(inventory).nodes}
    except InventoryError:
        return {}


def _resolved(testinfra_host: testinfra.host.Host) -> Any | None:
    backend = testinfra_host.backend
    if backend.NAME != "ansible" or not getattr(backend, "ansible_inventory", None):
        return None
    return _resolved_nodes(str(backend.ansible_inventory)).get(backend.host)


def _hostvars(testinfra_host: testinfra.host.Host) -> tuple[str, dict[str, Any]]:
    backend = testinfra_host.backend
    if backend.NAME == "ansible":
        hostvars = dict(backend.ansible_runner.get_variables(backend.host))
        node = _resolved(testinfra_host)
        if node is not None:
            hostvars.update(node.vars)  # templated values win over the raw ones
        return backend.host, hostvars
    return backend.get_hostname(), {}


def _ssh_host(node: Any) -> testinfra.host.Host:
    user = f"{node.user}@" if node.user else ""
    address = f"[{node.address}]" if ":" in node.address else node.address
    extra = " ".join(f"-o {shlex.quote(f'{k}={v}')}" for k, v in node.ssh_options)
    return testinfra.get_host(
        f"ssh://{user}{address}:{node.port}",
        ssh_identity_file=node.key_file,
        ssh_extra_args=extra or None,
        sudo=bool(node.vars.get("ansible_become")) and node.user not in (None, "root"),
    )


@pytest.fixture(scope="module")
def host(_testinfra_host: testinfra.host.Host) -> testinfra.host.Host:
    """The node. Containers reached through Ansible's podman connection use testinfra's podman
    backend directly (one `podman exec` per command instead of one ad-hoc Ansible run); SSH
    nodes use the SSH backend with the connection variables resolved as Ansible resolves them
    (see the module docstring); ``--force-ansible`` keeps testinfra's ansible backend."""
    name, hostvars = _hostvars(_testinfra_host)
    if hostvars.get("ansible_connection") in _PODMAN_CONNECTIONS:
        return testinfra.get_host(f"podman://{hostvars.get('ansible_host', name)}")
    backend = _testinfra_host.backend
    if backend.NAME == "ansible" and not getattr(backend, "force_ansible", False):
        node = _resolved(_testinfra_host)
        if node is not None and node.connection in ("ssh", "paramiko", "smart"):
            return _ssh_host(node)
    return _testinfra_host


@pytest.fixture(scope="module")
def gds(_testinfra_host: testinfra.host.Host) -> GdsExpectation:
    name, hostvars = _hostvars(_testinfra_host)
    return _expectation(name, hostvars)


@pytest.fixture(scope="module")
def nvfs(gds: GdsExpectation) -> GdsExpectation:
    if gds.route != "nvfs":
        pytest.skip(f"{gds.name} is on the {gds.route} route (nvfs only)")
    return gds


@pytest.fixture(scope="module")
def p2pdma(gds: GdsExpectation) -> GdsExpectation:
    if gds.route != "p2pdma":
        pytest.skip(f"{gds.name} is on the {gds.route} route (p2pdma only)")
    return gds


@pytest.fixture(scope="module")
def with_ofed(nvfs: GdsExpectation) -> GdsExpectation:
    if nvfs.mofed_flavor == "none":
        pytest.skip(f"{nvfs.name} has mofed_flavor none")
    return nvfs
