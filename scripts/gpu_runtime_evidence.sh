#!/usr/bin/env bash
# The lent GPU machine as a REAL node for the verification runtime: rebuilds a wheel folder
# from the distributions installed in the machine's own Python environment (kvikio-cu13, cupy,
# numpy, the nvidia-* wheels: about 2 GB, more than can be carried there), then runs the role
# gdsfleet.gds.verify_runtime with verify_runtime_source: wheel_dir against the machine itself
# (ansible_connection: local), end to end, a second time (idempotence: changed=0), two refusals
# (an OS package that is missing and cannot be installed; an interpreter that does not run),
# and `provisioner verify --local` with the virtual environment the role made. Then the node
# I/O script straight from that venv, with and without loading the host's libcufile first.
#
# Changes the machine: /opt/gdsfleet/{venv,wheels}, /etc/ansible/facts.d (a lent, throw-away
# machine). Needs, in git-ignored folders carried there (docs/evidence/README.md):
#   .whl/       ansible-core, resolvelib, cryptography, cffi, pycparser, distlib, SQLAlchemy,
#               greenlet (cp312 manylinux wheels)
#   .devcarry/collections/ansible_collections/{ansible/posix,community/general}, and
#   .devcarry/repack_installed.py (rebuilds wheels from installed distributions)
#   .devcarry/extra-wheels/  wheels that environment lacks (the lent machine's has no kvikio):
#               kvikio-cu13, libkvikio-cu13, rapids-logger, the cuda-toolkit 13.0.x metapackages
# Environment: SRC_PYTHON (the environment holding cupy and the nvidia-* wheels, default
# /opt/torch/.venv/bin/python), REPACK (what to rebuild from it), OUT (default
# /tmp/gdsfleet-runtime-evidence). Writes $OUT/runtime.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-runtime-evidence}
SRC_PYTHON=${SRC_PYTHON:-/opt/torch/.venv/bin/python}
REPACK=${REPACK:-kvikio-cu13==26.10.0 cupy-cuda13x[ctk]==14.2.0 nvidia-cuda-runtime nvidia-cublas
  nvidia-cufft nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cuda-nvrtc nvidia-nvjitlink
  nvidia-cufile packaging}
ev=$OUT/runtime
wheels=/tmp/gdsfleet-wheels
mkdir -p "$ev"
# the carried wheels and collections, and this checkout's collection
. scripts/device_node_env.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD

{
  date -u; uname -r; grep PRETTY /etc/os-release
  ansible-playbook --version | head -n 1
  echo "/usr/bin/python3: $(/usr/bin/python3 --version 2>&1)"
  dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' python3-venv python3-apt 2>&1
  echo "apt lists: $(find /var/lib/apt/lists -maxdepth 1 -type f -name '*Packages*' 2>/dev/null | wc -l) Packages files"
  echo "ldconfig -p | grep libcufile.so.0:"; ldconfig -p | grep 'libcufile.so.0 ' || echo "  (none)"
  echo "wheel environment $SRC_PYTHON:"
  "$SRC_PYTHON" -c 'import importlib.metadata as m
for n in ("kvikio-cu13","libkvikio-cu13","cupy-cuda13x","cuda-toolkit","nvidia-cufile","nvidia-cuda-runtime","cuda-pathfinder","numpy"):
    try: print("  ", n, m.version(n))
    except m.PackageNotFoundError: print("  ", n, "-")'
} > "$ev/machine.txt" 2>&1

