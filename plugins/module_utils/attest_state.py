# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""attest, part one: the node's GDS state, the record ``verify`` leaves, and what changed.

``snapshot(node, mount_path)`` reads, with bounded reads of local files only (no command, no
network, no ``stat`` of a mount point, so a hung network filesystem cannot hang it), what
``verify`` proved a node by: the running kernel, nvidia-fs (loaded, version, srcversion), the
storage modules nvidia-fs registers with, ``/etc/cufile.json`` (digest and
``allow_compat_mode``), the host's libcufile, and the GDS mount (device, type and options from
``/proc/self/mountinfo``). ``verify`` writes that snapshot with its verdict into the record
(``write_record``, atomically, 0644); ``provisioner attest`` / ``gdsfleet-attest`` takes a new
snapshot and ``compare`` names every difference as a regression with its fix.

Upstream facts (tests/fixtures/attest/README.md): nvidia-fs registers with a storage module only
while some process holds ``/dev/nvidia-fs*`` open (NVIDIA/gds-nvidia-fs v2.28.4
``src/nvfs-core.c``: ``nvfs_open`` probes, the last ``nvfs_close`` unregisters), so
``/proc/driver/nvidia-fs/modules`` (``src/nvfs-proc.c``: ``name: version`` per registered
module) says little on an idle node; the identity of each storage module nvidia-fs knows
(``src/nvfs-dma.h`` ``NVFS_PROC_MOD_*_KEY``) is compared instead (loaded, ``version``,
``srcversion`` under ``/sys/module``).

The record is hostile input: read without following a symlink, without blocking on a FIFO, at
most ``RECORD_MAX`` bytes, owned by root or by the caller and writable by nobody else, and
every field type-checked (``load_record``). Pure standard library, Python 3.8+; every path is
read under ``Node.root`` so tests can point it at a simulated node tree.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
import time

# typing is imported for the type checker only: a node pays for no import it does not need
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

RECORD_PATH = "/var/lib/gdsfleet/verified.json"
RECORD_SCHEMA = "gdsfleet.attest-record/1"
RECORD_MAX = 64 * 1024
SMALL_MAX = 4096  # a /sys or /proc value
LIST_MAX = 64 * 1024  # /proc/driver/nvidia-fs/modules, ld.so.conf files
CUFILE_MAX = 256 * 1024  # as the gather reads cufile.json
MOUNTINFO_MAX = 4 * 1024 * 1024
CUFILE_PATH = "/etc/cufile.json"
DEFAULT_MOUNT = "/mnt/gds"
# The storage modules nvidia-fs registers with (NVIDIA/gds-nvidia-fs v2.28.4 src/nvfs-dma.h,
# NVFS_PROC_MOD_*_KEY): local NVMe, NVMe-oF RDMA, ScaleFlux, NVMesh, Lustre (LNet), BeeGFS,
# Storage Scale, NFS over RDMA, WekaFS, ScaTeFS.
STORAGE_MODULES = ("nvme", "nvme_rdma", "sfxvdriver", "nvmeib_common", "lnet", "beegfs",
                   "mmfslinux", "rpcrdma", "wekafsio", "scatefs")
# Where a host keeps libcufile.so.0 when ld.so.conf does not name the folder (the CUDA
# toolkit's; the same list the I/O test uses, provisioner/remote/_libcufile.py).
LIBCUFILE_DIRS = ("/usr/local/cuda/targets/x86_64-linux/lib",
                  "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/local/cuda/lib64",
                  "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64")
LIBCUFILE = "libcufile.so.0"
_VERSION_IN_NAME = re.compile(r"libcufile\.so\.(\d+(?:\.\d+)+)$")
# mount options whose values may be secrets (cifs password=, credentials=...): kept masked
_SECRET_OPT = re.compile(r"pass|secret|token|cred|key", re.I)


class Unjudgeable(Exception):
    """A file attest must read and may not (EACCES, an I/O error): the state cannot be judged
    (exit 70), which is not the node's regression."""


