#!/bin/sh
# TEST STAND-IN (gdsfleet test harness) for NVIDIA's gdscheck.py: delegates to the stand-in
# gdscheck next to it (same options).
exec "$(dirname "$0")/gdscheck" "$@"
