#!/usr/bin/env bash
# Installs what the project and its tests need on a fresh Debian 12 machine (run as root):
# system packages, the pinned virtual environment in .venv, the simulated node image and the
# stand-in package repository. Safe to run again: every step skips work already done.
#   scripts/setup.sh                 everything
#   scripts/setup.sh --python-only   system packages and .venv only (scripts/test.sh --fast)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
python_only=0
if [ "${1:-}" = "--python-only" ]; then python_only=1; fi

apt_pkgs=(podman runc debootstrap openssh-client openssh-server xfsprogs e2fsprogs dpkg-dev
          apt-utils gnupg sqlite3 python3-venv uidmap postgresql chromium gcc libc6-dev)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== apt: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Prometheus: promtool for the alert rules' unit tests (monitoring/prometheus) and the server
# for the lab test that sees an alert fire (tests/molecule/test_slurm_prometheus_lab.py, on a
# loopback port of its own). Only the programs are wanted: the package's own service is neither
# started by this install (a policy-rc.d for this one apt call, where the machine has none)
# nor enabled at boot, so nothing listens on 9090 because of this script.
if ! dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "ok installed"; then
  echo "== apt: installing prometheus (its service not started)"
  [ ${#missing[@]} -gt 0 ] || apt-get update -qq
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs prometheus\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -n "$policy" ]; then rm -f "$policy"; trap - EXIT; fi
  if [ -d /run/systemd/system ]; then systemctl disable --now prometheus.service >/dev/null 2>&1 || true; fi
fi

# The node image (debootstrap from the Debian mirror, about a minute on a fresh machine) needs
# only the apt packages: it builds in the background while pip fills .venv and the stand-in
# repository is made, and is waited for at the end.
image_pid=
if [ "$python_only" = 0 ]; then
  export CONTAINERS_CONF="$root/tests/harness/containers.conf"
  image_log=$(mktemp)
  bash tests/harness/build_node_image.sh >"$image_log" 2>&1 &
  image_pid=$!
fi

stamp=.venv/.requirements.sha256
want=$(cat requirements/ci.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== python: creating .venv from requirements/ci.txt"
  python3 -m venv .venv
  # --no-compile: no byte-compiling of every file of every package up front (the ansible
  # package alone holds tens of thousands); Python compiles what is imported, when it is
  log=$(mktemp)
  if ! { .venv/bin/pip install --no-compile -r requirements/ci.txt && .venv/bin/pip install --no-deps -e .; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2; exit 1
  fi
  rm -f "$log"
  echo "$want" > "$stamp"
fi

[ "$python_only" = 1 ] && exit 0
if [ -x tests/harness/standin_repo/build.sh ]; then
  echo "== stand-in package repository"
  bash tests/harness/standin_repo/build.sh
fi
echo "== node image"
if ! wait "$image_pid"; then
  cat "$image_log" >&2; rm -f "$image_log"
  echo "setup.sh: the node image build failed (tests/harness/build_node_image.sh, above)" >&2
  exit 1
fi
cat "$image_log"; rm -f "$image_log"
