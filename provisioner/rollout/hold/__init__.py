"""The callback plugin folder of a held playbook run (see :mod:`provisioner.rollout.prestart`).

Only ``gdsfleet_hold.py`` lives here: ``ansible-playbook`` loads every callback plugin of a
folder on ``ANSIBLE_CALLBACK_PLUGINS``, and the rollout puts this folder there for its held runs
only. Ansible skips ``__init__``.
"""
