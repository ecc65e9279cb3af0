"""The callback plugin folder of every playbook run of the rollout: ``gdsfleet_events.py``,
the stdout callback that streams each event to ansible-runner as one slim record (see that
module). :func:`provisioner.rollout.runner.run_playbook` puts this folder on
``ANSIBLE_CALLBACK_PLUGINS`` and names the plugin in the run's guard wrapper. Ansible skips
``__init__``.
"""

import os
from collections.abc import Mapping
from pathlib import Path

STREAM_PLUGIN_DIR = Path(__file__).resolve().parent
STDOUT_CALLBACK = "gdsfleet_events"


def callback_dirs(environ: Mapping[str, str], folder: Path) -> str:
    """``ANSIBLE_CALLBACK_PLUGINS`` of ``environ`` with ``folder`` added last (the folders
    already there keep their place)."""
    dirs = [p for p in (environ.get("ANSIBLE_CALLBACK_PLUGINS") or "").split(os.pathsep) if p]
    return os.pathsep.join([*dirs, str(folder)])
