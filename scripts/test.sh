#!/usr/bin/env bash
# The whole test suite, from a fresh machine: setup, lint (ruff, mypy, ansible-lint on the whole
# repository, changelog fragments), the collection build and ansible-test sanity on it, unit
# tests, molecule scenarios and the simulated fleet. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CONTAINERS_CONF="$PWD/tests/harness/containers.conf"
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/.lab/collections"
bash scripts/install_collection.sh >/dev/null

echo "== ruff"; ruff check provisioner plugins tests bench
echo "== mypy"; mypy
echo "== ansible-lint (production profile, whole repository)"; ansible-lint --offline -q
echo "== antsibull-changelog lint"; antsibull-changelog lint
# ansible-test sanity (about 5 min) runs beside pytest: pytest's fleet tests spend much of
# their time waiting on simulated reboots and SSH, so the two overlap well on 2 cores. Its
# result is reported, and fails the run, after pytest.
echo "== ansible-test sanity (the collection as built): started in the background"
sanity_log=$(mktemp)
bash scripts/ansible_test_sanity.sh >"$sanity_log" 2>&1 &
sanity_pid=$!
echo "== pytest"
rc=0
python -m pytest "$@" || rc=$?
echo "== ansible-test sanity (the collection as built)"
if ! wait "$sanity_pid"; then
  grep -vE "^(Collecting|Downloading|Installing|Successfully|WARNING: Location|  )" "$sanity_log" | tail -n 60 >&2
  echo "ansible-test sanity failed" >&2
  rm -f "$sanity_log"
  exit 1
fi
grep -E "^(Running sanity test|ERROR|WARNING: Skipping)" "$sanity_log" | sed 's/^/  /' || true
rm -f "$sanity_log"
exit "$rc"
