"""The verification runtime on a REAL node (docs/evidence/h100-runtime/, made by
scripts/gpu_runtime_evidence.sh on an H100 node, Ubuntu 24.04: python3-venv installed,
python3-apt not, no APT lists, host libcufile 1.15.1 in the CUDA toolkit's folder). Replayed:

* the role gdsfleet.gds.verify_runtime with ``verify_runtime_source: wheel_dir`` (a 2 GB folder
  of real kvikio-cu13 26.10, cupy-cuda13x 14.2, numpy and nvidia-* wheels) ran end to end, then
  again with nothing to change, and refused a missing package / an interpreter that does not
  run, naming the fix, before any change;
* ``provisioner verify --local`` used the venv the role recorded, with the host's libcufile;
* the node I/O script straight from that venv: with the host's libcufile loaded first the
  process maps only the host's; without, cuda-pathfinder maps the nvidia-cufile wheel's;
* a wheel of another release (nvidia-cufile 1.15.0.42, cuda-toolkit 13.0.0's pin) fails
  io.libcufile with the pin to install.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from provisioner.verify import checks, iojudge
from provisioner.verify.model import IoTestResult
from provisioner.verify.policy import Policy

EVIDENCE = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "h100-runtime"
HOST_REAL = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcufile.so.1.15.1"
WHEEL_SO0 = "/opt/gdsfleet/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0"


def _play(name: str) -> tuple[str, int, dict[str, int], dict[str, str]]:
    """(text, exit code, recap, {task name: last status})."""
    text = (EVIDENCE / f"{name}.txt").read_text()
    rc = int(re.findall(r"^\[exit (\d+) after \d+ s\]$", text, re.M)[-1])
    line = next(x for x in text.splitlines() if re.search(r"\bok=\d+ +changed=", x))
    recap = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    tasks: dict[str, str] = {}
    current = None
    for ln in text.splitlines():
        m = re.match(r"^TASK \[gdsfleet\.gds\.verify_runtime : (.*?)\] \**$", ln)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^(ok|changed|skipping|fatal|failed):", ln)
        if m and current:
            tasks[current] = m.group(1)
    return text, rc, recap, tasks


def test_the_node_had_venv_but_no_python3_apt() -> None:
    machine = (EVIDENCE / "machine.txt").read_text()
    assert "python3-venv ii" in machine and "python3-apt un" in machine
    assert "apt lists: 0 Packages files" in machine
    assert "/usr/bin/python3: Python 3.12" in machine


def test_the_role_ran_end_to_end_from_the_wheel_folder() -> None:
    wheels = (EVIDENCE / "wheels.txt").read_text()
    total = int(re.search(r"^total bytes: (\d+)$", wheels, re.M).group(1))  # type: ignore[union-attr]
    assert total > 1_500_000_000  # the real ~2 GB of CUDA wheels
    text, rc, recap, tasks = _play("role-first")
    assert rc == 0 and recap["failed"] == 0 and recap["changed"] == 5
    # the package module was never called: python3-venv was there (the node has no python3-apt)
    assert tasks["Read which OS packages venv needs are installed"] == "ok"
    assert tasks["Install the OS packages venv needs"] == "skipping"
    assert tasks["Update the APT cache before installing python3-venv"] == "skipping"
    for task in ("Create the verification virtual environment", "Copy the wheel folder to the node",
                 "Install the pinned kvikio and cupy wheels",
                 "Write the verification runtime fact file"):
        assert tasks[task] == "changed", task
    assert tasks["Check that kvikio and cupy import in the virtual environment"] == "ok"
    assert tasks["Remove the wheels of another CUDA major"] == "skipping"
    fact = json.loads((EVIDENCE / "fact-file.json").read_text())
    assert fact["python"] == "/opt/gdsfleet/venv/bin/python" and fact["source"] == "wheel_dir"
    assert (fact["kvikio_package"], fact["kvikio_version"]) == ("kvikio-cu13", "26.10.0")
    assert (fact["cupy_package"], fact["cupy_version"]) == ("cupy-cuda13x", "14.2.0")


@pytest.mark.parametrize("name", ["role-second", "role-third"])
def test_the_role_is_idempotent(name: str) -> None:
    _, rc, recap, tasks = _play(name)
    assert rc == 0 and recap["failed"] == 0 and recap["changed"] == 0
    assert tasks["Install the pinned kvikio and cupy wheels"] == "skipping"


def test_a_missing_package_that_cannot_be_installed_is_refused_with_the_reason() -> None:
    text, rc, recap, _ = _play("refuse-missing-package")
    assert rc == 2 and recap["changed"] == 0 and recap["rescued"] == 1
    flat = " ".join(text.split())
    assert "gdsfleet-no-such-package (needed by" in flat and "could not be installed" in flat
    assert "python3-apt' has no installation candidate" in flat
    assert "apt-get install gdsfleet-no-such-package" in flat


def test_an_interpreter_that_does_not_run_is_refused_before_any_change() -> None:
    text, rc, recap, tasks = _play("refuse-python")
    assert rc == 2 and recap["changed"] == 0
    assert "Create the verification virtual environment" not in tasks
    flat = " ".join(text.split())
    assert "needs Python >= 3.11" in flat
    assert 'verify_runtime_python ("/usr/bin/python3.10")' in flat


def _node(name: str) -> dict[str, Any]:
    node: dict[str, Any] = json.loads((EVIDENCE / name).read_text())["nodes"][0]
    return node


def _replayed(node: dict[str, Any]) -> dict[str, Any]:
    io = IoTestResult(**{k: (tuple(v) if k == "attempts" else v)
                                for k, v in node["io_test"].items()})
    _, results, _ = checks.evaluate(node["facts"], io, Policy.default(), route=node["route"],
                                    io_path=node["io_test"]["path"])
    return {c.id: c for c in results}


def test_verify_used_the_roles_venv_and_the_hosts_libcufile() -> None:
    node = _node("verify-local.json")
    ev = node["io_test"]["evidence"]
    assert ev["interpreter"]["source"] == "fact_file"
    assert ev["interpreter"]["python"] == "/opt/gdsfleet/venv/bin/python"
    assert node["io_test"]["path_taken"] == "compat" and node["io_test"]["bytes"] == 1 << 30
    lib = ev["libcufile"]
    assert lib["used"] == "host" and lib["mapped"] == [HOST_REAL]
    assert (lib["host_version"], lib["wheel_version"]) == ("1.15.1", "1.15.1.6")
    recorded = {c["id"]: c["status"] for c in node["checks"]}
    replayed = _replayed(node)
    assert recorded["io.libcufile"] == replayed["io.libcufile"].status == "pass"
    assert {k: replayed[k].status for k in recorded} == recorded


def test_a_wheel_of_another_release_failed_io_libcufile_on_the_node() -> None:
    node = _node("verify-mismatch.json")
    lib = node["io_test"]["evidence"]["libcufile"]
    assert lib["wheel_version"] == "1.15.0.42" and lib["used"] == "host"
    check = _replayed(node)["io.libcufile"]
    assert check.status == "fail" and "nvidia-cufile==1.15.1.*" in check.message
    assert {c["id"]: c["status"] for c in node["checks"]}["io.libcufile"] == "fail"


def test_cuda_pathfinder_takes_the_wheels_libcufile_unless_the_hosts_is_loaded_first() -> None:
    for pref, mapped, used in ((True, HOST_REAL, "host"), (False, WHEEL_SO0, "wheel")):
        doc = json.loads((EVIDENCE / f"iotest-prefer-host-{str(pref).lower()}.json").read_text())
        assert doc["libcufile"]["prefer_host"] is pref
        direct = doc["attempts"][0]
        assert direct["mode"] == "OFF" and direct["libcufile_mapped"] == [mapped]
        assert "nvidia-fs driver is not loaded" in direct["error"]
        lib = iojudge.libcufile_evidence(doc, doc["attempts"])
        assert lib is not None and lib["used"] == used
        status, _, why = iojudge.libcufile_verdict(lib, ran=True)
        assert status == ("pass" if pref else "fail"), why
