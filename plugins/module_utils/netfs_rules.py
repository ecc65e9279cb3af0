# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What GDS needs on a network filesystem, judged from ``gdscheck -p`` or the node's own state.

The facts are data: ``netfs_caps.json`` beside this file (one entry per filesystem: its mount
types, the gdscheck DRIVER CONFIGURATION lines that speak for it, its route, its kind of RDMA,
the kernel module and registration symbol nvidia-fs looks up, its cufile.json section, whether
nvidia-fs counts its I/O, the key that decides its writes, and the sources). The rules here read
that table; ``provisioner verify`` (provisioner/verify/netfs.py), ``playbooks/verify.yml`` (the
``gdsfleet.gds.netfs_prerequisites`` filter) and the roles use these functions, so the two
verify paths cannot drift apart. Standard library only (the collection must not import the
provisioner, and the provisioner must not need Ansible).

Two kinds of RDMA (NVIDIA's gds-diag, checks/fs_matrix.py ``rdma_type``; the GDS 1.0 README):

* kernel RDMA through nvidia-fs (NFS over RDMA, Lustre, BeeGFS, ScaTeFS, NVMe-oF): the
  filesystem's client registers with nvidia-fs; no cuFile RDMA library (libcufile_rdma.so), no
  ``rdma_dev_addr_list`` and no ``--rdma_device_status`` Up count are needed (NVIDIA's README
  sample: ``NFS : Supported`` with ``--rdma library : Not Loaded`` and ``Up: 0 Down: 0``);
* userspace RDMA in cuFile (WekaFS, IBM Storage Scale): ``Userspace RDMA : Supported``, the RDMA
  library loaded for the client NICs, an RDMA device up, and ``nvidia_peermem`` loaded or
  ``properties.rdma_peer_type`` ``dmabuf``; a 1.16+ mode list with ``dmabuf`` or
  ``nvidia_peermem`` on the filesystem's own line is gdscheck's verdict that this path is on.

virtiofs takes the P2PDMA route (no nvidia-fs): its ``VIRTIOFS`` line shows ``p2pdma`` (or
``c2c``) only with ``properties.use_pci_p2pdma`` and ``fs.virtiofs.use_pci_p2pdma`` both true.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CAPS_FILE = Path(__file__).with_name("netfs_caps.json")
# Mode tokens that mean a direct path (gds-diag checks/gdscheck.py NATIVE_ROUTE_TOKENS and
# DIRECT_ROUTE_TOKENS); which of them count for a filesystem is its entry's direct_tokens
DIRECT_TOKENS = frozenset({"nvfs", "p2pdma", "c2c", "dmabuf", "nvidia_peermem"})
USERSPACE_TOKENS = frozenset({"dmabuf", "nvidia_peermem"})
_KV = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_SEP = re.compile(r"^\s*=+\s*$")
_HEADER = re.compile(r"^\s*([A-Z][A-Z ]+[A-Z]):\s*$")
_TABLE: dict[str, Any] = {}


def table() -> dict[str, Any]:
    """The whole table (read once)."""
    if not _TABLE:
        _TABLE.update(json.loads(CAPS_FILE.read_text(encoding="utf-8")))
    return _TABLE


def filesystems() -> dict[str, dict[str, Any]]:
    """Every entry, by its name in the table (nfs, lustre, gpfs, wekafs, beegfs, ...)."""
    fs: dict[str, dict[str, Any]] = table()["filesystems"]
    return fs


def mount_types() -> dict[str, str]:
    """Kernel mount type (/proc/mounts field 3) -> the table's name for its filesystem."""
    return {t: name for name, e in filesystems().items() for t in e["mount_types"]}


def entry(fstype: str) -> dict[str, Any] | None:
    """The entry of a mount type (nfs4 -> nfs's), None for a type the table does not know."""
    name = mount_types().get(str(fstype))
    return filesystems()[name] if name else None


def cufile_keys() -> tuple[str, ...]:
    """The cufile.json keys the rules read (write keys, P2PDMA keys, rdma_peer_type)."""
    keys = {"properties.rdma_peer_type", "properties.use_pci_p2pdma"}
    for e in filesystems().values():
        if e.get("write_key"):
            keys.add(e["write_key"])
        keys.update(e.get("p2pdma_keys") or ())
    return tuple(sorted(keys))


def cufile_sections() -> tuple[str, ...]:
    return tuple(sorted({e["cufile_section"] for e in filesystems().values()
                         if e.get("cufile_section")}))


# -- gdscheck -p -------------------------------------------------------------------------------
def mode_tokens(value: Any) -> tuple[str, ...]:
    """A DRIVER CONFIGURATION value as tokens: ``Supported`` -> (supported,), ``Unsupported`` /
    ``Not Supported`` -> (unsupported,), 1.16+ ``dmabuf, compat`` -> (dmabuf, compat)."""
    if value is None:
        return ()
    low = str(value).strip().lower()
    if low == "supported":
        return ("supported",)
    if low in ("unsupported", "not supported"):
        return ("unsupported",)
    return tuple(t.strip() for t in low.split(",") if t.strip())


def driver_config(output: str | Iterable[str] | None) -> dict[str, str] | None:
    """The DRIVER CONFIGURATION section of ``gdscheck -p`` output (text or lines), keys lower
    case; None without output. Only that section: its keys repeat nowhere else."""
    if output is None:
        return None
    lines = output.splitlines() if isinstance(output, str) else [str(x) for x in output]
    if not any(str(x).strip() for x in lines):
        return None
    out: dict[str, str] = {}
    section = ""
    for line in lines[:2000]:
        if _SEP.match(line) or not line.strip():
            continue
        head = _HEADER.match(line)
        if head:
            section = head.group(1).strip().upper()
            continue
        m = _KV.match(line)
        if section == "DRIVER CONFIGURATION" and m:
            out.setdefault(m.group("key").strip().lower()[:64], m.group("value")[:200])
    return out


def lines_of(e: Mapping[str, Any], driver: Mapping[str, str]) -> list[tuple[str, str]]:
    """The filesystem's own DRIVER CONFIGURATION lines that gdscheck printed: (name, value)."""
    return [(n, driver[n.lower()]) for n in e["gdscheck_lines"] if n.lower() in driver]


def line_direct(e: Mapping[str, Any], driver: Mapping[str, str]) -> tuple[bool, str]:
    """(a line of this filesystem names one of its direct modes, what gdscheck says)."""
    seen = lines_of(e, driver)
    wanted = set(e["direct_tokens"])
    ok = any(wanted & set(mode_tokens(pair[1])) for pair in seen)
    shown = "; ".join(f"{n} : {v}" for n, v in seen) or (
        " / ".join(e["gdscheck_lines"]) + " : absent")
    return ok, shown


def _up(status: str) -> int:
    m = re.search(r"up:\s*(\d+)", status, re.IGNORECASE)
    return int(m.group(1)) if m else 0


def rdma_state(driver: Mapping[str, str] | None) -> dict[str, Any]:
    """The cuFile RDMA library's lines: ``--rdma library``, ``--rdma_device_status`` (gds-diag
    also reads ``--rdma_dev_addr_list_status``), PeerDirect and DmaBuf."""
    d = driver or {}
    lib = d.get("--rdma library")
    status = d.get("--rdma_device_status") or d.get("--rdma_dev_addr_list_status") or ""
    return {"library": lib,
            "library_loaded": (lib or "").strip().lower().startswith("loaded"),
            "devices": d.get("--rdma devices"), "device_status": status or None,
            "devices_up": _up(status),
            "userspace_rdma": d.get("userspace rdma"),
            "peerdirect": d.get("--mellanox peerdirect"), "dmabuf": d.get("--dmabuf support")}


def nfs_transport(options: Iterable[str]) -> str:
    """``proto=`` of an NFS mount (rdma, tcp, rdma6, tcp6...); a bare ``rdma`` option is RDMA;
    tcp when absent (the kernel's default)."""
    opts = [str(o) for o in options]
    for o in opts:
        if o.startswith("proto="):
            return o.split("=", 1)[1][:16]
    return "rdma" if "rdma" in opts else "tcp"


# -- what the node shows itself ------------------------------------------------------------------
def _addr_strings(value: Any) -> list[str] | None:
    """A list of addresses as written: strings only, at most 64 of 64 characters (the document
    is the node's); None when absent or not a list."""
    if not isinstance(value, list):
        return None
    return [a[:64] for a in value[:64] if isinstance(a, str)]


def cufile_evidence(cfg: Any) -> dict[str, Any]:
    """What the rules read of a parsed cufile.json: ``rdma_dev_addr_list``, each section's own
    list and its ``mount_table``'s addresses (gds-diag checks/rdma.py counts both),
    ``rdma_peer_type`` and ``cufile_keys`` (:func:`cufile_keys`, plain values only)."""
    doc = cfg if isinstance(cfg, Mapping) else {}

    def get(dotted: str) -> Any:
        node: Any = doc
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    sections: dict[str, list[str] | None] = {}
    for sect in cufile_sections():
        own = _addr_strings(get(f"fs.{sect}.rdma_dev_addr_list"))
        table_ = get(f"fs.{sect}.mount_table")
        mounts = list(table_.values())[:64] if isinstance(table_, Mapping) else []
        extra = [a for m in mounts if isinstance(m, Mapping)
                 for a in _addr_strings(m.get("rdma_dev_addr_list")) or []]
        sections[sect] = own if not extra else ((own or []) + extra)[:64]
    keys: dict[str, Any] = {}
    for k in cufile_keys():
        v = get(k)
        keys[k] = v if isinstance(v, bool) else (v[:32] if isinstance(v, str) else None)
    return {"rdma_dev_addr_list": _addr_strings(get("properties.rdma_dev_addr_list")),
            "fs_rdma_dev_addr_list": sections,
            "rdma_peer_type": keys.get("properties.rdma_peer_type"), "cufile_keys": keys}


_PORT = re.compile(r"/sys/class/infiniband/([A-Za-z0-9_.\-]{1,64})/ports/(\d{1,8})/state:"
                   r"\s*(?:\d+:)?\s*([A-Za-z_]{1,32})\s*$")


def ports_from_sysfs(lines: Iterable[str]) -> dict[str, Any]:
    """``grep -H . /sys/class/infiniband/*/ports/*/state`` lines as the rules' RDMA ports."""
    ports = []
    for line in list(lines)[:64]:
        m = _PORT.search(str(line))
        if m:
            ports.append({"device": m.group(1), "port": m.group(2), "state": m.group(3).upper()})
    return {"rdma_readable": True, "rdma_ports": ports,
            "rdma_active": sum(1 for p in ports if p["state"] == "ACTIVE")}


# -- the rules -----------------------------------------------------------------------------------
def _enabled(value: Any) -> bool:
    return str(value or "").strip().lower().startswith("enabled")


def _peer_ok(rd: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nvidia_peermem loaded or rdma_peer_type dmabuf (gds-diag checks/rdma.py
    check_peermem_or_dmabuf), as gdscheck's PeerDirect / DmaBuf lines or the node shows it."""
    return bool(_enabled(rd.get("peerdirect")) or _enabled(rd.get("dmabuf"))
                or node.get("peermem_loaded")
                or str(node.get("rdma_peer_type") or "").lower() == "dmabuf")


def _peer_missing(rd: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    seen = []
    if rd.get("peerdirect") is not None or rd.get("dmabuf") is not None:
        seen.append(f"--Mellanox PeerDirect : {rd.get('peerdirect') or 'absent'}, "
                    f"--DmaBuf support : {rd.get('dmabuf') or 'absent'}")
    seen.append(f"nvidia_peermem {'loaded' if node.get('peermem_loaded') else 'not loaded'}, "
                f"rdma_peer_type {node.get('rdma_peer_type') or 'unset'}")
    return ("cuFile's userspace RDMA has no way to reach GPU memory: load nvidia_peermem "
            "(modprobe nvidia_peermem, and /etc/modules-load.d) or set "
            "properties.rdma_peer_type to dmabuf in cufile.json (" + "; ".join(seen) + ")")


def _addresses(e: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    sect = e.get("cufile_section")
    own = (node.get("fs_rdma_dev_addr_list") or {}).get(sect) if sect else None
    return list(node.get("rdma_dev_addr_list") or []) + list(own or [])


def _userspace(e: Mapping[str, Any], rd: Mapping[str, Any] | None,
               node: Mapping[str, Any]) -> list[str]:
    """A userspace-RDMA filesystem's cuFile pieces (gdscheck's lines when there are some)."""
    missing: list[str] = []
    if rd is not None:
        ur = mode_tokens(rd.get("userspace_rdma"))
        if rd.get("userspace_rdma") is not None and "supported" not in ur:
            missing.append(f"gdscheck says Userspace RDMA : {rd.get('userspace_rdma')} (cuFile's "
                           f"userspace RDMA, which {e['name']} uses, needs MLNX_OFED or DOCA "
                           "and libcufile_rdma.so)")
        if not rd["library_loaded"]:
            missing.append(f"the cuFile RDMA library is not loaded (--rdma library : "
                           f"{rd['library'] or 'absent'}): {e['name']} is read through it; set "
                           "properties.rdma_dev_addr_list in cufile.json to the client NICs' "
                           "addresses (cufile_rdma_dev_addr_list)")
        if rd["devices_up"] < 1:
            missing.append(f"no RDMA device up for cuFile (--rdma_device_status : "
                           f"{rd['device_status'] or 'absent'})")
    elif not _addresses(e, node):
        sect = e.get("cufile_section")
        missing.append(f"cufile.json has no properties.rdma_dev_addr_list (nor "
                       f"fs.{sect}.rdma_dev_addr_list): cuFile loads its RDMA library only for "
                       "the client NICs' addresses listed there (set cufile_rdma_dev_addr_list "
                       "in the inventory: gdsfleet.gds.cufile)")
    if not _peer_ok(rd or {}, node):
        missing.append(_peer_missing(rd or {}, node))
    return missing


def _registration(e: Mapping[str, Any], node: Mapping[str, Any], operator: bool) -> list[str]:
    """The client module nvidia-fs registers with: loaded (operator nodes, which have no
    gdscheck), and exporting the registration symbol nvidia-fs looks up (kernel RDMA), by
    symbol and not by package: VAST's NFS client and linux-nvidia kernels carry it too."""
    mod, sym = e.get("client_module"), e.get("registration_symbol")
    mods, syms = node.get("client_modules"), node.get("symbols")
    if not mod:
        return []
    if operator:
        if mods is None:
            return [f"no gdscheck -p output to show {e['gdscheck_lines'][0]} support, and the "
                    "node's kernel modules were not read"]
        if mod not in mods:
            return [f"the {e['name']} client's kernel module {mod} is not loaded (nvidia-fs "
                    f"registers with it; load the client's GDS build: modprobe {mod})"]
    if (sym and e["rdma"] == "kernel" and syms is not None and mods is not None
            and mod in mods and sym not in syms):
        return [f"the loaded {mod} does not export {sym}, so nvidia-fs cannot register with it "
                f"and {e['name']} I/O runs in compat mode ({e['fix']})"]
    return []


def _p2pdma_keys(e: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    keys = node.get("cufile_keys") or {}
    off = [k for k in e.get("p2pdma_keys") or () if keys.get(k) is not True]
    return [f"cufile.json does not set {' and '.join(off)} to true: cuFile takes the P2PDMA "
            f"route on {e['name']} only with both ({e['fix']})"] if off else []


def prerequisites(fstype: str, options: Iterable[str], driver: Mapping[str, str] | None,
                  nvfs_loaded: bool, node: Mapping[str, Any] | None = None) -> list[str]:
    """What is missing for GDS on a mount of ``fstype`` (empty: nothing). ``driver``: gdscheck's
    DRIVER CONFIGURATION (:func:`driver_config`), None when the node has no gdscheck; ``node``:
    what the node shows itself (see docs/checks.md, fs.mount.type): ``operator``,
    ``client_modules``, ``symbols`` (kallsyms names, None when not read), ``rdma_readable``,
    ``rdma_ports``, ``rdma_active``, ``rdma_dev_addr_list``, ``fs_rdma_dev_addr_list``,
    ``peermem_loaded``, ``rdma_peer_type``, ``cufile_keys``."""
    e = entry(fstype)
    if e is None:
        return [f"{str(fstype)[:32]} is not a filesystem GDS reaches"]
    node = node or {}
    opts = [str(o) for o in options]
    missing: list[str] = []
    if e.get("transport_option") == "proto=rdma":
        proto = nfs_transport(opts)
        if not proto.startswith("rdma"):
            missing.append(f"the NFS mount is over {proto.upper()} (proto={proto}), not RDMA: "
                           "GDS reaches NFS only over RDMA, over TCP cuFile runs in compat mode")
    operator = driver is None and bool(node.get("operator"))
    if driver is None and not operator:
        # a host install has gds-tools (gdsfleet.gds.cuda): its gdscheck is the judge
        missing.append(f"no gdscheck -p output to show {e['gdscheck_lines'][0]} support "
                       "(install gds-tools-X-Y: gdsfleet.gds.cuda)")
    elif driver is not None:
        ok, shown = line_direct(e, driver)
        if not ok:
            missing.append(f"gdscheck says {shown}")
            if e["route"] == "p2pdma":
                missing += _p2pdma_keys(e, node)
        if e["rdma"] == "userspace":
            tokens = {t for pair in lines_of(e, driver) for t in mode_tokens(pair[1])}
            if not tokens & USERSPACE_TOKENS:
                missing += _userspace(e, rdma_state(driver), node)
    if driver is not None or operator:
        missing += _registration(e, node, operator)
        if operator and e["rdma"] == "userspace":
            missing += _userspace(e, None, node)
        if operator and e["route"] == "p2pdma":
            missing += _p2pdma_keys(e, node)
    if e["rdma"] != "none" and node.get("rdma_readable") and int(node.get("rdma_active") or 0) < 1:
        seen = ", ".join(f"{p['device']}/{p['port']} {p['state']}"
                         for p in node.get("rdma_ports") or []) or "no RDMA device"
        missing.append(f"no RDMA port ACTIVE (/sys/class/infiniband: {seen[:300]}; bring a "
                       "client NIC's link up: ibstat shows its state)")
    if e["route"] == "nvfs" and not nvfs_loaded:
        missing.append("nvidia-fs is not loaded (gdsfleet.gds.nvidia_fs)")
    return missing
