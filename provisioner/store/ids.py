"""Run ids and timestamps, apart from the tables so that a command that records nothing
(``verify --no-ledger``) does not import SQLAlchemy for them."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone


def utcnow() -> str:
    """Timestamps are UTC ISO-8601 strings of fixed width: they sort as text on any backend."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    """Time-ordered, unique run id, e.g. ``20261122T050233Z-3f9a1c``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)
