"""``gdscheck -p`` output, by section.

Accepts the formats of several GDS releases:

* 1.0-1.11: ``NVMe : Supported`` / ``Unsupported``
* 1.12-1.15: an extra ``NVMe P2PDMA : Supported`` line
* 1.16+: the modes, ``NVMe : nvfs, compat``, ``NVMe : compat``, ``NVMe : c2c, nvfs, compat``

"Platform verification succeeded" says the platform is capable, never that the storage route is
active: the NVMe decision comes from the DRIVER CONFIGURATION tokens only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from provisioner import collection_utils

COMMAND = "gdscheck -p"

_SEP_RE = re.compile(r"^\s*=+\s*$")
_HEADER_RE = re.compile(r"^\s*([A-Z][A-Z ]+[A-Z]):\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_GPU_RE = re.compile(
    r"GPU index (?P<index>\d+)\s+(?P<name>.+?)\s+bar:\s*(?P<bar>\d+)\s+bar size \(MiB\):\s*"
    r"(?P<bar_mib>\d+)(?:,)?\s*(?P<rest>.*)$"
)
_VERSION_RE = re.compile(r"GDS release version:\s*(?P<v>\S+)")
_NVFS_RE = re.compile(r"nvidia_fs version:\s*(?P<v>[\d.]+)")
_LIBCUFILE_RE = re.compile(r"libcufile version:\s*(?P<v>[\d.]+)")
_NVFS_MIN_RE = re.compile(r"nvidia_fs minimum version:\s*(?P<v>[\d.]+)")

# How a DRIVER CONFIGURATION value reads as mode tokens, and the tokens that mean a direct path
# (gds-diag's grouping): one copy, plugins/module_utils/netfs_rules.py, which the network
# filesystems' rules and playbooks/verify.yml's filter read too.
_rules = collection_utils.load("netfs_rules.py")
DIRECT_TOKENS: frozenset[str] = _rules.DIRECT_TOKENS
mode_tokens = _rules.mode_tokens


@dataclass(frozen=True)
class NvmeSupport:
    """What DRIVER CONFIGURATION says about local NVMe."""

    raw: str | None  # the NVMe line's value, None when absent
    p2pdma_raw: str | None  # the ``NVMe P2PDMA`` line (1.12-1.15), None when absent
    modes: tuple[str, ...]  # normalised tokens: nvfs, p2pdma, c2c, compat, supported, unsupported
    direct: bool  # a direct (non-compat) route is reported
    route: str  # nvfs | p2pdma | c2c | compat | unsupported | unknown


@dataclass(frozen=True)
class GdsCheck:
    gds_version: str | None = None
    nvfs_version: str | None = None
    libcufile_version: str | None = None
    nvfs_min_version: str | None = None
    sections: dict[str, list[str]] = field(default_factory=dict)
    driver: dict[str, str] = field(default_factory=dict)
    cufile: dict[str, str] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    platform: dict[str, str] = field(default_factory=dict)
    nvme: NvmeSupport | None = None
    iommu: str | None = None  # "disabled" | "enabled" | the raw text
    iommu_warning: str | None = None
    acs_warnings: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    verification_succeeded: bool = False

    def to_dict(self) -> dict[str, Any]:
        nvme = None
        if self.nvme is not None:
            nvme = {
                "raw": self.nvme.raw,
                "p2pdma_raw": self.nvme.p2pdma_raw,
                "modes": list(self.nvme.modes),
                "direct": self.nvme.direct,
                "route": self.nvme.route,
            }
        return {
            "gds_version": self.gds_version,
            "nvfs_version": self.nvfs_version,
            "libcufile_version": self.libcufile_version,
            "nvfs_min_version": self.nvfs_min_version,
            "driver": dict(self.driver),
            "cufile": dict(self.cufile),
            "gpus": [dict(g) for g in self.gpus],
            "platform": dict(self.platform),
            "nvme": nvme,
            "iommu": self.iommu,
            "iommu_warning": self.iommu_warning,
            "acs_warnings": list(self.acs_warnings),
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "verification_succeeded": self.verification_succeeded,
        }


def _split_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {"HEADER": []}
    current = "HEADER"
    for line in text.splitlines():
        if _SEP_RE.match(line) or not line.strip():
            continue
        m = _HEADER_RE.match(line)
        if m and ":" not in line.strip()[:-1]:
            current = m.group(1).strip().upper()
            sections.setdefault(current, [])
            continue
        sections.setdefault(current, []).append(line.strip())
    return sections


def _kv(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        m = _KV_RE.match(line)
        if m:
            out[m.group("key").strip()] = m.group("value").strip()
    return out


def classify_nvme(value: str | None, p2pdma_value: str | None = None) -> NvmeSupport:
    """Normalise the NVMe lines of any GDS release into tokens and one route."""
    tokens: list[str] = list(mode_tokens(value))
    p2p_ok = p2pdma_value is not None and p2pdma_value.strip().lower() == "supported"
    if p2p_ok and "p2pdma" not in tokens:
        tokens.insert(0, "p2pdma")
    direct = any(t in DIRECT_TOKENS for t in tokens) or "supported" in tokens
    if "p2pdma" in tokens:
        route = "p2pdma"
    elif "nvfs" in tokens or "supported" in tokens:
        # "Supported" (pre-1.16) on local NVMe means nvidia-fs with the patched driver.
        route = "nvfs"
    elif "c2c" in tokens:
        route = "c2c"
    elif "compat" in tokens:
        route = "compat"
    elif "unsupported" in tokens:
        route = "unsupported"
    else:
        route = "unknown"
    return NvmeSupport(
        raw=value, p2pdma_raw=p2pdma_value, modes=tuple(tokens), direct=direct, route=route
    )


def parse(text: str) -> GdsCheck:
    sections = _split_sections(text)
    header = "\n".join(sections.get("HEADER", []))
    m = _VERSION_RE.search(text)
    gds_version = m.group("v") if m else None
    m = _NVFS_RE.search(header) or _NVFS_RE.search(text)
    nvfs_version = m.group("v") if m else None
    m = _LIBCUFILE_RE.search(text)
    libcufile_version = m.group("v") if m else None
    m = _NVFS_MIN_RE.search(text)
    nvfs_min = m.group("v") if m else None

    driver_lines = sections.get("DRIVER CONFIGURATION", [])
    driver = _kv(driver_lines)
    nvme: NvmeSupport | None = None
    if driver:
        nvme_value = next((v for k, v in driver.items() if k.lower() == "nvme"), None)
        p2p_value = next((v for k, v in driver.items() if k.lower() == "nvme p2pdma"), None)
        if nvme_value is not None or p2p_value is not None:
            nvme = classify_nvme(nvme_value, p2p_value)
    cufile = _kv(sections.get("CUFILE CONFIGURATION", []))

    gpus: list[dict[str, Any]] = []
    for line in sections.get("GPU INFO", []):
        gm = _GPU_RE.search(line)
        if not gm:
            continue
        rest = gm.group("rest")
        gpu: dict[str, Any] = {
            "index": int(gm.group("index")),
            "name": gm.group("name").strip(),
            "bar": int(gm.group("bar")),
            "bar_mib": int(gm.group("bar_mib")),
            "supports_gds": "supports GDS" in rest and "not supports" not in rest,
        }
        im = re.search(r"IOMMU State:\s*(\w+)", rest)
        if im:
            gpu["iommu_state"] = im.group(1)
        gpus.append(gpu)

    platform_lines = sections.get("PLATFORM INFO", [])
    platform = _kv(platform_lines)
    iommu: str | None = None
    iommu_warning: str | None = None
    acs: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    succeeded = False
    for line in text.splitlines():
        s = line.strip()
        low = s.lower()
        if low.startswith("iommu:") or low.startswith("iommu :"):
            value = s.split(":", 1)[1].strip()
            iommu = "disabled" if value.lower().startswith("disabled") else value
            if "pass-through or enabled" in low or value.lower().startswith("enabled"):
                iommu_warning = s
        elif re.search(r"\bACS\b", s) and "enabled" in low:
            acs.append(s)
        if "warn" in low:
            warnings.append(s)
        if (
            low.startswith(("err:", "error"))
            or " error:" in low
            or "initialization failed" in low
            or "verification error" in low
            or ("driveropen failed" in low)
        ):
            errors.append(s)
        if "platform verification succeeded" in low:
            succeeded = True
    if iommu_warning is None and iommu not in (None, "disabled"):
        iommu_warning = f"IOMMU: {iommu}"
    return GdsCheck(
        gds_version=gds_version,
        nvfs_version=nvfs_version,
        libcufile_version=libcufile_version,
        nvfs_min_version=nvfs_min,
        sections=sections,
        driver=driver,
        cufile=cufile,
        gpus=gpus,
        platform=platform,
        nvme=nvme,
        iommu=iommu,
        iommu_warning=iommu_warning,
        acs_warnings=acs,
        warnings=warnings,
        errors=errors,
        verification_succeeded=succeeded,
    )
