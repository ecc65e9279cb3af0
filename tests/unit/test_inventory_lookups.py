"""Inventories that use lookups load through provisioner/inventory.py as they do for
ansible-playbook (the collection loader is installed first), and a role variable the
provisioner does not read cannot stop it (inventories/lab reads a checksum file with a lookup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.errors import InventoryError
from provisioner.inventory import load_inventory


def _write(tmp_path: Path, host_vars: str) -> Path:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n" + host_vars)
    return inv


def test_connection_variable_from_a_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("GDSFLEET_TEST_KEY", str(tmp_path / "id"))
    inv = _write(tmp_path, "      ansible_ssh_private_key_file: "
                           "\"{{ lookup('ansible.builtin.env', 'GDSFLEET_TEST_KEY') }}\"\n")
    (node,) = load_inventory(inv).nodes
    assert node.key_file == str(tmp_path / "id")


def test_role_variable_whose_lookup_fails_is_kept_as_written(tmp_path: Path) -> None:
    raw = "{{ lookup('ansible.builtin.file', '/nonexistent/gdsfleet.sha256') }}"
    inv = _write(tmp_path, f"      mofed_mlnx_ofed_tarball_checksum: \"{raw}\"\n")
    (node,) = load_inventory(inv).nodes
    assert node.vars["mofed_mlnx_ofed_tarball_checksum"] == raw


def test_connection_variable_whose_lookup_fails_is_refused(tmp_path: Path) -> None:
    inv = _write(tmp_path, "      ansible_user: "
                           "\"{{ lookup('ansible.builtin.file', '/nonexistent/user') }}\"\n")
    with pytest.raises(InventoryError, match="n1.*ansible_user cannot be templated"):
        load_inventory(inv)
