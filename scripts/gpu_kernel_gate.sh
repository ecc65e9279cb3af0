#!/usr/bin/env bash
# The kernel gate (issue 29) on the lent GPU machine as a REAL node (Ubuntu 24.04, no kernel
# headers, no DKMS, no nvidia-fs): the gdsfleet.gds.kernel_gate role in check mode against the
# RUNNING kernel (ansible_connection=local), kept as evidence. Read-only (--check: no default
# change, no hold, no state file). The gate must fail and say why: no headers for the running
# kernel (the fix names linux-headers-$(uname -r)), no DKMS nvidia-fs; it also reads the
# machine's real modules (.ko.zst on Ubuntu 24.04): the nvme module's vermagic and exports and
# the NVIDIA driver's license. Also the module alone (`ansible -m gdsfleet.gds.kernel_gate -C`,
# JSON), and the next-boot kernel as the gate and verify find it.
# Needs .whl/ and .devcarry/ as scripts/gpu_node_evidence.sh describes.
# Writes summary.txt, gate-role.txt, gate-module.json and machine.txt under $OUT (default
# /tmp/gdsfleet-kernel-gate).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-kernel-gate}
mkdir -p "$OUT"
# the carried wheels and collections, and this checkout's collection
. scripts/device_node_env.sh || exit 1
{ uname -r; grep PRETTY_NAME /etc/os-release; ansible --version | head -1
  ls -d "/lib/modules/$(uname -r)/build" 2>&1; command -v dkms zstd || true
  ls /boot | grep -E '^(vmlinuz|config)-' || true
  modinfo -n nvme nvidia 2>&1 || true; } > "$OUT/machine.txt" 2>&1
inv=$OUT/inventory.yml
printf 'all:\n  hosts:\n    %s:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n' \
  "$(hostname -s 2>/dev/null || echo gpu-node)" "$(command -v python3)" > "$inv"
printf -- '- hosts: all\n  become: true\n  gather_facts: false\n  roles: [gdsfleet.gds.kernel_gate]\n' > "$OUT/play.yml"
: > "$OUT/summary.txt"
# the role, check mode, the running kernel (the gate's default would be the next boot)
ansible-playbook -i "$inv" --check -e kernel_gate_kernel="$(uname -r)" "$OUT/play.yml" \
  > "$OUT/gate-role.txt" 2>&1
rc=$?  # before any other expansion: $(uname -r) in the echo below would reset $?
echo "role (check mode, kernel $(uname -r)) exit $rc" | tee -a "$OUT/summary.txt"
grep -E "Kernel gate (PASSED|FAILED)" "$OUT/gate-role.txt" | head -2 | cut -c1-600 | tee -a "$OUT/summary.txt"
# the module alone: every check's reason and fix as JSON
ANSIBLE_STDOUT_CALLBACK=ansible.posix.json ANSIBLE_LOAD_CALLBACK_PLUGINS=1 \
  ansible all -i "$inv" -C -m gdsfleet.gds.kernel_gate -a "kernel=$(uname -r)" \
  > "$OUT/gate-module.json" 2>&1
rc=$?
echo "module (check mode) exit $rc" | tee -a "$OUT/summary.txt"
python3 - "$OUT/gate-module.json" >> "$OUT/summary.txt" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
res = next(iter(doc["plays"][0]["tasks"][0]["hosts"].values()))
print("passed:", res.get("passed"), "next_boot:", res.get("next_boot"), res.get("next_boot_source"))
for r in res.get("results", []):
    print(("ok  " if r["ok"] else "FAIL"), r["check"], "-", r["reason"][:300])
PY
cat "$OUT/summary.txt"
