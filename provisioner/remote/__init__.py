"""Scripts that run ON a node with the node's own python3 (stdlib only, Python 3.8+).

They are not imported by the orchestrator: :func:`load_script` reads their source (package
data), puts in the source of the shared modules each declares (provisioner/remote/bundle.py;
modules whose name starts with ``_`` are such shared node-side code, not scripts) and the
transport sends the result on stdin to ``python3 -``.
"""

from __future__ import annotations


def load_script(name: str) -> bytes:
    """``provisioner/remote/<name>`` bundled with its shared modules, as bytes ready to send on
    stdin (the same bytes for the same files; cached)."""
    from provisioner.remote.bundle import bundle

    return bundle(name)
