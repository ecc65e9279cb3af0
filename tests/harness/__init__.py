"""Test harness: simulated GPU nodes, stand-in packages, the lab fleet (TEST ONLY)."""
