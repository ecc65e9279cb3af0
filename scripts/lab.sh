#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: set up, build and install the collection, bring up
# the SIMULATED lab fleet (podman containers standing in for GPU nodes; no real GPU, NVMe or
# kernel module is involved), roll GPUDirect Storage out to it with `provisioner rollout`
# (canary first, gated waves, SQLite ledger in .lab/ledger.sqlite), then show
# `provisioner status`. The lab stays up afterwards; the last lines say how to tear it down.
#
#   scripts/lab.sh                 # 8 simulated nodes
#   LAB_NODES=4 scripts/lab.sh     # fewer nodes (every command then carries --limit)
#   scripts/lab.sh --waves 1,100%  # extra arguments go to `provisioner rollout`
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
nodes=${LAB_NODES:-8}

step="start"
say() { step="$*"; printf '\n\033[1m== %s\033[0m\n' "$*"; }
# A failing step says which one failed (set -e alone would exit silently).
trap 'rc=$?; printf "\nlab.sh: FAILED (exit %s) in step: %s\n" "$rc" "$step" >&2' ERR

# The inventory lists gdsfleet-lab-01..08; with fewer nodes every command (and every command
# printed at the end) carries a --limit naming the nodes that exist.
if ! [[ "$nodes" =~ ^[1-8]$ ]]; then
  echo "lab.sh: LAB_NODES must be 1 to 8 (the inventory's nodes), not '$nodes'" >&2
  exit 64
fi
# The lab inventory points the roles at the stand-in repository on 127.0.0.1:8470; a session
# that serves it elsewhere (GDSFLEET_REPO_PORT) passes the URLs as extra variables.
repo_port=${GDSFLEET_REPO_PORT:-8470}
repo_args=()
if [ "$repo_port" != 8470 ]; then
  base="http://127.0.0.1:$repo_port"
  tarball=$(sed -n 's|^mofed_mlnx_ofed_tarball: http://127.0.0.1:8470/||p' \
    inventories/lab/group_vars/all/repositories.yml)
  repo_args=(-e "cuda_repo_base_url=$base/cuda/repos" -e "mofed_doca_repo_base_url=$base/doca"
             -e "mofed_mlnx_ofed_tarball=$base/$tarball"
             -e "verify_runtime_index_url=$base/pypi/simple")
fi
limit_args=()
if [ "$nodes" -lt 8 ]; then
  limit=$(for i in $(seq 1 "$nodes"); do printf 'gdsfleet-lab-%02d:' "$i"; done)
  limit=${limit%:}
  limit_args=(--limit "$limit")
fi

cat <<'BANNER'
############################################################################
#  gdsfleet lab: this is a SIMULATION.                                      #
#  The "GPU nodes" are podman containers on this machine with stand-in      #
#  NVIDIA/DOCA packages and simulated /proc and /sys files. Nothing here    #
#  touches real GPUs, NVMe drives or kernel modules.                        #
############################################################################
BANNER

say "setup (system packages, .venv, node image, stand-in package repository)"
bash scripts/setup.sh

export PATH="$root/.venv/bin:$PATH"
export CONTAINERS_CONF="$root/tests/harness/containers.conf"
export ANSIBLE_COLLECTIONS_PATH="$root/.lab/collections"

say "build and install the collection gdsfleet.gds into .lab/collections"
bash scripts/install_collection.sh

say "bring up the simulated lab fleet ($nodes nodes: containers gdsfleet-lab-NN, sshd on 127.0.0.1:22NN)"
# SIMULATION: each node's APT source is the stand-in distribution archive (real Debian 12
# packages such as python3-venv, and the stand-in dkms and kernel headers a Debian archive
# offers for the node's kernel; tests/harness/standin_repo/build.sh): the roles install what
# they need from it through apt, as on a real node.
python -m tests.harness.lab up --nodes "$nodes"

ledger="$root/.lab/ledger.sqlite"
say "plan (changes nothing)"
provisioner plan -i inventories/lab "${limit_args[@]}" --ledger "$ledger"

say "rollout to the simulated fleet (ledger $ledger)"
set +e
trap - ERR  # the rollout's exit code is reported below, not as a failed step
# --allow-reboot: DOCA's patched NVMe driver needs a reboot; the simulated nodes "reboot"
# (ansible.builtin.reboot works against them: the harness restarts their init and boot_id).
provisioner rollout -i inventories/lab "${limit_args[@]}" "${repo_args[@]}" \
  --ledger "$ledger" \
  --io-size "${LAB_IO_SIZE:-64M}" \
  --allow-reboot \
  --json "$root/.lab/rollout-report.json" --junit "$root/.lab/rollout-report.xml" "$@"
rc=$?
set -e

say "status (latest verification of every node in the ledger)"
provisioner status --ledger "$ledger" || true

# The follow-up commands come from tests/harness/lab_followups.py, which
# tests/fleet/test_rollout.py runs as printed: the script and the test cannot drift apart.
followup_args=(--rc "$rc")
if [ "$nodes" -lt 8 ]; then followup_args+=(--limit "$limit"); fi
python -m tests.harness.lab_followups "${followup_args[@]}" -- "${repo_args[@]}"
exit "$rc"
