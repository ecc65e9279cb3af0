# Sourced (not run) by the scripts that use the lent GPU machine as a real node
# (gpu_node_evidence.sh, gpu_runtime_evidence.sh, gpu_role_includes.sh), from the tree's root:
# installs the carried wheels (.whl/) into /tmp/site, puts them on PYTHONPATH and PATH, points
# Ansible at the carried collections (.devcarry/collections) with plain output, and builds and
# installs this checkout's collection there. Returns 1, saying why, when either step fails.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$PWD/.devcarry/collections ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_LOCAL_TEMP=/tmp/gdsfleet-ansible-tmp ANSIBLE_STDOUT_CALLBACK=default
ansible-galaxy collection build --force --output-path /tmp/gdsfleet-build . >/dev/null &&
  ansible-galaxy collection install --force --offline --no-deps -p .devcarry/collections \
    /tmp/gdsfleet-build/gdsfleet-gds-*.tar.gz >/dev/null || { echo "collection install failed"; return 1; }
