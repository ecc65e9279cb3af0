"""gdscheck -p parser over real outputs of several GDS releases (tests/fixtures/gdscheck/)."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.verify.parsers import gdscheck
from tests.unit.fixture_loader import FIXTURES, header, load

CASES = load("gdscheck")


def test_fixtures_are_real_and_name_their_source() -> None:
    assert len(CASES) >= 6
    for path in (FIXTURES / "gdscheck").glob("*.yml"):
        lines = header(path)
        assert lines and lines[0].startswith("# Source:"), path
    # every NVMe format the parser must accept is covered by a captured output
    raws = {(d["expected"].get("nvme_raw"), d["expected"].get("nvme_p2pdma_raw")) for _, d in CASES}
    assert ("Supported", None) in raws
    assert ("Unsupported", None) in raws
    assert ("Supported", "Supported") in raws
    assert ("Supported", "Unsupported") in raws
    assert ("nvfs, compat", None) in raws


@pytest.mark.parametrize(("name", "case"), CASES, ids=[n for n, _ in CASES])
def test_parse_captured_output(name: str, case: dict[str, Any]) -> None:
    parsed = gdscheck.parse(case["text"])
    exp = case["expected"]
    for key, want in exp.items():
        if key == "nvme_raw":
            assert parsed.nvme is not None and parsed.nvme.raw == want
        elif key == "nvme_p2pdma_raw":
            assert parsed.nvme is not None and parsed.nvme.p2pdma_raw == want
        elif key == "nvme_route":
            assert parsed.nvme is not None and parsed.nvme.route == want
        elif key == "nvme_direct":
            assert parsed.nvme is not None and parsed.nvme.direct is want
        elif key == "nvme_modes":
            assert parsed.nvme is not None and list(parsed.nvme.modes) == want
        elif key.startswith("cufile."):
            assert parsed.cufile[key[len("cufile."):]] == want
        elif key.startswith("platform."):
            assert parsed.platform[key[len("platform."):]] == want
        elif key.startswith("gpu0_"):
            assert parsed.gpus[0][key[len("gpu0_"):]] == want
        else:
            assert getattr(parsed, key) == want, key
    # JSON-safe summary
    assert parsed.to_dict()["nvme"]["route"] == exp["nvme_route"]


def test_platform_verification_succeeded_is_never_proof_of_the_route() -> None:
    text = (
        " =====================\n DRIVER CONFIGURATION:\n =====================\n"
        " NVMe               : compat\n ==============\n PLATFORM INFO:\n ==============\n"
        " IOMMU: disabled\n Platform verification succeeded\n"
    )  # synthetic: 1.16 layout with a compat-only NVMe line
    parsed = gdscheck.parse(text)
    assert parsed.verification_succeeded is True
    assert parsed.nvme is not None
    assert parsed.nvme.direct is False
    assert parsed.nvme.route == "compat"


@pytest.mark.parametrize(
    ("value", "p2p", "route", "direct"),
    [
        ("Supported", None, "nvfs", True),
        ("Unsupported", None, "unsupported", False),
        ("nvfs, compat", None, "nvfs", True),
        ("compat", None, "compat", False),
        ("p2pdma, compat", None, "p2pdma", True),
        ("c2c, nvfs, compat", None, "nvfs", True),
        ("Supported", "Supported", "p2pdma", True),
        ("Unsupported", "Supported", "p2pdma", True),
        ("Supported", "Unsupported", "nvfs", True),
    ],
)
def test_classify_nvme_all_release_formats(value: str, p2p: str | None, route: str,
                                           direct: bool) -> None:
    nvme = gdscheck.classify_nvme(value, p2p)
    assert (nvme.route, nvme.direct) == (route, direct)


def test_iommu_and_acs_warnings_are_surfaced() -> None:
    # synthetic: the warning lines as NVIDIA's docs and gds-diag's tests show them
    text = (
        "=====================\nDRIVER CONFIGURATION:\n=====================\n"
        "NVMe               : nvfs, compat\n"
        "=====================\nPLATFORM INFO:\n=====================\n"
        "  Found ACS enabled for switch 0000:40:01.1\n"
        " IOMMU: Pass-through or enabled\n"
        " WARN: GDS is not guaranteed to work functionally or in a performant way with "
        "iommu=on/pt\n"
        " Platform verification succeeded\n"
    )
    parsed = gdscheck.parse(text)
    assert parsed.acs_warnings == ["Found ACS enabled for switch 0000:40:01.1"]
    assert parsed.iommu_warning == "IOMMU: Pass-through or enabled"
    assert parsed.iommu == "Pass-through or enabled"
    assert any("iommu=on/pt" in w for w in parsed.warnings)


def test_empty_or_garbage_output_parses_to_nothing() -> None:
    parsed = gdscheck.parse("bash: gdscheck: command not found\n")
    assert parsed.nvme is None
    assert parsed.gds_version is None
    assert parsed.verification_succeeded is False


def test_cufile_initialisation_failure_is_an_error_not_a_route() -> None:
    # SYNTHETIC: the harness stand-in's imitation of gdscheck when allow_compat_mode is false
    # and nvidia-fs has no registered NVMe driver (cuFileDriverOpen fails before any section).
    text = (
        " GDS release version: 1.14.1.1\n nvidia_fs version:  2.26 libcufile version: 2.12\n"
        " Platform: x86_64\n ============\n ENVIRONMENT:\n ============\n"
        " ERR: cuFileDriverOpen failed: NVMe Driver not registered with nvidia-fs and "
        "properties.allow_compat_mode is false\n cuFile initialization failed\n"
        " Platform verification error :\nGDS driver is not loaded and compatible mode is disabled\n"
    )
    parsed = gdscheck.parse(text)
    assert parsed.nvme is None
    assert parsed.verification_succeeded is False
    assert parsed.errors[0].startswith("ERR: cuFileDriverOpen failed")
    assert len(parsed.errors) == 3
