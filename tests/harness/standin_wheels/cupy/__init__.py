# TEST STAND-IN (gdsfleet test harness): NOT CuPy. A tiny pure-Python imitation of the part of
# the CuPy API the gdsfleet verification uses, backed by the simulated GPUs of the node image
# (device memory is a bytearray; numpy is not on the node).
from __future__ import annotations

import os
import random as _random

from . import cuda  # noqa: F401
from .cuda import runtime as _rt

__version__ = "13.4.1"
__gdsfleet_standin__ = True


class _DType:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"dtype('{self.name}')"

    def __eq__(self, other: object) -> bool:
        return str(other) in (self.name, repr(self)) or (
            isinstance(other, _DType) and other.name == self.name)

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name


uint8 = _DType("uint8", 1)


def _dtype(d: object) -> _DType:
    if d is None or d is uint8 or str(d) in ("uint8", "B", "u1"):
        return uint8
    raise TypeError(f"gdsfleet stand-in cupy supports uint8 only, not {d!r}")


class ndarray:
    """Device array (simulated): a bytearray that remembers its device."""

    def __init__(self, data: bytearray, device: int) -> None:
        self._buf = data
        self.device = cuda.Device(device)
        self.dtype = uint8

    @property
    def nbytes(self) -> int:
        return len(self._buf)

    @property
    def size(self) -> int:
        return len(self._buf)

    @property
    def shape(self) -> tuple[int]:
        return (len(self._buf),)

    def __len__(self) -> int:
        return len(self._buf)

    def __eq__(self, other: object) -> bool:  # elementwise in real CuPy; enough here
        return isinstance(other, ndarray) and self._buf == other._buf

    __hash__ = None  # type: ignore[assignment]

    def get(self) -> _HostArray:
        return asnumpy(self)

    def fill(self, value: int) -> None:
        self._buf[:] = bytes([value & 0xFF]) * len(self._buf)

    def __repr__(self) -> str:
        return f"<stand-in cupy.ndarray nbytes={self.nbytes} device={self.device.id}>"


class _HostArray:
    """What cupy.asnumpy returns here (numpy-like: .tobytes(), .nbytes, len)."""

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)

    def tobytes(self) -> bytes:
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _size(size: object) -> int:
    if isinstance(size, tuple):
        n = 1
        for s in size:
            n *= int(s)
        return n
    return int(size)  # type: ignore[arg-type]


def _new(n: int) -> ndarray:
    dev = _rt._current_device()
    return ndarray(bytearray(n), dev)


def empty(shape: object, dtype: object = uint8) -> ndarray:
    _dtype(dtype)
    return _new(_size(shape))


def zeros(shape: object, dtype: object = uint8) -> ndarray:
    return empty(shape, dtype)


def asarray(obj: object, dtype: object = uint8) -> ndarray:
    _dtype(dtype)
    if isinstance(obj, ndarray):
        return obj
    data = obj.tobytes() if hasattr(obj, "tobytes") else bytes(obj)  # type: ignore[arg-type]
    a = _new(len(data))
    a._buf[:] = data
    return a


array = asarray


def asnumpy(a: ndarray) -> _HostArray:
    return _HostArray(a._buf)


def array_equal(a: ndarray, b: ndarray) -> bool:
    return bytes(a._buf) == bytes(b._buf)


class _Random:
    @staticmethod
    def randint(low: int, high: int | None = None, size: object = None,
                dtype: object = uint8) -> ndarray:
        _dtype(dtype)
        if high is None:
            low, high = 0, low
        n = _size(size if size is not None else 1)
        a = _new(n)
        if (low, high) == (0, 256):
            a._buf[:] = os.urandom(n)
        else:
            a._buf[:] = bytes(_random.randrange(low, high) for _ in range(n))  # noqa: S311
        return a


random = _Random()
