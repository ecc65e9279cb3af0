"""The cuFile log parser on REAL logs: tests/fixtures/h100/cufile_*.log were captured by the
integrator on the lent H100 (libcufile 1.15.1, kvikio 26.10, no nvidia-fs, no NVMe; README.md
beside them says how each was made). Per-I/O markers that the H100 cannot produce (it has no
direct path) are tested on single lines in the format of those captures."""

from __future__ import annotations

from provisioner.verify.parsers import cufile_log
from tests.unit.fixture_loader import FIXTURES

H100 = FIXTURES / "h100"


def _log(name: str) -> cufile_log.CufileLog:
    return cufile_log.parse((H100 / name).read_text())


def test_fixtures_name_their_source() -> None:
    readme = (H100 / "README.md").read_text()
    assert "Real captures from the lent H100" in readme
    for name in ("cufile_off_allowcompat_info.log", "cufile_off_nocompat_trace.log",
                 "cufile_off_allowcompat_trace_small.log"):
        assert name in readme


def test_compat_allowed_log_says_compat() -> None:
    log = _log("cufile_off_allowcompat_info.log")
    assert log.unparsed == 0 and len(log.lines) == 106 and log.pids == (511,)
    assert log.mode == "compat"
    assert log.compat_lines[0].level == "NOTICE"
    assert log.compat_lines[0].render().startswith("NOTICE cufio:285 cuFileHandleRegister GDS")
    assert log.driver_configuration["NVMe P2PDMA"] == "Unsupported"
    assert log.driver_configuration["NVMe"] == "Unsupported"
    assert log.cufile_configuration["properties.use_compat_mode"] == "true"
    assert log.cufile_configuration["profile.cufile_stats"] == "3"
    assert any("file descriptor is not registered" in b.message for b in log.blocker_lines)
    assert not log.p2pdma_io_lines and not log.nvfs_io_lines


def test_trace_log_parses_every_line() -> None:
    log = _log("cufile_off_allowcompat_trace_small.log")
    assert log.unparsed == 0
    assert log.levels["TRACE"] > 300 and log.levels["DEBUG"] > 100
    assert log.mode == "compat"


def test_compat_refused_log_has_no_mode_but_names_the_blocker() -> None:
    log = _log("cufile_off_nocompat_trace.log")
    assert log.mode is None
    assert [b.message for b in log.blocker_lines] == ["nvidia-fs.ko driver not loaded"]
    assert log.p2pdma_status == {"Is PCIP2PDMA Supported": 0, "kernel Support": 0,
                                 "pci_p2pdma_supported_cuda": 0,
                                 "checkIfAllGPUsSupportP2PDMA()": 0}
    ev = log.evidence()
    assert ev["mode"] is None and ev["blockers"] == ["ERROR cufio-drv:846 nvidia-fs.ko driver "
                                                     "not loaded"]


PREFIX = " 22-11-2026 15:16:50:10 [pid=484 tid=490] "


def test_per_io_markers_decide_the_mode() -> None:
    p2p = cufile_log.parse(PREFIX + "TRACE  cufio_core:2964 write p2p mode: 1 compat: 0\n")
    assert p2p.mode == "p2pdma"
    nvfs = cufile_log.parse(PREFIX + "DEBUG  cufio_core:2859 gds path taken with ODIRECT fd: 52\n")
    assert nvfs.mode == "nvfs"
    mixed = cufile_log.parse(PREFIX + "TRACE  cufio_core:2964 write p2p mode: 1 compat: 0\n"
                             + PREFIX + "TRACE  cufio_core:2964 read p2p mode: 0 compat: 1\n")
    assert mixed.mode == "compat"  # any I/O through POSIX spoils the proof
    old = cufile_log.parse(PREFIX + "NOTICE  cufio-drv:720 running in compatible mode\n")
    assert old.mode == "compat"


def test_garbage_is_counted_not_parsed() -> None:
    log = cufile_log.parse("not a log line\n\n" + PREFIX + "INFO   0:179 nvidia_fs driver open "
                           "invoked\n")
    assert log.unparsed == 1 and len(log.lines) == 1 and log.mode is None
    assert cufile_log.parse("").empty
