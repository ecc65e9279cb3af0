"""The simulation mark reaches every output, and a rollout's JSON has one shape (issue 47
item 5): ``rollout --json`` (.lab/rollout-report.json) had no ``simulated``, ``export env`` /
``export deepspeed`` said "direct path proven" and ``use_gds: true`` for a simulated node
without a word, rollout's terminal summary said nothing, and ``report RUN --json`` wrote
another shape than the live ``rollout --json``. Also (Low): ``export env --max-age`` gave
"compat (POSIX) I/O" as the reason for a stale proof, ``--group`` errors said ``--limit``, and
``export env`` pointed at DeepSpeed's defaults.

Ledgers are written through the real API; the rollout runs a real ansible-playbook on
local-connection hosts (no containers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from tests.unit.test_export import _direct


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, {**_direct("sim-01"), "simulated": True})
        led.record_verification(run, {**_direct("real-01"), "simulated": False})
        led.finish_run(run, "compliant")
    return path


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_export_env_says_a_node_is_simulated_in_every_format(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _export(capsys, "env", "--ledger", str(ledger), "--node", "sim-01")
    assert code == Exit.OK
    assert out.startswith("# gdsfleet: sim-01: SIMULATED node (gdsfleet_simulated, stand-in "
                          "hardware): direct path proven"), out
    assert "sim-01: SIMULATED: the inventory marks this node simulated" in err
    _, out, _ = _export(capsys, "env", "--ledger", str(ledger), "--node", "sim-01",
                        "--format", "json")
    doc = json.loads(out)
    assert doc["simulated"] is True and doc["use_gds"] is True
    _, out, _ = _export(capsys, "env", "--ledger", str(ledger), "--node", "sim-01",
                        "--format", "dotenv")
    assert out.splitlines()[0].startswith("# gdsfleet: sim-01: SIMULATED node")
    # a real node: no mark anywhere
    code, out, err = _export(capsys, "env", "--ledger", str(ledger), "--node", "real-01",
                             "--format", "json")
    assert json.loads(out)["simulated"] is False and "SIMULATED" not in err


def test_export_deepspeed_says_it_on_stderr_and_per_node(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _export(capsys, "deepspeed", "--ledger", str(ledger), "--node", "sim-01")
    assert code == Exit.OK and json.loads(out)["aio"]["use_gds"] is True
    assert "SIMULATED: sim-01: the inventory marks it simulated (gdsfleet_simulated)" in err
    code, out, err = _export(capsys, "deepspeed", "--ledger", str(ledger), "--node", "sim-01",
                             "--node", "real-01", "--per-node")
    nodes = json.loads(out)["nodes"]
    assert nodes["sim-01"]["simulated"] is True and "simulated" not in nodes["real-01"]


def test_a_stale_proof_is_named_as_stale_not_as_compat(
        ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from provisioner.commands import export

    later = export.utc_now() + timedelta(days=30)
    monkeypatch.setattr(export, "utc_now", lambda: later)
    code, out, err = _export(capsys, "env", "--ledger", str(ledger), "--node", "real-01")
    assert "KVIKIO_COMPAT_MODE=ON" in out
    header = out.splitlines()[0]
    assert "its proof is stale" in header and "compat (POSIX) I/O" not in header, header


def test_group_and_env_errors_name_what_was_given(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _export(capsys, "deepspeed", "--ledger", str(ledger), "--group", "gpu")
    assert code == Exit.USAGE and "--group 'gpu' needs -i INVENTORY" in err, err
    assert "--limit" not in err
    code, _, err = _export(capsys, "deepspeed", "--ledger", str(ledger), "--limit", "gpu")
    assert code == Exit.USAGE and "--limit 'gpu' needs -i INVENTORY" in err
    inv = tmp_path / "hosts"
    inv.write_text("[gpu_nodes]\nreal-01\n")
    code, _, err = _export(capsys, "env", "--ledger", str(ledger), "-i", str(inv),
                           "--node", "other")
    assert code == Exit.USAGE and "DeepSpeed" not in err, err
    code, _, err = _export(capsys, "deepspeed", "--ledger", str(ledger), "-i", str(inv),
                           "--node", "other")
    assert code == Exit.USAGE and "DeepSpeed's defaults" in err


# --------------------------------------------------------------------------- rollout
PLAY = """\
- name: Stand-in site playbook
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
    - name: Fail on demand
      ansible.builtin.fail:
        msg: "install failed on {{ inventory_hostname }}"
      when: inventory_hostname == 'node03'
