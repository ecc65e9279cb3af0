"""The first wave's playbook run started before the rollout knows its hosts, held at a gate
(provisioner.rollout.prestart.Gate): ansible-playbook reads its inventory, then waits in the
gate script, its last inventory source; released, it runs for exactly the hosts written into
its ``--limit @FILE``; dropped, or never reaching its gate, it stops at the missing limit file
having touched no host. Real ansible-playbook runs (``ansible_connection: local``) whose one
task writes a file per host: the files are what "touched" means."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.rollout.adapters import AnsibleProvisioner
from provisioner.rollout.executors import LocalExecutor
from provisioner.rollout.prestart import Gate, Held
from provisioner.rollout.runner import HostOutcome, HostStatus, PlaybookResult
from tests.unit.test_rollout_prestart import _inventory, _marks, _playbook

ALL = ["h1", "h2", "h3"]


def _ahead(tmp: Path, *, envvars: dict[str, str] | None = None,
           relay: Any = None) -> Held:
    return LocalExecutor().start_ahead(
        str(_playbook(tmp)), _inventory(tmp), forks=3, extravars={"mark": "ahead"},
        envvars=envvars or {}, private_data_dir=tmp / "pdd", on_host_event=relay,
        timeout=None, children_lock=None, run_tag="20261127T000000Z-abcdef")


def _wait(cond: Any, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def _gate(held: Held) -> Gate:
    assert isinstance(held.hold, Gate)
    return held.hold


def test_a_run_started_ahead_waits_at_its_gate_then_runs_for_the_hosts_it_is_given(
        tmp_path: Path) -> None:
    seen: list[str] = []
    held = _ahead(tmp_path, relay=lambda h, k, t: seen.append(h))
    gate = _gate(held)
    # its script sits where the run's guard wrapper does (a noexec /tmp would stop it)
    assert Path(gate.script).parent == tmp_path / "pdd"
    _wait(lambda: gate.arrived, "the run never reached its gate")
    time.sleep(0.5)  # at the gate: a run that went on would have written marks by now
    assert _marks(tmp_path) == {}
    assert not os.path.exists(gate.limit_file)
    assert held.matches(["h3", "h1"])  # any plain names: they come with the release
    res = held.release(["h3", "h1"])
    assert res.error is None and res.status == "successful"
    assert {h: o.status for h, o in res.hosts.items()} == {"h1": HostStatus.CHANGED,
                                                           "h3": HostStatus.CHANGED}
    assert _marks(tmp_path) == {"h1": "ahead", "h3": "ahead"}  # h2: never touched
    assert set(seen) == {"h1", "h3"}
    assert held.stood_in(res)
    whole = held.wait(120)
    assert whole is not None and whole.rc == 0 and whole.hosts == res.hosts
    # the gate's folder (its FIFO, script and limit file) is gone with the release
    assert not os.path.exists(gate.script) and not os.path.exists(gate.limit_file)


def test_a_dropped_run_touches_no_host_and_leaves_no_artifacts(tmp_path: Path) -> None:
    held = _ahead(tmp_path)
    _wait(lambda: _gate(held).arrived, "the run never reached its gate")
    held.drop(60)
    assert held.done
    result = held.wait(1)
    assert result is not None and result.hosts == {}
    assert _marks(tmp_path) == {}
    assert list((tmp_path / "pdd" / "artifacts").iterdir()) == []


def test_a_run_dropped_before_its_gate_stops_there_too(tmp_path: Path) -> None:
    """The word comes before ansible-playbook has even loaded: the FIFO keeps it."""
    held = _ahead(tmp_path)
    held.drop(60)
    assert held.done and _marks(tmp_path) == {}


def test_without_the_script_plugin_the_missing_limit_file_stops_the_run_and_the_wave_starts_its_own(
        tmp_path: Path) -> None:
    """An operator's ansible.cfg may enable other inventory plugins only: the gate script is
    then never run (nor read as hosts by the ini plugin), ansible-playbook stops at its missing
    --limit file before any play, and the wave's own run takes its place."""
    env = {"ANSIBLE_INVENTORY_ENABLED": "ini,yaml"}
    prov = AnsibleProvisioner(inventory=_inventory(tmp_path), playbook=str(_playbook(tmp_path)),
                              reboot_playbook="reboot.yml", forks=3, envvars=env,
                              extravars={"mark": "ahead"}, private_data_dir=tmp_path / "pdd",
                              start_together=False)
    assert prov.start_ahead()
    held = prov._ahead[0] if prov._ahead else None
    assert held is not None
    _wait(lambda: held.done, "a run without its gate script should stop at its limit file")
    result = held.wait(1)
    assert result is not None and result.error is not None and "limit file" in result.error
    assert not _gate(held).arrived and not held.stood_in(result)
    assert _marks(tmp_path) == {}
    out = prov.provision(["h2"], wave=0, on_host_event=lambda h, k, t: None)
    assert {h: o.status for h, o in out.items()} == {"h2": HostStatus.CHANGED}
    assert _marks(tmp_path) == {"h2": "ahead"}


