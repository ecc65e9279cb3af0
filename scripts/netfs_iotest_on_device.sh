#!/usr/bin/env bash
# Issue 43 on a real GPU node: the I/O test's new reads (cuFile's own statistics, gds_stats -p
# <pid> -l 3, and /proc/driver/nvidia-fs/modules, both read while the direct attempt still holds
# cuFile and nvidia-fs open) run with the node's real kvikio and cupy, and the controller's
# evaluation of that document, as a local mount and as if it were WekaFS.
#
#   bash scripts/netfs_iotest_on_device.sh            (from the tree's root)
#
# PYTHON: an interpreter with kvikio (default python3 with the wheels carried in .whl/; the
# lent H200's /opt/torch venv has no kvikio); SIZE: the test's bytes (default 64 MiB). Writes $OUT/iotest.json (the node script's
# document) and $OUT/summary.txt. What it should print on the lent H200 (no nvidia-fs, no
# gds-tools): the OFF attempt refused or served in compat; cufile_stats {"tool": null, ...,
# "err": "gds_stats not found (gds-tools)"}; nvfs_modules null; as WekaFS the evaluation says
# nothing proves the path and names gds_stats.
set -uo pipefail
OUT=${OUT:-/tmp/gdsfleet-netfs-iotest}
# the carried wheels (kvikio, as verify --local's I/O test uses them) when .whl/ is here
if [ -z "${PYTHON:-}" ] && [ -d .whl ]; then . scripts/device_node_env.sh >/dev/null || exit 1; fi
PY=${PYTHON:-python3}
SIZE=${SIZE:-67108864}
DIR=$(mktemp -d /var/tmp/gdsfleet-netfs-XXXXXX)
mkdir -p "$OUT"
python3 -c 'import sys; sys.path.insert(0, "."); from provisioner.remote import load_script; \
sys.stdout.buffer.write(load_script("iotest.py"))' > "$OUT/iotest_bundled.py"
"$PY" - "{\"path\": \"$DIR\", \"size_bytes\": $SIZE, \"gds_threshold\": 4096, \"cufile_log\": true}" \
  < "$OUT/iotest_bundled.py" > "$OUT/iotest.json" 2> "$OUT/iotest.stderr"
echo "iotest exit: $?" > "$OUT/summary.txt"
rmdir "$DIR" 2>/dev/null
python3 - "$OUT/iotest.json" >> "$OUT/summary.txt" <<'PY'
import json, sys
sys.path.insert(0, ".")
from provisioner.verify import iotest
doc = iotest.last_json(open(sys.argv[1]).read())
if doc is None:
    print("no document"); raise SystemExit(1)
off = next((a for a in doc["attempts"] if a.get("mode") == "OFF"), {})
print("OFF attempt: ok", off.get("ok"), "stage", off.get("stage"), "error", str(off.get("error"))[:200])
print("cufile_stats:", json.dumps(off.get("cufile_stats")))
print("nvfs_modules:", json.dumps(off.get("nvfs_modules")))
local = iotest.evaluate(doc, route="nvfs")
print("as local NVMe:", local.path_taken, local.evidence.get("proof"), "|", local.reason[:300])
weka = {"fstype": "wekafs", "name": "WekaFS", "rdma": "userspace", "nvfs_counters": False,
        "write_key": "fs.weka.rdma_write_support", "writes_direct": False}
as_weka = iotest.evaluate(doc, route="nvfs", netfs=weka)
print("as WekaFS:", as_weka.path_taken, as_weka.evidence.get("proof"), "|", as_weka.reason[:300])
PY
cat "$OUT/summary.txt"
