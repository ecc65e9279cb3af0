"""One role of roles/ run on localhost by the checkout's ansible-playbook, its variables from a
JSON file (so no quoting), and the PLAY RECAP read back: what the role tests of the node-side
roles (attest, slurm_gds_health, node_exporter_textfile) share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def play_role(role: str, tmp: Path, variables: dict[str, Any],
              *flags: str) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook`` of a play that runs ``role`` on localhost (no facts)."""
    play = tmp / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": role}],
    }]))
    extra = tmp / "vars.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(play),
                           "-e", f"@{extra}", *flags], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def recap(out: str) -> dict[str, int]:
    """localhost's PLAY RECAP counters (ok, changed, failed, ...)."""
    line = next(ln for ln in out.splitlines() if ln.startswith("localhost") and "ok=" in ln)
    return {k: int(v) for k, v in (p.split("=") for p in line.split()[2:])}