set -f; echo "## $SRC_PYTHON repack_installed.py $wheels" $REPACK > "$ev/wheels.txt"; set +f
t0=$(date +%s)
set -f  # REPACK's extras ("[ctk]") are no globs
# shellcheck disable=SC2086 # REPACK is a list of requirements
"$SRC_PYTHON" .devcarry/repack_installed.py "$wheels" $REPACK >> "$ev/wheels.txt" 2>&1
rc=$?; set +f
echo "[exit $rc after $(( $(date +%s) - t0 )) s]" >> "$ev/wheels.txt"
if [ -d .devcarry/extra-wheels ]; then
  echo "## carried: $(cd .devcarry/extra-wheels && echo *.whl)" >> "$ev/wheels.txt"
  cp .devcarry/extra-wheels/*.whl "$wheels"/
fi
(cd "$wheels" && ls -l --time-style=+ | awk 'NR>1 {print $5, $NF}') >> "$ev/wheels.txt"
echo "total bytes: $(du -sb "$wheels" | cut -f1)" >> "$ev/wheels.txt"

inv=/tmp/gdsfleet-local-inventory.yml
cat > "$inv" <<EOF
all:
  children:
    gpu_nodes:
      hosts:
        gpu-node:
          ansible_connection: local
          ansible_python_interpreter: /usr/bin/python3
EOF
play=/tmp/gdsfleet-runtime-play.yml
cat > "$play" <<'EOF'
- name: The verification runtime from a wheel folder
  hosts: gpu_nodes
  gather_facts: true
  roles:
    - role: gdsfleet.gds.verify_runtime
      vars:
        verify_runtime_source: wheel_dir
        verify_runtime_wheel_dir: /tmp/gdsfleet-wheels
        verify_runtime_cuda_major: "13"
EOF
cp "$inv" "$ev/inventory.yml"; cp "$play" "$ev/play.yml"

run_play() {  # name args...: one ansible-playbook run, output, duration and exit code kept
  local name=$1; shift
  echo "## ansible-playbook -i inventory.yml play.yml $*" > "$ev/$name.txt"
  local t0; t0=$(date +%s)
  ansible-playbook -i "$inv" "$play" "$@" >> "$ev/$name.txt" 2>&1
  echo "[exit $? after $(( $(date +%s) - t0 )) s]" >> "$ev/$name.txt"
  echo "== $name: $(grep -E 'ok=' "$ev/$name.txt" | tail -n 1) $(tail -n 1 "$ev/$name.txt")"
}
run_play role-first
run_play role-second
cat /etc/ansible/facts.d/gdsfleet_verify_runtime.fact > "$ev/fact-file.json" 2>&1
env -u PYTHONPATH /opt/gdsfleet/venv/bin/python -m pip list --disable-pip-version-check \
  > "$ev/venv-pip-list.txt" 2>&1
# refusals, on the same node: nothing may change
run_play refuse-missing-package -e '{"__verify_runtime_os_packages": {"Debian": ["python3-venv", "gdsfleet-no-such-package"], "RedHat": []}}'
run_play refuse-python -e verify_runtime_python=/usr/bin/python3.10

# the ledger in a folder of its own, 0700: the provisioner refuses one that others can write
# (/tmp itself: issue 45)
ledger_dir=$(mktemp -d)
iodir=/var/tmp/gdsfleet-io
mkdir -p "$iodir"
echo "## provisioner verify --local --io-size 1G --io-path $iodir --details" > "$ev/verify-local.txt"
python3 -m provisioner.cli verify --local --io-size 1G --io-path "$iodir" --details \
  --json "$ev/verify-local.json" --ledger "$ledger_dir/ledger.sqlite" >> "$ev/verify-local.txt" 2>&1
echo "[exit $?]" >> "$ev/verify-local.txt"
echo "== verify-local: $(tail -n 1 "$ev/verify-local.txt")"
# the node I/O script itself, 64 MiB, from the role's venv: as verify runs it (host libcufile
# loaded first) and without that (what cuda-pathfinder picks on its own)
# (bundled with its shared modules as verify sends it: provisioner/remote/bundle.py)
python3 -m provisioner.remote.bundle iotest.py > /tmp/gdsfleet-iotest.py
for pref in true false; do
  /opt/gdsfleet/venv/bin/python /tmp/gdsfleet-iotest.py \
    "{\"path\": \"$iodir\", \"size_bytes\": 67108864, \"gds_threshold\": 4096, \"cufile_log\": true, \"prefer_host_libcufile\": $pref}" \
    > "$ev/iotest-prefer-host-$pref.json" 2> "$ev/iotest-prefer-host-$pref.stderr"
  echo "== iotest prefer_host=$pref: exit $? $(grep -o '"libcufile_mapped": \[[^]]*\]' "$ev/iotest-prefer-host-$pref.json" | head -n 1)"
done
# a wheel of another libcufile release beside the host's (cuda-toolkit 13.0.0 pins
# nvidia-cufile 1.15.0.42): io.libcufile must fail and name the fix; then the folder's wheel
# again, and the role once more (nothing to change: it pins kvikio and cupy only)
if ls .devcarry/mismatch/*.whl >/dev/null 2>&1; then
  {
    echo "## venv/bin/python -m pip install --no-deps --no-index $(cd .devcarry/mismatch && echo *.whl)"
    /opt/gdsfleet/venv/bin/python -m pip install -q --no-deps --no-index --disable-pip-version-check \
      .devcarry/mismatch/*.whl 2>&1
    echo "## provisioner verify --local --io-size 64M --io-path $iodir --details"
    python3 -m provisioner.cli verify --local --io-size 64M --io-path "$iodir" --details \
      --json "$ev/verify-mismatch.json" --ledger "$ledger_dir/ledger.sqlite" 2>&1
    echo "[exit $?]"
  } > "$ev/verify-mismatch.txt"
  echo "== verify-mismatch: $(grep -E 'io.libcufile' "$ev/verify-mismatch.txt" | head -n 1 | cut -c1-200)"
  /opt/gdsfleet/venv/bin/python -m pip install -q --no-deps --no-index --disable-pip-version-check \
    --force-reinstall --find-links "$wheels" nvidia-cufile==1.15.1.6 > "$ev/restore-cufile.txt" 2>&1
  echo "[exit $?]" >> "$ev/restore-cufile.txt"
  run_play role-third
fi
rm -rf "$iodir"
tar -C "$OUT" -czf "$OUT/runtime.tgz" runtime
for f in "$ev"/*.txt; do echo "=== ${f##*/}"; grep -E "FAILED|fatal|msg|\[exit|PLAY RECAP|ok=|changed:" "$f" | cut -c1-300 | tail -n 14; done
