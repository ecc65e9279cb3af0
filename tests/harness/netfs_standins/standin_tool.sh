#!/bin/sh
# STAND-IN for a vendor's read-only tool (lctl, mmlsconfig, weka) and for the BeeGFS client
# rebuild, used by tests/unit/test_netfs_vendor_prereqs.py. The test copies it under the tool's
# name into a per-host directory; it prints "<itself>.<first argument>.out" (or "<itself>.out")
# and exits with the number in "<itself>.rc" (0 when absent). Every call is appended to
# "<itself>.calls" so the test can count rebuilds.
echo "$*" >> "$0.calls"
if [ -f "$0.$1.out" ]; then cat "$0.$1.out"; elif [ -f "$0.out" ]; then cat "$0.out"; fi
if [ -f "$0.rc" ]; then exit "$(cat "$0.rc")"; fi
exit 0
