"""A wave's playbook run started ahead and held before its first play (provisioner.rollout
.prestart): it touches no host until released, runs as a run started then would once released,
and ends without touching a host when dropped, when the rollout dies, or when its wave turns
out to need other hosts. Real ansible-playbook runs (``ansible_connection: local``) whose one
task writes a file per host: the files are what "touched" means."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.rollout import guard
from provisioner.rollout.adapters import AnsibleProvisioner
from provisioner.rollout.engine import Engine
from provisioner.rollout.executors import LocalExecutor
from provisioner.rollout.interfaces import RolloutOptions
from provisioner.rollout.runner import HostOutcome, HostStatus, PlaybookResult, run_playbook

HOSTS = ["h1", "h2", "h3"]
REPO = Path(__file__).resolve().parents[2]


def _inventory(tmp: Path) -> Path:
    inv = tmp / "hosts.ini"
    inv.write_text("\n".join(HOSTS) + "\n\n[all:vars]\nansible_connection=local\n"
                   f"ansible_python_interpreter={sys.executable}\n")
    return inv


def _playbook(tmp: Path) -> Path:
    """One task per host: write ``marks/<host>`` holding the extra var ``mark``."""
    (tmp / "marks").mkdir()
    play = tmp / "mark.yml"
    play.write_text(textwrap.dedent(f"""\
        - name: Marks each host
          hosts: all
          gather_facts: false
          tasks:
            - name: Writes the mark
              ansible.builtin.copy:
                content: "{{{{ mark }}}}"
                dest: "{tmp}/marks/{{{{ inventory_hostname }}}}"
                mode: "0600"
        """))
    return play


def _marks(tmp: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((tmp / "marks").iterdir())}


def _wait_held(pdd: Path, timeout: float = 120.0) -> Path:
    """The artifact folder of the run that reached its hold (its first event written)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for events in pdd.glob("artifacts/*/events.jsonl"):
            if "playbook_on_start" in events.read_text():
                return events.parent
        time.sleep(0.1)
    raise AssertionError("the held run never reached its hold")


def _prestart(tmp: Path, hosts: Sequence[str], *, extravars: Mapping[str, Any] | None = None,
              lock: Path | None = None, timeout: int | None = None) -> Any:
    return LocalExecutor().prestart(
        str(_playbook(tmp)), _inventory(tmp), list(hosts), forks=3,
        extravars=extravars or {"mark": "held"}, envvars={}, private_data_dir=tmp / "pdd",
        on_host_event=None, timeout=timeout, children_lock=lock, run_tag="t", wave=1,
        kind="site")


def test_a_held_run_touches_no_host_until_released_then_runs_with_its_extra_vars(
        tmp_path: Path) -> None:
    held = _prestart(tmp_path, HOSTS)
    art = _wait_held(tmp_path / "pdd")
    time.sleep(1.0)  # held: a run that went on would have written its marks by now
    assert _marks(tmp_path) == {}
    # while it waits, a whole other run of the same folder with the same extra vars starts
    # and ends (the wave before it, which removes its own extra-vars file at its end)
    other = run_playbook(tmp_path / "mark.yml", tmp_path / "hosts.ini", ["h1"], forks=1,
                         extravars={"mark": "wave before"},
                         private_data_dir=tmp_path / "pdd")
    assert other.hosts["h1"].status is HostStatus.CHANGED
    assert _marks(tmp_path) == {"h1": "wave before"}
    res = held.release()
    assert res.error is None and res.status == "successful"
    assert {h: o.status for h, o in res.hosts.items()} == {h: HostStatus.CHANGED
                                                           for h in HOSTS}
    assert _marks(tmp_path) == dict.fromkeys(HOSTS, "held")
    # release() returned at the run's stats; the whole run's result has the same outcomes
    whole = held.wait(120)
    assert whole is not None and whole.rc == 0 and whole.hosts == res.hosts
    # its events and outcomes are kept as a run started now would keep them
    assert (art / "hosts.json").is_file()
    kinds = [json.loads(ln)["event"] for ln in (art / "events.jsonl").read_text().splitlines()]
    assert kinds[0] == "playbook_on_start" and kinds[-1] == "playbook_on_stats"
    # no extra-vars file is left, and none is ever the shared env/extravars
    assert not list((tmp_path / "pdd" / "env").glob("extravars*"))


