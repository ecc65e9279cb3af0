"""Filesystem checks on the I/O test's directory (``fs.*``): mount, type, options, NVMe,
transport."""

from __future__ import annotations

from typing import Any

from provisioner.verify import netfs
from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult
from provisioner.verify.parsers import storage


def gds_mount(ctx: Context) -> dict[str, Any] | None:
    """The mount that holds the I/O path (or the policy's GDS mount), None for none or /."""
    m = _mount(ctx)
    return None if m is None or m.get("target") == "/" else m


def _mount(ctx: Context) -> dict[str, Any] | None:
    mounts = (ctx.f.get("storage") or {}).get("mounts") or []
    return storage.mount_for(ctx.io_path or ctx.p.gds_mount, mounts) if mounts else None


def network_gds_mount(ctx: Context) -> str | None:
    """The GDS mount's fstype when it is a network filesystem the policy judges as one
    (fs.mount.type then judges it on its own prerequisites; no NVMe is under it)."""
    m = gds_mount(ctx)
    fstype = str((m or {}).get("fstype"))
    return fstype if netfs.is_network(fstype) and fstype in ctx.p.network_filesystems else None


def mount_paths(ctx: Context, m: dict[str, Any]) -> list[dict[str, str]]:
    """The NVMe controller paths under mount ``m`` (storage.mount_transports)."""
    st = ctx.f.get("storage") or {}
    info = [i for i in st.get("mountinfo") or [] if i.get("target") == m["target"]]
    devno = info[-1]["devno"] if info else None
    mp = str(((ctx.f.get("nvme") or {}).get("multipath")) or "Y").upper() != "N"
    return storage.mount_transports(m["source"], devno, st.get("nvme_topology") or {}, mp)


def _unmounted(cid: str) -> CheckResult:
    return CheckResult(cid, SKIP, "a GDS mount", "not mounted", "Skipped: no GDS mount.")


@check("fs.mount.present", "a filesystem of its own at the I/O test's directory")
def mount_present(ctx: Context) -> CheckResult:
    path = ctx.io_path or ctx.p.gds_mount
    m = _mount(ctx)
    if m is None or m.get("target") == "/":
        return CheckResult("fs.mount.present", FAIL, f"a filesystem mounted at {path}",
                           "not mounted" if m is None else "only the root filesystem",
                           f"Mount the NVMe filesystem at {path} (gdsfleet.gds.nvme role), or "
                           "point the I/O test elsewhere with --io-path.")
    return CheckResult("fs.mount.present", PASS, f"a filesystem mounted at {path}",
                       f"{m['source']} on {m['target']} ({m['fstype']})", "GDS mount present.")


@check("fs.mount.type", "a filesystem type GDS supports")
def mount_type(ctx: Context) -> CheckResult:
    m = gds_mount(ctx)
    if m is None:
        return _unmounted("fs.mount.type")
    fstype = m["fstype"]
    if netfs.is_network(fstype) and fstype in ctx.p.network_filesystems:
        return _network_type(ctx, m)
    allowed = " or ".join(ctx.p.allowed_filesystems)
    if fstype in ctx.p.allowed_filesystems:
        return CheckResult("fs.mount.type", PASS, allowed, fstype,
                           "Filesystem type supported by GDS.")
    return CheckResult("fs.mount.type", FAIL, allowed, fstype,
                       f"{fstype} only runs in compat mode: reformat as XFS or ext4 "
                       "(data=ordered).")


def _network_type(ctx: Context, m: dict[str, Any]) -> CheckResult:
    """A network filesystem, judged on its own prerequisites (netfs.prerequisites: the shared
    rule of plugins/module_utils/netfs_rules.py, per kind of RDMA)."""
    fs = netfs.NETWORK_FILESYSTEMS[m["fstype"]]
    gc = (ctx.f.get("gdscheck") or {}).get("parsed")
    node = netfs.node_evidence(ctx.f)
    missing = netfs.prerequisites(m["fstype"], m.get("options") or [], gc,
                                  bool((ctx.f.get("nvfs") or {}).get("loaded")), node)
    needs = {"kernel": "kernel RDMA through nvidia-fs",
             "userspace": "cuFile's userspace RDMA, nvidia_peermem or dmabuf, nvidia-fs",
             "none": "the P2PDMA route"}[fs.rdma]
    expected = f"{fs.name} with GDS support ({fs.gdscheck_line} in gdscheck, {needs})"
    if not missing and gc is None:
        ports = ", ".join(f"{p['device']}/{p['port']}" for p in node.get("rdma_ports") or []
                          if p["state"] == "ACTIVE") or "sysfs not read"
        return CheckResult("fs.mount.type", PASS,
                           f"{fs.name} with GDS support (its client, {needs})",
                           f"{m['fstype']} ({fs.name}; no gdscheck on the node)",
                           f"{fs.name}: no gdscheck on the node (the GPU Operator puts none on "
                           f"the host), so judged on what the node shows: the client's module "
                           f"{fs.client_module or '-'} is loaded and registers with nvidia-fs, "
                           + ("cufile.json lists the client NICs and nvidia_peermem or dmabuf "
                              "is there, " if fs.rdma == "userspace" else "")
                           + f"an RDMA port is ACTIVE ({ports}) and nvidia-fs is loaded. The I/O "
                           "test proves the direct path.")
    if not missing:
        how = {"kernel": "its client registers with nvidia-fs over kernel RDMA (no cuFile RDMA "
                         "library needed) and nvidia-fs is loaded",
               "userspace": "cuFile's userspace RDMA is ready (library, device, nvidia_peermem "
                            "or dmabuf) and nvidia-fs is loaded",
               "none": "cuFile takes the P2PDMA route on it"}[fs.rdma]
        return CheckResult("fs.mount.type", PASS, expected, f"{m['fstype']} ({fs.name})",
                           f"{fs.name}: gdscheck supports it and {how}.")
    return CheckResult("fs.mount.type", FAIL, expected, f"{m['fstype']}: " + "; ".join(missing),
                       f"{m['fstype']} only runs in compat mode here: " + "; ".join(missing)
                       + f". Fix: {fs.fix}.")