class Node:
    """The node's files, read under ``root`` (``/`` on a real node)."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root or "/")

    def path(self, path: str) -> str:
        return path if self.root == "/" else self.root + path

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.path(path))

    def read(self, path: str, limit: int, *, follow: bool = True) -> bytes | None:
        """At most ``limit + 1`` bytes of a regular file (None when missing); never blocks on a
        FIFO or device. Raises :class:`Unjudgeable` when it exists and cannot be read."""
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        if not follow:
            flags |= getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path(path), flags)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RecordError("it is a symbolic link") from None
            raise Unjudgeable(f"cannot read {path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RecordError("it is not a regular file")
            chunks = []
            left = limit + 1
            while left > 0:
                chunk = os.read(fd, min(left, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise Unjudgeable(f"cannot read {path}: {exc.strerror}") from None
        finally:
            os.close(fd)

    def text(self, path: str, limit: int = SMALL_MAX) -> str | None:
        """A small file's text, stripped (None when missing, unreadable as a file or too big)."""
        try:
            data = self.read(path, limit)
        except RecordError:
            return None
        if data is None or len(data) > limit:
            return None
        return data.decode("utf-8", "replace").strip()

    def stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(self.path(path))
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        """``path`` with its symbolic links resolved inside ``root`` (an absolute link target is
        read under ``root`` too); at most 40 links."""
        parts = [p for p in path.split("/") if p]
        done: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join([*done, part])
            try:
                target = os.readlink(self.path(candidate))
            except OSError:
                done.append(part)
                continue
            hops += 1
            if hops > 40:
                return candidate
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
        return "/" + "/".join(done)


class RecordError(ValueError):
    """The record (or a file read like it) is not one attest can trust: the node counts as
    never verified, with this reason."""


# --- the node's state --------------------------------------------------------------------------

def _module(node: Node, name: str) -> dict[str, Any]:
    base = "/sys/module/" + name
    if not node.isdir(base):
        return {"loaded": False, "version": None, "srcversion": None}
    return {"loaded": True, "version": node.text(base + "/version"),
            "srcversion": node.text(base + "/srcversion")}


def nvfs_state(node: Node) -> dict[str, Any]:
    mod = _module(node, "nvidia_fs")
    proc = node.text("/proc/driver/nvidia-fs/version") or ""
    m = re.search(r"version:\s*([0-9][0-9.]*)", proc)
    listed = node.text("/proc/driver/nvidia-fs/modules", LIST_MAX)
    mod["proc_version"] = m.group(1) if m else None
    mod["rw_stats_enabled"] = node.text("/sys/module/nvidia_fs/parameters/rw_stats_enabled")
    mod["registered"] = [ln.strip()[:128] for ln in (listed or "").splitlines()
                         if ln.strip()][:32]
    return mod


def storage_modules(node: Node) -> dict[str, Any]:
    return {name: _module(node, name) for name in STORAGE_MODULES}


def cufile_state(node: Node, strip_comments: Callable[[str], str] | None = None,
                 path: str = CUFILE_PATH) -> dict[str, Any]:
    """``/etc/cufile.json``: present, sha256 of its bytes, size, ``allow_compat_mode`` (its
    effective value: NVIDIA's default is true when the key is absent; None when the file does
    not parse), ``cufile_stats`` and ``logging_dir`` (what a job proof reads)."""
    out: dict[str, Any] = {"path": path, "present": False, "sha256": None, "size": None,
                           "allow_compat_mode": None, "cufile_stats": None, "logging_dir": None,
                           "error": None}
    try:
        data = node.read(path, CUFILE_MAX)
    except RecordError as exc:
        out["error"] = str(exc)
        return out
    if data is None:
        return out
    out["present"] = True
    if len(data) > CUFILE_MAX:
        out["error"] = f"larger than {CUFILE_MAX} bytes"
        return out
    out["sha256"] = hashlib.sha256(data).hexdigest()
    out["size"] = len(data)
    text = data.decode("utf-8", "replace")
    try:
        doc = json.loads(strip_comments(text) if strip_comments else text)
    except (ValueError, RecursionError) as exc:
        out["error"] = f"not JSON: {str(exc)[:120]}"
        return out
    if not isinstance(doc, dict):
        out["error"] = "not a JSON object"
        return out
    props = doc.get("properties") if isinstance(doc.get("properties"), dict) else {}
    compat = props.get("allow_compat_mode", True)
    out["allow_compat_mode"] = compat if isinstance(compat, bool) else None
    prof = doc.get("profile") if isinstance(doc.get("profile"), dict) else {}
    stats = prof.get("cufile_stats")
    out["cufile_stats"] = stats if isinstance(stats, int) and not isinstance(stats, bool) else None
    logging = doc.get("logging") if isinstance(doc.get("logging"), dict) else {}
    ldir = logging.get("dir")
    out["logging_dir"] = ldir[:4096] if isinstance(ldir, str) and ldir.startswith("/") else None
    return out


