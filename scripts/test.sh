#!/usr/bin/env bash
# The whole test suite, from a fresh machine: setup, lint, collection build, unit tests,
# molecule scenarios and the simulated fleet. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CONTAINERS_CONF="$PWD/tests/harness/containers.conf"
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/.lab/collections"
bash scripts/install_collection.sh >/dev/null

echo "== ruff"; ruff check provisioner plugins tests bench
echo "== mypy"; mypy
echo "== ansible-lint (production profile)"; ansible-lint --offline -q roles playbooks
echo "== pytest"
python -m pytest "$@"