@check("fs.mount.options", "mount options GDS supports (ext4: data=ordered)")
def mount_options(ctx: Context) -> CheckResult:
    cid = "fs.mount.options"
    m = gds_mount(ctx)
    if m is None:
        return _unmounted(cid)
    opts = m.get("options") or []
    if m["fstype"] != "ext4":
        return CheckResult(cid, PASS, "no GDS-incompatible options", ",".join(opts),
                           "Mount options are acceptable.")
    data = [o for o in opts if o.startswith("data=")]
    if "data=ordered" in data:
        return CheckResult(cid, PASS, "data=ordered", ",".join(opts),
                           "ext4 is mounted with an explicit data=ordered.")
    if "data=journal" in data:
        return CheckResult(cid, FAIL, "data=ordered", ",".join(opts),
                           "ext4 with data=journal is not supported by GDS: remount with "
                           "data=ordered.")
    return CheckResult(cid, FAIL, "data=ordered", ",".join(opts),
                       "GDS needs ext4 mounted with an explicit data=ordered: add it to the "
                       "mount options in /etc/fstab and remount.")


@check("fs.mount.nvme", "the mount is on NVMe")
def mount_nvme(ctx: Context) -> CheckResult:
    m = gds_mount(ctx)
    if m is None:
        return _unmounted("fs.mount.nvme")
    if netfs.is_network(m["fstype"]):
        return CheckResult("fs.mount.nvme", SKIP, "backed by NVMe", m["source"],
                           f"Skipped: {m['fstype']} is a network filesystem (fs.mount.type "
                           "judges it).")
    devices = (ctx.f.get("storage") or {}).get("devices") or []
    if storage.is_nvme_source(m["source"], devices):
        return CheckResult("fs.mount.nvme", PASS, "backed by NVMe", m["source"],
                           "Mount is on NVMe.")
    return CheckResult("fs.mount.nvme", WARN, "backed by NVMe", m["source"],
                       "The mount is not on an NVMe device: local GDS needs NVMe (or md RAID0 "
                       "over NVMe).")


@check("fs.mount.transport", "an NVMe transport GDS supports under the mount")
def mount_transport(ctx: Context) -> CheckResult:
    """The NVMe transport of every controller path under the GDS mount (mountinfo device
    number -> /dev/nvmeXnY or md members -> /sys/class/nvme)."""
    cid, expected = "fs.mount.transport", "NVMe over " + " or ".join(
        storage.GDS_NVME_TRANSPORTS)
    m = gds_mount(ctx)
    if m is None:
        return _unmounted(cid)
    if netfs.is_network(m["fstype"]):
        return CheckResult(cid, SKIP, expected, m["fstype"],
                           f"Skipped: {m['fstype']} is a network filesystem, not NVMe "
                           "(fs.mount.type judges its transport).")
    paths = mount_paths(ctx, m)
    if not paths:
        return CheckResult(cid, SKIP, expected, "no NVMe controller visible",
                           f"Skipped: no NVMe controller found under {m['source']} "
                           "(/sys/class/nvme).")
    seen = "; ".join(f"{p['transport']} ({p['namespace']} via {p['controller']}"
                     + (f" {p['address']}" if p["address"] else "") + ")" for p in paths)
    kinds = {p["transport"] for p in paths}
    arrays = sorted({p["md"] for p in paths if p.get("md")})
    if "tcp" in kinds:
        return CheckResult(cid, FAIL, expected, seen,
                           "GDS does not work over NVMe/TCP: cuFile only reaches this mount in "
                           "compat mode (POSIX through the page cache). Connect the subsystem "
                           "over RDMA (gdsfleet.gds.nvmeof, transport rdma) and put the GDS "
                           "filesystem on that namespace, or use local NVMe.")
    if ctx.target == "p2pdma" and ("rdma" in kinds or arrays):
        # NVIDIA's P2PDMA guide: neither NVMe-oF nor RAID0 over NVMe is supported there
        what = " and ".join(
            (["NVMe-oF (rdma)"] if "rdma" in kinds else [])
            + ([f"md RAID ({', '.join(arrays)})"] if arrays else []))
        return CheckResult(cid, FAIL, "one local PCIe NVMe namespace (p2pdma route)", seen,
                           f"The p2pdma route does not support {what} (NVIDIA's GDS P2PDMA "
                           "guide): cuFile cannot reach this mount over PCI P2PDMA. Put the GDS "
                           "filesystem on a single local PCIe NVMe namespace, or use the nvfs "
                           "route (nvidia-fs), which supports NVMe-oF over RDMA and md RAID0.")
    if kinds <= set(storage.GDS_NVME_TRANSPORTS):
        return CheckResult(cid, PASS, expected, seen,
                           "The GDS mount is on a transport GDS supports.")
    return CheckResult(cid, WARN, expected, seen,
                       "The GDS mount is on an NVMe transport GDS does not document "
                       f"({', '.join(sorted(kinds))}): use local PCIe NVMe or NVMe over RDMA.")