def _ld_dirs(node: Node) -> list[str]:
    """The folders ld.so.conf names (its ``include`` globs followed one level), in order."""
    import glob

    dirs: list[str] = []
    text = node.text("/etc/ld.so.conf", LIST_MAX) or ""
    for line in text.splitlines()[:256]:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            pattern = line[len("include "):].strip()
            if not pattern.startswith("/"):
                pattern = "/etc/" + pattern
            for conf in sorted(glob.glob(node.path(pattern)))[:64]:
                rel = conf[len(node.root):] if node.root != "/" else conf
                for inner in (node.text(rel, LIST_MAX) or "").splitlines()[:256]:
                    inner = inner.split("#", 1)[0].strip()
                    if inner.startswith("/"):
                        dirs.append(inner)
        elif line.startswith("/"):
            dirs.append(line)
    return dirs


def libcufile_state(node: Node) -> dict[str, Any]:
    """The host's libcufile.so.0 the way the dynamic loader finds it without LD_LIBRARY_PATH:
    the folders of ld.so.conf first, then the CUDA toolkit's; its real file, version and size.
    No ``ldconfig`` run: a file read answers in microseconds and cannot hang."""
    import glob

    def key(path: str) -> tuple[int, int]:
        m = re.search(r"/cuda-(\d+)\.(\d+)/", path)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    versioned = sorted(glob.glob(node.path("/usr/local/cuda-*/targets/*/lib/" + LIBCUFILE)),
                       key=key, reverse=True)[:16]
    candidates = [d + "/" + LIBCUFILE for d in [*_ld_dirs(node), *LIBCUFILE_DIRS]]
    candidates += [p[len(node.root):] if node.root != "/" else p for p in versioned]
    for path in candidates:
        if "/site-packages/" in path or "/dist-packages/" in path:
            continue
        real = node.realpath(path)
        st = node.stat(real)
        if st is None or not stat.S_ISREG(st.st_mode):
            continue
        m = _VERSION_IN_NAME.search(os.path.basename(real))
        return {"path": path, "real": real, "version": m.group(1) if m else None,
                "size": st.st_size}
    return {"path": None, "real": None, "version": None, "size": None}


