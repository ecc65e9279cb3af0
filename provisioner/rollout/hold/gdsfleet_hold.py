"""Callback plugin: hold an ``ansible-playbook`` run before its first play until released.

Loaded only into the runs ``provisioner rollout`` starts ahead of their wave (its folder is on
``ANSIBLE_CALLBACK_PLUGINS`` for those runs alone; :mod:`provisioner.rollout.prestart`). By the
time ``v2_playbook_on_start`` is called, ansible-playbook has imported itself, read the
inventory and loaded the playbook, which is what a wave would otherwise wait for; no host has
been contacted. The plugin then reads one byte from the FIFO named in ``GDSFLEET_HOLD_FIFO``:

- ``g``: go, the playbook runs as it would have;
- ``a``, or the end of the FIFO (every writer gone: the rollout died or dropped the run), or
  anything else: the process exits at once with status 75, having touched no host.

Without ``GDSFLEET_HOLD_FIFO`` it does nothing. Stdlib and ansible-core only; it runs inside
ansible-playbook, never imported by the provisioner.
"""

from __future__ import annotations

import os
import select
import sys

from ansible.plugins.callback import CallbackBase

FIFO_ENV = "GDSFLEET_HOLD_FIFO"
CANCELED_EXIT = 75  # EX_TEMPFAIL: the run was dropped before it began


def wait_for_go(path: str) -> bool:
    """True when the rollout wrote ``g``; False for anything else, including its end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            if not events:
                continue
            try:
                data = os.read(fd, 1)
            except BlockingIOError:
                continue
            return data == b"g"
    finally:
        os.close(fd)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gdsfleet_hold"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_start(self, playbook: object) -> None:
        path = os.environ.get(FIFO_ENV)
        if not path:
            return
        if not wait_for_go(path):
            sys.stderr.write("gdsfleet: this held playbook run was dropped before its first "
                             "play; no host was touched\n")
            sys.stderr.flush()
            os._exit(CANCELED_EXIT)
