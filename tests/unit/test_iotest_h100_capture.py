"""The REAL outputs captured on the lent H100 machine (kvikio 26.10, libcufile 1.15, no
nvidia-fs): the gather document and the I/O test document, evaluated as the orchestrator would.
A correct compliance check marks such a node NOT GDS-compliant while reporting that I/O works."""

from __future__ import annotations

import json
from typing import Any

from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts, raw_outputs
from provisioner.verify.policy import Policy
from tests.unit.fixture_loader import FIXTURES, header, load


def _doc(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (name, case), = load(kind)[:1]
    return json.loads(case["output"][0]), case["expected"]


def test_captures_name_their_source() -> None:
    for kind in ("gather", "iotest"):
        for path in (FIXTURES / kind).glob("*.yml"):
            assert header(path)[0].startswith("# Source: CAPTURED"), path


def test_real_io_test_document_is_compat_not_direct() -> None:
    doc, exp = _doc("iotest")
    result = iotest.evaluate(doc, route="compat")
    assert result.path_taken == exp["path_taken"]
    assert result.verified is exp["verified"]
    assert result.evidence["proof"] is exp["proof"]
    assert result.evidence["is_gds_available"] is exp["is_gds_available"]
    assert exp["direct_error_contains"] in result.reason
    assert [a["mode"] for a in result.attempts] == exp["attempt_modes"]
    assert result.evidence["file_removed"] is exp["file_removed"]
    assert result.evidence["compat_mode"] == "OFF"  # the enum came back by name
    assert result.bytes == 1 << 30
    # measured there: POSIX through kvikio at roughly 1-2.5 GB/s
    assert result.write_gbps is not None and 0.5 < result.write_gbps < 5
    assert result.read_gbps is not None and 0.5 < result.read_gbps < 5
    assert not result.direct_proven


def test_real_gather_document_builds_facts() -> None:
    doc, exp = _doc("gather")
    facts = build_facts(doc)
    assert checks.determine_route(facts) == exp["route"]
    assert facts["gpu"]["count"] == exp["gpu_count"]
    assert facts["gpu"]["driver_flavor"] == exp["driver_flavor"]
    assert facts["gpu"]["driver_version"] == exp["driver_version"]
    assert facts["nvfs"]["loaded"] is exp["nvfs_loaded"]
    assert facts["libcufile"]["found"] is exp["libcufile_found"]
    assert facts["cufile"]["valid"] is exp["cufile_valid"]
    assert facts["cufile"]["allow_compat_mode"] is exp["allow_compat_mode"]
    assert facts["gdscheck"]["found"] is exp["gdscheck_found"]
    assert facts["os"]["id"] == exp["os_id"]
    assert facts["kallsyms"]["p2pdma_pgmap_ops"] is exp["p2pdma_pgmap_ops"]
    raw = raw_outputs(doc)
    assert "NVRM version" in raw["nvidia_version"]
    assert "[rc=None" in raw["nvfs_stats"]  # absent files are marked, not silently empty
    json.dumps(facts)  # JSON-safe for the ledger


def test_real_h100_node_is_not_compliant_with_the_reasons() -> None:
    gdoc, _ = _doc("gather")
    iodoc, _ = _doc("iotest")
    facts = build_facts(gdoc)
    route = checks.determine_route(facts)
    io = iotest.evaluate(iodoc, route=route)
    route, results, compliant = checks.evaluate(facts, io, Policy.default(), route=route,
                                                io_path="/tmp/gds")
    by_id = {c.id: c for c in results}
    assert compliant is False
    assert by_id["gpu.driver.open"].status == "pass"
    assert by_id["nvfs.module.loaded"].status == "fail"
    assert by_id["cufile.compat_mode"].status == "fail"  # NVIDIA's default allow_compat true
    assert by_id["io.direct_path"].status == "fail"
    assert "POSIX" in by_id["io.direct_path"].message
    assert by_id["io.data_integrity"].status == "pass"