def _unoctal(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mask(options: list[str]) -> list[str]:
    out = []
    for opt in options:
        name, eq, _value = opt.partition("=")
        out.append(f"{name}=***" if eq and _SECRET_OPT.search(name) else opt)
    return sorted(set(out))


def mount_entries(text: str) -> list[dict[str, Any]]:
    """``/proc/self/mountinfo`` lines -> mounts (pure): target, device number, type, source and
    the per-mount and superblock options together (secret-looking values masked). verify's own
    reading (provisioner/verify/parsers/storage.py ``parse_mountinfo``) keeps no options and
    does not run on the node; a test holds the two to the same target, device, type and
    source (tests/unit/test_attest_record.py)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        a, b = left.split(), right.split()
        if len(a) < 6 or len(b) < 2:
            continue
        opts = a[5].split(",") + (b[2].split(",") if len(b) > 2 else [])
        mounts.append({"target": _unoctal(a[4])[:4096], "devno": a[2][:32],
                       "fstype": b[0][:64], "source": _unoctal(b[1])[:4096],
                       "options": _mask([o[:256] for o in opts if o][:128])})
    return mounts


def mount_state(node: Node, mount_path: str | None) -> dict[str, Any] | None:
    """The mount that holds ``mount_path`` (the longest mount point that is a prefix of it; the
    last such mount when several stack); None when no such path was verified."""
    if not mount_path:
        return None
    data = node.read("/proc/self/mountinfo", MOUNTINFO_MAX)
    found = None
    path = "/" + "/".join(p for p in mount_path.split("/") if p)
    for m in mount_entries((data or b"")[:MOUNTINFO_MAX].decode("utf-8", "replace")):
        t = m["target"]
        covers = path == t or path.startswith(t.rstrip("/") + "/") or t == "/"
        if covers and (found is None or len(t) >= len(found["target"])):
            found = m
    if found is None:
        return {"path": path, "target": None}
    return {"path": path, **found}


def snapshot(node: Node, mount_path: str | None = DEFAULT_MOUNT,
             strip_comments: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Everything attest compares, read now (no command runs, no network)."""
    return {
        "kernel": node.text("/proc/sys/kernel/osrelease"),
        "boot_id": node.text("/proc/sys/kernel/random/boot_id"),
        "nvfs": nvfs_state(node),
        "storage_modules": storage_modules(node),
        "cufile": cufile_state(node, strip_comments),
        "libcufile": libcufile_state(node),
        "mount": mount_state(node, mount_path),
    }


# --- the record --------------------------------------------------------------------------------

_STR = (str,)
_OPT_STR = (str, type(None))
# field -> accepted types (top level); "state" is checked by _check_state
_RECORD_FIELDS = {"schema": _STR, "node": _STR, "verified_at": (int, float),
                  "compliant": (bool,), "route": _OPT_STR, "path_taken": _OPT_STR,
                  "failing": (list,), "simulated": (bool,), "operator_managed": (bool,),
                  "mount_path": _OPT_STR, "state": (dict,)}
_STATE_FIELDS = {"kernel": _OPT_STR, "boot_id": _OPT_STR, "nvfs": (dict,),
                 "storage_modules": (dict,), "cufile": (dict,), "libcufile": (dict,),
                 "mount": (dict, type(None))}
_MODULE_FIELDS = {"loaded": (bool,), "version": _OPT_STR, "srcversion": _OPT_STR}
_CUFILE_FIELDS = {"present": (bool,), "sha256": _OPT_STR, "allow_compat_mode": (bool, type(None))}
_LIB_FIELDS = {"path": _OPT_STR, "real": _OPT_STR, "version": _OPT_STR,
               "size": (int, type(None))}
_MOUNT_FIELDS = {"target": _OPT_STR, "devno": _OPT_STR, "fstype": _OPT_STR, "source": _OPT_STR,
                 "options": (list,)}


def _check_fields(doc: dict[str, Any], fields: dict[str, tuple[type, ...]], where: str,
                  optional: bool = False) -> None:
    for name, types in fields.items():
        if name not in doc:
            if optional:
                continue
            raise RecordError(f"{where} lacks {name!r}")
        value = doc[name]
        # bool is an int: a count given as true is refused
        if isinstance(value, bool) and bool not in types:
            raise RecordError(f"{where}.{name} has the wrong type (bool)")
        if not isinstance(value, types):
            raise RecordError(f"{where}.{name} has the wrong type ({type(value).__name__})")
        if isinstance(value, str) and len(value) > 4096:
            raise RecordError(f"{where}.{name} is longer than 4096 characters")


def validate_record(doc: Any) -> dict[str, Any]:
    """The record, type-checked (raises :class:`RecordError` naming the first bad field)."""
    if not isinstance(doc, dict):
        raise RecordError(f"the record is a JSON {type(doc).__name__}, not an object")
    if doc.get("schema") != RECORD_SCHEMA:
        raise RecordError(f"unknown record schema {str(doc.get('schema'))[:64]!r} "
                          f"(this attest reads {RECORD_SCHEMA})")
    _missing(doc)
    _check_fields(doc, _RECORD_FIELDS, "record", optional=True)
    if not math.isfinite(float(doc["verified_at"])):
        raise RecordError("record.verified_at is not a finite number")
    if not all(isinstance(f, str) and len(f) <= 128 for f in doc.get("failing") or []) or len(
            doc.get("failing") or []) > 256:
        raise RecordError("record.failing is not a list of check ids")
    labels = doc.get("labels", {})
    if not isinstance(labels, dict) or len(labels) > 32 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 128 and len(v) <= 63
            for k, v in labels.items()):
        raise RecordError("record.labels is not a map of at most 32 short strings")
    state = doc["state"]
    _check_fields(state, _STATE_FIELDS, "record.state")
    _check_fields(state["nvfs"], _MODULE_FIELDS, "record.state.nvfs")
    for name, mod in state["storage_modules"].items():
        if not isinstance(mod, dict) or len(str(name)) > 64:
            raise RecordError("record.state.storage_modules holds a non-object")
        _check_fields(mod, _MODULE_FIELDS, f"record.state.storage_modules.{str(name)[:64]}")
    _check_fields(state["cufile"], _CUFILE_FIELDS, "record.state.cufile")
    _check_fields(state["libcufile"], _LIB_FIELDS, "record.state.libcufile")
    if state["mount"] is not None and state["mount"].get("target") is not None:
        _check_fields(state["mount"], _MOUNT_FIELDS, "record.state.mount")
        if not all(isinstance(o, str) for o in state["mount"]["options"]):
            raise RecordError("record.state.mount.options is not a list of strings")
    return doc


