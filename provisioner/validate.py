"""Command-line values that argparse accepts but the provisioner must refuse (exit 64).

``float("nan")``, ``inf`` and negative numbers all parse; a NaN timeout made ``verify`` hang
(every comparison with NaN is false, so no deadline ever passed). Sizes: ``0`` used to become
4 KiB silently and ``1T`` went to the node unchecked.
"""

from __future__ import annotations

import math
from typing import Any

from provisioner.errors import UsageError
from provisioner.verify.model import MIN_PROVABLE_IO_BYTES, SMALL_IO_WHY

KIB = 1 << 10
GIB = 1 << 30
# The I/O test holds the data in GPU memory twice (written, read back), so a test size beyond
# 32 GiB cannot fit an 80 GB GPU; larger sizes also take minutes per node for no more proof.
# Smaller tests cannot prove the direct path (provisioner/verify/iotest.py says why).
MIN_IO_SIZE = MIN_PROVABLE_IO_BYTES
ALIGN = 4 * KIB
MAX_IO_SIZE = 32 * GIB
# A wave's playbook run: enough for DOCA/CUDA installs and DKMS builds on a slow mirror.
DEFAULT_PLAYBOOK_TIMEOUT_S = 4 * 3600


def check_node_name(option: str, value: str) -> str:
    """A node name from the command line that the ledger can be asked about: text that is
    UTF-8 (bytes that are not arrive as lone surrogates, which no database query can carry:
    ``history $'\\xff'`` exited 70)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        from provisioner.sanitize import printable

        raise UsageError(f"{option} {printable(ascii(value))} is not UTF-8 text, so no ledger "
                         f"row can name it; give the node's name as the inventory spells it"
                         ) from None
    return value


def check_seconds(option: str, value: Any, *, allow_zero: bool = False) -> float:
    """A finite, positive number of seconds (or 0 where ``allow_zero``)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {value!r}: give a number of seconds") from None
    if not math.isfinite(seconds):
        raise UsageError(f"{option} {value!r}: give a finite number of seconds")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        floor = "0 or more" if allow_zero else "more than 0"
        raise UsageError(f"{option} {value!r}: must be {floor} seconds")
    return seconds


def human_size(n: int) -> str:
    for unit, factor in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n} bytes"


def check_io_size(option: str, value: Any) -> int:
    """A test size: 1 MiB to 32 GiB, a multiple of 4 KiB (O_DIRECT/cuFile alignment)."""
    from provisioner.verify.policy import parse_size

    try:
        size = parse_size(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{option} {value!r}: {exc}") from None
    if size < MIN_IO_SIZE:
        raise UsageError(f"{option} {value!r}: the I/O test needs at least "
                         f"{human_size(MIN_IO_SIZE)} (e.g. 64M): {SMALL_IO_WHY}")
    if size > MAX_IO_SIZE:
        raise UsageError(f"{option} {value!r}: at most {human_size(MAX_IO_SIZE)} (the test "
                         f"holds the data twice in GPU memory); 1G proves the path as well")
    if size % ALIGN:
        up = (size + ALIGN - 1) // ALIGN * ALIGN
        raise UsageError(f"{option} {value!r}: must be a multiple of 4 KiB (O_DIRECT "
                         f"alignment), e.g. {up}")
    return size


__all__ = [
    "ALIGN",
    "DEFAULT_PLAYBOOK_TIMEOUT_S",
    "MAX_IO_SIZE",
    "MIN_IO_SIZE",
    "check_io_size",
    "check_seconds",
    "human_size",
]
