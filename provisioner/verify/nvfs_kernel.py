"""Which nvidia-fs release a kernel series needs (the pairing `kernel.version` checks).

Each floor is the oldest nvidia-fs whose ChangeLog entry says it builds on that kernel series,
from NVIDIA/gds-nvidia-fs ``ChangeLog`` at the tags in
tests/fixtures/kernel_gate/nvfs_kernel_pairing.yml (tests/unit/test_nvfs_kernel_pairing.py holds
the two to each other). A kernel newer than the newest listed series needs at least the newest
floor, and is "unverified": no ChangeLog entry says that release builds and works there (DKMS
and the kernel gate tell whether it builds).
"""

from __future__ import annotations

from provisioner import collection_utils
from provisioner.verify.parsers.driver import version_tuple

# (kernel series, oldest nvidia-fs that builds on it), ascending: the one table, in
# plugins/module_utils/nvfs_symbols.py, that verify.yml's pairing assert reads too
_RULES = collection_utils.load("nvfs_symbols.py")
FLOORS: tuple[tuple[tuple[int, int], str], ...] = tuple(_RULES.KERNEL_FLOORS)


def floor_for(kernel: tuple[int, ...]) -> tuple[tuple[int, int], str] | None:
    """The newest floor whose series is <= kernel (None below every listed series)."""
    best = None
    for series, version in FLOORS:
        if tuple(kernel[:2]) >= series:
            best = (series, version)
    return best


def pairing(kernel: tuple[int, ...], nvfs_version: str | None) -> tuple[bool | None, str, str]:
    """(ok, floor text, unverified text): ok is None when there is nothing to compare or the
    kernel is newer than any the ChangeLog names (unverified says so); the shared rule of
    plugins/module_utils/nvfs_symbols.py, which verify.yml reads too."""
    version = nvfs_version if nvfs_version and version_tuple(nvfs_version) else None
    out = _RULES.kernel_pairing(version, tuple(kernel[:2]))
    return out["ok"], str(out["floor"]), str(out.get("unverified") or "")
