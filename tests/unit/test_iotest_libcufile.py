"""Which libcufile the I/O test proved (io.libcufile), and the P2PDMA log read before the nvidia-fs
counters' verdict (issue 15, items 4 and 5).

Upstream facts (tests/fixtures/iotest/libcufile/README.md names each source): libkvikio 26.10
loads libcufile through cuda-pathfinder, which takes a library already loaded in the process,
then the environment's NVIDIA wheels, then the system; libkvikio-cu13 26.10 requires
``cuda-toolkit[cufile]==13.*``, so the ``nvidia-cufile`` wheel floats with cuda-toolkit (13.0.0
pins 1.15.0.42, 13.0.1 and 13.0.2 pin 1.15.1.6)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from provisioner.verify import checks
from provisioner.verify.facts import build_facts
from provisioner.verify.iotest import evaluate
from provisioner.verify.model import CheckResult
from provisioner.verify.parsers import cufile_log
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf
from tests.unit.fixture_loader import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
LIBDIR = FIXTURES / "iotest" / "libcufile"
HOST_SO0 = "/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0"
HOST_REAL = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcufile.so.1.15.1"
WHEEL_SO0 = "/opt/gdsfleet/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0"


def remote_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_remote_iotest", ROOT / "provisioner" / "remote" / "iotest.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def with_lib(doc: dict[str, Any], *, host: str | None = HOST_SO0, host_real: str | None = HOST_REAL,
             host_version: str | None = "1.15.1", wheel: str | None = "1.15.1.6",
             mapped: list[str] | None = None) -> dict[str, Any]:
    """The ``libcufile`` report the node script adds (provisioner/remote/iotest.py)."""
    doc["libcufile"] = {
        "host": {"path": host, "real": host_real if host else None, "source": "ldconfig",
                 "version": host_version if host else None},
        "wheel": {"distribution": "nvidia-cufile" if wheel else None, "version": wheel,
                  "path": WHEEL_SO0 if wheel else None},
        "prefer_host": True,
    }
    for att in doc["attempts"]:
        att["libcufile_preload"] = {"path": host, "error": None}
        att["libcufile_mapped"] = [HOST_REAL] if mapped is None else mapped
    return doc


def io_check(doc: dict[str, Any], route: str = "p2pdma") -> CheckResult:
    result = evaluate(doc, route=route)
    facts = build_facts(nf.gather_doc(route=route))
    _, out, _ = checks.evaluate(facts, result, Policy.default(), route=route, io_path="/mnt/gds")
    return next(c for c in out if c.id == "io.libcufile")


# -- item 4: the host's libcufile, the wheel's release ----------------------------------------
def test_the_hosts_library_and_the_same_wheel_release_pass() -> None:
    check = io_check(with_lib(nf.direct_p2pdma_io()))
    assert check.status == "pass", check
    assert "1.15.1" in check.observed and "nvidia-cufile 1.15.1.6" in check.observed
    assert evaluate(with_lib(nf.direct_p2pdma_io()), route="p2pdma").direct_proven


def test_a_wheel_of_another_release_fails_naming_the_pin() -> None:
    # cuda-toolkit 13.0.0 pins nvidia-cufile 1.15.0.42 (fixture), the host has 1.15.1
    check = io_check(with_lib(nf.direct_p2pdma_io(), wheel="1.15.0.42"))
    assert check.status == "fail"
    assert "differ" in check.message and "nvidia-cufile==1.15.1.*" in check.message


def test_the_wheels_library_in_the_process_proves_nothing_for_the_host() -> None:
    doc = with_lib(nf.direct_p2pdma_io(), mapped=[WHEEL_SO0])
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "direct" and not result.direct_proven
    assert "not the host's" in result.reason and "io.libcufile" in result.reason
    check = io_check(doc)
    assert check.status == "fail" and WHEEL_SO0 in check.message


def test_a_host_without_libcufile_is_not_proven_by_the_wheel() -> None:
    doc = with_lib(nf.direct_p2pdma_io(), host=None, mapped=[WHEEL_SO0])
    result = evaluate(doc, route="p2pdma")
    assert not result.direct_proven and "the host has none" in result.reason
    check = io_check(doc)
    assert check.status == "fail" and "has no libcufile of its own" in check.message


def test_an_unreadable_version_fails_safe() -> None:
    check = io_check(with_lib(nf.direct_p2pdma_io(), host_version=None))
    assert check.status == "fail" and "could not be read" in check.message


def test_an_older_node_script_skips_the_check() -> None:
    check = io_check(nf.direct_p2pdma_io())
    assert check.status == "skip" and "did not report" in check.message


def test_compat_io_with_the_hosts_library_passes_the_library_check() -> None:
    check = io_check(with_lib(nf.compat_io()), route="nvfs")
    assert check.status == "pass"


def test_a_skipped_io_test_skips_the_check() -> None:
    doc = with_lib(nf.direct_p2pdma_io(), mapped=[])
    doc["attempts"][0].update(ok=False, verified=False, stage="import", missing="kvikio")
    doc["status"] = "skipped"
    assert io_check(doc).status == "skip"


# -- the node script's side ---------------------------------------------------------------------
def test_mapped_libcufile_reads_proc_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text((LIBDIR / "proc_self_maps.txt").read_text())
    found = remote_script().mapped_libcufile(str(maps))
    assert found == [HOST_REAL]  # libcufile_rdma and other libraries are not libcufile


def test_host_libcufile_never_takes_a_wheels_copy(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    mod = remote_script()
    wheel_dir = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "nvidia" / "cu13"
    host_dir = tmp_path / "cuda" / "lib"
    for d in (wheel_dir, host_dir):
        d.mkdir(parents=True)
    (wheel_dir / "libcufile.so.0").write_bytes(b"")
    (host_dir / "libcufile.so.1.14.1").write_bytes(b"")
    (host_dir / "libcufile.so.0").symlink_to("libcufile.so.1.14.1")
    lib = mod._libcufile  # the shared node-side module (provisioner/remote/_libcufile.py)
    monkeypatch.setattr(lib, "HOST_LIBCUFILE_DIRS", (str(wheel_dir), str(host_dir)))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no ldconfig answer here
    monkeypatch.setattr(lib.subprocess, "run", _no_ldconfig)
    host = mod.host_libcufile()
    assert host["path"] == str(host_dir / "libcufile.so.0")
    assert host["version"] == "1.14.1" and host["source"] == "cuda_dir"


def test_host_libcufile_of_a_cuda_release_without_the_toolkit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # libcufile-12-9 and libcufile-13-0 without cuda-toolkit: no /usr/local/cuda alternative,
    # no ldconfig entry; the host's cuFile is the newest release's
    lib = remote_script()._libcufile
    for cuda, release in (("12.9", "1.14.1"), ("13.0", "1.15.1")):
        d = tmp_path / f"cuda-{cuda}" / "targets" / "x86_64-linux" / "lib"
        d.mkdir(parents=True)
        (d / f"libcufile.so.{release}").write_bytes(b"")
        (d / "libcufile.so.0").symlink_to(f"libcufile.so.{release}")
    monkeypatch.setattr(lib, "HOST_LIBCUFILE_DIRS", (str(tmp_path / "absent"),))
    monkeypatch.setattr(lib, "VERSIONED_CUDA_LIBS", str(tmp_path / "cuda-*" / "targets" / "*"
                                                         / "lib"))
    monkeypatch.setattr(lib.subprocess, "run", _no_ldconfig)
    host = lib.host_libcufile()
    assert host["version"] == "1.15.1" and "/cuda-13.0/" in host["path"]


def _no_ldconfig(*_a: Any, **_k: Any) -> Any:
    raise OSError("no ldconfig")


def test_preload_reports_a_library_that_does_not_load(tmp_path: Path) -> None:
    bad = tmp_path / "libcufile.so.0"
    bad.write_bytes(b"not an ELF file")
    out = remote_script().preload_libcufile(str(bad))
    assert out["path"] == str(bad) and out["error"]
    assert remote_script().preload_libcufile(None)["error"] == "the host has no libcufile.so.0"


# -- item 5: P2PDMA markers before the counters' compat verdict -------------------------------
def test_p2pdma_io_on_a_node_taken_as_nvfs_is_proven_by_the_log() -> None:
    # no gdscheck: the route is taken as nvfs; nvidia-fs is loaded with rw_stats on, its counters
    # did not move (P2PDMA bypasses nvidia-fs); cuFile's log has per-I/O P2PDMA markers
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(), after=nf.stats_io(),
                    log=nf.cufile_log("p2pdma"))
    result = evaluate(doc, route="nvfs")
    assert result.path_taken == "direct" and result.direct_proven, result.reason
    assert result.evidence["proof"] == "cufile_log"
    assert "bypasses nvidia-fs" in result.reason


def test_unmoved_counters_without_p2pdma_markers_stay_compat_on_nvfs() -> None:
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(), after=nf.stats_io(),
                    log=nf.cufile_log("silent"))
    result = evaluate(doc, route="nvfs")
    assert result.path_taken == "compat" and not result.direct_proven


# -- smaller: the P2PDMA marker is unconfirmed; another wording fails safe --------------------
OTHER_WORDINGS = (
    "TRACE  cufio_core:2964 write P2PDMA mode enabled",
    "TRACE  cufio_core:2964 write p2p_mode=1 compat=0",
    "TRACE  cufio_core:2964 read pci-p2pdma path taken",
)


@pytest.mark.parametrize("line", OTHER_WORDINGS)
def test_a_p2pdma_log_in_another_wording_is_unproven(line: str) -> None:
    prefix = " 22-11-2026 15:16:50:10 [pid=484 tid=490] "
    text = nf.cufile_log("silent")["text"] + "".join(prefix + line + "\n" for _ in range(8))
    log = {"files": ["cufile.log"], "bytes": len(text), "lines_dropped": 0, "text": text}
    assert cufile_log.parse(text).mode is None
    for route, path in (("p2pdma", "direct"), ("nvfs", "compat")):
        doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(),
                        after=nf.stats_io(), log=log)
        result = evaluate(doc, route=route)
        assert result.path_taken == path and not result.direct_proven, (route, result.reason)


def test_the_p2pdma_marker_is_documented_as_unconfirmed() -> None:
    doc = cufile_log.__doc__ or ""
    assert "unconfirmed" in doc and "p2p mode: 1 compat: 0" in doc



def test_the_wheels_pin_follows_cuda_toolkit_so_releases_can_differ() -> None:
    # tests/fixtures/iotest/libcufile/: PyPI wheel metadata (README.md names each source)
    kvikio = (LIBDIR / "libkvikio_cu13-26.10.0.METADATA.txt").read_text()
    assert "Requires-Dist: cuda-toolkit[cufile]==13.*" in kvikio and "nvidia-cufile" not in kvikio
    pins = (LIBDIR / "cuda_toolkit-13.0.x.cufile-pins.txt").read_text()
    releases = {m.split("==")[1].split(".*")[0] for m in pins.split() if "nvidia-cufile==" in m}
    assert releases == {"1.15.0.42", "1.15.1.6"}
    # the older pin beside a host libcufile 1.15.1 fails io.libcufile; the newer one passes
    for wheel, status in (("1.15.0.42", "fail"), ("1.15.1.6", "pass")):
        assert io_check(with_lib(nf.direct_p2pdma_io(), wheel=wheel)).status == status


def test_what_the_node_sends_is_bounded() -> None:
    doc = with_lib(nf.direct_p2pdma_io(), host="/x" * 5000, host_version="1" * 5000,
                   mapped=["/y" * 5000] * 50)
    lib = evaluate(doc, route="p2pdma").evidence["libcufile"]
    assert len(lib["host_path"]) <= 300 and len(lib["host_version"]) <= 40
    assert len(lib["mapped"]) == 1 and len(lib["mapped"][0]) <= 300
