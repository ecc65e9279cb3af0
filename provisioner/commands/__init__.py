"""Sub-commands of ``provisioner``.

Each module here defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``
and is listed in :data:`COMMANDS`. Modules are imported only when their command runs, so
``provisioner --help`` stays fast.
"""

from __future__ import annotations

# name -> module under provisioner.commands
COMMANDS: dict[str, str] = {
    "verify": "verify",
    "status": "status",
    "history": "history",
    "plan": "plan",
    "rollout": "rollout",
    "export": "export",
    "report": "report",
    "exec-nodes": "exec_nodes",
    "attest": "attest",
}
