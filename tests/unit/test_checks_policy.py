"""Policy defaults and the YAML override file."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.errors import UsageError
from provisioner.verify import GIB, Policy


def test_defaults() -> None:
    p = Policy.default()
    assert p.expected_route == "any"
    assert p.require_allow_compat_false is True
    assert p.io_test_size == GIB
    assert p.allowed_filesystems == ("xfs", "ext4")
    assert p.iommu == "warn"
    assert p.min_write_gbps is None


def test_from_file(tmp_path: Path) -> None:
    f = tmp_path / "policy.yml"
    f.write_text("expected_route: p2pdma\nio_test_size: 256MiB\nallowed_filesystems: xfs\n"
                 "iommu: fail\nmin_write_gbps: 5\nmin_nvfs_version: '2.20'\n")
    p = Policy.from_file(f)
    assert p.expected_route == "p2pdma"
    assert p.io_test_size == 256 << 20
    assert p.allowed_filesystems == ("xfs",)
    assert p.iommu == "fail"
    assert p.min_write_gbps == 5.0
    assert p.min_nvfs_version == "2.20"
    assert p.source == str(f)
    assert p.to_dict()["allowed_filesystems"] == ["xfs"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("expected_rout: nvfs\n", "did you mean 'expected_route'"),
        ("expected_route: rdma\n", "nvfs, p2pdma or any"),
        ("iommu: maybe\n", "warn or fail"),
        ("io_test_size: lots\n", "not a size"),
        ("io_test_size: 1KiB\n", "at least 1MiB"),
        ("io_test_size: 512KiB\n", "cannot prove the direct path"),
        ("require_io_test: 'yes'\n", "true/false"),
        ("min_nvfs_version: 2.20\n", "as a string"),
        ("- a\n- b\n", "mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_policy_files_are_refused_with_a_clear_message(tmp_path: Path, text: str,
                                                           needle: str) -> None:
    f = tmp_path / "policy.yml"
    f.write_text(text)
    with pytest.raises(UsageError, match=None) as exc:
        Policy.from_file(f)
    assert needle in str(exc.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="policy file"):
        Policy.from_file(tmp_path / "nope.yml")
