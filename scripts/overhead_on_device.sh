#!/usr/bin/env bash
# The orchestrator-overhead benchmark (bench/bench_overhead.py, issue 31) on a machine without
# network, e.g. the 16-core GPU node: raw ansible-playbook, stock ansible_runner.run() and
# provisioner rollout --no-verify over the same serial batches, at 500 and 2,000 hosts.
#
#   bash scripts/overhead_on_device.sh [CARRY_DIR]          (from the tree's root)
#
# CARRY_DIR (default .carry, git-ignored) holds wheels/: ansible-core, ansible-runner and the
# provisioner's other imports with their dependencies for CPython 3.12 manylinux x86_64
# (pip download --only-binary), and setuptools + wheel; the same folder
# scripts/exec_scale_on_device.sh uses (no OpenSSH needed here: every host is local).
# Writes under $OUT (default /tmp/gdsfleet-overhead): probe.txt (the machine), table.txt (the
# figures as printed), overhead.json, progress.txt (the bench's stderr). A failed run: exit 1,
# the reason in progress.txt, no table.
set -uo pipefail

CARRY=${1:-.carry}
OUT=${OUT:-/tmp/gdsfleet-overhead}
PY=${PYTHON:-python3}
VENV=${VENV:-/tmp/gdsfleet-overhead-venv}
HOSTS=${HOSTS:-500 2000}
FORKS=${FORKS:-50}
REPEAT=${REPEAT:-1}
TURN=${TURN:-0}  # the first round's order of the rows (a series of rounds split over calls)
mkdir -p "$OUT"
probe=$OUT/probe.txt
{
  echo "## date: $(date -u +%FT%TZ)"
  echo "## cores: $(nproc); memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  echo "## cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "## os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); kernel: $(uname -r)"
  echo "## python: $($PY -c 'import sys; print(sys.version.split()[0])' 2>&1)"
} > "$probe"

rm -rf "$VENV"
if ! "$PY" -m venv "$VENV" >> "$probe" 2>&1; then
  rm -rf "$VENV"
  "$PY" -m venv --without-pip "$VENV" >> "$probe" 2>&1 || { echo "no venv" >> "$probe"; exit 70; }
  PIP=("$PY" -m pip --python "$VENV/bin/python")
else
  PIP=("$VENV/bin/python" -m pip)
fi
"${PIP[@]}" install -q --no-index --no-deps --no-cache-dir "$CARRY"/wheels/*.whl \
  >> "$probe" 2>&1 || { echo "FAILED: installing the carried wheels" | tee -a "$probe"; exit 70; }
"${PIP[@]}" install -q --no-index --no-deps --no-build-isolation --no-cache-dir . \
  >> "$probe" 2>&1 || { echo "FAILED: installing the provisioner from the tree" | tee -a "$probe"; exit 70; }
"$VENV/bin/python" -c 'import ansible, ansible_runner, provisioner, sqlalchemy' \
  >> "$probe" 2>&1 || { echo "FAILED: imports in the new venv" | tee -a "$probe"; exit 70; }
"$VENV/bin/python" -m pip list --format=freeze 2>/dev/null | sed 's/^/## venv: /' >> "$probe"

# shellcheck disable=SC2086  # the list is meant to split
PYTHONUNBUFFERED=1 "$VENV/bin/python" bench/bench_overhead.py --hosts $HOSTS --forks "$FORKS" --repeat "$REPEAT" --turn "$TURN" \
  --json "$OUT/overhead.json" 2> "$OUT/progress.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
cat "$OUT/progress.txt"
exit "$rc"
