#!/usr/bin/env bash
# gdsfleet's Slurm prolog / epilog / health check (roles/slurm_gds_health) with the REAL
# gdsfleet-attest on a real node (the lent GPU machine: Ubuntu 24.04, a real /proc, /sys and
# libcufile, no nvidia-fs, no Slurm). No Slurm there: scontrol is the TEST STAND-IN of
# tests/unit/slurm_standins (it records the drain/resume calls, answers `show node` with a
# capture of Slurm 22.05.8). Nothing is installed: attest runs from this tree's
# plugins/module_utils (as the role gdsfleet.gds.attest copies it), the scripts' paths are under
# $OUT; attest keeps its job files where it always does (/run/gdsfleet/jobs, the proofs in
# /var/lib/gdsfleet/attest-*): the baselines of the script's job ids are removed at the end, the
# proof log is left (run it on a machine that is handed back after the call).
#
#   bash scripts/slurm_health_on_device.sh          (from the tree's root; as root)
#
# Prints, and writes to $OUT/result.txt (default /tmp/gdsfleet-slurm-health):
#   1. the node never verified (no record): the prolog exits 1 and asks to drain with
#      "reason=gdsfleet: attest.unverified: ..." (a never-verified node takes no job);
#   2. a record of the node's own state taken now (a STAND-IN for `provisioner verify`, which
#      needs the I/O runtime; it says compliant: the machine's path is compat in truth): the
#      prolog exits 0 and stores the job's baseline, the epilog keeps the job's proof; the wall
#      time of 20 prologs (median, max) with the real attest: expected well under a second;
#   3. the health check of the now regressed node (the record says nvidia-fs loaded, a module
#      it has not): a drain call; then attest's installation broken: exit 0, "NOT draining".
set -uo pipefail
OUT=${OUT:-/tmp/gdsfleet-slurm-health}
root=$(pwd)
rm -rf "$OUT" && mkdir -p "$OUT/sc" "$OUT/attest"
res=$OUT/result.txt
cp "$root"/plugins/module_utils/attest*.py "$root"/plugins/module_utils/cufile_json.py "$OUT/attest/"
printf '#!/bin/sh\nexec python3 -I -S %s/attest/attest.py "$@"\n' "$OUT" > "$OUT/gdsfleet-attest"
chmod 755 "$OUT/gdsfleet-attest"
cp "$root/tests/fixtures/slurm/22.05.8/scontrol-show-node-idle.txt" "$OUT/sc/node.txt"
cat > "$OUT/settings.conf" <<EOF
ATTEST=$OUT/gdsfleet-attest
ATTEST_RECORD=$OUT/verified.json
SCONTROL=$root/tests/unit/slurm_standins/scontrol
STATE_DIR=$OUT/state
LOG_FILE=$OUT/slurm-gds-health.log
NODENAME=gpu-node-01
EOF
export GDSFLEET_SLURM_HEALTH_CONF=$OUT/settings.conf STANDIN_SCONTROL_DIR=$OUT/sc
script=$root/roles/slurm_gds_health/files/slurm-gds-health.sh
run() {  # run CONTEXT JOB: as slurmd runs it (no PATH); prints the exit status
  env -i GDSFLEET_SLURM_HEALTH_CONF="$GDSFLEET_SLURM_HEALTH_CONF" \
    STANDIN_SCONTROL_DIR="$STANDIN_SCONTROL_DIR" SLURMD_NODENAME=gpu-node-01 \
    ${2:+SLURM_JOB_ID=$2} /bin/bash "$script" "$1" 2>>"$OUT/stderr.txt"
  echo $?
}
{
  # shellcheck disable=SC1091  # the machine's own
  echo "## $(date -u +%FT%TZ) $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(nproc) cores"
  echo "## 1. never verified"
  echo "prolog exit: $(run prolog 101)"
  echo "scontrol calls: $(tr '\n' ' ' < "$OUT/sc/calls" 2>/dev/null)"
  : > "$OUT/sc/calls"
  echo "## 2. a record of the node's own state (stand-in for verify)"
  python3 -I -S - "$OUT" <<'PY'
import importlib.util, os, sys
out = sys.argv[1]
def load(name):
    spec = importlib.util.spec_from_file_location("gdsfleet_attest_" + name, f"{out}/attest/{name}.py")
    mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
    return mod
cj = load("cufile_json"); st = load("attest_state")
node = st.Node("/")
state = st.snapshot(node, None, cj.strip_comments)
rec = st.new_record("gpu-node-01", {"compliant": True, "route": "nvfs", "path_taken": "direct",
                                    "simulated": False, "mount_path": None}, state)
st.write_record(node, rec, f"{out}/verified.json")
print("record:", {k: state[k] for k in ("kernel",)}, "nvidia-fs loaded:", (state["nvfs"] or {}).get("loaded"))
PY
  echo "prolog exit: $(run prolog 102)"
  echo "epilog exit: $(run epilog 102)"
  echo "scontrol calls: $(tr '\n' ' ' < "$OUT/sc/calls" 2>/dev/null)"
  times=()
  for i in $(seq 1 20); do
    t0=$(date +%s%N); run prolog $((200 + i)) >/dev/null; t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000000 )))
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  echo "prolog wall ms over 20 runs: median $(sed -n 10p <<<"$sorted"), max $(tail -n 1 <<<"$sorted")"
  echo "## 3. regressed (the record says nvidia-fs loaded), then attest broken"
  python3 -I -S -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d["state"]["nvfs"]={"loaded": True, "version": "2.28.4", "srcversion": None}; json.dump(d, open(p, "w"))' "$OUT/verified.json"
  echo "healthcheck exit: $(run healthcheck)"
  echo "scontrol calls: $(tr '\n' ' ' < "$OUT/sc/calls" 2>/dev/null)"
  : > "$OUT/sc/calls"
  mv "$OUT/attest/attest_state.py" "$OUT/attest_state.py.away"
  echo "prolog exit (attest broken): $(run prolog 301)"
  echo "scontrol calls: $(tr '\n' ' ' < "$OUT/sc/calls" 2>/dev/null)"
  echo "## the scripts' log"
  cat "$OUT/slurm-gds-health.log"
} 2>&1 | tee "$res"
rm -f /run/gdsfleet/jobs/101.json /run/gdsfleet/jobs/102.json /run/gdsfleet/jobs/2[0-2][0-9].json \
  /run/gdsfleet/jobs/301.json
