#!/usr/bin/python3
# TEST STAND-IN (gdsfleet test harness) for NVIDIA's gdscheck.py: delegates to the stand-in
# gdscheck next to it (same options).
import os
import sys

tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gdscheck")
os.execv(tool, [tool, *sys.argv[1:]])  # noqa: S606
