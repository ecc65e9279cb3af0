"""tests/unit/playbatch.py: many cases in one ansible-playbook run give each case what a run of
its own would (one play here, three local hosts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.unit.playbatch import run_cases

TASKS = [
    {"name": "Refuse a bad value", "ansible.builtin.assert": {
        "that": ["value != 'bad'"], "fail_msg": 'refused: value is "{{ value }}"',
        "quiet": True}},
    {"name": "Say the family", "ansible.builtin.debug": {
        "msg": "family={{ ansible_facts['os_family'] | default('none') }} value={{ value }}"}},
]


def test_each_case_gets_its_own_outcome_and_facts(tmp_path: Path) -> None:
    cases = {
        "good": {"value": "fine", "ansible_facts": {"os_family": "RedHat"}},
        "bad": {"value": "bad", "ansible_facts": {"os_family": "Debian"}},
        "other": {"value": "also fine", "ansible_facts": {"os_family": "Suse"}},
    }
    env = dict(os.environ, ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    got = run_cases(tmp_path, TASKS, cases, env, extra_var_names=("ansible_facts",))
    assert {name: r.rc for name, r in got.items()} == {"good": 0, "bad": 2, "other": 0}
    # a failed host drops out, the others go on; each sees its own facts with -e precedence
    assert 'refused: value is "bad"' in got["bad"].stdout  # raw, as the node prints it
    assert "family=" not in got["bad"].stdout
    assert "family=RedHat value=fine" in got["good"].stdout
    assert "family=Suse value=also fine" in got["other"].stdout
    assert "refused" not in got["good"].stdout + got["other"].stdout


def test_every_case_needs_each_extra_var(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every case needs each of extra_var_names"):
        run_cases(tmp_path, TASKS, {"a": {"value": "x"}}, dict(os.environ),
                  extra_var_names=("ansible_facts",))
