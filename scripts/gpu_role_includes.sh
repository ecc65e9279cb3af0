#!/usr/bin/env bash
# The roles whose route- and input-specific task files are included, not imported (d9aa7cb),
# run in check mode against the lent GPU machine itself (ansible_connection=local): each role
# alone, on the p2pdma route, with no NVMe drive, no NVMe-oF target and the exporter off, so
# the files a node leaves out are each one skipped include. Read-only (--check). Also one
# tagged run (--tags nvidia_fs_configure) and one --skip-tags run, to show the tags reach the
# included tasks. Needs .whl/ and .devcarry/ as scripts/gpu_node_evidence.sh describes
# (ansible-core and its dependencies; ansible.posix and community.general).
# Writes summary.txt and outputs.tgz (every run's output) under $OUT (default
# /tmp/gdsfleet-role-includes).
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/gdsfleet-role-includes}
OUT=$FINAL/work
mkdir -p "$OUT"
# the carried wheels and collections, and this checkout's collection
. scripts/device_node_env.sh || exit 1
{ uname -r; grep PRETTY_NAME /etc/os-release; ansible --version | head -1; } > "$OUT/machine.txt" 2>&1
inv=$OUT/inventory.yml
printf 'all:\n  hosts:\n    %s:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n' \
  "$(hostname -s 2>/dev/null || echo gpu-node)" "$(command -v python3)" > "$inv"
for role in nvidia_fs mofed p2pdma nvme nvmeof node_exporter_textfile; do
  printf -- '- hosts: all\n  become: true\n  gather_facts: true\n  roles: [gdsfleet.gds.%s]\n' "$role" > "$OUT/play-$role.yml"
done
cuda=$(awk -F'"' '/^cuda_version:/ {print $2}' roles/cuda/defaults/main.yml)  # nvidia_fs reads it
run() {  # name, role, extra args...
  local name=$1 role=$2; shift 2
  ansible-playbook -i "$inv" --check -e gds_route=p2pdma -e mofed_flavor=none \
    -e cuda_version="$cuda" "$@" \
    "$OUT/play-$role.yml" > "$OUT/$name.txt" 2>&1
  echo "$name exit $?" | tee -a "$OUT/summary.txt"
  grep -A1 "PLAY RECAP" "$OUT/$name.txt" | tail -1 | tee -a "$OUT/summary.txt"
}
: > "$OUT/summary.txt"
for role in nvidia_fs mofed p2pdma nvme nvmeof node_exporter_textfile; do run "$role" "$role"; done
run nvidia_fs-nvfs-tags nvidia_fs -e gds_route=nvfs --tags nvidia_fs_configure
run nvidia_fs-nvfs-skip nvidia_fs -e gds_route=nvfs --skip-tags nvidia_fs_install,nvidia_fs_configure
cp "$OUT/summary.txt" "$FINAL/" && tar -C "$OUT" -czf "$FINAL/outputs.tgz" . && rm -rf "$OUT"
