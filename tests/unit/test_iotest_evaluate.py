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
    result = evaluate(doc, route="p2pdma")
    assert result.path_taken == "direct"
    assert result.evidence["proof"] == "compat_off"
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
