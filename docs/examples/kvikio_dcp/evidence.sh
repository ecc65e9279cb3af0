#!/usr/bin/env bash
# The kvikio DCP example end to end on a real GPU node, from a checkout's root:
#   1. `provisioner verify --local` (64 MiB I/O test) into a fresh ledger;
#   2. `provisioner export env` and `export deepspeed` for this node from that ledger;
#   3. run_example.py with exactly the exported environment (1 GiB of tensors by default), then
#      the same under torchrun with two ranks on the one GPU (gloo), 256 MiB;
#   4. run_example.py with the direct path forced (KVIKIO_COMPAT_MODE=OFF, cuFile compat off):
#      a node without GDS must refuse, loudly;
#   5. run_example.py with kvikio's default (AUTO), which falls back to POSIX silently.
# Needs torch and cupy installed, and the wheels of docs/evidence/README.md in $WHL (default
# .whl/: kvikio-cu13, libkvikio-cu13, rapids-logger, SQLAlchemy, greenlet). Writes under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/gdsfleet-kvikio-dcp}
FINAL=$OUT
OUT=/var/tmp/gdsfleet-kvikio-dcp  # collected here, packed into $FINAL/kvikio-dcp-evidence.tar.gz
rm -rf "$OUT"
WHL=${WHL:-.whl}
SIZE_MIB=${KVIKIO_DCP_SIZE_MIB:-1024}
IODIR=${GDSFLEET_EVIDENCE_DIR:-/var/tmp/gdsfleet-io}
EXAMPLE=docs/examples/kvikio_dcp/run_example.py
mkdir -p "$OUT" "$IODIR"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/gdsfleet-site "$WHL"/*.whl || exit 1
export PYTHONPATH=/tmp/gdsfleet-site:$PWD

{
  echo "## machine"; date -u; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "## python, torch, cupy, kvikio"; command -v python3
  python3 -c 'import sys, torch, cupy, kvikio; print(sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("cupy", cupy.__version__); print("kvikio", kvikio.__version__)'
  echo "## test directory"; findmnt -T "$IODIR" -o TARGET,SOURCE,FSTYPE,OPTIONS
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

step() {  # name, command...: stdout to $OUT/name, stderr to $OUT/name.stderr, exit code appended
  local name=$1; shift
  "$@" > "$OUT/$name" 2> "$OUT/$name.stderr"
  echo "[exit $?]" >> "$OUT/$name.stderr"
  echo "== $name"; cat "$OUT/$name" "$OUT/$name.stderr"
}

step verify-local.txt python3 -m provisioner.cli verify --local --io-size 64M --io-path "$IODIR" \
  --ledger "$OUT/ledger.sqlite" --json "$OUT/verify-local.json"
NODE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["nodes"][0]["name"])' \
  "$OUT/verify-local.json")
step export-env.sh python3 -m provisioner.cli export env --node "$NODE" --ledger "$OUT/ledger.sqlite"
step export-env.json python3 -m provisioner.cli export env --node "$NODE" \
  --ledger "$OUT/ledger.sqlite" --format json
step export-deepspeed.json python3 -m provisioner.cli export deepspeed --node "$NODE" \
  --ledger "$OUT/ledger.sqlite"
step run-exported-env.json bash -c ". '$OUT/export-env.sh' && exec python3 $EXAMPLE --size-mib $SIZE_MIB"
step run-two-ranks.json bash -c ". '$OUT/export-env.sh' && GLOO_SOCKET_IFNAME=lo exec python3 \
  -m torch.distributed.run --standalone --nproc-per-node 2 $EXAMPLE --size-mib 256"
step run-forced-direct.json env KVIKIO_COMPAT_MODE=OFF CUFILE_ALLOW_COMPAT_MODE=false \
  GDSFLEET_GDS_MOUNT="$IODIR" python3 $EXAMPLE --size-mib 64
step run-kvikio-default.json env -u KVIKIO_COMPAT_MODE GDSFLEET_GDS_MOUNT="$IODIR" \
  python3 $EXAMPLE --size-mib 64
rm -f "$OUT/ledger.sqlite" "$OUT/ledger.sqlite-wal" "$OUT/ledger.sqlite-shm"
mkdir -p "$FINAL" && tar -czf "$FINAL/kvikio-dcp-evidence.tar.gz" -C "$OUT" . && rm -rf "$OUT"
