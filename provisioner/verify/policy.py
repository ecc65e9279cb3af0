"""Compliance policy: what a compliant node must show. Defaults, overridable by a YAML file.

```yaml
expected_route: nvfs          # nvfs | p2pdma | any
min_nvfs_version: "2.17.5"    # the nvidia-fs module version (not the GDS release)
require_allow_compat_false: true
io_test_size: 1GiB            # bytes, or a size with a unit (KiB, MiB, GiB, K, M, G)
allowed_filesystems: [xfs, ext4]
network_filesystems: [nfs, nfs4, lustre, gpfs, mmfs, wekafs, beegfs, fhgfs, scatefs,
                      virtiofs]  # judged on their own prerequisites (NFS only over RDMA;
                              # plugins/module_utils/netfs_caps.json); [] refuses them all
iommu: warn                   # warn | fail
min_write_gbps: null          # GB/s (decimal); null = no floor
min_read_gbps: null
require_io_test: true         # a node without a proven direct path is not compliant
gds_mount: /mnt/gds           # where the I/O test writes when no NVMe mount is found
min_p2pdma_driver: "565.47"
reboot_pending: fail          # fail | warn
gdsio_min_ratio: null         # verify --gdsio: GDS/CPU-only gdsio throughput floor; null = none
```
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import UsageError
from provisioner.verify.model import GIB, MIN_PROVABLE_IO_BYTES, SMALL_IO_WHY

_UNITS = {
    "": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2,
    "mib": 1 << 20, "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
}


def parse_size(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (use bytes or e.g. 512MiB, 1GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class Policy:
    expected_route: str = "any"
    min_nvfs_version: str = "2.17.5"
    require_allow_compat_false: bool = True
    io_test_size: int = GIB
    allowed_filesystems: tuple[str, ...] = ("xfs", "ext4")
    # every mount type of plugins/module_utils/netfs_caps.json
    network_filesystems: tuple[str, ...] = ("nfs", "nfs4", "lustre", "gpfs", "mmfs", "wekafs",
                                            "beegfs", "fhgfs", "scatefs", "virtiofs")
    iommu: str = "warn"
    min_write_gbps: float | None = None
    min_read_gbps: float | None = None
    require_io_test: bool = True
    gds_mount: str = "/mnt/gds"
    min_p2pdma_driver: str = "565.47"
    reboot_pending: str = "fail"
    gdsio_min_ratio: float | None = None
    source: str = "defaults"

    def __post_init__(self) -> None:
        if self.expected_route not in ("nvfs", "p2pdma", "any"):
            raise UsageError(
                f"policy: expected_route {self.expected_route!r} must be nvfs, p2pdma or any"
            )
        if self.iommu not in ("warn", "fail"):
            raise UsageError(f"policy: iommu {self.iommu!r} must be warn or fail")
        if self.reboot_pending not in ("warn", "fail"):
            raise UsageError(f"policy: reboot_pending {self.reboot_pending!r} must be warn or fail")
        if self.gdsio_min_ratio is not None and not self.gdsio_min_ratio > 0:
            raise UsageError(f"policy: gdsio_min_ratio {self.gdsio_min_ratio!r} must be a number "
                             "above 0 (e.g. 1.2: GDS at least 1.2x the CPU-only throughput), or "
                             "null")
        if self.io_test_size < MIN_PROVABLE_IO_BYTES:
            raise UsageError(f"policy: io_test_size must be at least 1MiB: {SMALL_IO_WHY}")

    @classmethod
    def default(cls) -> Policy:
        return cls()

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "dict") -> Policy:
        names = [f.name for f in fields(cls) if f.name != "source"]
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UsageError(f"policy {source}: unknown key {key!r}{hint}")
            try:
                if key == "io_test_size":
                    value = parse_size(value)
                elif key in ("allowed_filesystems", "network_filesystems"):
                    if isinstance(value, str):
                        value = [value]
                    value = tuple(str(v) for v in value)
                elif key in ("min_write_gbps", "min_read_gbps", "gdsio_min_ratio"):
                    value = None if value is None else float(value)
                elif key in ("require_allow_compat_false", "require_io_test"):
                    if not isinstance(value, bool):
                        raise ValueError(f"{value!r} is not true/false")
                elif key in ("min_nvfs_version", "min_p2pdma_driver"):
                    if isinstance(value, float):
                        raise ValueError(
                            f"write the version as a string, e.g. \"{value}\" quoted (YAML reads "
                            "2.20 as the number 2.2)")
                    value = str(value)
                elif key in ("expected_route", "iommu", "gds_mount", "reboot_pending"):
                    value = str(value)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"policy {source}: {key}: {exc}") from exc
            kwargs[key] = value
        return cls(source=source, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> Policy:
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except OSError as exc:
            raise UsageError(f"policy file {p}: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise UsageError(f"policy file {p} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise UsageError(f"policy file {p}: expected a mapping of settings")
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["allowed_filesystems"] = list(self.allowed_filesystems)
        out["network_filesystems"] = list(self.network_filesystems)
        return out
