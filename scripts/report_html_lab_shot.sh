#!/usr/bin/env bash
# The HTML report of a lab-shaped run (8 compliant nodes marked simulated, each with the lab's
# fs.mount.nvme warning; tests/unit/reportsfleet.py build_lab), rendered by `provisioner report`
# and shot by headless chromium with the network closed: docs/evidence/reports/report-html-lab.png.
# Usage: bash scripts/report_html_lab_shot.sh [OUT.png]   (figures are the fixture's)
#        LEDGER=.lab/ledger.sqlite bash scripts/report_html_lab_shot.sh OUT.png
#        (the last run of a real ledger instead, e.g. the lab's after scripts/lab.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/docs/evidence/reports/report-html-lab.png}")
ledger=${LEDGER:+$(realpath "$LEDGER")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=${PYTHON:-$root/.venv/bin/python}
cd "$work"  # relative paths: the page names no machine path
if [ -n "$ledger" ]; then
  cp "$ledger" lab-ledger.sqlite  # copied: the page names the ledger by this relative path
  # the fleet is the inventory's absolute path: shown as <checkout>/..., not this machine's
  sqlite3 lab-ledger.sqlite "UPDATE runs SET fleet = replace(fleet, '$root', '<checkout>')"
else
  PYTHONPATH=$root "$py" -c 'from pathlib import Path; from tests.unit.reportsfleet import build_lab; build_lab(Path("."))'
fi
PYTHONPATH=$root "$py" -m provisioner report latest --ledger lab-ledger.sqlite --html lab.html
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$work/profile" --proxy-server=127.0.0.1:9 "--host-resolver-rules=MAP * ~NOTFOUND" \
  --window-size=1400,2000 --screenshot="$out" "file://$work/lab.html" 2>/dev/null
echo "wrote $out"
