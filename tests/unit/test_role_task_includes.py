"""A role brings in a task file that only some nodes run with ``include_tasks``, never with
``import_tasks``.

An import copies its ``when`` onto every task of the file, and Ansible evaluates a task's
``when`` in a worker process it forks on the controller for each host (ansible/ansible,
lib/ansible/executor/task_executor.py, tag v2.19.14: ``TaskExecutor._execute`` resolves
``self._task.when``; the strategy starts a ``WorkerProcess`` per host and task before that,
lib/ansible/plugins/strategy/__init__.py ``_queue_task``): a file of 30 tasks a
node's route leaves out costs 30 forks per host, each about 20 ms of controller CPU (100
skipped tasks on localhost: 2.1 CPU-s, against 0.05 for one skipped include). An include is
decided once per host. This keeps the roles from sliding back (a p2pdma converge skipped 77
tasks with imports, 48 with includes); the tags the import carried go on the include and, with
``apply``, onto the tasks it brings in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASK_FILES = sorted(ROOT.glob("roles/*/tasks/*.yml"))
IMPORTS = {"import_tasks", "ansible.builtin.import_tasks"}
INCLUDES = {"include_tasks", "ansible.builtin.include_tasks"}


def _tasks(items: Any) -> list[dict[str, Any]]:
    """Every task of a task file, the ones inside blocks too."""
    out: list[dict[str, Any]] = []
    for t in items or []:
        if not isinstance(t, dict):
            continue
        out.append(t)
        for key in ("block", "rescue", "always"):
            out += _tasks(t.get(key))
    return out


def test_the_task_files_are_found() -> None:
    assert len(TASK_FILES) > 20, TASK_FILES


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(ROOT / "roles")))
def test_a_conditional_task_file_is_included_not_imported(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    bad = [t.get("name") for t in _tasks(doc) if IMPORTS & t.keys() and "when" in t]
    assert not bad, (
        f"{path.relative_to(ROOT)}: {bad} import a task file under a `when`; use "
        "ansible.builtin.include_tasks with `file:` and `apply: {tags: [...]}` (the same tags "
        "on the include), so a node that skips it forks one worker, not one per task")


def test_the_includes_keep_the_tags_they_give_their_tasks() -> None:
    """``--tags``/``--skip-tags`` see an include's own tags and its tasks' applied ones: both
    must name the same tags, or a tagged run would skip the include or run its tasks bare."""
    seen = 0
    for path in TASK_FILES:
        for t in _tasks(yaml.safe_load(path.read_text())):
            key = next(iter(INCLUDES & t.keys()), None)
            if key is None or not isinstance(t[key], dict):
                continue
            applied = (t[key].get("apply") or {}).get("tags")
            if applied is None and t.get("tags") is None:
                continue
            seen += 1
            assert sorted(applied or []) == sorted(t.get("tags") or []), (path, t.get("name"))
    assert seen >= 10
