"""The lent H100 as a REAL node (docs/evidence/h100-node/, made by scripts/gpu_node_evidence.sh):
Ubuntu 24.04, a provider-built kernel with no /lib/modules, no driver sources, no python3-apt,
no nvidia-fs, no NVMe. Its outputs are replayed here:

* ``before/``: what the collection did there before issue 7: preflight passed the nvfs route
  and ``site.yml --check`` died inside the mofed role on python3-apt;
* ``after/``: preflight refuses the nvfs route with the real reason (no kernel headers for a
  kernel that did not come from a package), before any change; a check run without that
  reason meets the python3-apt refusal, still in preflight; ``verify --local`` reports the node
  NOT compliant, the I/O through compat, with cuFile's own log saying why;
* ``merged/`` and ``locked/``: the same script with later code; ``locked/`` (2026-11-24) has
  ``site.yml`` holding the node with gdsfleet.gds.node_lock (issue 14) and verify's node-side
  scripts bundled at send time (issue 16): the lock is taken first and let go in ``always``
  even though preflight refuses, and every verdict stays the same;
* ``takeover/`` (2026-11-24, later): the same, with ``site.yml`` putting the play's token in
  every task's environment, and one more run: a same-run takeover on the real node (a fenced
  play's lock and its 6 s of work still running under token ``evidence.1.*``, then
  ``site.yml --check`` as ``evidence.2.*``): the first task waited for that work to end, then
  took the node;
* ``includes/`` (2026-11-25, scripts/gpu_role_includes.sh): the roles whose route- and
  input-specific task files are included, each alone in check mode: every run ends 0, what a
  node leaves out is one skipped include, and tags reach the included tasks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from provisioner.verify import checks, iotest
from provisioner.verify.policy import Policy

EVIDENCE = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "h100-node"
KERNEL = "6.18.44-fc-v657-gpu"


def _play(stage: str, name: str) -> tuple[str, int, list[str]]:
    text = (EVIDENCE / stage / f"{name}.txt").read_text()
    rc = int(re.findall(r"^\[exit (\d+)\]$", text, re.M)[-1])
    roles = re.findall(r"^TASK \[gdsfleet\.gds\.(\w+) :", text, re.M)
    return text, rc, roles


def _recap(text: str) -> dict[str, int]:
    line = next(x for x in text.splitlines() if re.search(r"\bok=\d+ +changed=", x))
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def test_before_preflight_passed_nvfs_and_check_died_in_mofed() -> None:
    text, rc, roles = _play("before", "preflight-nvfs")
    assert rc == 0 and _recap(text)["failed"] == 0  # the defect issue 7 reports
    text, rc, roles = _play("before", "site-check-nvfs")
    assert rc == 2
    assert roles[-1] == "mofed"  # failed after preflight, inside a role that changes things
    assert "python3-apt must be installed to use check mode" in text


@pytest.mark.parametrize("name", ["preflight-nvfs", "site-check-nvfs"])
def test_after_preflight_refuses_nvfs_for_the_real_reason(name: str) -> None:
    text, rc, roles = _play("after", name)
    assert rc == 2
    assert set(roles) == {"preflight"}, roles  # no other role started
    recap = _recap(text)
    assert recap["failed"] == 1 and recap["changed"] == 0
    assert f"/lib/modules/{KERNEL}/build is missing" in text
    assert f"there is no /lib/modules/{KERNEL} at all" in text
    assert f"linux-headers-{KERNEL}" in text and "To fix" in text


def test_after_check_run_without_the_dkms_reason_meets_python3_apt_in_preflight() -> None:
    text, rc, roles = _play("after", "site-check-nvfs-prebuilt")
    assert rc == 2 and set(roles) == {"preflight"}
    assert _recap(text)["changed"] == 0
    assert "the node has no python3-apt" in text and "apt-get install python3-apt" in text


def test_after_p2pdma_refused_for_the_kernel() -> None:
    text, rc, roles = _play("after", "site-check-p2pdma")
    assert rc == 2 and set(roles) == {"preflight"}
    assert f"kernel {KERNEL} has no P2PDMA support" in text


@pytest.mark.parametrize("stage", ["locked", "takeover"])
@pytest.mark.parametrize("name", ["site-check-nvfs", "site-check-nvfs-prebuilt",
                                  "site-check-p2pdma"])
def test_locked_site_holds_the_node_first_and_lets_it_go_after_the_refusal(
        stage: str, name: str) -> None:
    text, rc, roles = _play(stage, name)
    assert rc == 2 and set(roles) == {"preflight"}
    tasks = re.findall(r"^TASK \[(.+?)\] \*+$", text, re.M)
    assert tasks[:2] == ["Gathering Facts", "Hold the node for this play"]
    assert tasks[-1] == "Let the node go"  # after the failed preflight task: `always`
    after = text.split("TASK [Let the node go]", 1)[1]
    assert re.match(r"\s*\**\nok: \[\w+\]", after), after[:200]
    recap = _recap(text)
    assert recap["failed"] == 1 and recap["changed"] == 0
    # the verdicts of the runs before the lock, unchanged
    before, _, _ = _play("merged", name)
    for line in re.findall(r'"msg": "([^"]{40})', before):
        assert line in text


def test_takeover_on_the_real_node_waited_for_the_fenced_plays_work() -> None:
    text, rc, roles = _play("takeover", "site-check-takeover")
    assert rc == 2 and set(roles) == {"preflight"}  # the p2pdma refusal, as above
    log = [json.loads(x) for x in (EVIDENCE / "takeover" / "site-lock.log").read_text()
           .splitlines()]
    old = json.loads((EVIDENCE / "takeover" / "takeover-old-lock.txt").read_text()
                     .split("=>", 1)[1])["token"]
    (took,) = [e for e in log if e["event"] == "takeover"]
    assert took["old"]["token"] == old and took["token"].startswith("evidence.2.")
    # the work's shell and its sleep, both carrying the old token, ended by themselves
    assert len(took["waited_for"]) == 2 and took["stopped"] == [] and took["waited_s"] > 0.5
    ended = float((EVIDENCE / "takeover" / "takeover-old-work-end.txt").read_text())
    (acquired,) = [e["at"] for e in log if e["event"] == "acquire"
                   and e["token"] == took["token"]]
    assert ended <= took["at"] <= acquired
    released = [e for e in log if e["event"] == "release" and e["token"] == took["token"]]
    assert released and released[0]["at"] > acquired


@pytest.fixture(scope="module", params=["after", "merged", "locked", "takeover"])
def node(request: pytest.FixtureRequest) -> dict[str, Any]:
    """verify --local's report: `after` (issue 7's run), `merged` (the same script run again
    with the code of the issue 8-10 merges), `locked` (again, with the bundled node-side
    scripts of issue 16) and `takeover` (again, later the same day)."""
    doc = json.loads((EVIDENCE / request.param / "verify-local.json").read_text())
    (only,) = doc["nodes"]
    return {**only, "_run": request.param}


def test_after_verify_local_replayed_through_todays_code(node: dict[str, Any]) -> None:
    """The node-side I/O document and the facts, evaluated again by the current code, give the
    verdict recorded on the machine. A check added after a recording has no facts of its own
    in it, so it can only skip there; every recorded check keeps its status."""
    raw = node["raw"]["io_test"]
    io = iotest.evaluate(json.loads(raw.splitlines()[0]), route=node["route"])
    assert io.path_taken == "compat" and io.verified and not io.direct_proven
    assert io.evidence["proof"] is None
    # no verification-runtime fact file there: verify fell back to python3 (kvikio on its path)
    assert node["io_test"]["evidence"]["interpreter"]["source"] == "fallback"
    log = io.evidence["cufile_log"]
    assert log["compat_lines"] == 0 and log["mode"] is None  # cuFile refused, it did not fall back
    assert any("nvidia-fs.ko driver not loaded" in b for b in log["blockers"])
    route, results, compliant = checks.evaluate(node["facts"], io, Policy.default(),
                                                route=node["route"], io_path=io.path)
    assert compliant is False and route == "compat"
    recorded = {c["id"]: c["status"] for c in node["checks"]}
    replayed = {c.id: c.status for c in results}
    # checks added after a recording can only skip there (their evidence was not gathered):
    # fs.mount.transport after "after", io.libcufile (issue 15) after both
    added = {"io.libcufile": "skip"} if node["_run"] in ("after", "merged") else {}
    if node["_run"] == "after":
        added["fs.mount.transport"] = "skip"
    added["gate.boot_kernel"] = "skip"  # issue 29: empty /boot there, boot kernel unknown
    added["nvfs.registered"] = "skip"  # issue 43: the I/O test there read no modules file
    assert {k: replayed.get(k) for k in recorded} == recorded
    assert {k: v for k, v in replayed.items() if k not in recorded} == added
    assert replayed["nvfs.module.loaded"] == "fail" and replayed["io.direct_path"] == "fail"
    assert replayed["nvfs.dkms.boot_kernel"] == "skip"  # empty /boot, no grubby there
    assert replayed["gpu.driver.open"] == "pass"


# ------------------------------------------------------- includes/ (the roles' task files)
_RECAP = re.compile(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)")


def _summary() -> dict[str, tuple[int, dict[str, int]]]:
    """includes/summary.txt: per run, its exit status and recap counts."""
    lines = (EVIDENCE / "includes" / "summary.txt").read_text().splitlines()
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for head, recap in zip(lines[::2], lines[1::2], strict=True):
        name, _, rc = head.rpartition(" exit ")
        m = _RECAP.search(recap)
        assert m, recap
        keys = ("ok", "changed", "unreachable", "failed", "skipped")
        out[name] = (int(rc), dict(zip(keys, map(int, m.groups()), strict=True)))
    return out


def _included(run: str) -> list[str]:
    text = (EVIDENCE / "includes" / f"{run}.txt").read_text()
    return re.findall(r"^included: \S+/roles/(\S+) for ", text, re.M)


def test_includes_the_roles_ran_in_check_mode_on_the_real_node() -> None:
    """The roles with included (not imported) task files, each alone in check mode on the
    H100 node (scripts/gpu_role_includes.sh): every run ends 0 with nothing failed; what a
    node's route or inputs leave out is one skipped include, and what applies is included."""
    runs = _summary()
    assert set(runs) == {"nvidia_fs", "mofed", "p2pdma", "nvme", "nvmeof",
                         "node_exporter_textfile", "nvidia_fs-nvfs-tags", "nvidia_fs-nvfs-skip"}
    assert all(rc == 0 and r["failed"] == 0 and r["unreachable"] == 0
               for rc, r in runs.values()), runs
    assert "Ubuntu 24.04" in (EVIDENCE / "includes" / "machine.txt").read_text()
    # p2pdma route: nvidia-fs's three files are skipped as three includes, nothing brought in
    assert _included("nvidia_fs") == [] and runs["nvidia_fs"][1]["skipped"] <= 6
    assert _included("p2pdma") == ["p2pdma/tasks/boot.yml", "p2pdma/tasks/configure.yml"]
    assert _included("node_exporter_textfile") == ["node_exporter_textfile/tasks/disable.yml"]
    assert _included("nvme") == [] and _included("nvmeof") == []


def test_includes_tags_reach_the_included_tasks_on_the_real_node() -> None:
    """--tags picks the include and, through `apply`, its tasks; --skip-tags leaves it out."""
    assert _included("nvidia_fs-nvfs-tags") == ["nvidia_fs/tasks/configure.yml"]
    tagged = (EVIDENCE / "includes" / "nvidia_fs-nvfs-tags.txt").read_text()
    assert "TASK [gdsfleet.gds.nvidia_fs : Ensure nvidia_fs loads at boot]" in tagged
    assert "Install nvidia-fs" not in tagged.split("included:")[1]
    assert _included("nvidia_fs-nvfs-skip") == []
    assert _summary()["nvidia_fs-nvfs-skip"][1]["ok"] <= 2
