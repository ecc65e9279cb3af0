"""Which nvidia-fs release a kernel series needs (the pairing `kernel.version` checks).

Each floor is the oldest nvidia-fs whose ChangeLog entry says it builds on that kernel series,
from NVIDIA/gds-nvidia-fs ``ChangeLog`` at the tags in
tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml (tests/unit/test_nvfs_kernel_pairing.py holds
the two to each other). A kernel newer than the newest listed series needs at least the newest
floor; whether that release really builds there only DKMS can tell (the kernel gate does).
"""

from __future__ import annotations

from provisioner import collection_utils
from provisioner.verify.parsers.driver import version_tuple

# (kernel series, oldest nvidia-fs that builds on it), ascending: the one table, in
# plugins/module_utils/nvfs_symbols.py, that verify.yml's pairing assert reads too
FLOORS: tuple[tuple[tuple[int, int], str], ...] = tuple(
    collection_utils.load("nvfs_symbols.py").KERNEL_FLOORS)


def floor_for(kernel: tuple[int, ...]) -> tuple[tuple[int, int], str] | None:
    """The newest floor whose series is <= kernel (None below every listed series)."""
    best = None
    for series, version in FLOORS:
        if tuple(kernel[:2]) >= series:
            best = (series, version)
    return best


def pairing(kernel: tuple[int, ...], nvfs_version: str | None) -> tuple[bool | None, str]:
    """(ok, floor text): ok is None when there is nothing to compare."""
    floor = floor_for(kernel)
    if floor is None:
        return None, ""
    series, version = floor
    text = f"nvidia-fs >= {version} on kernel >= {series[0]}.{series[1]}"
    if not nvfs_version or not version_tuple(nvfs_version):
        return None, text
    return version_tuple(nvfs_version) >= version_tuple(version), text
