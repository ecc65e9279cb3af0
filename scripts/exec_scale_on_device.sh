#!/usr/bin/env bash
# The execution-node scale benchmark (bench/bench_exec_scale.py) on a machine without network,
# e.g. a 16-core GPU node: 200, 500 and 1,000 hosts over K = 1, 2, 4 loopback execution nodes.
#
#   bash scripts/exec_scale_on_device.sh [CARRY_DIR]       (as root, from the tree's root)
#
# CARRY_DIR (default .carry) holds what the machine cannot fetch, made on a machine with
# network (docs/scale.md, "Benchmark"):
#   wheels/   ansible-core, ansible-runner and the provisioner's other imports with their
#             dependencies, for CPython 3.12 manylinux x86_64 (pip download --only-binary),
#             and setuptools + wheel to install the provisioner from this tree
#   openssh/  optional: bin/{sshd,ssh,ssh-keygen} and lib/ (their shared libraries), used only
#             when the machine has no OpenSSH of its own
# Writes under $OUT (default /tmp/gdsfleet-exec-scale): probe.txt (the machine), table.txt
# (the figures as printed), exec-scale.json, progress.txt (one line per run, the bench's
# stderr). Exit 69 when sshd, ssh or ssh-keygen cannot be had, with the reason in probe.txt.
set -uo pipefail

CARRY=${1:-.carry}
OUT=${OUT:-/tmp/gdsfleet-exec-scale}
PY=${PYTHON:-python3}
VENV=${VENV:-/tmp/gdsfleet-exec-venv}
HOSTS=${HOSTS:-200 500 1000}
EXEC_NODES=${EXEC_NODES:-1 2 4}
FORKS=${FORKS:-20}
TASK_SLEEP=${TASK_SLEEP:-0}  # seconds: --task-sleep, the fork-bound case
EXTRA_TASKS=${EXTRA_TASKS:-0}  # --extra-tasks: several values give the CPU per extra event
mkdir -p "$OUT"
probe=$OUT/probe.txt

{
  echo "## date: $(date -u +%FT%TZ)"
  echo "## cores: $(nproc); memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  echo "## cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "## os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); kernel: $(uname -r)"
  echo "## python: $($PY -c 'import sys; print(sys.version.split()[0])' 2>&1)"
} > "$probe"

# OpenSSH: the machine's own, else the carried one (wrappers carry its library path, so that
# nothing else in the run loads those libraries)
have_ssh() { [ -x "$(command -v sshd || echo /usr/sbin/sshd)" ] && command -v ssh >/dev/null \
  && command -v ssh-keygen >/dev/null; }
if have_ssh; then
  echo "## openssh: the machine's: $(command -v sshd || echo /usr/sbin/sshd) $(ssh -V 2>&1)" >> "$probe"
elif [ -x "$CARRY/openssh/bin/sshd" ]; then
  o=/tmp/gdsfleet-openssh
  rm -rf "$o" && mkdir -p "$o/real" "$o/bin" && cp -a "$CARRY/openssh/bin/." "$o/real/" \
    && cp -a "$CARRY/openssh/lib" "$o/lib"
  for t in sshd ssh ssh-keygen; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$o/lib" "$o/real/$t" > "$o/bin/$t"
    chmod 755 "$o/bin/$t"
  done
  # sshd 9.2's privilege separation wants its user
  getent passwd sshd >/dev/null || useradd --system --no-create-home --home-dir /run/sshd \
    --shell /usr/sbin/nologin sshd >> "$probe" 2>&1
  export PATH=$o/bin:$PATH
  echo "## openssh: the machine has none; carried: $(ssh -V 2>&1)" >> "$probe"
fi
if ! have_ssh; then
  echo "MISSING: sshd, ssh or ssh-keygen (openssh-server, openssh-client), and none carried" \
    "under $CARRY/openssh; the benchmark needs real sshd on loopback: no figure" | tee -a "$probe"
  exit 69
fi
if [ "$(id -u)" != 0 ]; then
  echo "MISSING: root (sshd's privilege separation); run as root: no figure" | tee -a "$probe"
  exit 69
fi

# a fresh virtual environment from the carried wheels only
rm -rf "$VENV"
if ! "$PY" -m venv "$VENV" >> "$probe" 2>&1; then
  rm -rf "$VENV"
  "$PY" -m venv --without-pip "$VENV" >> "$probe" 2>&1 || { echo "no venv" >> "$probe"; exit 70; }
  PIP=("$PY" -m pip --python "$VENV/bin/python")
else
  PIP=("$VENV/bin/python" -m pip)
fi
# with their bytecode, as pip installs by default: the coordinators of the bench run with
# PYTHONDONTWRITEBYTECODE, and without it every run compiled ansible-core, SQLAlchemy and the
# rest again (1.2 CPU-s a run, counted as coordinator CPU)
"${PIP[@]}" install -q --no-index --no-deps --no-cache-dir "$CARRY"/wheels/*.whl \
  >> "$probe" 2>&1 || { echo "FAILED: installing the carried wheels" | tee -a "$probe"; exit 70; }
"${PIP[@]}" install -q --no-index --no-deps --no-build-isolation --no-cache-dir . \
  >> "$probe" 2>&1 || { echo "FAILED: installing the provisioner from the tree" | tee -a "$probe"; exit 70; }
"$VENV/bin/python" -c 'import ansible, ansible_runner, provisioner, sqlalchemy, paramiko, rich' \
  >> "$probe" 2>&1 || { echo "FAILED: imports in the new venv" | tee -a "$probe"; exit 70; }
"$VENV/bin/python" -m pip list --format=freeze 2>/dev/null | sed 's/^/## venv: /' >> "$probe"

# shellcheck disable=SC2086  # the lists are meant to split
PYTHONUNBUFFERED=1 "$VENV/bin/python" bench/bench_exec_scale.py --hosts $HOSTS \
  --exec-nodes $EXEC_NODES --forks-per-exec-node "$FORKS" --task-sleep "$TASK_SLEEP" --extra-tasks $EXTRA_TASKS --json "$OUT/exec-scale.json" \
  2> "$OUT/progress.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
cat "$OUT/progress.txt"
exit "$rc"
