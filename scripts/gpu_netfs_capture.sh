#!/usr/bin/env bash
# Reads, on a REAL GPU node (the lent H100: Ubuntu 24.04), what verify judges for a network GDS
# mount on a node without gdscheck (issue 33): the RDMA ports' states in
# /sys/class/infiniband/*/ports/*/state and the network filesystem clients' kernel modules in
# /sys/module, raw, then through the gather script's own items (netfs_client_modules,
# rdma_ports) and verify's parsers (provisioner/verify/netfs.py). Reads only; prints to stdout and
# to $OUT/netfs-node-state.txt (default /tmp/gdsfleet-capture). Needs python3 and the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-capture}
mkdir -p "$OUT"
{
  echo "== kernel $(uname -r)"
  echo "== /sys/class/infiniband"
  ls -l /sys/class/infiniband 2>&1 | sed -n '1,40p'
  echo "== RDMA port states (grep -H . /sys/class/infiniband/*/ports/*/state)"
  grep -H . /sys/class/infiniband/*/ports/*/state 2>&1 | sed -n '1,64p'
  echo "== link layers"
  grep -H . /sys/class/infiniband/*/ports/*/link_layer 2>&1 | sed -n '1,64p'
  echo "== network filesystem client modules loaded (/sys/module)"
  for m in rpcrdma lnet ko2iblnd mmfslinux wekafsio beegfs nvidia_fs; do
    if [ -d "/sys/module/$m" ]; then echo "$m: loaded"; else echo "$m: not loaded"; fi
  done
  echo "== /proc/driver/nvidia-fs/modules"
  cat /proc/driver/nvidia-fs/modules 2>&1
  echo "== the gather script's items and verify's parsers"
  python3 - <<'PY'
import json, subprocess, sys
from provisioner.remote import load_script
from provisioner.verify import netfs
doc = json.loads(subprocess.run([sys.executable, "-"], input=load_script("gather.py"),
                                capture_output=True, check=True).stdout)
items = doc["items"]
for key in ("netfs_client_modules", "rdma_ports"):
    print(key, json.dumps(items.get(key)))
print("parsed client_modules", netfs.parse_client_modules(
    items["netfs_client_modules"]["out"] if items["netfs_client_modules"]["rc"] == 0 else None))
print("parsed rdma_ports", json.dumps(netfs.parse_rdma_ports(items["rdma_ports"])))
PY
} 2>&1 | tee "$OUT/netfs-node-state.txt"
