"""gdsfleet orchestrator: roll out and verify GPUDirect Storage across bare-metal fleets."""

from __future__ import annotations

__version__ = "0.1.0"
