"""Node-level checks (``node.*``): a node that could not be verified at all. They replace the
whole list of checks and are emitted by :mod:`provisioner.verify.node`, never by evaluate()."""

from __future__ import annotations

from provisioner.verify.checks.registry import declare

_BY = "provisioner.verify.node"

declare("node.reachable", __name__, "the node answers over SSH", emitted_by=_BY)
declare("node.gather", __name__, "the gather script printed its report", emitted_by=_BY)
declare("node.verify", __name__, "the node's verification could be evaluated", emitted_by=_BY)
