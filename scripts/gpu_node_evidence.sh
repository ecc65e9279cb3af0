#!/usr/bin/env bash
# The lent GPU machine as a REAL node for the collection and the orchestrator: runs the
# preflight playbook (both routes), `site.yml --check` (both routes) and `provisioner verify
# --local` against the machine itself, with ansible_connection=local. Read-only: preflight
# only probes, a check run changes nothing, verify writes one test file and removes it.
#
# Needs, in git-ignored folders carried to the machine (docs/evidence/README.md):
#   .whl/         ansible-core, resolvelib, cryptography, cffi, pycparser, distlib (the
#                 collection build's manifest), SQLAlchemy, greenlet, kvikio-cu13,
#                 libkvikio-cu13, rapids-logger (cp312 manylinux wheels)
#   .devcarry/collections/ansible_collections/{ansible/posix,community/general}
#                 copies of the collections from the `ansible` pip package
# Writes every output under $OUT (default /tmp/gdsfleet-node-evidence) and $OUT/node.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-node-evidence}
ev=$OUT/node
mkdir -p "$ev"
# the carried wheels and collections, and this checkout's collection
. scripts/device_node_env.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD

inv=/tmp/gdsfleet-local-inventory.yml
cat > "$inv" <<EOF
all:
  children:
    gpu_nodes:
      hosts:
        $(hostname -s 2>/dev/null || echo gpu-node):
          ansible_connection: local
          ansible_python_interpreter: $(command -v python3)
EOF
cp "$inv" "$ev/inventory.yml"

play() {  # name args...: one ansible-playbook run, output and exit code kept
  local name=$1; shift
  echo "## ansible-playbook $*" > "$ev/$name.txt"
  ansible-playbook -i "$inv" "$@" >> "$ev/$name.txt" 2>&1
  echo "[exit $?]" >> "$ev/$name.txt"
  echo "== $name: $(tail -n 1 "$ev/$name.txt")"
}
{ date -u; uname -r; grep PRETTY /etc/os-release; ansible-playbook --version | head -n 1; } > "$ev/machine.txt" 2>&1
play preflight-nvfs playbooks/preflight.yml -e gds_route=nvfs
play preflight-p2pdma playbooks/preflight.yml -e gds_route=p2pdma
play site-check-nvfs playbooks/site.yml --check --diff -e gds_route=nvfs
play site-check-p2pdma playbooks/site.yml --check --diff -e gds_route=p2pdma
# as if the DKMS modules came prebuilt: the next refusal a check run meets is python3-apt
play site-check-nvfs-prebuilt playbooks/site.yml --check --diff -e gds_route=nvfs \
  -e preflight_require_dkms_build=false

# A same-run takeover on the real node: a fenced play of run "evidence" (its lock held by
# token evidence.1.*, and its work, a 6 s process carrying that token, still running), then
# site.yml --check of the same run: its first task waits for that work, then takes the node.
old_tok=evidence.1.$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
new_tok=evidence.2.$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
ansible -i "$inv" gpu_nodes -m gdsfleet.gds.node_lock -a "token=$old_tok ttl=600" \
  > "$ev/takeover-old-lock.txt" 2>&1
GDSFLEET_PLAYBOOK_TOKEN=$old_tok setsid sh -c 'sleep 6; date -u +%s.%N > /tmp/gdsfleet-old-work.end' \
  </dev/null >/dev/null 2>&1 &
date -u +%s.%N > "$ev/takeover-started.txt"
(export GDSFLEET_PLAYBOOK_TOKEN=$new_tok
 play site-check-takeover playbooks/site.yml --check --diff -e gds_route=p2pdma)
cp /tmp/gdsfleet-old-work.end "$ev/takeover-old-work-end.txt" 2>/dev/null
cp /run/gdsfleet/site-lock.log "$ev/site-lock.log" 2>/dev/null

# the ledger in a folder of its own, 0700: the provisioner refuses one that others can write
# (/tmp itself: issue 45)
ledger_dir=$(mktemp -d)
iodir=/var/tmp/gdsfleet-io
mkdir -p "$iodir"
echo "## provisioner verify --local --io-size 64M --io-path $iodir --details" > "$ev/verify-local.txt"
python3 -m provisioner.cli verify --local --io-size 64M --io-path "$iodir" --details \
  --json "$ev/verify-local.json" --ledger "$ledger_dir/ledger.sqlite" >> "$ev/verify-local.txt" 2>&1
echo "[exit $?]" >> "$ev/verify-local.txt"
echo "== verify-local: $(tail -n 1 "$ev/verify-local.txt")"
rm -rf "$iodir"
tar -C "$OUT" -czf "$OUT/node.tgz" node
for f in "$ev"/*.txt; do echo "=== ${f##*/}"; grep -E "FAILED|fatal|msg|\[exit|refuse|PLAY RECAP|ok=" "$f" | cut -c1-400 | tail -n 12; done
