#!/usr/bin/env bash
# Evidence run on a real GPU machine (the lent H100: CUDA 13.0, libcufile 1.15.1, cupy, no
# nvidia-fs, no NVMe, no gds-tools, no network). Runs `provisioner verify --local` for real
# with the real kvikio, then measures the same disk with a plain O_DIRECT writer (dd, and fio
# when present) so the report's figures can be compared.
#
# Needs the wheels kvikio-cu13, libkvikio-cu13, rapids-logger, SQLAlchemy and greenlet
# (cp312) in .whl/ (git-ignored; see docs/evidence/README.md for the download command).
# Writes everything under $OUT (default /tmp/gdsfleet-evidence).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-evidence}
SIZE=${GDSFLEET_EVIDENCE_SIZE:-1G}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
IODIR=${GDSFLEET_EVIDENCE_DIR:-/var/tmp/gdsfleet-io}
mkdir -p "$IODIR"

{
  echo "## machine"; date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  cat /proc/driver/nvidia/version 2>&1 | head -n 2
  echo "## test directory"; findmnt -T "$IODIR" -o TARGET,SOURCE,FSTYPE,OPTIONS; df -h "$IODIR"
  echo "## kvikio as installed"
  python3 - <<'PY'
import kvikio, kvikio.defaults, kvikio.cufile_driver as d
print("kvikio", kvikio.__version__)
print("libcufile", d.libcufile_version())
print("is_gds_available", d.properties.is_gds_available)
print("compat_mode_preferred", kvikio.defaults.is_compat_mode_preferred())
PY
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

echo "## provisioner verify --local (io size $SIZE in $IODIR)"
python3 -m provisioner.cli verify --local --io-size "$SIZE" --io-path "$IODIR" --details \
  --json "$OUT/verify-local.json" --ledger "$OUT/ledger.sqlite" > "$OUT/verify-local.txt" 2>&1
echo "verify exit code: $?" >> "$OUT/verify-local.txt"
cat "$OUT/verify-local.txt"

echo "## baseline: dd with O_DIRECT on the same directory"
bytes=$(python3 -c "import sys;s=sys.argv[1];m={'K':1<<10,'M':1<<20,'G':1<<30};print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$SIZE")
count=$((bytes / 1048576))
head -c "$bytes" /dev/urandom > /dev/shm/gdsfleet-src
{
  echo "dd write (oflag=direct, bs=1M, count=$count, random data from /dev/shm):"
  dd if=/dev/shm/gdsfleet-src of="$IODIR/dd.bin" bs=1M count="$count" oflag=direct conv=fsync 2>&1 | tail -n 1
  echo "dd read (iflag=direct):"
  dd if="$IODIR/dd.bin" of=/dev/null bs=1M iflag=direct 2>&1 | tail -n 1
  if command -v fio >/dev/null; then
    fio --name=w --filename="$IODIR/fio.bin" --rw=write --bs=1M --size="$SIZE" --direct=1 --ioengine=psync --output-format=terse
  else
    echo "fio: not installed on this machine"
  fi
} > "$OUT/baseline.txt" 2>&1
rm -f "$IODIR/dd.bin" "$IODIR/fio.bin" /dev/shm/gdsfleet-src
cat "$OUT/baseline.txt"
