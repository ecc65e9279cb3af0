"""GPU Operator-managed nodes: a mode of the other subsystems' checks, not ids of its own.

The NVIDIA GPU Operator's driver container, not a host install, brings the driver and nvidia-fs
(facts ``operator``, docs/checks.md "GPU Operator nodes"). The host-package and host-DKMS
checks then skip and say so: each declares it with ``operator_skip=True`` in its own module and
gives its reason through :meth:`Context.operator_skip
<provisioner.verify.checks.registry.Context.operator_skip>`; the list of such checks is
:func:`provisioner.verify.checks.registry.operator_skipping`. This module registers no check.
"""

from __future__ import annotations

from typing import Any


def managed(facts: dict[str, Any]) -> bool:
    """The GPU Operator's driver container manages the node."""
    return bool((facts.get("operator") or {}).get("managed"))


def evidence(facts: dict[str, Any]) -> str:
    """What the gather saw that makes the node operator-managed (for ``observed``)."""
    return str((facts.get("operator") or {}).get("evidence") or "")

