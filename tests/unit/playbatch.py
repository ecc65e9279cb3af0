"""Many input->decision cases of a role in ONE ``ansible-playbook`` run (the fast lane, issue 16).

Each case is one inventory host (``ansible_connection: local``) whose host variables are the
case's variables; the play runs the same tasks on every host, so a case's result is exactly what
a run of its own would give for the variables a role reads from its defaults (inventory host vars
win over role defaults, as the ``-e`` of a single run does). A variable that only ``-e`` beats
(``ansible_facts`` over gathered facts; a role's ``vars/``; ``set_fact``) is named in
``extra_var_names``: it goes in as an extra variable whose value is a template that picks the
running host's own value (``{{ __playbatch_extra[inventory_hostname].<name> }}``), so each host
still gets its case's value with ``-e`` precedence.

A failed host drops out of the play and the others go on (no ``any_errors_fatal``). The results
come from the ``ansible.posix.json`` callback: per host, ``rc`` is what a run of that host alone
would exit with (0, 2 for a failed task, 4 for an unreachable host) and ``out`` holds, task by
task, its status and its raw ``msg``/``stdout``/``stderr`` (so a fail_msg reads as the node
prints it) followed by the result as JSON.

One run costs ansible-playbook's start once (about 2 CPU seconds) instead of once per case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ROOT / ".venv" / "bin" / "ansible-playbook"


@dataclass(frozen=True)
class HostRun:
    """One case's outcome: ``rc`` as its own run would exit, ``out`` its tasks' results."""

    rc: int
    out: str

    @property
    def returncode(self) -> int:  # the name a subprocess.CompletedProcess gives it
        return self.rc

    @property
    def stdout(self) -> str:
        return self.out

    stderr = ""


def case_key(variables: dict[str, Any]) -> str:
    """The identity of a case: its variables, canonical."""
    return json.dumps(variables, sort_keys=True)


def _status(result: dict[str, Any]) -> str:
    if result.get("unreachable"):
        return "unreachable"
    if result.get("failed"):
        return "fatal"
    if result.get("skipped"):
        return "skipping"
    return "changed" if result.get("changed") else "ok"


def _host_text(host: str, results: list[tuple[str, dict[str, Any]]]) -> str:
    lines: list[str] = []
    for task, result in results:
        lines.append(f"TASK [{task}]")
        lines.append(f"{_status(result)}: [{host}]")
        for field in ("msg", "stdout", "stderr"):
            value = result.get(field)
            if isinstance(value, str) and value:
                lines.append(value)
        lines.append(json.dumps(result, sort_keys=True, default=str))
    return "\n".join(lines) + "\n"


def run_cases(folder: Path, tasks: list[dict[str, Any]], cases: dict[str, dict[str, Any]],
              env: dict[str, str], *, gather_facts: bool = False,
              extra_var_names: tuple[str, ...] = (), extra_args: tuple[str, ...] = (),
              timeout: float = 600) -> dict[str, HostRun]:
    """Run ``tasks`` once over one local host per case; ``{case name: HostRun}``.

    ``cases`` maps a case's name to its variables. The names become inventory host names, so
    they are generated here (``case0``, ``case1``...), never taken from the caller's text.
    """
    folder.mkdir(parents=True, exist_ok=True)
    names = {name: f"case{i}" for i, name in enumerate(cases)}
    if not all(k.isidentifier() for k in extra_var_names):
        raise ValueError(f"extra_var_names must be variable names: {list(extra_var_names)}")
    hosts: dict[str, dict[str, Any]] = {}
    per_host_extra: dict[str, dict[str, Any]] = {}
    for name, variables in cases.items():
        missing = [v for v in extra_var_names if v not in variables]
        if missing:
            raise ValueError(f"case {name!r} has no {missing}: every case needs each of "
                             f"extra_var_names {list(extra_var_names)}")
        host = names[name]
        hosts[host] = {"ansible_connection": "local",
                       **{k: v for k, v in variables.items() if k not in extra_var_names}}
        per_host_extra[host] = {k: variables[k] for k in extra_var_names}
    if extra_var_names:
        extra_file = folder / "extra_vars.json"
        extra_file.write_text(json.dumps({
            "__playbatch_extra": per_host_extra,
            **{k: f"{{{{ __playbatch_extra[inventory_hostname].{k} }}}}"
               for k in extra_var_names}}))
        extra_args = ("-e", f"@{extra_file}", *extra_args)
    inventory = folder / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = folder / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": gather_facts,
                                     "tasks": tasks}]))
    run_env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_PYTHON_INTERPRETER=env.get("ANSIBLE_PYTHON_INTERPRETER",
                                                      sys.executable),
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(play),
                           "--forks", str(min(len(hosts), 20) or 1), *extra_args],
                          capture_output=True, text=True, timeout=timeout, env=run_env,
                          check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"ansible-playbook rc={proc.returncode} gave no JSON report:\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}") from None
    per_host: dict[str, list[tuple[str, dict[str, Any]]]] = {h: [] for h in hosts}
    for play_report in report.get("plays", []):
        for task in play_report.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if host in per_host:
                    per_host[host].append((task["task"]["name"], result))
    stats = report.get("stats", {})
    out: dict[str, HostRun] = {}
    for name, host in names.items():
        if host not in stats:
            raise AssertionError(f"ansible-playbook rc={proc.returncode} never reached {host} "
                                 f"({name}):\n{proc.stderr[-4000:]}")
        s = stats[host]
        rc = 4 if s.get("unreachable") else 2 if s.get("failures") else 0
        out[name] = HostRun(rc, _host_text(host, per_host[host]))
    return out
