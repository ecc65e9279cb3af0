"""The collection's cufile.json schema (plugins/filter/cufile.py): validation, merge, routes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_cufile_filter", ROOT / "plugins" / "filter" / "cufile.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cufile = _load()

# NVIDIA's cufile.json as shipped, // comments and all: real captures (sources named in
# tests/unit/test_cufile_schema_shared.py, which checks every key of every vendor capture).
VENDOR_FILES = [
    ROOT / "tests" / "fixtures" / "h100" / "usr_local_cuda_gds_cufile.json",  # CUDA 13.0
    ROOT / "tests" / "fixtures" / "cufile" / "nvidia-default.cufile.json",  # GDS 1.x
]


def errors(config: Any, route: str | None = None, **kwargs: Any) -> list[str]:
    result = cufile.cufile_validate(config, route=route, **kwargs)
    assert isinstance(result, list)
    return result


def one_error(config: Any, route: str | None = None) -> str:
    result = errors(config, route)
    assert len(result) == 1, result
    return result[0]


# --- accepted input ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", VENDOR_FILES, ids=lambda p: p.name)
def test_vendor_file_with_comments_is_accepted(path: Path) -> None:
    data = json.loads(cufile.strip_json_comments(path.read_text()))
    assert data["properties"]["allow_compat_mode"] is True
    assert errors(data) == []


def test_rendered_document_agrees_with_the_cuda13_vendor_file() -> None:
    """Every key the role renders that NVIDIA's CUDA 13.0 file also sets has NVIDIA's value
    (route keys and allow_compat_mode aside, which the role sets on purpose)."""
    vendor = json.loads(cufile.strip_json_comments(VENDOR_FILES[0].read_text()))
    doc = cufile.cufile_document({}, route="nvfs")
    for section, keys in vendor.items():
        for key, value in keys.items():
            if isinstance(value, dict):
                for sub, subvalue in value.items():
                    assert doc[section][key][sub] == subvalue, f"{section}.{key}.{sub}"
            else:
                assert doc[section][key] == value, f"{section}.{key}"


def test_comment_stripping_keeps_slashes_inside_strings() -> None:
    text = '{"logging": {"dir": "/var/log//cufile"}} // trailing\n/* block */'
    assert json.loads(cufile.strip_json_comments(text)) == {"logging": {"dir": "/var/log//cufile"}}


def test_empty_and_none_configs_are_valid() -> None:
    assert errors({}) == []
    assert errors(None) == []


def test_rendered_defaults_validate_for_both_routes() -> None:
    for route in ("nvfs", "p2pdma"):
        doc = cufile.cufile_document({}, route=route)
        assert errors(doc, route=route) == []


def test_newer_keys_can_be_let_through_explicitly() -> None:
    config = {"properties": {"some_future_knob": 3}}
    assert errors(config)
    assert errors(config, extra_keys=["properties.some_future_knob"]) == []


# --- unknown keys name the key meant ------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "meant"),
    [
        ("max_pinned_memory_size", "properties.max_device_pinned_mem_size_kb"),
        ("max_device_cache_size", "properties.max_device_cache_size_kb"),
        ("max_batch_io_size", "properties.io_batchsize"),
        ("max_direct_io_size", "properties.max_direct_io_size_kb"),
        ("per_buffer_cache_size", "properties.per_buffer_cache_size_kb"),
        ("allow_compat_mod", "properties.allow_compat_mode"),
    ],
)
def test_unknown_property_names_the_right_key(wrong: str, meant: str) -> None:
    message = one_error({"properties": {wrong: 1}})
    assert message.startswith(f"properties.{wrong}: unknown cufile.json key")
    assert meant in message


def test_size_keys_without_kb_suffix_mention_units() -> None:
    message = one_error({"properties": {"max_device_cache_size": 1}})
    assert "_kb" in message and "KiB" in message


def test_key_in_the_wrong_section_says_where_it_belongs() -> None:
    message = one_error({"allow_compat_mode": False})
    assert "belongs under properties.allow_compat_mode" in message


def test_unknown_section_is_reported() -> None:
    message = one_error({"propertys": {}})
    assert "did you mean properties" in message


def test_allowlist_points_to_denylist() -> None:
    assert "denylist" in one_error({"allowlist": {"devices": []}})


def test_misspelt_nested_key_gets_close_match() -> None:
    message = one_error({"profile": {"cufile_stat": 1}})
    assert "profile.cufile_stats" in message


# --- wrong types and enums ------------------------------------------------------------------


def test_quoted_boolean_is_a_wrong_type() -> None:
    message = one_error({"properties": {"allow_compat_mode": "false"}})
    assert "properties.allow_compat_mode: expected a boolean" in message
    assert "quoted string" in message


def test_integer_fields_refuse_booleans_and_strings() -> None:
    assert "expected an integer" in one_error({"properties": {"io_batchsize": True}})
    message = one_error({"properties": {"max_device_pinned_mem_size_kb": "1024"}})
    assert "without quotes" in message


def test_cufile_stats_range() -> None:
    assert "from 0 to 3" in one_error({"profile": {"cufile_stats": 4}})
    assert errors({"profile": {"cufile_stats": 3}}) == []


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"logging": {"level": "VERBOSE"}}, "NOTICE, ERROR, WARN, INFO, DEBUG, TRACE"),
        ({"properties": {"io_priority": "urgent"}}, "default, low, med, high"),
        ({"properties": {"rdma_dynamic_routing_order": ["GPU_MEM", "BOGUS"]}}, "BOGUS"),
    ],
)
def test_enums(config: dict[str, Any], expected: str) -> None:
    assert expected in one_error(config)


def test_level_enum_accepts_every_documented_value() -> None:
    for level in ("NOTICE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"):
        assert errors({"logging": {"level": level}}) == []


def test_rdma_dev_addr_list_is_ipv4() -> None:
    assert errors({"properties": {"rdma_dev_addr_list": ["192.0.2.10", "192.0.2.11"]}}) == []
    message = one_error({"properties": {"rdma_dev_addr_list": ["mlx5_0"]}})
    assert "IPv4" in message and "mlx5_0" in message
    assert "IPv4" in one_error({"fs": {"lustre": {"rdma_dev_addr_list": ["fe80::1"]}}})
    assert "a list" in one_error({"properties": {"rdma_dev_addr_list": "192.0.2.10"}})


def test_section_must_be_a_mapping() -> None:
    assert "expected a mapping" in one_error({"properties": ["allow_compat_mode"]})


def test_top_level_must_be_a_mapping() -> None:
    assert "expected a mapping" in one_error(["properties"])


# --- cross-field rules ----------------------------------------------------------------------


def test_slab_config_with_legacy_cache_keys_is_refused() -> None:
    message = one_error(
        {
            "properties": {
                "gpu_bounce_buffer_slab_config": {"slab_size_kb": [1024], "slab_count": [128]},
                "max_device_cache_size_kb": 131072,
            }
        }
    )
    assert "gpu_bounce_buffer_slab_config" in message
    assert "properties.max_device_cache_size_kb" in message


def test_slab_config_alone_is_accepted_and_drops_legacy_defaults() -> None:
    slab = {"slab_size_kb": [1024, 8192], "slab_count": [128, 8]}
    config = {"properties": {"gpu_bounce_buffer_slab_config": slab}}
    assert errors(config) == []
    doc = cufile.cufile_document(config, route="nvfs")
    assert doc["properties"]["gpu_bounce_buffer_slab_config"] == slab
    for key in ("max_direct_io_size_kb", "max_device_cache_size_kb", "per_buffer_cache_size_kb"):
        assert key not in doc["properties"]
    assert errors(doc, route="nvfs") == []


def test_slab_lists_need_equal_lengths() -> None:
    assert "same length" in one_error(
        {"properties": {"posix_pool_slab_size_kb": [4, 1024], "posix_pool_slab_count": [128]}}
    )


def test_force_compat_contradicts_disallowed_compat() -> None:
    message = one_error({"properties": {"force_compat_mode": True, "allow_compat_mode": False}})
    assert "force_compat_mode" in message


# --- blacklist alias --------------------------------------------------------------------------


def test_blacklist_is_accepted_with_a_warning_and_rendered_as_denylist() -> None:
    config = {"blacklist": {"devices": ["/dev/nvme3n1"]}}
    assert errors(config) == []
    warnings = cufile.cufile_warnings(config)
    assert any("blacklist" in w and "denylist" in w for w in warnings)
    doc = cufile.cufile_document(config, route="nvfs")
    assert "blacklist" not in doc
    assert doc["denylist"]["devices"] == ["/dev/nvme3n1"]
    assert doc["denylist"]["drivers"] == []


def test_blacklist_and_denylist_together_are_refused() -> None:
    assert "legacy name of denylist" in one_error({"blacklist": {}, "denylist": {}})


def test_blacklist_entries_are_validated() -> None:
    assert "denylist.devices" in one_error({"blacklist": {"devices": "/dev/nvme0n1"}})


# --- routes -------------------------------------------------------------------------------------


def test_route_sets_both_p2pdma_keys() -> None:
    doc = cufile.cufile_document({}, route="p2pdma")
    assert doc["properties"]["use_pci_p2pdma"] is True
    assert doc["block"]["nvme"]["use_pci_p2pdma"] is True
    doc = cufile.cufile_document({}, route="nvfs")
    assert doc["properties"]["use_pci_p2pdma"] is False
    assert doc["block"]["nvme"]["use_pci_p2pdma"] is False


def test_agreeing_explicit_route_keys_are_accepted() -> None:
    config = {"properties": {"use_pci_p2pdma": True}, "block": {"nvme": {"use_pci_p2pdma": True}}}
    assert errors(config, route="p2pdma") == []


@pytest.mark.parametrize(
    ("config", "route", "key"),
    [
        ({"properties": {"use_pci_p2pdma": True}}, "nvfs", "properties.use_pci_p2pdma"),
        ({"block": {"nvme": {"use_pci_p2pdma": True}}}, "nvfs", "block.nvme.use_pci_p2pdma"),
        ({"block": {"raid": {"use_pci_p2pdma": True}}}, "nvfs", "block.raid.use_pci_p2pdma"),
        ({"properties": {"use_pci_p2pdma": False}}, "p2pdma", "properties.use_pci_p2pdma"),
        ({"block": {"nvme": {"use_pci_p2pdma": False}}}, "p2pdma", "block.nvme.use_pci_p2pdma"),
    ],
)
def test_conflicting_route_keys_are_refused_with_explanation(
    config: dict[str, Any], route: str, key: str
) -> None:
    message = one_error(config, route=route)
    assert message.startswith(key)
    assert f"gds_route is {route}" in message
    assert "gds_route:" in message  # says how to fix it


def test_unknown_route_is_refused() -> None:
    assert "nvfs, p2pdma" in one_error({}, route="gpudirect")
    with pytest.raises(ValueError):
        cufile.cufile_document({}, route="gpudirect")


# --- merge --------------------------------------------------------------------------------------


def test_merge_is_recursive_and_lists_replace() -> None:
    base = {"properties": {"a": 1, "lst": [1, 2]}, "logging": {"level": "ERROR"}}
    override = {"properties": {"lst": [3]}, "profile": {"nvtx": True}}
    merged = cufile.merge(base, override)
    assert merged == {
        "properties": {"a": 1, "lst": [3]},
        "logging": {"level": "ERROR"},
        "profile": {"nvtx": True},
    }
    assert base["properties"]["lst"] == [1, 2]  # inputs untouched


def test_document_layers_defaults_base_and_operator_config() -> None:
    doc = cufile.cufile_document(
        {"properties": {"max_device_pinned_mem_size_kb": 16777216}, "logging": {"level": "WARN"}},
        route="nvfs",
        base={"properties": {"allow_compat_mode": False}},
    )
    props = doc["properties"]
    assert props["allow_compat_mode"] is False  # role default over NVIDIA's true
    assert props["max_device_pinned_mem_size_kb"] == 16777216  # operator
    assert props["io_batchsize"] == 128  # NVIDIA default kept
    assert doc["logging"]["level"] == "WARN"
    assert doc["execution"]["max_io_threads"] == 4
    # operator wins over the role's base
    doc = cufile.cufile_document(
        {"properties": {"allow_compat_mode": True}},
        route="nvfs",
        base={"properties": {"allow_compat_mode": False}},
    )
    assert doc["properties"]["allow_compat_mode"] is True


def test_document_is_plain_json() -> None:
    base = {"properties": {"allow_compat_mode": False}}
    doc = cufile.cufile_document({}, route="p2pdma", base=base)
    text = json.dumps(doc, indent=2, sort_keys=True)
    assert "//" not in text
    assert json.loads(text) == doc


def test_compat_mode_on_is_warned_about() -> None:
    warnings = cufile.cufile_warnings({"properties": {"allow_compat_mode": True}})
    assert any("silently" in w for w in warnings)
    assert cufile.cufile_warnings({}) == []


def test_filter_plugin_exposes_the_filters() -> None:
    filters = cufile.FilterModule().filters()
    assert set(filters) == {"cufile_validate", "cufile_warnings", "cufile_document"}
