"""The I/O test end to end on this machine with STAND-IN cupy/kvikio modules (written here into a
temporary directory; they implement only the API subset the script uses), and the controller's
path decision on edge cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from provisioner.remote import load_script
from provisioner.verify import IoTestOptions
from provisioner.verify.iotest import command, evaluate
from tests.unit import nodefacts as nf
from tests.unit.fixture_loader import FIXTURES

STANDIN_CUPY = '''
"""STAND-IN cupy for tests: bytearray-backed arrays, no GPU."""
import os
import random as _r

uint8 = "uint8"


class ndarray:
    def __init__(self, data):
        self.data = bytearray(data)
        self.nbytes = len(self.data)


class _Runtime:
    @staticmethod
    def getDeviceCount():
        n = int(os.environ.get("STANDIN_GPUS", "1"))
        if n < 0:
            raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        return n

    @staticmethod
    def getDeviceProperties(i):
        return {"name": b"STAND-IN GPU"}

    @staticmethod
    def deviceSynchronize():
        return None


class cuda:
    runtime = _Runtime


class random:
    @staticmethod
    def randint(low, high, size, dtype=None):
        return ndarray(_r.getrandbits(8) for _ in range(size))


def empty(n, dtype=None):
    return ndarray(bytes(n))


def array_equal(a, b):
    if os.environ.get("STANDIN_CORRUPT"):
        return False
    return a.data == b.data

__version__ = "0.0-standin"
'''

STANDIN_KVIKIO = '''
"""STAND-IN kvikio for tests: POSIX file I/O; with KVIKIO_COMPAT_MODE=OFF it refuses unless
STANDIN_DIRECT=1, like the real one on a node without a direct path."""
import os

__version__ = "0.0-standin"


def _off():
    return os.environ.get("KVIKIO_COMPAT_MODE", "AUTO").upper() == "OFF"


class _Defaults:
    pass


defaults = _Defaults()
if os.environ.get("STANDIN_NEW_API"):
    defaults.compat_mode = lambda: "OFF" if _off() else "ON"
else:
    defaults.is_compat_mode_preferred = lambda: not _off()


class _Props:
    is_gds_available = bool(os.environ.get("STANDIN_DIRECT"))


class cufile_driver:
    properties = _Props()

    @staticmethod
    def libcufile_version():
        return 1150100


class CuFile:
    def __init__(self, path, flags="r"):
        if _off() and not os.environ.get("STANDIN_DIRECT"):
            raise RuntimeError("cuFile error at: cuFileHandleRegister: GPUDirect Storage not "
                               "supported on current file")
        self.fh = open(path, flags + "b")

    def write(self, buf):
        return self.fh.write(buf.data)

    def read(self, buf):
        data = self.fh.read(buf.nbytes)
        buf.data[: len(data)] = data
        return len(data)

    def close(self):
        self.fh.close()
'''


def run_script(tmp_path: Path, env: dict[str, str], *, try_compat: bool = True,
               with_modules: bool = True) -> dict[str, Any]:
    mods = tmp_path / "standin"
    mods.mkdir(exist_ok=True)
    if with_modules:
        (mods / "cupy.py").write_text(textwrap.dedent(STANDIN_CUPY))
        (mods / "kvikio.py").write_text(textwrap.dedent(STANDIN_KVIKIO))
    data = tmp_path / "gds"
    data.mkdir(exist_ok=True)
    opts = IoTestOptions(size_bytes=64 * 1024, path=str(data), timeout_s=60,
                         try_compat=try_compat)
    cmd = command(opts, str(data)).replace("python3 -", f"{sys.executable} -", 1)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "KVIKIO"))}
    full_env.update({"PYTHONPATH": str(mods)}, **env)
    proc = subprocess.run(cmd, shell=True, input=load_script("iotest.py"),  # noqa: S602
                          capture_output=True, timeout=120, env=full_env)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert list(data.iterdir()) == [], "test file left behind"
    return doc


def test_direct_attempt_succeeds_and_is_evaluated_as_direct(tmp_path: Path) -> None:
    doc = run_script(tmp_path, {"STANDIN_DIRECT": "1"})
    assert [a["mode"] for a in doc["attempts"]] == ["OFF"]
    att = doc["attempts"][0]
    assert att["ok"] and att["verified"], att
    assert att["kvikio_version"] == "0.0-standin"
    assert att["gpu_name"] == "STAND-IN GPU"
    assert att["compat_mode_preferred"] is False
    assert att["libcufile_version"] == 1150100
    assert att["env"]["KVIKIO_GDS_THRESHOLD"] == "4096"  # set for the test, recorded
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "direct"
    # 64 KiB, no counters, no cuFile log (this stand-in writes none): nothing proves the path;
    # compat mode off alone is no proof (it was, as "compat_off", before the proof rules)
    assert result.evidence["proof"] is None
    assert result.evidence["fallback_disabled"] is True
    assert "proves nothing" in result.reason and "--io-size" in result.reason
    assert not result.direct_proven
    assert result.write_gbps is not None and result.read_gbps is not None


def test_refused_direct_falls_back_to_compat_attempt(tmp_path: Path) -> None:
    doc = run_script(tmp_path, {})
    assert [a["mode"] for a in doc["attempts"]] == ["OFF", "ON"]
    assert "GPUDirect Storage not supported" in doc["attempts"][0]["error"]
    result = evaluate(doc)
    assert result.path_taken == "compat"
    assert result.verified
    assert "not supported on current file" in result.reason


def test_no_compat_attempt_when_disabled(tmp_path: Path) -> None:
    doc = run_script(tmp_path, {}, try_compat=False)
    assert len(doc["attempts"]) == 1
    result = evaluate(doc)
    assert result.path_taken == "failed"
    assert "no compat attempt" in result.reason


def test_newer_kvikio_api_compat_mode_function(tmp_path: Path) -> None:
    doc = run_script(tmp_path, {"STANDIN_DIRECT": "1", "STANDIN_NEW_API": "1"})
    assert doc["attempts"][0]["compat_mode_preferred"] == {"compat_mode": "OFF"}


def test_data_mismatch_is_a_failure(tmp_path: Path) -> None:
    doc = run_script(tmp_path, {"STANDIN_DIRECT": "1", "STANDIN_CORRUPT": "1"})
    assert doc["attempts"][0]["stage"] == "compare"
    result = evaluate(doc)
    assert result.path_taken == "failed"
    assert not result.verified


@pytest.mark.parametrize(("gpus", "needle"), [("0", "getDeviceCount() == 0"),
                                              ("-1", "no usable CUDA GPU")])
def test_no_gpu_is_a_skip_with_reason(tmp_path: Path, gpus: str, needle: str) -> None:
    doc = run_script(tmp_path, {"STANDIN_GPUS": gpus})
    assert doc["status"] == "skipped"
    assert needle in doc["reason"]
    assert len(doc["attempts"]) == 1  # no compat attempt without a GPU
    assert evaluate(doc).path_taken == "skipped"


def test_evaluate_both_attempts_failed() -> None:
    doc = nf.io_doc(attempts=[nf.attempt("OFF", ok=False, error="RuntimeError: boom"),
                              nf.attempt("ON", ok=False, error="OSError: EIO")])
    result = evaluate(doc)
    assert result.path_taken == "failed"
    assert "boom" in result.reason and "EIO" in result.reason


def test_evaluate_round_trips_through_json() -> None:
    result = evaluate(nf.direct_nvfs_io(), route="nvfs")
    from provisioner.verify.model import IoTestResult

    again = IoTestResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert again.direct_proven


# -- the proof rules (docs/checks.md, io.direct_path), on evaluate() inputs ---------------------
GIB = 1 << 30


def test_nvfs_counters_covering_the_test_bytes_prove_the_direct_path() -> None:
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(mmap=3),
                    after=nf.stats_io(writes_n=64, write_mib=1024, reads_n=64, read_mib=1024,
                                      mmap=4))
    result = evaluate(doc, route="nvfs")
    assert result.path_taken == "direct" and result.direct_proven
    assert result.evidence["proof"] == "nvfs_counters"
    assert result.evidence["bytes_needed_mib"] == 1024
    assert "writeMiB +1024" in result.reason and "readMiB +1024" in result.reason


def test_counters_allow_for_mib_rounding_down() -> None:
    # 1 GiB + 8 KiB: the driver counts whole MiB (bytes >> 20), so 1024 MiB covers it
    size = GIB + 8192
    doc = nf.io_doc(attempts=[nf.attempt("OFF", size=size)], size=size, before=nf.stats_io(),
                    after=nf.stats_io(writes_n=65, write_mib=1024, reads_n=65, read_mib=1024))
    assert evaluate(doc, route="nvfs").evidence["proof"] == "nvfs_counters"


def test_counters_are_corroborated_by_the_cufile_log() -> None:
    result = evaluate(nf.direct_nvfs_io(), route="nvfs")
    assert result.evidence["proof"] == "nvfs_counters"
    assert result.evidence["corroborated_by"] == "cufile_log"
    assert result.evidence["cufile_log"]["mode"] == "nvfs"


def test_a_concurrent_jobs_counters_do_not_prove_our_io() -> None:
    # another GDS job moved n and a few MiB while this 1 GiB test ran through POSIX
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(),
                    after=nf.stats_io(writes_n=40, write_mib=10, reads_n=40, read_mib=10))
    result = evaluate(doc, route="nvfs")
    assert result.evidence["proof"] is None and not result.direct_proven
    assert result.path_taken == "compat"
    assert "do not cover the test's own 1024 MiB" in result.reason
    assert "another GDS job" in result.reason


def test_covering_counters_do_not_prove_when_our_own_attempt_fell_back() -> None:
    # the counters cover 1 GiB (another job wrote that much), but cuFile's test-scoped log says
    # this attempt was served through POSIX
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=nf.stats_io(),
                    after=nf.stats_io(writes_n=99, write_mib=4096, reads_n=99, read_mib=4096),
                    log=nf.cufile_log("compat"))
    result = evaluate(doc, route="nvfs")
    assert result.path_taken == "compat" and result.evidence["proof"] is None
    assert "cuFile's own log" in result.reason and "compat mode enabled" in result.reason


def test_counters_with_only_n_prove_nothing() -> None:
    only_n = nf.STATS.replace(" readMiB={rm}", "").replace(" writeMiB={wm}", "")
    before = only_n.format(io="Enabled", w=0, wm=0, r=0, rm=0, m=0, pgc="")
    after = only_n.format(io="Enabled", w=500, wm=0, r=500, rm=0, m=1, pgc="")
    doc = nf.io_doc(attempts=[nf.attempt("OFF")], before=before, after=after)
    result = evaluate(doc, route="nvfs")
    assert result.evidence["proof"] is None and not result.direct_proven
    assert "writeMiB/readMiB counters were not available" in result.reason


@pytest.mark.parametrize(("size", "threshold"), [(64 << 10, 4096), (512 << 10, 4096),
                                                 (2 << 20, 16 << 20)])
def test_an_io_size_below_the_threshold_proves_nothing(size: int, threshold: int) -> None:
    # everything else says "direct" (counters cover the bytes, the log shows p2pdma markers):
    # a size under 1 MiB or under kvikio's GDS threshold still proves nothing
    att = nf.attempt("OFF", size=size)
    att["gds_threshold"] = threshold
    mib = max(1, size >> 20)
    doc = nf.io_doc(attempts=[att], size=size, before=nf.stats_io(),
                    after=nf.stats_io(writes_n=1, write_mib=mib, reads_n=1, read_mib=mib),
                    log=nf.cufile_log("p2pdma"))
    result = evaluate(doc, route="nvfs")
    assert result.evidence["proof"] is None and not result.direct_proven
    assert "proves nothing" in result.reason and "KVIKIO_GDS_THRESHOLD" in result.reason
    assert result.evidence["kvikio_gds_threshold"] == threshold


def test_an_unknown_threshold_is_taken_as_kvikios_old_1mib_default() -> None:
    att = nf.attempt("OFF", size=512 << 10)
    del att["gds_threshold"]
    del att["env"]["KVIKIO_GDS_THRESHOLD"]
    doc = nf.io_doc(attempts=[att], size=512 << 10, log=nf.cufile_log("p2pdma"))
    result = evaluate(doc, route="p2pdma")
    assert result.evidence["proof"] is None
    assert "assumed 1048576" in result.reason


def test_p2pdma_proven_by_the_cufile_log() -> None:
    result = evaluate(nf.direct_p2pdma_io(), route="p2pdma")
    assert result.path_taken == "direct" and result.direct_proven
    assert result.evidence["proof"] == "cufile_log"
    log = result.evidence["cufile_log"]
    assert log["mode"] == "p2pdma" and log["p2pdma_io_lines"] == 8 and log["compat_lines"] == 0
    assert "p2p mode: 1 compat: 0" in log["direct"][0]
    assert log["driver_configuration"]["NVMe P2PDMA"] == "Supported"


def test_p2pdma_with_a_compat_cufile_log_fails() -> None:
    doc = nf.io_doc(attempts=[nf.attempt("OFF", gds_available=False)], log=nf.cufile_log("compat"))
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "compat" and not result.direct_proven
    assert result.evidence["cufile_log"]["mode"] == "compat"


def test_p2pdma_with_the_real_h100_compat_log_fails() -> None:
    # REAL log: tests/fixtures/h100/cufile_off_allowcompat_info.log (libcufile 1.15, lent H100,
    # captured by the integrator; README.md beside it)
    text = (FIXTURES / "h100" / "cufile_off_allowcompat_info.log").read_text()
    log = {"files": ["cufile_511_2026-11-22.15:16:49.log"], "bytes": len(text),
           "lines_dropped": 0, "text": text}
    doc = nf.io_doc(attempts=[nf.attempt("OFF", gds_available=False)], log=log)
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "compat" and result.evidence["proof"] is None
    assert "cufio:285 cuFileHandleRegister GDS not supported" in result.reason


def test_p2pdma_with_a_silent_log_is_direct_but_unproven() -> None:
    # compat mode off, the I/O worked, the log says nothing about the path: not proof
    doc = nf.io_doc(attempts=[nf.attempt("OFF", gds_available=False)], log=nf.cufile_log("silent"))
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "direct" and result.evidence["proof"] is None
    assert "no per-I/O direct marker" in result.reason
    assert "Compat mode off alone is no proof" in result.reason


def test_compat_off_alone_is_not_proof_and_the_check_fails() -> None:
    from provisioner.verify import checks
    from provisioner.verify.facts import build_facts
    from provisioner.verify.policy import Policy

    doc = nf.io_doc(attempts=[nf.attempt("OFF", gds_available=False)])  # no counters, no log
    facts = build_facts(nf.gather_doc(route="p2pdma"))
    io = evaluate(doc, route="p2pdma")
    assert io.evidence["fallback_disabled"] is True and io.evidence["proof"] is None
    _, results, compliant = checks.evaluate(facts, io, Policy.default(), route="p2pdma",
                                            io_path="/mnt/gds")
    by_id = {c.id: c for c in results}
    assert by_id["io.direct_path"].status == "fail"
    assert "no cuFile log came back" in by_id["io.direct_path"].message
    assert compliant is False
