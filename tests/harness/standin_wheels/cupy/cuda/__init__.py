# TEST STAND-IN (gdsfleet test harness): NOT CuPy. cupy.cuda for the simulated GPUs.
from __future__ import annotations

from . import runtime  # noqa: F401


class Device:
    def __init__(self, device: int = 0) -> None:
        self.id = int(device)

    def use(self) -> None:
        runtime.setDevice(self.id)

    def __enter__(self) -> Device:
        self._prev = runtime.getDevice()
        runtime.setDevice(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        runtime.setDevice(self._prev)

    def synchronize(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"
