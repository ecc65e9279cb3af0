#!/usr/bin/env bash
# Issue 47 on the lent GPU machine as a REAL node (read-only; needs .whl/ and .devcarry/ as
# scripts/gpu_node_evidence.sh describes), from the tree's root, as root:
#
# 1. the kernel_gate module alone, check mode, the running kernel (as gpu_kernel_gate.sh runs
#    it): it must now FAIL with one line (before: a green SUCCESS holding "passed": false), and
#    a kernel that is not installed must be "pending" (before: every check failed on it);
# 2. `provisioner verify --local` as root and as a throw-away non-root user (docs/non-root.md):
#    which checks differ, and whether the I/O test ran for the non-root user in a directory it
#    owns (nvidia-fs is absent there, so both take the compat path: NOT compliant, as before).
#
# Writes summary.txt, module-running.txt, module-absent.txt, verify-root.json,
# verify-nonroot.json under $OUT (default /tmp/gdsfleet-first-fleet). Removes the user it made.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-first-fleet}
mkdir -p "$OUT"
. scripts/device_node_env.sh || exit 1
: > "$OUT/summary.txt"
K=$(uname -r)

# 1. the module
ansible localhost -c local -C -m gdsfleet.gds.kernel_gate -a "kernel=$K" \
  > "$OUT/module-running.txt" 2>&1
echo "module, check mode, running kernel $K: exit $? (expected 2: FAILED, one line)" \
  | tee -a "$OUT/summary.txt"
grep -m1 -E '"msg"|FAILED!|SUCCESS' "$OUT/module-running.txt" | cut -c1-400 | tee -a "$OUT/summary.txt"
ansible localhost -c local -C -m gdsfleet.gds.kernel_gate -a "kernel=9.9.9-not-installed" \
  > "$OUT/module-absent.txt" 2>&1
echo "module, check mode, a kernel not installed: exit $? (expected 0, \"pending\": true)" \
  | tee -a "$OUT/summary.txt"
grep -m1 -E '"pending"' "$OUT/module-absent.txt" | tee -a "$OUT/summary.txt"

# 2. verify --local as root, then as a non-root user with its own I/O directory
user=gdsfleet-nonroot-probe
io=/tmp/gdsfleet-nonroot-io
python3 -m provisioner.cli verify --local --no-ledger --io-size 64M --io-path /tmp \
  --json "$OUT/verify-root.json" > "$OUT/verify-root.txt" 2>&1
echo "verify --local as root: exit $?" | tee -a "$OUT/summary.txt"
useradd --no-create-home --shell /bin/sh "$user" 2>>"$OUT/summary.txt"
mkdir -p "$io" && chown "$user" "$io"
# the user reads this tree and writes its report in the folder it owns ($OUT may be under
# root's home, which it cannot write)
su "$user" -s /bin/sh -c "cd '$PWD' && PYTHONPATH=/tmp/site:'$PWD' HOME=/tmp python3 -m \
  provisioner.cli verify --local --no-ledger --io-size 64M --io-path '$io' \
  --json '$io/verify-nonroot.json'" > "$OUT/verify-nonroot.txt" 2>&1
echo "verify --local as $user: exit $?" | tee -a "$OUT/summary.txt"
cp "$io/verify-nonroot.json" "$OUT/verify-nonroot.json" 2>/dev/null ||
  { echo "no report from the non-root verify; its output:"; tail -n 20 "$OUT/verify-nonroot.txt"; } \
  | tee -a "$OUT/summary.txt"
userdel "$user" 2>/dev/null; rm -rf "$io"
python3 - "$OUT/verify-root.json" "$OUT/verify-nonroot.json" >> "$OUT/summary.txt" <<'PY'
import json, sys
root, user = (json.load(open(p))["nodes"][0] for p in sys.argv[1:3])
r = {c["id"]: c["status"] for c in root["checks"]}
u = {c["id"]: c["status"] for c in user["checks"]}
print("checks that differ (root -> non-root):")
for k in sorted(set(r) | set(u)):
    if r.get(k) != u.get(k):
        print(f"  {k}: {r.get(k)} -> {u.get(k)}")
io = user.get("io_test") or {}
print("non-root I/O test:", io.get("path_taken"), "-", str(io.get("reason"))[:300])
PY
cat "$OUT/summary.txt"
