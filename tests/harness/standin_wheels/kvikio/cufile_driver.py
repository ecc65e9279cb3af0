# TEST STAND-IN (gdsfleet test harness): NOT kvikio. kvikio.cufile_driver over the simulated
# node: libcufile version from the installed (stand-in) libcufile package, else the one a kvikio
# wheel would bring; is_gds_available only while nvidia-fs is loaded.
from __future__ import annotations

import sys

sys.path.insert(0, "/usr/local/lib/gdsfleet-sim")
import gdsfleet_sim as _sim  # noqa: E402

WHEEL_LIBCUFILE = "1.15.1"


def _version() -> tuple[int, int]:
    v = _sim.libcufile_installed_version() or WHEEL_LIBCUFILE
    parts = [int(x) for x in v.split(".")[:2]]
    return parts[0], parts[1]


def libcufile_version() -> tuple[int, int]:
    return _version()


def driver_open() -> None:
    s = _sim.cufile_settings()
    route, why = _sim.direct_route(None)
    if route is None and not s["allow_compat_mode"]:
        raise RuntimeError(f"cuFile error at: cufile_driver.cpp:41: cuFileDriverOpen failed: "
                           f"CU_FILE_DRIVER_NOT_INITIALIZED ({why})")


def driver_close() -> None:
    return None


def initialize() -> None:
    driver_open()


class _Properties:
    @property
    def is_gds_available(self) -> bool:
        return bool(_sim.gpus()) and _sim.module_loaded("nvidia_fs")

    @property
    def major_version(self) -> int:
        v = (_sim.read("/sys/module/nvidia_fs/version") or "0.0").strip().split(".")
        return int(v[0]) if self.is_gds_available else 0

    @property
    def minor_version(self) -> int:
        v = (_sim.read("/sys/module/nvidia_fs/version") or "0.0").strip().split(".")
        return int(v[1]) if self.is_gds_available and len(v) > 1 else 0

    @property
    def allow_compat_mode(self) -> bool:
        return bool(_sim.cufile_settings()["allow_compat_mode"])

    @property
    def poll_mode(self) -> bool:
        return bool(_sim.cufile_settings()["config"].get("properties", {}).get(
            "use_poll_mode", False))

    @property
    def max_direct_io_size(self) -> int:
        return int(_sim.cufile_settings()["max_direct_io_size_kb"])  # type: ignore[arg-type]


properties = _Properties()


def get(key: str) -> object:
    return getattr(properties, key)
