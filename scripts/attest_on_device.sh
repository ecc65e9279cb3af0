#!/usr/bin/env bash
# attest (issue 44) on a real GPU node: the lent H200 (Ubuntu 24.04, no nvidia-fs, no NVMe, no
# gds-tools, no network), from the tree's root:
#
#   bash scripts/attest_on_device.sh
#
# 1. installs gdsfleet-attest as the role gdsfleet.gds.attest does (with ansible-playbook when
#    the carried wheels and collections of scripts/device_node_env.sh are there, else by the
#    same copy by hand) and the provisioner from this tree (PYTHONPATH; its imports from the
#    carried wheels in .whl/, as scripts/gpu_evidence.sh);
# 2. runs gdsfleet-attest before any verify: "never verified", exit 1;
# 3. runs `provisioner verify --local` (NOT compliant here: no nvidia-fs), which writes the record
#    /var/lib/gdsfleet/verified.json for that verdict too;
# 4. runs gdsfleet-attest, --json, --textfile, and a job's prolog + epilog: exit 1 every time,
#    "NOT compliant at <time> (failing: ...)": a node whose last verify failed is never ok;
# 5. prints timings: each command's wall time, and bench/bench_attest.py --where host (attest
#    against verify --local's gather on this machine, 20 runs).
#
# What it should print (the lead compares): step 2 `attest.unverified: last verify, compliant
# -> never (no record /var/lib/gdsfleet/verified.json)` exit 1; step 3 verify exit 1 with
# io.direct_path failing and "attest record" NOT in its stderr (the record was written); step 4
# `attest.unverified: last verify, compliant -> NOT compliant at ... (failing: ...)` exit 1, the
# JSON's "status": "unverified", gdsfleet_attest_ok 0 and gdsfleet_attest_unverified 1 in the
# textfile, the epilog's job verdict "unknown" (no nvidia-fs counters, no gds_stats); step 5
# attest's median wall well under 1 s and the gather a multiple of it. Any other exit code of
# attest than 0/1 (70: it could not judge) is a finding: the script says so and exits 1.
# Everything goes under $OUT (default /tmp/gdsfleet-attest-device).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-attest-device}
IODIR=${GDSFLEET_EVIDENCE_DIR:-/var/tmp/gdsfleet-io}
SIZE=${GDSFLEET_EVIDENCE_SIZE:-64M}
ENTRY=/usr/local/sbin/gdsfleet-attest
LIB=/usr/local/lib/gdsfleet/attest
mkdir -p "$OUT" "$IODIR"
fail=0

{
  echo "## machine"; date -u; uname -r
  . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 2
  echo "nvidia-fs: $([ -d /sys/module/nvidia_fs ] && echo loaded || echo 'not loaded')"
  echo "python3: $(python3 -c 'import sys; print(sys.version.split()[0])')"
} 2>&1 | tee "$OUT/machine.txt"

echo "## 1. install gdsfleet-attest (as the role does) and the provisioner from this tree"
installed=""
if [ -d .whl ] && [ -d .devcarry/collections ] && . scripts/device_node_env.sh; then
  cat > /tmp/gdsfleet-attest-play.yml <<'PLAY'
- hosts: localhost
  connection: local
  gather_facts: false
  roles: [{role: gdsfleet.gds.attest}]
PLAY
  if ansible-playbook -i localhost, /tmp/gdsfleet-attest-play.yml > "$OUT/role.txt" 2>&1; then
    installed="the role gdsfleet.gds.attest (ansible-playbook, connection local)"
  fi
  tail -n 4 "$OUT/role.txt"
else
  [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
if [ -z "$installed" ]; then  # the role's steps by hand: its files, its wrapper, its compile
  mkdir -p "$LIB"
  for f in attest.py attest_state.py attest_compare.py attest_counters.py cufile_json.py; do
    install -m 0644 "plugins/module_utils/$f" "$LIB/$f"
  done
  printf '#!/bin/sh\nexec /usr/bin/python3 -I -S %s/attest.py "$@"\n' "$LIB" > "$ENTRY"
  chmod 0755 "$ENTRY"
  /usr/bin/python3 -m compileall -q "$LIB"
  installed="a copy of the role's files (no carried Ansible)"
fi
echo "installed by: $installed"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD

run() {  # run NAME CMD...: output to $OUT/NAME.txt, wall time and exit code after it
  local name=$1; shift
  local t0 t1 rc
  t0=$EPOCHREALTIME
  "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  rc=$?
  t1=$EPOCHREALTIME
  awk -v n="$name" -v rc="$rc" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "%s: exit %s in %.3f s\n", n, rc, b - a }' | tee -a "$OUT/timings.txt"
  cat "$OUT/$name.txt"; [ -s "$OUT/$name.err" ] && sed 's/^/  stderr: /' "$OUT/$name.err"
  return $rc
}
attest_rc() {  # attest must answer 0 or 1 here; 70 (cannot judge) is a finding
  if [ "$1" != 0 ] && [ "$1" != 1 ]; then echo "FINDING: $2 exited $1"; fail=1; fi
}

echo "## 2. before any verify"
rm -f /var/lib/gdsfleet/verified.json
run attest-before "$ENTRY"; rc=$?; attest_rc $rc attest-before
[ $rc = 1 ] || { echo "FINDING: a node never verified must exit 1"; fail=1; }

echo "## 3. provisioner verify --local (io size $SIZE in $IODIR)"
run verify-local python3 -m provisioner.cli verify --local --io-size "$SIZE" --io-path "$IODIR" \
  --json "$OUT/verify-local.json" --ledger "$OUT/ledger.sqlite" --quiet
echo "record: $(ls -l /var/lib/gdsfleet/verified.json 2>&1)"
if grep -q "attest record .* NOT written" "$OUT/verify-local.err"; then
  echo "FINDING: verify did not write the record"; fail=1
fi
python3 - <<'PY' 2>&1 | tee "$OUT/record.txt"
import json
doc = json.load(open("/var/lib/gdsfleet/verified.json"))
print({k: doc.get(k) for k in ("schema", "node", "compliant", "route", "path_taken", "failing",
                                "mount_path")})
st = doc["state"]
print("state:", {"kernel": st["kernel"], "nvfs": st["nvfs"]["loaded"],
                 "cufile": (st["cufile"]["present"], st["cufile"]["allow_compat_mode"]),
                 "libcufile": st["libcufile"]["real"], "mount": (st["mount"] or {}).get("target")})
PY

echo "## 4. gdsfleet-attest after verify"
run attest "$ENTRY"; rc=$?; attest_rc $rc attest
[ $rc = 1 ] || { echo "FINDING: a node whose last verify was NOT compliant must exit 1"; fail=1; }
run attest-json "$ENTRY" --json; attest_rc $? attest-json
run attest-textfile "$ENTRY" --textfile "$OUT/gdsfleet_attest.prom"; attest_rc $? attest-textfile
cat "$OUT/gdsfleet_attest.prom"
run attest-prolog "$ENTRY" --job device-1 --job-start; attest_rc $? attest-prolog
run attest-epilog "$ENTRY" --job device-1 --since "$(date -d '-1 min' +%s)" --json
attest_rc $? attest-epilog
run provisioner-attest python3 -m provisioner.cli attest; attest_rc $? provisioner-attest

echo "## 5. timings: attest against verify --local's gather on this machine"
python3 bench/bench_attest.py --where host --runs 20 2>&1 | tee "$OUT/bench.txt"
echo "## timings of the commands above"; cat "$OUT/timings.txt"
[ $fail = 0 ] && echo "attest on device: as expected" || echo "attest on device: FINDINGS above"
exit $fail
