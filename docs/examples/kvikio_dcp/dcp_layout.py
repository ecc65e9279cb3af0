"""Pure-Python parts of the kvikio DCP example (no torch, no kvikio): where each tensor goes in
a rank's data file, and what kvikio's settings say about the path the bytes took.

Unit-tested in tests/unit/test_kvikio_dcp_example.py without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ALIGN = 4096  # GDS moves 4 KiB-aligned file offsets directly; kvikio splits unaligned ones


def aligned_offsets(sizes: Iterable[int], align: int = ALIGN) -> tuple[list[int], int]:
    """Offsets of blobs of ``sizes`` bytes placed back to back, each starting on ``align``;
    and the file size they need."""
    if align < 1:
        raise ValueError("align must be >= 1")
    offsets: list[int] = []
    end = 0
    for size in sizes:
        if size < 0:
            raise ValueError(f"negative size {size}")
        start = (end + align - 1) // align * align
        offsets.append(start)
        end = start + size
    return offsets, end


_MODES = {0: "OFF", 1: "ON", 2: "AUTO"}


def mode_name(value: Any) -> str:
    """kvikio's CompatMode (an int enum: OFF=0, ON=1, AUTO=2 in kvikio 26.10) as its name."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.upper() in ("OFF", "ON", "AUTO"):
        return name.upper()
    try:
        return _MODES[int(value)]
    except (TypeError, ValueError, KeyError):
        text = str(value).rsplit(".", 1)[-1].upper()
        return text if text in ("OFF", "ON", "AUTO") else "UNKNOWN"


def describe_path(settings: Mapping[str, Any], *, io_ok: bool = True) -> dict[str, str]:
    """Which path kvikio's I/O took, from what kvikio reported while the example ran.

    ``io_ok`` False (the save or load raised): ``none``, with the path those settings allowed.

    ``settings``: ``compat_mode`` (OFF/ON/AUTO), ``compat_mode_preferred`` (bool, kvikio's
    global view), ``allow_compat_mode`` (cuFile's property; None when cuFile was never asked).

    * ON, or AUTO with compat preferred: ``compat``; kvikio's own POSIX threads, no cuFile.
    * OFF with cuFile's allow_compat_mode false: ``direct``; cuFile had no POSIX fallback, so
      I/O that succeeded went through GDS (nvidia-fs or P2PDMA).
    * OFF with allow_compat_mode true: ``cufile-unproven``; cuFile may have used its own POSIX
      fallback ("using cuFile posix read/write with compat mode enabled").
    * AUTO otherwise: ``unknown``; kvikio falls back per file, silently, and 26.10 does not
      expose a file handle's choice to Python.
    """
    if not io_ok:
        allowed = describe_path(settings)
        return {"path": "none", "why": f"the I/O failed, so no path was taken; the settings "
                f"allowed only '{allowed['path']}': {allowed['why']}"}
    mode = mode_name(settings.get("compat_mode"))
    preferred = bool(settings.get("compat_mode_preferred"))
    allow = settings.get("allow_compat_mode")
    if mode == "ON" or (mode == "AUTO" and preferred):
        return {"path": "compat", "why": f"KVIKIO_COMPAT_MODE={mode} and kvikio prefers compat "
                "mode: kvikio's own POSIX reads/writes, cuFile never called"}
    if mode == "OFF" and allow is False:
        return {"path": "direct", "why": "KVIKIO_COMPAT_MODE=OFF and cuFile's allow_compat_mode "
                "false: neither kvikio nor cuFile could fall back to POSIX"}
    if mode == "OFF":
        return {"path": "cufile-unproven", "why": "KVIKIO_COMPAT_MODE=OFF but cuFile's "
                "allow_compat_mode is true: cuFile may have used its own POSIX fallback"}
    return {"path": "unknown", "why": f"KVIKIO_COMPAT_MODE={mode}: kvikio decides per file and "
            "falls back silently; set ON or OFF (provisioner export env) to know"}


def narrow_spec(offsets: Iterable[int], lengths: Iterable[int]) -> list[tuple[int, int, int]]:
    """(dim, start, length) for each dimension a stored chunk is narrowed along to give a read
    request's part of it (DCP's ReadItem.storage_offsets / lengths)."""
    offs, lens = list(offsets), list(lengths)
    if len(offs) != len(lens):
        raise ValueError(f"{len(offs)} offsets but {len(lens)} lengths")
    return [(dim, int(o), int(n)) for dim, (o, n) in enumerate(zip(offs, lens, strict=True))]
