"""gdsfleet tests."""
