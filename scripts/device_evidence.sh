#!/usr/bin/env bash
# One call on the lent GPU machine (an H200 node, Ubuntu 24.04) for the evidence of issues 43,
# 44 and 47, the scripts in order of what a release needs most, each under its own deadline so
# that a call cut at its limit still brings back what ran:
#
#   bash scripts/device_evidence.sh            (from the tree's root, as root)
#
#   attest          scripts/attest_on_device.sh       (issue 44: attest on a real node)
#   node            scripts/gpu_node_evidence.sh      (the roles: preflight, site --check, the
#                                                      takeover, verify --local)
#   first-fleet     scripts/gpu_first_fleet.sh        (issue 47: kernel_gate module, non-root)
#   netfs-iotest    scripts/netfs_iotest_on_device.sh (issue 43: gds_stats, nvidia-fs modules)
#   slurm-health    scripts/slurm_health_on_device.sh (issue 44: prolog wall time)
#
# Needs .whl/ and .devcarry/ (scripts/gpu_node_evidence.sh says what). Writes $OUT/<name>/
# (default OUT=/tmp/gdsfleet-device-evidence), each step's output beside it ($OUT/<name>.stdout.txt:
# a step may empty its own folder first), and $OUT/summary.txt: each step's exit code and
# wall time. Each step has its deadline (460 s in all); STEP_S=N gives every step N s; ONLY="a b" runs the named steps.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-device-evidence}
mkdir -p "$OUT"
# name:script:seconds (the step's deadline; STEP_S, when set, replaces every one)
steps=(attest:scripts/attest_on_device.sh:100 node:scripts/gpu_node_evidence.sh:190
       first-fleet:scripts/gpu_first_fleet.sh:80 netfs-iotest:scripts/netfs_iotest_on_device.sh:40
       slurm-health:scripts/slurm_health_on_device.sh:50)
{ date -u; uname -r; grep PRETTY /etc/os-release; nproc
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 2; } \
  > "$OUT/machine.txt" 2>&1
for step in "${steps[@]}"; do
  name=${step%%:*} rest=${step#*:}
  script=${rest%%:*} limit=${STEP_S:-${rest#*:}}
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  mkdir -p "$OUT/$name"
  t0=$(date +%s.%N)
  OUT="$OUT/$name" timeout --kill-after=5 "$limit" bash "$script" > "$OUT/$name.stdout.txt" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  awk -v n="$name" -v rc="$rc" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "%-13s exit %3s in %6.1f s%s\n", n, rc, b - a, (rc == 124 ? " (cut at its deadline)" : "") }' \
    | tee -a "$OUT/summary.txt"
  tail -n 15 "$OUT/$name.stdout.txt" | cut -c1-300 | sed 's/^/    /'
done
# the device tool brings back a bounded number of files: everything in one archive, the
# summary beside it
tar -C "$OUT" -czf /tmp/gdsfleet-device-evidence.tgz --exclude=evidence.tgz . &&
  find "$OUT" -mindepth 1 -not -name summary.txt -not -name machine.txt -delete &&
  mv /tmp/gdsfleet-device-evidence.tgz "$OUT/evidence.tgz"
