# TEST STAND-IN (gdsfleet test harness): NOT kvikio. kvikio.defaults (compat mode, thresholds).
from __future__ import annotations

import enum
import os
import sys

sys.path.insert(0, "/usr/local/lib/gdsfleet-sim")
import gdsfleet_sim as _sim  # noqa: E402


class CompatMode(enum.Enum):
    OFF = 0
    ON = 1
    AUTO = 2


def _parse(value: object) -> CompatMode:
    if isinstance(value, CompatMode):
        return value
    if isinstance(value, bool):
        return CompatMode.ON if value else CompatMode.OFF
    v = str(value).strip().upper()
    if v in ("ON", "TRUE", "YES", "1"):
        return CompatMode.ON
    if v in ("OFF", "FALSE", "NO", "0"):
        return CompatMode.OFF
    if v == "AUTO":
        return CompatMode.AUTO
    raise ValueError(f"unknown compatibility mode: {value!r}")


# KVIKIO_GDS_THRESHOLD: calls smaller than this skip cuFile and go through POSIX (real kvikio:
# cpp/src/file_handle.cpp, "size < gds_threshold"). Default 16 KiB as in kvikio >= 25.04
# (rapidsai/kvikio cpp/src/defaults.cpp, changed from 1 MiB by PR #596; kvikio 26.10 on the lent
# H100 reports defaults.get("gds_threshold") == 16384).
_settings: dict[str, object] = {
    "compat_mode": _parse(os.environ.get("KVIKIO_COMPAT_MODE", "AUTO")),
    "gds_threshold": int(os.environ.get("KVIKIO_GDS_THRESHOLD", str(16 * 1024))),
    "task_size": int(os.environ.get("KVIKIO_TASK_SIZE", str(4 * 1024 * 1024))),
    "num_threads": int(os.environ.get("KVIKIO_NTHREADS", "1")),
}


def compat_mode() -> CompatMode:
    return _settings["compat_mode"]  # type: ignore[return-value]


def is_compat_mode_preferred() -> bool:
    mode = compat_mode()
    if mode == CompatMode.ON:
        return True
    if mode == CompatMode.OFF:
        return False
    route, _ = _sim.direct_route(None)
    return route is None


def gds_threshold() -> int:
    return int(_settings["gds_threshold"])  # type: ignore[arg-type]


def task_size() -> int:
    return int(_settings["task_size"])  # type: ignore[arg-type]


def get(key: str) -> object:
    if key not in _settings:
        raise KeyError(key)
    return _settings[key]


class _Set:
    def __init__(self, values: dict[str, object]) -> None:
        self._old = dict(_settings)
        for k, v in values.items():
            if k not in _settings:
                raise KeyError(k)
            _settings[k] = _parse(v) if k == "compat_mode" else v

    def __enter__(self) -> _Set:
        return self

    def __exit__(self, *exc: object) -> None:
        _settings.clear()
        _settings.update(self._old)


def set(*args: object, **kwargs: object) -> _Set:  # noqa: A001 (kvikio's name)
    values: dict[str, object] = {}
    if len(args) == 1 and isinstance(args[0], dict):
        values.update(args[0])
    elif len(args) == 2:
        values[str(args[0])] = args[1]
    values.update(kwargs)
    return _Set(values)


def compat_mode_reset(mode: object) -> None:
    _settings["compat_mode"] = _parse(mode)
