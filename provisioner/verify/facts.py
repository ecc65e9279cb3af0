"""Turn the gather script's JSON document into facts (pure; no I/O).

``raw_outputs(doc)`` gives ``{item: text}`` for the report's ``raw``; ``build_facts(doc)`` runs
every parser and returns one JSON-safe dict that checks read.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provisioner.verify import netfs
from provisioner.verify.parsers import (
    cufile,
    driver,
    gdscheck,
    kernel,
    kernel_gate,
    modprobe,
    nvfs_stats,
    os_release,
    packages,
    storage,
)


def _item(doc: dict[str, Any], name: str) -> dict[str, Any]:
    items = doc.get("items") or {}
    value = items.get(name)
    return value if isinstance(value, dict) else {"rc": None, "out": "", "err": "not gathered"}


def _ok(item: dict[str, Any]) -> bool:
    return item.get("rc") == 0


def _text(doc: dict[str, Any], name: str) -> str | None:
    item = _item(doc, name)
    return str(item.get("out") or "") if _ok(item) else None


def raw_outputs(doc: dict[str, Any]) -> dict[str, str]:
    """Every item's raw text (stdout, plus stderr and status when the item failed)."""
    out: dict[str, str] = {}
    for name, item in sorted((doc.get("items") or {}).items()):
        if not isinstance(item, dict):
            continue
        text = str(item.get("out") or "")
        if item.get("rc") != 0:
            text += f"\n[rc={item.get('rc')} {item.get('err') or ''}]".rstrip()
        elif item.get("err"):
            text += f"\n[stderr] {item['err']}"
        out[name] = text
    return out


def _module(doc: dict[str, Any], name: str) -> dict[str, Any]:
    item = _item(doc, name)
    if not _ok(item):
        return {"loaded": False, "params": {}, "version": None}
    try:
        params = json.loads(item.get("out") or "{}")
    except ValueError:
        params = {}
    if not isinstance(params, dict):
        params = {}
    params = {k: v for k, v in params.items() if isinstance(v, dict)}
    return {"loaded": True, "params": params, "version": item.get("version")}


