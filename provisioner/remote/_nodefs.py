"""Free space and sizes in words, for the node-side scripts that write a test file (iotest.py,
gdsio.py; bundled into them at send time, provisioner/remote/bundle.py). Stdlib only, 3.8+."""

from __future__ import annotations

import os


def free_bytes(directory: str) -> int | None:
    """Bytes an unprivileged writer may still use in ``directory`` (None when unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def human_bytes(n: int) -> str:
    """``1.5 GiB``, ``64 MiB``, ``100 bytes``: one decimal unless the value is whole."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            value = n / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
