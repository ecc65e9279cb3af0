# TEST STAND-IN (gdsfleet test harness): NOT CuPy. cupy.cuda.runtime over the simulated GPUs.
from __future__ import annotations

import sys

sys.path.insert(0, "/usr/local/lib/gdsfleet-sim")
import gdsfleet_sim as _sim  # noqa: E402


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, name: str, text: str) -> None:
        self.status = status
        super().__init__(f"{name}: {text}")


_state = {"device": 0}


def _check() -> list[dict]:
    if _sim.gpu_driver() == "none" or not _sim.module_loaded("nvidia"):
        raise CUDARuntimeError(35, "cudaErrorInsufficientDriver",
                               "CUDA driver version is insufficient for CUDA runtime version")
    gl = _sim.gpus()
    if not gl:
        raise CUDARuntimeError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected")
    return gl


def getDeviceCount() -> int:  # noqa: N802 (CuPy's name)
    return len(_check())


def getDeviceProperties(device: int) -> dict:  # noqa: N802
    gl = _check()
    if not 0 <= int(device) < len(gl):
        raise CUDARuntimeError(101, "cudaErrorInvalidDevice", "invalid device ordinal")
    g = gl[int(device)]
    major, minor = (int(x) for x in str(g["compute_cap"]).split("."))
    bus = int(str(g["bdf"]).split(":")[1], 16)
    return {"name": str(g["name"]).encode(), "totalGlobalMem": int(g["memory_mib"]) << 20,
            "major": major, "minor": minor, "pciBusID": bus, "pciDeviceID": 0,
            "pciDomainID": 0, "uuid": str(g["uuid"]).replace("-", "").encode()}


def getDevice() -> int:  # noqa: N802
    return _state["device"]


def setDevice(device: int) -> None:  # noqa: N802
    gl = _check()
    if not 0 <= int(device) < len(gl):
        raise CUDARuntimeError(101, "cudaErrorInvalidDevice", "invalid device ordinal")
    _state["device"] = int(device)


def _current_device() -> int:
    _check()
    return _state["device"]


def driverGetVersion() -> int:  # noqa: N802
    _check()
    return _sim.cuda_driver_version()


def runtimeGetVersion() -> int:  # noqa: N802
    return 12090


def deviceSynchronize() -> None:  # noqa: N802
    return None
