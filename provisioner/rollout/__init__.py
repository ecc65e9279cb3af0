"""Gated, resumable rollouts of the collection's playbooks across a fleet.

``planner`` turns a target set and a wave spec into waves and per-node actions; ``runner``
drives one playbook run per wave through ansible-runner and reads per-host outcomes from its
events; ``engine`` is the state machine (waves, gates, budgets, resume) that commits every
node's step together with its result in the ledger; ``lock`` keeps two rollouts off one
fleet; ``drain`` runs the optional scheduler hooks; ``progress`` shows what happens.
"""

from __future__ import annotations
