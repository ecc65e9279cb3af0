"""Which libcufile a node-side process loads: the host's, the nvidia-cufile wheel's, and what
is mapped (node-side code, bundled into provisioner/remote/iotest.py at send time,
provisioner/remote/bundle.py).

libkvikio (26.10) loads libcufile through cuda-pathfinder, which takes a library already in the
process first, then the virtual environment's NVIDIA wheels (``nvidia-cufile``), then the system
(NVIDIA/cuda-python cuda_pathfinder README; fixture tests/fixtures/iotest/libcufile/README.md).
DeepSpeed and gdsio use the host's libcufile, so the I/O test preloads the host's before kvikio.

- ``host_libcufile()``: the host's libcufile.so.0 (ldconfig's cache, then HOST_LIBCUFILE_DIRS,
  then /usr/local/cuda-X.Y, newest first; never a copy inside a Python environment) with its
  version.
- ``wheel_libcufile()``: the nvidia-cufile wheel of this interpreter's environment.
- ``mapped_libcufile(maps)``: the libcufile files mapped into this process.
- ``preload_libcufile(path)``: load ``path`` with RTLD_GLOBAL before kvikio does.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

MAPS_MAX = 4 * 1024 * 1024


# Where a host (not a Python wheel) keeps libcufile when ldconfig's cache does not list it: the
# CUDA toolkit's folders (the H100's libcufile 1.15.1: /usr/local/cuda/targets/x86_64-linux/lib).
HOST_LIBCUFILE_DIRS = (
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/local/cuda/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
)
# Then each CUDA release's own folder (the libcufile-X-Y package's), newest first
VERSIONED_CUDA_LIBS = "/usr/local/cuda-*/targets/*/lib"
LIBCUFILE_SONAME = "libcufile.so.0"
# The nvidia-cufile wheels: CUDA 13 dropped the -cuNN suffix.
CUFILE_WHEELS = ("nvidia-cufile", "nvidia-cufile-cu13", "nvidia-cufile-cu12")
_VERSION_IN_NAME = re.compile(r"libcufile\.so\.(\d+(?:\.\d+)+)$")


def _in_python_tree(path: str) -> bool:
    """A path inside a Python environment (a wheel's copy), not the host's."""
    real = os.path.realpath(path)
    venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    return ("/site-packages/" in real or "/dist-packages/" in real
            or (venv and real.startswith(os.path.realpath(sys.prefix) + os.sep)))


def library_version(path: str) -> str | None:
    """``1.15.1`` from the file name libcufile.so.0 resolves to (libcufile.so.1.15.1)."""
    m = _VERSION_IN_NAME.search(os.path.basename(os.path.realpath(path)))
    return m.group(1) if m else None


def _versioned_cuda_libcufile() -> list:
    """libcufile.so.0 under /usr/local/cuda-X.Y/targets/*/lib, newest CUDA first: a node with
    the libcufile-X-Y package but no cuda-toolkit (so no /usr/local/cuda alternative) keeps
    its cuFile only there."""
    import glob

    def key(path: str) -> tuple:
        m = re.search(r"/cuda-(\d+)\.(\d+)/", path)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    found = glob.glob(os.path.join(VERSIONED_CUDA_LIBS, LIBCUFILE_SONAME))
    return sorted(found, key=key, reverse=True)[:16]


def host_libcufile() -> dict:
    """The host's libcufile.so.0: ldconfig's cache first, then HOST_LIBCUFILE_DIRS; never a copy
    inside a Python environment. ``path`` is None when the host has none."""
    candidates: list = []
    try:
        proc = subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=15, check=False,
                              env=dict(os.environ, PATH="/usr/sbin:/sbin:/usr/bin:/bin"))
        for line in proc.stdout.decode("utf-8", "replace").splitlines()[:5000]:
            name, _, target = line.strip().partition(" => ")
            if name.split(" ", 1)[0] == LIBCUFILE_SONAME and target.startswith("/"):
                candidates.append(("ldconfig", target.strip()))
    except (OSError, subprocess.SubprocessError):
        pass
    candidates += [("cuda_dir", os.path.join(d, LIBCUFILE_SONAME)) for d in HOST_LIBCUFILE_DIRS]
    candidates += [("cuda_dir", p) for p in _versioned_cuda_libcufile()]
    for source, path in candidates:
        if os.path.isfile(path) and not _in_python_tree(path):
            return {"path": path, "real": os.path.realpath(path), "source": source,
                    "version": library_version(path)}
    return {"path": None, "real": None, "source": None, "version": None}


def wheel_libcufile() -> dict:
    """The nvidia-cufile wheel in this interpreter's environment (what cuda-pathfinder would
    load first), with its version; ``distribution`` is None when there is none."""
    try:
        from importlib import metadata as md
    except ImportError:  # Python < 3.8
        return {"distribution": None, "version": None, "path": None}
    for name in CUFILE_WHEELS:
        try:
            dist = md.distribution(name)
        except Exception:  # noqa: BLE001, S112 - not installed, or unreadable metadata
            continue
        path = None
        for f in dist.files or []:
            if os.path.basename(str(f)).startswith(LIBCUFILE_SONAME):
                path = str(dist.locate_file(f))
                break
        return {"distribution": name, "version": dist.version, "path": path}
    return {"distribution": None, "version": None, "path": None}


def mapped_libcufile(maps: str = "/proc/self/maps") -> list:
    """The libcufile files mapped into this process (at most 8)."""
    found: list = []
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAPS_MAX)
    except OSError:
        text = ""
    for line in text.splitlines():
        path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
        base = os.path.basename(path)
        if base.startswith("libcufile.so") and path not in found:
            found.append(path)
            if len(found) >= 8:
                break
    return found


def preload_libcufile(path: str | None) -> dict:
    """Load the host's libcufile before kvikio does (cuda-pathfinder then takes the one already
    in the process, and libkvikio's dlopen of the soname finds it loaded)."""
    if not path:
        return {"path": None, "error": "the host has no libcufile.so.0"}
    try:
        import ctypes

        ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    except OSError as exc:
        return {"path": path, "error": str(exc)[:300]}
    return {"path": path, "error": None}
