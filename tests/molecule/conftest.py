"""Fixtures for the collection's container tests (molecule scenarios, preflight refusals)."""

from __future__ import annotations

from gds_collection import installed_collection, molecule_ssh_pubkey

__all__ = ["installed_collection", "molecule_ssh_pubkey"]
