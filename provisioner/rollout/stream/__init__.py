"""The callback plugin folder of every playbook run of the rollout: ``gdsfleet_events.py``,
the stdout callback that streams each event to ansible-runner as one slim record (see that
module). :func:`provisioner.rollout.runner.run_playbook` puts this folder on
``ANSIBLE_CALLBACK_PLUGINS`` and names the plugin in the run's guard wrapper. Ansible skips
``__init__``.
"""

from pathlib import Path

STREAM_PLUGIN_DIR = Path(__file__).resolve().parent
STDOUT_CALLBACK = "gdsfleet_events"