def test_a_dropped_run_touches_no_host_and_leaves_no_run_behind(tmp_path: Path) -> None:
    lock = tmp_path / "rollout.lock.children"
    held = _prestart(tmp_path, HOSTS, lock=lock)
    art = _wait_held(tmp_path / "pdd")
    assert guard.holders(str(lock)), "the held run holds the children lock while it lives"
    t0 = time.monotonic()
    held.drop()
    assert time.monotonic() - t0 < 30
    assert _marks(tmp_path) == {}
    assert not art.exists()  # nothing ran: no artifacts of it
    assert guard.holders(str(lock)) == []  # its guard and ansible-playbook are gone


def test_a_run_dropped_before_it_reaches_its_hold_touches_no_host(tmp_path: Path) -> None:
    held = _prestart(tmp_path, HOSTS)
    held.drop()  # at once: ansible-playbook is still starting
    assert _marks(tmp_path) == {}
    assert not list((tmp_path / "pdd").glob("artifacts/*/events.jsonl"))


def test_a_held_run_ends_untouched_when_the_rollout_dies(tmp_path: Path) -> None:
    """kill -9 of the process that held it: the run's guard dies with it and the FIFO's last
    writer is gone; nothing of the run is left and no host was touched."""
    lock = tmp_path / "rollout.lock.children"
    _playbook(tmp_path)
    _inventory(tmp_path)
    script = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from provisioner.rollout.executors import LocalExecutor
        tmp = Path({str(tmp_path)!r})
        held = LocalExecutor().prestart(
            str(tmp / "mark.yml"), tmp / "hosts.ini", ["h1", "h2"], forks=2,
            extravars={{"mark": "x"}}, envvars={{}}, private_data_dir=tmp / "pdd",
            on_host_event=None, timeout=None, children_lock={str(lock)!r}, run_tag="t",
            wave=1, kind="site")
        time.sleep(600)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        _wait_held(tmp_path / "pdd")
        assert guard.holders(str(lock))
    finally:
        proc.kill()
        proc.wait()
    end = time.monotonic() + 30
    while guard.holders(str(lock)) and time.monotonic() < end:
        time.sleep(0.2)
    assert guard.holders(str(lock)) == []
    assert _marks(tmp_path) == {}


def test_the_timeout_counts_from_the_release() -> None:
    released: list[float] = []

    def began() -> float:
        return released[0] if released else time.monotonic()

    stop = guard.Stop("none.0.0", lambda: False, timeout=1, began=began)
    released_clock = time.monotonic() - 5  # held 5 s ago ... released then: past 1 s
    assert stop() is False  # held: its clock has not started
    released.append(released_clock)
    assert stop() is True and stop.reason == "timeout"


# ---------------------------------------------------------------- the provisioner and engine


class _FakeHeld:
    def __init__(self, log: list[tuple[Any, ...]], hosts: Sequence[str], wave: int,
                 relay: Callable[[str, str, str], None] | None) -> None:
        self.log, self.hosts, self.wave, self.relay = log, tuple(hosts), wave, relay

    def matches(self, hosts: Sequence[str]) -> bool:
        return sorted(self.hosts) == sorted(hosts)

    def release(self, hosts: Sequence[str] = ()) -> PlaybookResult:
        self.log.append(("release", self.wave, self.hosts))
        assert self.relay is not None
        for h in self.hosts:
            self.relay(h, "runner_on_ok", "t")
        return PlaybookResult("p", 0, "successful",
                              {h: HostOutcome(h, HostStatus.CHANGED, ok=1, changed=1)
                               for h in self.hosts})

    def stood_in(self, result: PlaybookResult) -> bool:
        return True

    def drop(self) -> None:
        self.log.append(("drop", self.wave, self.hosts))


class _FakeExecutor:
    """Records runs and held runs; every host changes."""

    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.fail = set(fail)

    def run(self, playbook: str, inventory: Any, hosts: Sequence[str], **kw: Any
            ) -> PlaybookResult:
        self.log.append(("run", kw["wave"], tuple(hosts)))
        for h in hosts:
            kw["on_host_event"](h, "runner_on_failed" if h in self.fail else "runner_on_ok", "t")
        return PlaybookResult(playbook, 0, "successful", {
            h: HostOutcome(h, HostStatus.FAILED if h in self.fail else HostStatus.CHANGED,
                           failed_task="t" if h in self.fail else None) for h in hosts})

    def prestart(self, playbook: str, inventory: Any, hosts: Sequence[str], **kw: Any
                 ) -> _FakeHeld:
        self.log.append(("prestart", kw["wave"], tuple(hosts)))
        return _FakeHeld(self.log, hosts, kw["wave"], kw["on_host_event"])