def build_facts(doc: dict[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {"gather_error": doc.get("error")}

    # OS and kernel
    osr = os_release.parse(_text(doc, "os_release") or "")
    facts["os"] = {
        "id": osr.get("ID"),
        "version_id": osr.get("VERSION_ID"),
        "pretty_name": osr.get("PRETTY_NAME"),
        "family": os_release.family(osr),
    }
    release = (_text(doc, "kernel_release") or "").strip()
    facts["kernel"] = {
        "release": release,
        "version": list(kernel.parse_kernel_version(release)),
        "machine": (_text(doc, "machine") or "").strip(),
    }
    facts["hostname"] = (_text(doc, "hostname") or "").strip()
    facts["boot_id"] = (_text(doc, "boot_id") or "").strip() or None
    facts["python"] = (_text(doc, "python") or "").strip() or None

    # GPU driver
    proc = driver.parse_proc_version(_text(doc, "nvidia_version") or "")
    lic_item = _item(doc, "modinfo_license")
    lic_flavor = driver.flavor_from_license(lic_item.get("out") or "") if _ok(lic_item) else None
    nvidia_mod = _module(doc, "nvidia_module")
    smi_q = driver.parse_smi_query(_text(doc, "nvidia_smi_query") or "")
    smi_l = driver.parse_smi_list(_text(doc, "nvidia_smi_L") or "")
    info = driver.parse_gpu_information(_text(doc, "nvidia_gpus_information") or "")
    gpus: list[dict[str, Any]] = list(smi_q) or list(smi_l)
    if not gpus:
        gpus = [{"index": str(i), "name": g.get("Model", "?"), "pci_bus_id": g.get("Bus Location")}
                for i, g in enumerate(info)]
    version = proc.get("version") or nvidia_mod.get("version")
    if not version and smi_q:
        version = smi_q[0].get("driver_version")
    facts["gpu"] = {
        "driver_loaded": bool(proc["loaded"] or nvidia_mod["loaded"]),
        "driver_flavor": proc.get("flavor") or lic_flavor,
        "driver_flavor_modinfo": lic_flavor,
        "driver_version": version,
        "count": len(gpus),
        "gpus": gpus,
        "nvidia_smi": _item(doc, "nvidia_smi_L").get("rc"),
    }

    # nvidia-fs
    nvfs_mod = _module(doc, "nvfs_module")
    stats_text = _text(doc, "nvfs_stats")
    stats = nvfs_stats.parse(stats_text) if stats_text is not None else None
    ver_text = _text(doc, "nvfs_version")
    modinfo_ver = _item(doc, "modinfo_nvfs_version")
    installed_version = ((modinfo_ver.get("out") or "").strip() or None
                         if _ok(modinfo_ver) else None)
    nvfs_version, nvfs_version_source = nvfs_stats.full_version(
        module_version=nvfs_mod.get("version") if nvfs_mod["loaded"] else None,
        stats_version=stats.driver_version if stats else None,
        modinfo_version=installed_version,
        proc_version=nvfs_stats.parse_version(ver_text) if ver_text else None,
    )
    rw = nvfs_mod["params"].get("rw_stats_enabled") or {}
    facts["nvfs"] = {
        "loaded": nvfs_mod["loaded"],
        "version": nvfs_version,
        "version_source": nvfs_version_source,
        "proc_version": nvfs_stats.parse_version(ver_text) if ver_text else None,
        "module_version": nvfs_mod.get("version"),
        "installed_version": installed_version,
        "params": {k: v.get("value") for k, v in nvfs_mod["params"].items()},
        "rw_stats_enabled": rw.get("value"),
        "rw_stats_writable": bool(rw.get("writable")),
        "devcount": nvfs_stats.parse_devcount(_text(doc, "nvfs_devcount") or ""),
        "stats": stats.to_dict() if stats else None,
        "persist_file": _text(doc, "nvfs_modules_load"),
    }

    # kernel symbols, nvme, iommu
    ks = kernel.parse_kallsyms(_text(doc, "kallsyms") or "")
    kallsyms_item = _item(doc, "kallsyms")
    facts["kallsyms"] = {**ks, "readable": _ok(kallsyms_item),
                         "nvfs_lookup": kernel.nvfs_lookup(
                             ks, nvfs_version if nvfs_mod["loaded"] else None,
                             facts["kernel"]["version"])}
    mp = _text(doc, "nvme_multipath")
    facts["nvme"] = {"multipath": mp.strip() if mp is not None else None,
                     "module_loaded": _module(doc, "nvme_module")["loaded"]}
    cmd = kernel.parse_cmdline(_text(doc, "cmdline") or "")
    iommu_item = _item(doc, "iommu_class")
    entries = [e for e in (iommu_item.get("out") or "").splitlines() if e] if _ok(
        iommu_item) else ([] if iommu_item.get("rc") is None else None)

    # gdscheck
    gc_item = _item(doc, "gdscheck")
    gc: gdscheck.GdsCheck | None = None
    if gc_item.get("rc") is not None and (gc_item.get("out") or "").strip():
        gc = gdscheck.parse(str(gc_item.get("out")))
    facts["gdscheck"] = {
        "found": gc_item.get("rc") is not None,
        "path": (gc_item.get("argv") or [None])[0],
        "rc": gc_item.get("rc"),
        "error": gc_item.get("err") if gc_item.get("rc") not in (0,) else None,
        "parsed": gc.to_dict() if gc else None,
    }
    facts["iommu"] = kernel.iommu_state(cmd, entries, gc.iommu if gc else None)
    facts["iommu"]["cmdline_params"] = cmd["iommu_params"]

    # cuFile configuration and library
    cf_item = _item(doc, "cufile_json")
    cf = cufile.parse(str(cf_item.get("out")) if _ok(cf_item) else None)
    if _ok(cf_item) is False and cf_item.get("rc") not in (None,):
        cf = cufile.CufileConfig(present=True, valid=False, error=str(cf_item.get("err")))
    facts["cufile"] = {**cf.to_dict(), "path": cf_item.get("path"),
                       "env_override": bool(cf_item.get("env_override"))}
    facts["cufile_files"] = cufile_files(doc)  # block "cufile.json files" below
    lib = _item(doc, "libcufile")
    facts["libcufile"] = {"found": _ok(lib),
                          "paths": [p for p in (lib.get("out") or "").splitlines() if p]}

    # packages, dkms, MOFED/DOCA, secure boot
    pk_item = _item(doc, "packages")
    pkgs = packages.parse_package_list(pk_item.get("out") or "") if pk_item.get("out") else {}
    facts["packages"] = {"manager": pk_item.get("manager"), "installed": pkgs,
                         **packages.gds_packages(pkgs)}
    dk = _item(doc, "dkms_status")
    facts["dkms"] = {"available": dk.get("rc") is not None,
                     "modules": packages.parse_dkms_status(dk.get("out") or "")}
    facts["boot"] = packages.boot_kernel(
        _text(doc, "boot_dir"), _text(doc, "grubby_default_kernel"))
    # the kernel gate's record and the kernel the node really boots next (GRUB saved entry)
    gate_state = kernel_gate.parse_state(_text(doc, "kernel_gate_state"))
    gate_state["boot_kernel"], gate_state["boot_source"] = kernel_gate.boot_kernel_after_gate(
        facts["boot"], _text(doc, "grub_default_entry"), _text(doc, "grubenv"))
    facts["kernel_gate"] = gate_state
    of = _item(doc, "ofed_info")
    facts["ofed"] = packages.parse_ofed_info(of.get("out") or "") if _ok(of) else {
        "flavor": None, "version": None, "raw": None}
    sb = _item(doc, "mokutil_sb_state")
    sb_text = (sb.get("out") or "") + (sb.get("err") or "")
    facts["secure_boot"] = (
        None if sb.get("rc") is None else ("enabled" in sb_text.lower() and
                                           "disabled" not in sb_text.lower())
    )

    # storage
    mounts = storage.parse_mounts(_text(doc, "mounts") or "")
    devices = storage.parse_lsblk(_text(doc, "lsblk") or "")
    facts["storage"] = {
        "mounts": [m for m in mounts if m["fstype"] not in _PSEUDO_FS],
        "devices": devices,
        "nvme_mounts": storage.nvme_mount_points(mounts, devices),
        "mountinfo": storage.parse_mountinfo(_text(doc, "mountinfo") or ""),
        "nvme_topology": storage.parse_nvme_topology(_text(doc, "nvme_topology") or ""),
    }

    # network filesystems: the GDS clients' kernel modules and the RDMA ports
    facts["netfs"] = {
        "client_modules": netfs.parse_client_modules(_text(doc, "netfs_client_modules")),
        **netfs.parse_rdma_ports(_item(doc, "rdma_ports")),
    }

    # reboot marker
    rb = _item(doc, "reboot_required")
    reasons = [ln.strip() for ln in (rb.get("out") or "").splitlines() if ln.strip()] if _ok(
        rb) else []
    facts["reboot"] = {"required": _ok(rb), "reasons": reasons}
    facts["verify_runtime"] = verify_runtime_facts(_item(doc, "verify_runtime"))
    facts.update(_module_options_facts(doc))
    facts["operator"] = operator_facts(doc, facts)
    return facts


def _listing(item: dict[str, Any]) -> list[str] | None:
    if not _ok(item):
        return None
    return [n for n in str(item.get("out") or "").splitlines() if n]


_READY_LINE = re.compile(r"^([A-Z][A-Z0-9_]{0,63})=([^\x00-\x1f]{0,256})$")


def parse_driver_ready(text: str) -> dict[str, str]:
    """The GPU Operator validator's driver-ready file: ``KEY=value`` lines (IS_HOST_DRIVER,
    NVIDIA_DRIVER_ROOT, ...; cmd/nvidia-validator, tests/fixtures/gpu-operator/README.md).
    Bounded: the first 32 lines, names and values of the expected shape only."""
    out: dict[str, str] = {}
    for line in text.splitlines()[:32]:
        m = _READY_LINE.match(line.strip())
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2)
    return out


def operator_facts(doc: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """Whether the NVIDIA GPU Operator manages this node's driver and nvidia-fs (pure).

    The validator writes /run/nvidia/validations/driver-ready on every node it validates, also
    where the driver is installed on the host (IS_HOST_DRIVER=true there): that host driver and
    its nvidia-fs are host installs. Managed when the validator says the driver is the
    operator's container (IS_HOST_DRIVER=false) or, where it does not say (an older validator,
    no driver-ready), the driver container's root /run/nvidia/driver is populated; and the host
    has no nvidia-fs package and no DKMS nvidia-fs: the driver container built and loaded the
    module, which is still visible in the host's /proc and /sys."""
    root_item = _item(doc, "operator_driver_root")
    root = _listing(root_item)
    validations = _listing(_item(doc, "operator_validations"))
    ready_item = _item(doc, "operator_driver_ready")
    ready = parse_driver_ready(str(ready_item.get("out") or "")) if _ok(ready_item) else {}
    flag = ready.get("IS_HOST_DRIVER", "").strip().lower()
    host_driver = True if flag == "true" else False if flag == "false" else None
    host_pkgs = sorted((facts.get("packages") or {}).get("nvidia_fs") or {})
    dkms_nvfs = [m for m in (facts.get("dkms") or {}).get("modules") or []
                 if m.get("module") == "nvidia-fs"]
    marks = []
    if root:
        marks.append(f"{root_item.get('path')} populated")
    if validations is not None:
        marks.append("/run/nvidia/validations: " + (", ".join(validations) or "empty"))
    if host_driver is not None:
        marks.append(f"driver-ready IS_HOST_DRIVER={flag}")
    host = []
    if host_driver:
        host.append("the validator found a host-installed driver")
    if host_pkgs:
        host.append("host packages " + ", ".join(host_pkgs))
    if dkms_nvfs:
        host.append("DKMS nvidia-fs")
    container_driver = host_driver is False or (host_driver is None and bool(root))
    managed = container_driver and not host
    return {
        "managed": managed,
        "host_driver": host_driver,
        "driver_root": root_item.get("path") if root else None,
        "validations": validations,
        "nvfs_ready": validations is not None and "nvidia-fs-ready" in validations,
        "driver_ready": validations is not None and "driver-ready" in validations,
        "host_nvfs": host,
        "evidence": "; ".join(marks + host) or "no GPU Operator marks",
    }


def _module_options_facts(doc: dict[str, Any]) -> dict[str, Any]:
    """The running nvidia module parameters (/proc/driver/nvidia/params) and the nvidia /
    nvme_core options modprobe.d configures (what the next module load, i.e. boot, uses)."""
    params_text = _text(doc, "nvidia_params")
    params = modprobe.parse_nvidia_params(params_text) if params_text is not None else None
    raw_dwords = params.get("RegistryDwords") if params is not None else None
    mp_item = _item(doc, "modprobe_options")
    configured = modprobe.configured_options(str(mp_item.get("out") or "")) if _ok(
        mp_item) else {}
    conf_dwords = (configured.get("nvidia") or {}).get("NVreg_RegistryDwords")
    kmod_version, kmod_dirs = modprobe.kmod_dirs_for(str(mp_item.get("out") or "")) if _ok(
        mp_item) else (None, ())
    boot = modprobe.boot_params(
        cmdline=_text(doc, "cmdline"),
        builtin=_text(doc, "modules_builtin"),
        grub=_text(doc, "grub_default"),
        grub_d=_text(doc, "grub_default_d"),
        grubby=_text(doc, "grubby_info_default"))
    return {
        "nvidia_params": {
            "present": params is not None,
            "registry_dwords": raw_dwords,
            "registry": modprobe.parse_registry_dwords(raw_dwords) if raw_dwords is not None
            else None,
        },
        "modprobe": {
            "gathered": _ok(mp_item),
            "options": configured,
            "nvme_multipath": (configured.get("nvme_core") or {}).get("multipath"),
            "registry_dwords": conf_dwords,
            "registry": modprobe.parse_registry_dwords(conf_dwords["value"]) if conf_dwords
            else {},
            "kmod_version": kmod_version,
            "dirs": list(kmod_dirs),
            # what defeats modprobe.d: built-in modules, the kernel command line now
            # (/proc/cmdline) and for the next boot (the boot loader's configuration)
            **boot,
        },
    }


_PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
    "tracefs", "pstore", "bpf", "mqueue", "hugetlbfs", "configfs", "fusectl", "autofs",
    "binfmt_misc", "rpc_pipefs", "efivarfs", "nsfs", "ramfs",
})


