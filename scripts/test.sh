#!/usr/bin/env bash
# The whole test suite, from a fresh machine: setup, lint (ruff, mypy, ansible-lint on the whole
# repository, changelog fragments), the collection build and ansible-test sanity on it, unit
# tests, molecule scenarios and the simulated fleet. Extra arguments go to pytest.
#
#   scripts/test.sh            everything (CI: .ci/run)
#   scripts/test.sh --fast     the developer's lane: ruff, mypy and every test that needs no
#                              container (-m 'not container and not fleet and not molecule'),
#                              in a few minutes; no node image, no ansible-lint, no sanity
#
# pytest runs with pytest-xdist: GDSFLEET_TEST_WORKERS workers (default 3; docs/testing.md
# says why and how to measure another count): the
# container tests mostly wait on SSH, apt and simulated reboots, so more workers than cores
# pay, but their timeouts were sized for a serial run. --gdsfleet-schedule
# (tests/harness/schedule.py): tests that share a module's fleet or node stay on one worker,
# in order; the longest parts start first. GDSFLEET_TEST_WORKERS=0 runs serially.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
if [ "${1:-}" = "--fast" ]; then fast=1; shift; fi
workers=${GDSFLEET_TEST_WORKERS:-3}
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "test.sh: GDSFLEET_TEST_WORKERS must be a number of workers (0: serial), not '$workers'" >&2
  exit 64
fi
xdist=()
if [ "$workers" -gt 0 ]; then xdist=(-n "$workers" --dist loadfile --gdsfleet-schedule); fi

export CONTAINERS_CONF="$PWD/tests/harness/containers.conf"
# Let Python cache byte-code: setup.sh installs with `pip --no-compile` (the ansible package
# alone holds tens of thousands of files), so with PYTHONDONTWRITEBYTECODE set, as some CI
# images set it, every `provisioner` the tests start would compile SQLAlchemy, rich and the
# rest from source again (0.5 against 0.2 CPU-seconds an import); written once, on first use
unset PYTHONDONTWRITEBYTECODE
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/.lab/collections"

if [ "$fast" = 1 ]; then
  bash scripts/setup.sh --python-only
  # the rollout CLI refuses before anything runs when gdsfleet.gds is not installed where
  # ANSIBLE_COLLECTIONS_PATH points: build it from this checkout (a few seconds)
  bash scripts/install_collection.sh >/dev/null
  export GDSFLEET_COLLECTION_INSTALLED="$PWD"
  echo "== ruff"; ruff check provisioner plugins tests bench
  # mypy (about 40 CPU seconds from a cold cache) runs beside pytest, reported after it
  echo "== mypy: started in the background"
  types_log=$(mktemp)
  mypy >"$types_log" 2>&1 &
  types_pid=$!
  echo "== pytest (no containers, ${workers} workers)"
  rc=0
  python -m pytest "${xdist[@]}" -m "not container and not fleet and not molecule" "$@" || rc=$?
  echo "== mypy"
  if ! wait "$types_pid"; then
    cat "$types_log" >&2; rm -f "$types_log"
    echo "mypy failed" >&2
    exit 1
  fi
  cat "$types_log"; rm -f "$types_log"
  exit "$rc"
fi

bash scripts/setup.sh
bash scripts/install_collection.sh >/dev/null
export GDSFLEET_COLLECTION_INSTALLED="$PWD"  # the tests' installed_collection fixture uses it

echo "== ruff"; ruff check provisioner plugins tests bench
# mypy (about 40 CPU seconds from cold) and the changelog lint run beside pytest too, and are
# reported (and fail the run) after it
echo "== mypy and antsibull-changelog lint: started in the background"
types_log=$(mktemp)
{ mypy && antsibull-changelog lint; } >"$types_log" 2>&1 &
types_pid=$!
# ansible-lint (about 35 CPU seconds) and ansible-test sanity (about 5 min) run beside pytest:
# the container tests spend most of their time waiting on SSH, apt and simulated reboots, so
# they overlap well on 2 cores. Their results are reported, and fail the run, after pytest.
echo "== ansible-lint (production profile, whole repository): started in the background"
lint_log=$(mktemp)
ansible-lint --offline -q >"$lint_log" 2>&1 &
lint_pid=$!
echo "== ansible-test sanity (the collection as built): started in the background"
sanity_log=$(mktemp)
bash scripts/ansible_test_sanity.sh >"$sanity_log" 2>&1 &
sanity_pid=$!
echo "== pytest (${workers} workers)"
rc=0
python -m pytest "${xdist[@]}" "$@" || rc=$?
failed=0
echo "== mypy and antsibull-changelog lint"
if ! wait "$types_pid"; then
  cat "$types_log" >&2
  echo "mypy or antsibull-changelog lint failed" >&2
  failed=1
else
  cat "$types_log"
fi
rm -f "$types_log"
echo "== ansible-lint (production profile, whole repository)"
if ! wait "$lint_pid"; then
  cat "$lint_log" >&2
  echo "ansible-lint failed" >&2
  failed=1
else
  cat "$lint_log"
fi
rm -f "$lint_log"
echo "== ansible-test sanity (the collection as built)"
if ! wait "$sanity_pid"; then
  grep -vE "^(Collecting|Downloading|Installing|Successfully|WARNING: Location|  )" "$sanity_log" | tail -n 60 >&2
  echo "ansible-test sanity failed" >&2
  failed=1
else
  grep -E "^(Running sanity test|ERROR|WARNING: Skipping)" "$sanity_log" | sed 's/^/  /' || true
fi
rm -f "$sanity_log"
if [ "$failed" = 1 ]; then exit 1; fi
exit "$rc"