def test_a_run_that_ended_before_its_release_is_not_used(tmp_path: Path) -> None:
    """stood_in: only a gate run that never arrived and never began is replaced."""
    ended = PlaybookResult("p", 1, "failed", {}, error="the playbook did not run")
    ran = PlaybookResult("p", 0, "successful", {"h1": HostOutcome("h1", HostStatus.OK, ok=1)})
    held = Held(None, lambda hold, on_final: ended, name="t")
    held.wait(10)
    assert not held.matches(["h1"])  # it ended: the wave starts its own
    assert not held.stood_in(ended) and held.stood_in(ran)
    held.drop(1)
    plain = Held(["h1"], lambda hold, on_final: ended, name="t")
    plain.wait(10)
    assert plain.stood_in(ended)  # a run held with its hosts is the wave's, whatever it did
    plain.drop(1)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(min_size=1, max_size=40),
                 st.sampled_from(["h*", "h1,h2", "h1\nh2", "@/etc/passwd", "!h1", "&h1",
                                  "h[0:9]", "~h.*", "all", "h1:h2", " h1", "-h1", "h1.x"])))
def test_only_plain_host_names_reach_a_limit_file(name: str) -> None:
    """A name that could be a pattern (``*``, ``:``, ``!``, ``&``, ``,``, ``[``, ``~``), a
    second line or an ``@file`` of its own never goes into the limit file: matches() is False,
    so the wave starts its own run, and go() refuses it."""
    import threading

    from provisioner.inventory import HOSTNAME_RE

    waiting = threading.Event()
    ended = PlaybookResult("p", 0, "successful", {})
    held = Held(None, lambda hold, on_final: (waiting.wait(10), ended)[1], name="t")
    gate = _gate(held)
    try:
        plain = bool(HOSTNAME_RE.match(name))
        assert held.matches([name]) is plain
        assert not held.matches([])
        if plain:
            gate.go([name])
            with open(gate.limit_file, encoding="utf-8") as fh:
                assert fh.read().splitlines() == [name]
        else:
            with pytest.raises(ValueError):
                gate.go(["h1", name])
            assert not os.path.exists(gate.limit_file) and gate.released_at is None
    finally:
        waiting.set()
        held.drop(10)


def test_the_gate_script_is_no_inventory_to_the_other_plugins(tmp_path: Path) -> None:
    """Should the script plugin fail (the drop) or be off, ansible-core tries the source with
    its other plugins: neither ini nor yaml may read hosts out of the script."""
    gate = Gate()
    try:
        inv = tmp_path / "one.ini"
        inv.write_text("h1 ansible_connection=local\n")
        out = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inv),
             "-i", gate.script, "--list"],
            env={**os.environ, "ANSIBLE_INVENTORY_ENABLED": "ini,yaml,toml,host_list"},
            capture_output=True, text=True, timeout=120, check=True)
        import json

        data = json.loads(out.stdout)
        hosts = set(data.get("_meta", {}).get("hostvars", {}))
        assert hosts == {"h1"}, hosts
        assert "Unable to parse" in out.stderr and gate.script in out.stderr
    finally:
        gate.close()



# ---------------------------------------------------------------- the rollout command

RUN_PLAY = """\
- name: Records each host's playbook token (the run it names is what node_lock reads)
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait when asked
      ansible.builtin.command: "sleep {{ wait_s | default(0) }}"
      changed_when: false
    - name: Token
      ansible.builtin.copy:
        content: "{{ lookup('env', 'GDSFLEET_PLAYBOOK_TOKEN') }}"
        dest: "{{ tokens }}/{{ inventory_hostname }}"
        mode: "0600"
"""