def verify_runtime_facts(item: dict[str, Any]) -> dict[str, Any]:
    """The fact file of the role gdsfleet.gds.verify_runtime (pure): ``present`` (the file was
    read), ``python`` (absolute interpreter path or None), versions, CUDA major, and ``error``
    when the file exists but is unusable."""
    out: dict[str, Any] = {"present": False, "path": item.get("path"), "python": None,
                           "kvikio_version": None, "cupy_version": None, "cuda_major": None,
                           "error": None}
    if item.get("rc") is None:
        return out
    if not _ok(item):
        out["error"] = f"cannot read the fact file: {item.get('err') or item.get('rc')}"
        return out
    out["present"] = True
    try:
        data = json.loads(str(item.get("out") or ""))
    except ValueError as exc:
        out["error"] = f"the fact file is not JSON: {exc}"
        return out
    if not isinstance(data, dict):
        out["error"] = "the fact file is not a JSON object"
        return out
    python = data.get("python")
    if isinstance(python, str) and python.startswith("/") and not any(
            ch.isspace() for ch in python):
        out["python"] = python
    else:
        out["error"] = f"the fact file names no absolute interpreter path (python={python!r})"
    for key in ("kvikio_version", "cupy_version", "kvikio_package", "cupy_package", "venv",
                "source"):
        value = data.get(key)
        out[key] = str(value) if value is not None else None
    major = data.get("cuda_major")
    out["cuda_major"] = int(major) if isinstance(major, (int, str)) and str(major).isdigit() \
        else None
    return out


# --- block: cufile.json files for `export env` (issue 15 item 10; gather's cufile_files) -------
_CUFILE_FILES_MAX = 6


def cufile_files(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each cufile.json the gather looked at: path, exists, valid, allow_compat_mode (None when
    the file is absent or unreadable) and realpath. Empty for a gather that predates it."""
    item = _item(doc, "cufile_files")
    raw = item.get("files")
    out: list[dict[str, Any]] = []
    if not isinstance(raw, list):
        return out
    for entry in raw[:_CUFILE_FILES_MAX]:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        text = entry.get("text")
        exists = bool(entry.get("exists"))
        parsed = cufile.parse(text) if exists and isinstance(text, str) else None
        real = entry.get("realpath")
        out.append({
            "path": entry["path"][:4096],
            "exists": exists,
            "realpath": real[:4096] if isinstance(real, str) else None,
            "valid": parsed.valid if parsed is not None else (False if exists else None),
            "allow_compat_mode": (parsed.allow_compat_mode
                                  if parsed is not None and parsed.valid else None),
            "error": (parsed.error if parsed is not None else str(entry.get("err") or ""))
            or None,
        })
    return out
# --- end of block: cufile.json files ---------------------------------------------------------
