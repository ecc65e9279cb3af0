"""cufile.json parser: NVIDIA's shipped file with // comments, and a synthetic file with every
comment form (block comments, // inside strings, trailing commas)."""

from __future__ import annotations

import json

import pytest

from provisioner.verify.parsers import cufile
from tests.unit.fixture_loader import FIXTURES

VENDOR = (FIXTURES / "cufile" / "nvidia-default.cufile.json").read_text()
TRICKY = (FIXTURES / "cufile" / "synthetic-tricky.cufile.json").read_text()


def test_vendor_file_parses_after_stripping_comments() -> None:
    assert VENDOR.startswith("// Source:")
    with pytest.raises(ValueError):
        json.loads(VENDOR)  # the real file is not JSON
    cfg = cufile.parse(VENDOR)
    assert cfg.valid, cfg.error
    assert cfg.had_comments
    assert cfg.unknown_keys == []
    assert cfg.allow_compat_mode is True  # NVIDIA's default: a broken node silently falls back
    assert cfg.force_compat_mode is False
    assert cfg.p2pdma == (False, False)
    assert cfg.get("logging.level") == "ERROR"
    assert cfg.get("logging.dir") is None  # commented out in the vendor file
    assert cfg.get("properties.rdma_dynamic_routing_order") == [
        "GPU_MEM_NVLINKS", "GPU_MEM", "SYS_MEM", "P2P"]
    assert cfg.get("denylist.drivers") == []


def test_comment_markers_inside_strings_are_kept() -> None:
    cfg = cufile.parse(TRICKY)
    assert cfg.valid, cfg.error
    assert cfg.get("logging.dir") == "/var/log/gds//cufile"
    assert cfg.get("properties.rdma_dev_addr_list") == ["10.0.0.1", "http://x/*not-a-comment*/"]
    assert cfg.allow_compat_mode is False
    assert cfg.p2pdma == (True, True)


def test_unknown_keys_name_the_likely_intended_key() -> None:
    cfg = cufile.parse(TRICKY)
    assert cfg.unknown_keys == ["properties.max_device_cache_size"]
    assert cfg.suggestions["properties.max_device_cache_size"] == (
        "properties.max_device_cache_size_kb")


def test_strip_comments_keeps_escaped_quotes() -> None:
    text = '{"a": "say \\"//hi\\"", // c\n "b": [1,2,],}'
    assert json.loads(cufile.strip_comments(text)) == {"a": 'say "//hi"', "b": [1, 2]}


def test_use_compat_mode_is_gdscheck_display_name_not_a_file_key() -> None:
    # libcufile 1.15.1 prints allow_compat_mode as "properties.use_compat_mode" (its own log,
    # tests/fixtures/h100/cufile_off_allowcompat_info.log) but reads allow_compat_mode from the
    # file: a file that sets only use_compat_mode leaves cuFile's default (compat allowed).
    cfg = cufile.parse('{"properties": {"use_compat_mode": false}}')
    assert cfg.valid
    assert cfg.unknown_keys == ["properties.use_compat_mode"]
    assert cfg.suggestions["properties.use_compat_mode"] == "properties.allow_compat_mode"
    assert cfg.allow_compat_mode is True


def test_wrong_types_are_reported() -> None:
    cfg = cufile.parse('{"properties": {"allow_compat_mode": "false", "io_batchsize": "128"}}')
    assert cfg.valid and cfg.unknown_keys == []
    assert len(cfg.type_errors) == 2
    assert cfg.type_errors[0].startswith("properties.allow_compat_mode: expected a boolean")
    assert "without quotes" in cfg.type_errors[1]
    assert cfg.to_dict()["type_errors"] == cfg.type_errors


@pytest.mark.parametrize(
    ("text", "error"),
    [(None, "file not found"), ('{"properties": ', "not valid JSON"), ("[1, 2]", "top level")],
)
def test_missing_or_broken_files(text: str | None, error: str) -> None:
    cfg = cufile.parse(text)
    assert not cfg.valid
    assert error in (cfg.error or "")
    assert cfg.present is (text is not None)