def _provisioner(tmp: Path, executor: Any, together: bool = False) -> AnsibleProvisioner:
    return AnsibleProvisioner(inventory=tmp / "hosts.ini", playbook="site.yml",
                              reboot_playbook="reboot.yml", forks=5, executor=executor,
                              events_log=tmp / "events.jsonl", start_together=together)


def test_the_provisioner_lets_a_held_run_go_only_for_its_wave_and_hosts(tmp_path: Path) -> None:
    ex = _FakeExecutor()
    prov = _provisioner(tmp_path, ex)
    seen: list[str] = []
    # asked for while no run is under way: it starts once the current wave's run is at work
    assert prov.prestart(["a", "b"], wave=1)
    assert ex.log == []
    prov.provision(["x"], wave=0, on_host_event=lambda h, k, t: None)
    assert ex.log == [("run", 0, ("x",)), ("prestart", 1, ("a", "b"))]
    out = prov.provision(["b", "a"], wave=1, on_host_event=lambda h, k, t: seen.append(h))
    assert {h: o.status for h, o in out.items()} == {"a": HostStatus.CHANGED,
                                                     "b": HostStatus.CHANGED}
    assert ex.log[2:] == [("release", 1, ("a", "b"))]
    assert sorted(seen) == ["a", "b"]  # its host events reach the wave's callback
    # other hosts when the wave begins (a drain failed, reconcile found one compliant): the
    # held run is dropped and the wave starts its own run
    ex.log.clear()
    prov.prestart(["c", "d"], wave=2)
    prov.reboot(["a"], wave=1)  # not a site playbook run: it does not start the held one
    prov.provision(["y"], wave=1, on_host_event=lambda h, k, t: None)
    prov.provision(["c"], wave=2, on_host_event=lambda h, k, t: None)
    assert ex.log == [("run", 1, ("a",)), ("run", 1, ("y",)), ("prestart", 2, ("c", "d")),
                      ("drop", 2, ("c", "d")), ("run", 2, ("c",))]
    # one asked for too late (its wave is running) is forgotten; one left over is dropped
    # when the rollout ends
    ex.log.clear()
    prov.prestart(["e"], wave=3)
    prov.provision(["e"], wave=3, on_host_event=lambda h, k, t: None)
    prov.prestart(["f"], wave=5)
    prov.provision(["g"], wave=4, on_host_event=lambda h, k, t: None)
    prov.drop_prestarted()
    assert ex.log == [("run", 3, ("e",)), ("run", 4, ("g",)), ("prestart", 5, ("f",)),
                      ("drop", 5, ("f",))]


def _engine(tmp: Path, ex: _FakeExecutor, together: bool = False, **opts: Any) -> Engine:
    from provisioner.store import Ledger

    ledger = Ledger.open(tmp / "l.db")
    options = RolloutOptions(verify=False, waves="1,2,100%", **opts)
    return Engine(ledger=ledger, fleet="f", targets=[f"n{i}" for i in range(6)],
                  provisioner=_provisioner(tmp, ex, together), verifier=None,
                  options=options)


def test_the_engine_starts_each_next_wave_ahead_and_lets_it_go_when_it_begins(
        tmp_path: Path) -> None:
    ex = _FakeExecutor()
    res = _engine(tmp_path, ex).run()
    assert res.status == "succeeded", res.message
    # wave 1's run starts once the canary's is at work, wave 2's once wave 1's is let go
    assert ex.log == [
        ("run", 0, ("n0",)), ("prestart", 1, ("n1", "n2")),
        ("prestart", 2, ("n3", "n4", "n5")), ("release", 1, ("n1", "n2")),
        ("release", 2, ("n3", "n4", "n5")),
    ]


def test_with_cores_enough_the_next_wave_starts_with_the_current_one(tmp_path: Path) -> None:
    """start_together (4 cores or more): wave 1's held run starts with the canary's run, not
    at its first host event, so that it has loaded by the canary's stats."""
    ex = _FakeExecutor()
    res = _engine(tmp_path, ex, together=True).run()
    assert res.status == "succeeded", res.message
    assert ex.log == [
        ("prestart", 1, ("n1", "n2")), ("run", 0, ("n0",)),
        ("prestart", 2, ("n3", "n4", "n5")), ("release", 1, ("n1", "n2")),
        ("release", 2, ("n3", "n4", "n5")),
    ]


def test_a_failed_canary_drops_the_held_wave_untouched(tmp_path: Path) -> None:
    ex = _FakeExecutor(fail=["n0"])
    res = _engine(tmp_path, ex).run()
    assert res.status == "aborted"
    assert ex.log == [("run", 0, ("n0",)), ("prestart", 1, ("n1", "n2")),
                      ("drop", 1, ("n1", "n2"))]


