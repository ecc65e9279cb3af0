"""testinfra: /etc/cufile.json is what the cufile role renders.

    pytest tests/infra/test_cufile.py --hosts=ssh://root@gpu-07

Checks: plain JSON (no // comments: the vendor's file is not in place), no unknown keys and no
wrong types (the collection's own validator, imported from this checkout's plugins/),
properties.allow_compat_mode false, and the route keys properties.use_pci_p2pdma and
block.nvme.use_pci_p2pdma agreeing (with GDSFLEET_EXPECT_ROUTE=nvfs|p2pdma: matching that
route). CUFILE_PATH overrides the path.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUFILE_PATH = os.environ.get("CUFILE_PATH", "/etc/cufile.json")


def _validator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_cufile_filter", ROOT / "plugins" / "filter" / "cufile.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def document(host: Any) -> dict[str, Any]:
    path = host.file(CUFILE_PATH)
    if not path.exists:
        pytest.skip(f"{CUFILE_PATH} is absent: neither libcufile nor the cufile role is there")
    text = path.content_string
    try:
        return json.loads(text)
    except ValueError as exc:
        pytest.fail(f"{CUFILE_PATH} is not plain JSON (vendor file with comments?): {exc}")


def test_no_unknown_keys_or_wrong_types(document: dict[str, Any]) -> None:
    assert _validator().cufile_validate(document) == []


def test_compat_mode_is_not_allowed(document: dict[str, Any]) -> None:
    assert document["properties"]["allow_compat_mode"] is False
    assert document["properties"].get("force_compat_mode", False) is False


def test_route_keys_agree(document: dict[str, Any]) -> None:
    props = document["properties"].get("use_pci_p2pdma", False)
    nvme = document.get("block", {}).get("nvme", {}).get("use_pci_p2pdma", False)
    assert props == nvme, f"properties.use_pci_p2pdma={props} but block.nvme.use_pci_p2pdma={nvme}"
    route = os.environ.get("GDSFLEET_EXPECT_ROUTE")
    if route:
        assert props is (route == "p2pdma"), f"route {route} but use_pci_p2pdma={props}"
        assert _validator().route_errors(document, route) == []


def test_file_is_root_owned_and_world_readable(host: Any, document: dict[str, Any]) -> None:
    path = host.file(CUFILE_PATH)
    assert path.user == "root"
    assert path.mode & 0o444 == 0o444
