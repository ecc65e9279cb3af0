#!/usr/bin/env bash
# Builds the collection tarball and installs it into .lab/collections, so that playbooks,
# molecule and tests run the roles by FQCN (gdsfleet.gds.<role>) from the built artifact.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .lab/build .lab/collections
rm -f .lab/build/gdsfleet-gds-*.tar.gz
ansible-galaxy collection build --force --output-path .lab/build . >/dev/null
ansible-galaxy collection install --force --offline --no-deps -p .lab/collections .lab/build/gdsfleet-gds-*.tar.gz >/dev/null
ls .lab/build/gdsfleet-gds-*.tar.gz
