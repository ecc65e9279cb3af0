"""Node-side gdsio runner for ``verify --gdsio`` (sent on stdin to the node's python3 (3.8+),
options as one JSON argument; prints one JSON document; bundled with the shared modules it
declares at send time, provisioner/remote/bundle.py).

Finds NVIDIA's gdsio (gds-tools: /usr/local/cuda/gds/tools/gdsio, else the newest
/usr/local/cuda-X.Y/gds/tools/gdsio), checks the free space, lays the test file out once, then
runs gdsio twice on it with the same size, I/O size and workers: ``-x 0`` (GPU Direct) and
``-x 1`` (CPU only, the baseline), ``-I 1`` (write) or ``-I 0`` (read). The file is removed
afterwards whatever happened. The controller (provisioner/verify/gdsio.py) parses the output.
"""

import glob
import json
import os
import re
import subprocess
import sys
import time
import uuid

# gdsfleet:bundle-begin
from provisioner.remote.bundle import shared as _shared  # controller side; bundle() inlines

# gdsfleet:bundle-end
# Free space: provisioner/remote/_nodefs.py (shared with iotest.py, bundled in at send time).
free_bytes = _shared("_nodefs.py").free_bytes

FIXED = "/usr/local/cuda/gds/tools/gdsio"
VERSIONED = "/usr/local/cuda-*/gds/tools/gdsio"
RUNS = (("gds", 0), ("cpu", 1))
CHUNK = 1 << 20


def find_gdsio():  # type: ignore[no-untyped-def]
    if os.access(FIXED, os.X_OK):
        return FIXED

    def version(path):  # type: ignore[no-untyped-def]
        m = re.search(r"cuda-(\d+)\.(\d+)/", path)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    found = [p for p in glob.glob(VERSIONED) if os.access(p, os.X_OK)]
    return max(found, key=version) if found else None


def size_arg(n: int) -> str:
    """gdsio reads sizes with a K/M/G suffix."""
    if n % (1 << 30) == 0:
        return f"{n >> 30}G"
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    return f"{n >> 10}K"


def lay_out(path: str, size: int) -> None:
    """Write the whole file once (a read run needs the data; a write run then rewrites blocks
    that exist, the same for both runs)."""
    block = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done = 0
        while done < size:
            n = min(CHUNK, size - done)
            os.write(fd, block[:n])
            done += n
        os.fsync(fd)
    finally:
        os.close(fd)


def run_one(gdsio: str, path: str, opts: dict, xfer: int) -> dict:
    argv = [gdsio, "-f", path, "-d", str(opts["gpu_index"]), "-w", str(opts["workers"]),
            "-s", size_arg(opts["size_bytes"]), "-i", size_arg(opts["io_size_bytes"]),
            "-x", str(xfer), "-I", "0" if opts["io_type"] == "read" else "1"]
    out = {"argv": argv, "xfer_type": xfer, "rc": None, "stdout": "", "stderr": "",
           "seconds": None, "error": None}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=float(opts["timeout_s"]),
                              check=False)
        out["rc"] = proc.returncode
        out["stdout"] = proc.stdout.decode("utf-8", "replace")[-8000:]
        out["stderr"] = proc.stderr.decode("utf-8", "replace")[-4000:]
    except subprocess.TimeoutExpired:
        out["error"] = f"gdsio ran past {opts['timeout_s']}s and was stopped"
    except OSError as exc:
        out["error"] = f"gdsio could not start: {exc}"
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def main() -> int:
    opts = json.loads(sys.argv[1])
    directory = opts["dir"]
    size = int(opts["size_bytes"])
    doc = {"gdsfleet_gdsio": 1, "status": "ran", "reason": None, "gdsio": None,
           "dir": directory, "file": None, "file_removed": None, "runs": [], "free_bytes": None}
    gdsio = find_gdsio()
    if gdsio is None:
        doc["status"] = "skipped"
        doc["reason"] = (f"gdsio not found ({FIXED}, {VERSIONED}): it comes with NVIDIA's "
                         "gds-tools package (gds-tools-X-Y, pulled in by nvidia-gds)")
        return emit(doc)
    doc["gdsio"] = gdsio
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        doc["status"] = "skipped"
        doc["reason"] = f"directory {directory} does not exist or is not writable"
        return emit(doc)
    free = free_bytes(directory)
    doc["free_bytes"] = free
    if free is not None and free < size:
        doc["status"] = "skipped"
        doc["reason"] = (f"needs {size >> 20} MiB, {free >> 20} MiB free at {directory}: free "
                         "space there, or choose a smaller --gdsio-size")
        return emit(doc)
    path = os.path.join(directory, f".gdsfleet-gdsio-{uuid.uuid4().hex[:12]}.bin")
    doc["file"] = path
    try:
        lay_out(path, size)
        for transfer, xfer in RUNS:
            run = run_one(gdsio, path, opts, xfer)
            run["transfer"] = transfer
            doc["runs"].append(run)
    except OSError as exc:
        doc["status"] = "failed"
        doc["reason"] = f"could not lay out the test file {path}: {exc}"
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            doc["remove_error"] = str(exc)
        doc["file_removed"] = not os.path.exists(path)
    return emit(doc)


def emit(doc: dict) -> int:
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
