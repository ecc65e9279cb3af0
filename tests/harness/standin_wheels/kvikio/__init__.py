# TEST STAND-IN (gdsfleet test harness): NOT kvikio. A pure-Python imitation of the part of the
# kvikio API the gdsfleet verification uses. I/O really happens (POSIX, on the real file); when
# the simulated node offers a direct GDS route the I/O is also counted in the simulated
# nvidia-fs stats, exactly as the real driver would count it.
from __future__ import annotations

from . import cufile_driver, defaults  # noqa: F401
from .cufile import CuFile, CUfileException, IOFuture  # noqa: F401

__version__ = "25.08.00"
__gdsfleet_standin__ = True