def _missing(doc: dict[str, Any]) -> None:
    for k in ("node", "verified_at", "compliant", "state"):
        if k not in doc:
            raise RecordError(f"record lacks {k!r}")


def load_record(node: Node, path: str = RECORD_PATH) -> dict[str, Any] | None:
    """The record at ``path``: None when there is none; raises :class:`RecordError` when it
    cannot be trusted (a symlink, not a regular file, larger than ``RECORD_MAX``, owned by
    someone else than root or the caller, writable by group or others, not JSON, wrong types)
    and :class:`Unjudgeable` when it cannot be read (EACCES)."""
    data = node.read(path, RECORD_MAX, follow=False)
    if data is None:
        return None
    if len(data) > RECORD_MAX:
        raise RecordError(f"it is larger than {RECORD_MAX} bytes")
    st = node.stat(path)
    if st is not None:
        if st.st_uid not in (0, os.geteuid()):
            raise RecordError(f"it is owned by uid {st.st_uid}, not root")
        if st.st_mode & 0o022:
            raise RecordError("it is writable by group or others "
                              f"(mode {stat.S_IMODE(st.st_mode):04o})")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"it is not JSON ({str(exc)[:80]})") from None
    return validate_record(doc)


def new_record(node_name: str, verdict: dict[str, Any], state: dict[str, Any],
               now: float | None = None) -> dict[str, Any]:
    """The record ``verify`` writes: its verdict (``compliant``, ``route``, ``path_taken``,
    ``failing``, ``simulated``, ``operator_managed``, ``mount_path``) and the state."""
    failing = [str(f)[:128] for f in verdict.get("failing") or []][:256]
    labels = verdict.get("labels") if isinstance(verdict.get("labels"), dict) else {}
    return {"schema": RECORD_SCHEMA, "node": str(node_name)[:255],
            "labels": {str(k)[:128]: str(v)[:63] for k, v in list(labels.items())[:32]},
            "verified_at": float(time.time() if now is None else now),
            "compliant": verdict.get("compliant") is True,
            "route": _opt(verdict.get("route"), 32),
            "path_taken": _opt(verdict.get("path_taken"), 32),
            "failing": failing, "simulated": verdict.get("simulated") is True,
            "operator_managed": verdict.get("operator_managed") is True,
            "mount_path": _opt(verdict.get("mount_path"), 4096), "state": state}


def _opt(value: Any, limit: int) -> str | None:
    return None if value is None else str(value)[:limit]


def write_record(node: Node, record: dict[str, Any], path: str = RECORD_PATH) -> str:
    """Write the record atomically (a temporary file in the same folder, fsync, rename), mode
    0644; the folder is made 0755 when missing. Returns the path written."""
    validate_record(record)
    data = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode()
    if len(data) > RECORD_MAX:
        raise RecordError(f"the record would be {len(data)} bytes, over {RECORD_MAX}")
    target = node.path(path)
    folder = os.path.dirname(target)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(target)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, target)
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path
