#!/usr/bin/env bash
# ansible-test sanity on the collection AS BUILT: the tarball from scripts/install_collection.sh
# is unpacked at <work>/ansible_collections/gdsfleet/gds (inside a git repository, as
# ansible-test wants) and checked there, so only what ships is checked.
#
# ansible-test bootstraps pip in its virtual environments with a script it downloads from a
# host these machines cannot reach; it uses a cached copy at ~/.ansible/test/cache/ when one is
# there. The stand-in written below installs the same pip release (24.2) from a wheel fetched
# from the package index and ignores its arguments; nothing else about the run is changed.
# Extra arguments go to ansible-test (e.g. --test pep8).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH=$root/.venv/bin:$PATH
pip_version=24.2
wheels=$root/.lab/pip-wheels
mkdir -p "$wheels" ~/.ansible/test/cache
wheel=$(ls "$wheels"/pip-$pip_version-py3-none-any.whl 2>/dev/null || true)
if [ -z "$wheel" ]; then
  pip download -q --no-deps --only-binary=:all: -d "$wheels" "pip==$pip_version" >/dev/null
  wheel=$(ls "$wheels"/pip-$pip_version-py3-none-any.whl)
fi
cat > ~/.ansible/test/cache/get_pip_${pip_version//./_}.py <<EOF
# Written by gdsfleet's scripts/ansible_test_sanity.sh: installs pip $pip_version from its wheel
# (fetched from the package index) in place of the downloaded get-pip script; ignores arguments.
import subprocess
import sys

wheel = "$wheel"
sys.exit(subprocess.call([sys.executable, wheel + "/pip", "install", "--quiet", "--no-index", wheel]))
EOF

tarball=$(bash scripts/install_collection.sh)
work=$(mktemp -d "${TMPDIR:-/tmp}/gdsfleet-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gdsfleet/gds
mkdir -p "$dest"
tar -xzf "$tarball" -C "$dest"
(cd "$dest" && printf 'tests/output/\n' > .gitignore && git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@invalid commit -qm built)
cd "$dest"
py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ansible-test sanity --venv --requirements --python "$py" --color no "$@"