"""


def _strip_volatile(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "generated_at"}


def test_rollout_json_and_report_run_json_are_one_shape_and_marked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv" / "hosts.yml"
    inv.parent.mkdir()
    hosts = {f"node{i:02d}": {"ansible_connection": "local",
                              "ansible_python_interpreter": sys.executable,
                              **({"gdsfleet_simulated": True} if i < 3 else {})}
             for i in (1, 2, 3)}
    inv.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    pb = tmp_path / "site.yml"
    pb.write_text(PLAY)
    ledger = tmp_path / "ledger.sqlite"
    live = tmp_path / "rollout-report.json"
    rc = main(["rollout", "-i", str(inv), "--ledger", str(ledger), "--playbook", str(pb),
               "--no-verify", "--plain", "--waves", "1,100%", "--max-failures", "1",
               "--allow-local-connection",
               "--json", str(live)])
    err = capsys.readouterr().err
    assert rc == Exit.NOT_COMPLIANT, err
    # the terminal summary says it, in the words every report uses
    assert "SIMULATED: 2 of 3 node(s) are marked simulated by their inventory" in err
    doc = json.loads(live.read_text())
    assert doc["simulated"] == 2
    marks = {n["name"]: n["simulated"] for n in doc["nodes"]}
    assert marks == {"node01": True, "node02": True, "node03": False}
    assert main(["report", doc["run_id"], "--ledger", str(ledger), "--json", "-"]) == 0
    again = json.loads(capsys.readouterr().out)
    # one writer: the same document, key for key and value for value
    assert _strip_volatile(again) == _strip_volatile(doc)
    assert doc["exit_code"] == Exit.NOT_COMPLIANT and doc["waves"] and doc["message"]
    n3 = {n["name"]: n for n in doc["nodes"]}["node03"]
    assert n3["failure"] == "failed" and "install failed on node03" in n3["reason"]
    assert n3["outcome"]["status"] == "failed" and n3["provisioned"] is False
    # JUnit and HTML of the same run carry the mark too
    html = tmp_path / "r.html"
    junit = tmp_path / "r.xml"
    assert main(["report", "latest", "--ledger", str(ledger), "--html", str(html),
                 "--junit", str(junit)]) == 0
    assert "SIMULATED: 2 of 3 node(s)" in html.read_text()
    assert junit.read_text().count('name="simulated" value="true"') == 2


def test_a_run_an_older_release_recorded_has_the_same_keys(tmp_path: Path) -> None:
    """No run_results row (an older release's rollout): the same keys, nulls where the
    ledger cannot know."""
    from provisioner.reports.model import from_ledger
    from provisioner.rollout.planner import plan_waves
    from provisioner.rollout.state import seed_pending

    plan = plan_waves(["a", "b"], "1,100%")
    with Ledger.open(tmp_path / "l.sqlite") as led:
        run = led.start_run("rollout", "fleet", {"plan": plan.to_dict()})
        seed_pending(led, run, plan)
        led.finish_run(run, "aborted")
        old = from_ledger(led, run)
        led.record_result(run, {"run_id": run, "status": "aborted", "exit_code": 3,
                                "message": "m", "resumed": False, "duration_s": 1.0,
                                "waves": [], "nodes": []})
        new = from_ledger(led, run)
    assert set(old) == set(new)
    assert [set(n) for n in old["nodes"]] == [set(n) for n in new["nodes"]]
    assert old["exit_code"] is None and new["exit_code"] == 3