def test_no_run_is_held_when_a_drain_hook_may_skip_a_node(tmp_path: Path) -> None:
    from provisioner.rollout.drain import DrainHooks

    ex = _FakeExecutor()
    eng = _engine(tmp_path, ex)
    eng.drain = DrainHooks(drain_cmd="true")
    assert eng.run().status == "succeeded"
    assert [e[0] for e in ex.log] == ["run", "run", "run"]


def test_hold_env_keeps_the_operators_callback_folders_first() -> None:
    from provisioner.rollout.prestart import HOLD_PLUGIN_DIR, Hold

    hold = Hold()
    try:
        env = hold.env({"ANSIBLE_CALLBACK_PLUGINS": f"/opt/cb{os.pathsep}/srv/cb"})
        assert env["ANSIBLE_CALLBACK_PLUGINS"].split(os.pathsep) == [
            "/opt/cb", "/srv/cb", str(HOLD_PLUGIN_DIR)]
        assert (HOLD_PLUGIN_DIR / "gdsfleet_hold.py").is_file()
        assert Path(env["GDSFLEET_HOLD_FIFO"]).exists()
    finally:
        hold.close()
    assert not Path(env["GDSFLEET_HOLD_FIFO"]).exists()


LINGER = '''\
"""Test stand-in: an ansible-playbook that lingers after its closing stats (as a large run's
workers, temporary files and interpreter take a while to end)."""
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gdsfleet_test_linger"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_stats(self, stats):
        time.sleep(float(os.environ["GDSFLEET_TEST_LINGER_S"]))
'''


def test_a_wave_run_returns_at_its_stats_and_the_rollout_waits_for_its_tail(
        tmp_path: Path) -> None:
    """The outcomes are final at the closing stats: the wave's run hands them over there (the
    next wave need not wait for ansible-playbook's exit), and settle() waits for the rest (the
    process's exit, its guard, the run's artifacts), so that no run outlives the rollout."""
    cb = tmp_path / "cb"
    cb.mkdir()
    (cb / "gdsfleet_test_linger.py").write_text(LINGER)
    lock = tmp_path / "rollout.lock.children"
    ex = LocalExecutor()
    res = ex.run(str(_playbook(tmp_path)), _inventory(tmp_path), HOSTS, forks=3,
                 extravars={"mark": "wave"},
                 envvars={"ANSIBLE_CALLBACK_PLUGINS": str(cb), "GDSFLEET_TEST_LINGER_S": "4"},
                 private_data_dir=tmp_path / "pdd", on_host_event=None, timeout=None,
                 children_lock=lock, run_tag="t", wave=1, kind="site")
    returned = time.monotonic()
    assert {h: o.status for h, o in res.hosts.items()} == dict.fromkeys(HOSTS,
                                                                         HostStatus.CHANGED)
    assert res.rc is None and res.status == "successful"  # the process has not exited yet
    assert _marks(tmp_path) == dict.fromkeys(HOSTS, "wave")
    assert guard.holders(str(lock)), "its ansible-playbook still lives, past its stats"
    ex.settle()
    assert time.monotonic() - returned > 2.0  # settle() waited for the lingering exit
    assert guard.holders(str(lock)) == []
    (art,) = (tmp_path / "pdd" / "artifacts").iterdir()
    doc = json.loads((art / "hosts.json").read_text())
    assert doc["rc"] == 0 and doc["final_stats"] is True
    assert {h: o["status"] for h, o in doc["hosts"].items()} == dict.fromkeys(HOSTS, "changed")
    assert not list((tmp_path / "pdd" / "env").glob("extravars*"))


def test_a_run_that_ends_without_stats_is_waited_for_whole(tmp_path: Path) -> None:
    """No stats (a broken playbook): nothing is handed over early; release() returns the whole
    run's result, every host failed with the reason."""
    bad = tmp_path / "bad.yml"
    bad.write_text("- hosts: all\n  tasks:\n    - name: x\n      no.such.module: {}\n")
    ex = LocalExecutor()
    res = ex.run(str(bad), _inventory(tmp_path), HOSTS, forks=3, extravars={}, envvars={},
                 private_data_dir=tmp_path / "pdd", on_host_event=None, timeout=None,
                 children_lock=None, run_tag="t", wave=1, kind="site")
    assert res.rc not in (None, 0) and res.error
    assert {o.status for o in res.hosts.values()} == {HostStatus.NOT_STARTED}
    ex.settle()
