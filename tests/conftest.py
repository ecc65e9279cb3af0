"""Shared pytest configuration: loads the test harness fixtures (simulated nodes, stand-in
repository, lab fleets) from tests/harness/fixtures.py."""

from __future__ import annotations

pytest_plugins = ["tests.harness.fixtures"]
