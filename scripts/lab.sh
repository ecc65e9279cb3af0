#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: set up, build and install the collection, bring up
# the SIMULATED lab fleet (podman containers standing in for GPU nodes; no real GPU, NVMe or
# kernel module is involved), roll GPUDirect Storage out to it with `provisioner rollout`
# (canary first, gated waves, SQLite ledger in .lab/ledger.sqlite), then show
# `provisioner status`. The lab stays up afterwards; the last lines say how to tear it down.
#
#   scripts/lab.sh                 # 8 simulated nodes
#   LAB_NODES=4 scripts/lab.sh     # fewer nodes
#   scripts/lab.sh --waves 1,100%  # extra arguments go to `provisioner rollout`
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
nodes=${LAB_NODES:-8}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

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
python -m tests.harness.lab up --nodes "$nodes"

say "SIMULATION: stand in for the nodes' distribution archive (dkms, linux-headers, python3-venv)"
# A real Debian node gets dkms and linux-headers-$(uname -r) from its distribution archive;
# the simulated nodes have none, and the stand-in repository carries both in its CUDA folder,
# which the roles configure only after DOCA needs them. molecule/gds_nvfs/prepare.yml installs
# the two stand-in packages directly and configures the stand-in distribution archive (real
# Debian packages; gdsfleet.gds.verify_runtime installs python3-venv from it) as the nodes'
# APT source (test harness only; the rollout itself is unchanged).
ansible-playbook -i inventories/lab molecule/gds_nvfs/prepare.yml >/dev/null

ledger="$root/.lab/ledger.sqlite"
say "plan (changes nothing)"
provisioner plan -i inventories/lab --ledger "$ledger"

say "rollout to the simulated fleet (ledger $ledger)"
set +e
# --allow-reboot: DOCA's patched NVMe driver needs a reboot; the simulated nodes "reboot"
# (ansible.builtin.reboot works against them: the harness restarts their init and boot_id).
provisioner rollout -i inventories/lab --ledger "$ledger" --io-size "${LAB_IO_SIZE:-64M}" \
  --allow-reboot \
  --json "$root/.lab/rollout-report.json" --junit "$root/.lab/rollout-report.xml" "$@"
rc=$?
set -e

say "status (latest verification of every node in the ledger)"
provisioner status --ledger "$ledger" || true

cat <<EOF

The simulated lab is still up (provisioner rollout exited $rc; reports in .lab/rollout-report.*).
  run it again (reconcile, fast):  .venv/bin/provisioner rollout -i inventories/lab
  verify the nodes yourself:       .venv/bin/provisioner verify -i inventories/lab
  the ledger, node by node:        .venv/bin/provisioner status --ledger .lab/ledger.sqlite
                                   .venv/bin/provisioner history gdsfleet-lab-01 --ledger .lab/ledger.sqlite
  tear the lab down:               CONTAINERS_CONF=$CONTAINERS_CONF .venv/bin/python -m tests.harness.lab down
(remember: a SIMULATION - containers with stand-in hardware, not GPU nodes)
EOF
exit "$rc"