def _lab(tmp: Path) -> list[str]:
    inv = tmp / "inv" / "hosts"
    inv.parent.mkdir()
    inv.write_text("[gpu_nodes]\n" + "".join(
        f"node{i:02d} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for i in range(1, 5)))
    (tmp / "site.yml").write_text(RUN_PLAY)
    (tmp / "tokens").mkdir()
    return ["rollout", "-i", str(inv), "--ledger", str(tmp / "ledger.sqlite"), "--playbook",
            str(tmp / "site.yml"), "--no-verify", "--plain", "-q", "-e",
            f"tokens={tmp / 'tokens'}", "--allow-local-connection"]


def _runs_in_tokens(tmp: Path) -> dict[str, str]:
    from provisioner.rollout.guard import run_of

    return {p.name: run_of(p.read_text()) for p in (tmp / "tokens").iterdir()}


def test_a_new_rollout_runs_its_canary_ahead_under_the_run_id_the_ledger_gives_it(
        tmp_path: Path) -> None:
    from provisioner.cli import main
    from provisioner.exitcodes import Exit
    from provisioner.store import Ledger

    assert main([*_lab(tmp_path), "--waves", "1,100%"]) == Exit.OK
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        (run,) = led.runs(kind="rollout")
    assert _runs_in_tokens(tmp_path) == {f"node{i:02d}": run["id"] for i in range(1, 5)}


def test_a_resumed_rollout_drops_the_run_started_ahead_for_a_new_id(tmp_path: Path) -> None:
    """The run started ahead carries the id a new run would get; the ledger holds an unfinished
    run of this fleet, so the rollout resumes that one instead: every playbook token then names
    the resumed run, never the id nobody got."""
    from provisioner.cli import main
    from provisioner.exitcodes import Exit
    from provisioner.store import Ledger

    argv = _lab(tmp_path)
    first = subprocess.Popen([sys.executable, "-m", "provisioner.cli", *argv, "--waves",
                              "1,100%", "-e", "wait_s=30"], cwd=str(Path(__file__).parents[2]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: (tmp_path / "ledger.sqlite").exists() and _step_of(
            tmp_path, "node01") == "provisioning", "the canary never began", 120)
    finally:
        first.kill()
        first.wait()
    assert main([*argv, "--waves", "1,100%"]) == Exit.OK
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        (run,) = led.runs(kind="rollout")
    assert run["status"] == "succeeded"
    assert _runs_in_tokens(tmp_path) == {f"node{i:02d}": run["id"] for i in range(1, 5)}


def _step_of(tmp: Path, node: str) -> str | None:
    from provisioner.store import Ledger

    with Ledger.open(tmp / "ledger.sqlite") as led:
        runs = led.runs(kind="rollout")
        return (led.node_steps(runs[0]["id"]).get(node) or {}).get("step") if runs else None


# ---------------------------------------------------------------- the upstream facts

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "ansible-core" / "upstream.yml"


def test_the_upstream_facts_the_gate_rests_on_hold_for_the_installed_versions(
        tmp_path: Path) -> None:
    """tests/fixtures/ansible-core/upstream.yml (ansible-core v2.19.14, ansible-runner 2.4.3),
    checked against what is installed: a missing @FILE limit is refused, the script plugin is
    on by default, and ansible-runner keeps a list of inventories in order."""
    import yaml
    from ansible import constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible_runner.config.runner import RunnerConfig

    facts = yaml.safe_load(UPSTREAM.read_text())
    assert C.config.get_configuration_definitions()["INVENTORY_ENABLED"]["default"] == \
        facts["inventory_enabled_default"]
    inv = _inventory(tmp_path)
    manager = InventoryManager(loader=DataLoader(), sources=[str(inv)])
    with pytest.raises(AnsibleError, match=facts["limit_file_missing"]):
        manager.subset(f"@{tmp_path / 'no-such-limit'}")
    (tmp_path / "limit").write_text("h3\nh1\n")
    manager.subset(f"@{tmp_path / 'limit'}")
    assert sorted(h.name for h in manager.get_hosts("all")) == ["h1", "h3"]
    rc = RunnerConfig(private_data_dir=str(tmp_path / "pdd"), playbook="p.yml",
                      inventory=[str(inv), str(tmp_path / "gate")])
    rc.prepare()
    cmd = rc.command
    at = [i for i, a in enumerate(cmd) if a == "-i"]
    assert [cmd[i + 1] for i in at] == [str(inv), str(tmp_path / "gate")]
