"""Package lists (``dpkg-query -W``/``rpm -qa``, filtered on the node), ``dkms status`` and
``ofed_info -s``."""

from __future__ import annotations

import re
from typing import Any

# Names from Debian's/Ubuntu's own archives that are not the CUDA repository's packages.
DISTRO_ARCHIVE_LOOKALIKES = ("libcufile0", "gds-tools", "nvidia-fs-dkms-distro")


def parse_package_list(text: str) -> dict[str, str]:
    """``name<TAB>version<TAB>status`` lines -> {name: version} of installed packages."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        status = parts[2].strip() if len(parts) > 2 else "ii"
        if status and not status.startswith("i"):
            continue  # rc (removed, config left) and friends
        out[parts[0].strip()] = parts[1].strip()
    return out


def gds_packages(pkgs: dict[str, str]) -> dict[str, Any]:
    """The GDS/CUDA names that matter, with their versions."""

    def pick(prefix: str) -> dict[str, str]:
        return {k: v for k, v in pkgs.items() if k.startswith(prefix)}

    return {
        "nvidia_gds": pick("nvidia-gds"),
        "libcufile": {k: v for k, v in pick("libcufile").items() if "-dev" not in k},
        "gds_tools": pick("gds-tools"),
        "nvidia_fs": {k: v for k, v in pkgs.items() if k in ("nvidia-fs", "nvidia-fs-dkms",
                                                                "kmod-nvidia-fs")},
        "cuda_toolkit": pick("cuda-toolkit"),
        "doca": {k: v for k, v in pkgs.items() if k.startswith("doca-")},
        "mlnx": {k: v for k, v in pkgs.items() if k.startswith(("mlnx-", "kmod-mlnx"))},
        "distro_lookalikes": sorted(
            k for k in pkgs if k == "libcufile0" or k == "gds-tools"
        ),
    }


_DKMS_RE = re.compile(
    r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+)"
    r"(?:,\s*(?P<arch>[^:\s]+))?\s*:\s*(?P<state>\w+)"
)
_DKMS_OLD_RE = re.compile(r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,:\s]+)\s*:\s*(?P<state>\w+)")


def parse_dkms_status(text: str) -> list[dict[str, str | None]]:
    """``nvidia-fs/2.25.7, 6.1.0-18-amd64, x86_64: installed`` (dkms 3) and the dkms 2
    ``nvidia-fs, 2.25.7, 6.1.0-18-amd64, x86_64: installed`` and ``added`` lines."""
    out: list[dict[str, str | None]] = []
    for line in text.splitlines():
        line = line.strip()
        m = _DKMS_RE.match(line)
        if m:
            out.append({"module": m.group("module"), "version": m.group("version"),
                        "kernel": m.group("kernel"), "arch": m.group("arch"),
                        "state": m.group("state")})
            continue
        m = _DKMS_OLD_RE.match(line)
        if m:
            out.append({"module": m.group("module"), "version": m.group("version"),
                        "kernel": None, "arch": None, "state": m.group("state")})
    return out


def parse_ofed_info(text: str) -> dict[str, str | None]:
    """``ofed_info -s``: ``MLNX_OFED_LINUX-23.10-2.1.3.1:`` or ``OFED-internal-24.10-1.1.4:``
    (DOCA-OFED)."""
    line = text.strip().splitlines()[0].strip().rstrip(":") if text.strip() else ""
    if not line:
        return {"flavor": None, "version": None, "raw": None}
    if line.startswith("MLNX_OFED_LINUX-"):
        return {"flavor": "mlnx_ofed", "version": line[len("MLNX_OFED_LINUX-"):], "raw": line}
    if line.startswith("OFED-internal-"):
        return {"flavor": "doca", "version": line[len("OFED-internal-"):], "raw": line}
    return {"flavor": "unknown", "version": line, "raw": line}


def _kernel_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", release))


def boot_kernel(boot_listing: str | None, grubby_default: str | None) -> dict[str, Any]:
    """The kernel the node boots next. ``grubby --default-kernel`` (RHEL family) prints
    ``/boot/vmlinuz-<release>``; without it, the newest ``/boot/vmlinuz-<release>`` by version
    order, which is GRUB's default entry on Debian/Ubuntu (update-grub lists the newest kernel
    first and GRUB_DEFAULT=0 boots it). A GRUB_DEFAULT pinned to another entry is not read."""
    kernels = sorted(
        (name[len("vmlinuz-"):] for name in (boot_listing or "").split()
         if name.startswith("vmlinuz-") and len(name) > len("vmlinuz-")
         and not name.endswith((".old", ".bak", ".efi.signed"))),
        key=_kernel_key,
    )
    default: str | None = None
    source: str | None = None
    line = (grubby_default or "").strip().splitlines()
    if line and "vmlinuz-" in line[0]:
        default = line[0].rsplit("vmlinuz-", 1)[1].strip() or None
        source = "grubby --default-kernel"
    elif kernels:
        default = kernels[-1]
        source = "newest /boot/vmlinuz-*"
    return {"kernels": kernels, "default": default, "source": source}
