"""Scripts that run ON a node with the node's own python3 (stdlib only, Python 3.8+).

They are not imported by the orchestrator: :func:`load_script` reads their source (package
data) and the transport sends it on stdin to ``python3 -``.
"""

from __future__ import annotations

from importlib import resources


def load_script(name: str) -> bytes:
    """Source of ``provisioner/remote/<name>`` as bytes, ready to send on stdin."""
    return resources.files(__name__).joinpath(name).read_bytes()
