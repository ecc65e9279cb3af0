"""The verification runtime on SIMULATED fleets (containers with stand-in hardware): the node
image ships no kvikio or cupy; `provisioner rollout` (site.yml, whose last role is
gdsfleet.gds.verify_runtime) installs the stand-in kvikio-cu12/cupy-cuda12x wheels from the
stand-in package index on loopback, and the node ends compliant, verified with the venv's
interpreter. On the same node: without the runtime, `verify` says so and names the role; the
role then reinstalls it from a wheel folder on the controller with the index unreachable
(pip --no-index), and the node is compliant again.

One node on the p2pdma route (the shortest play); 16 MiB I/O test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fixtures import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
FACT = "/etc/ansible/facts.d/gdsfleet_verify_runtime.fact"
VENV = "/opt/gdsfleet/venv"

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def repo(private_repo: Any) -> dict[str, Any]:
    """The stand-in repository on this module's private server, with its access log (to see
    what pip fetched)."""
    return {"base": private_repo.base_url, "log": private_repo.log,
            "group_vars": {"gds_route": "p2pdma", **private_repo.group_vars()}}


@pytest.fixture(scope="module")
def collections(private_collections: Path) -> Path:
    """The collection built from this checkout into a private path (no race with others)."""
    return private_collections


def _env(collections: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(ROOT / "tests" / "harness" / "containers.conf")
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n"
            f"{proc.stderr[-6000:]}")


@pytest.fixture(scope="module")
def node(lab_fleet: Any, repo: dict[str, Any], collections: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Any:
    fleet = lab_fleet(1, {1: "p2pdma"}, group_vars=repo["group_vars"])
    fleet.tmp = tmp_path_factory.mktemp("runtime")  # type: ignore[attr-defined]
    fleet.collections = collections  # type: ignore[attr-defined]
    return fleet


def provisioner(fleet: Any, *args: str, timeout: float = 900
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "provisioner"), *args, "-i", str(fleet.inventory),
                           "--ledger", str(fleet.tmp / "ledger.sqlite")],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=_env(fleet.collections), check=False)


def verify(fleet: Any, name: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = fleet.tmp / f"{name}.json"
    proc = provisioner(fleet, "verify", "--io-size", "16M", "--json", str(out))
    return proc, json.loads(out.read_text())


def _check(node_doc: dict[str, Any], check_id: str) -> dict[str, Any]:
    """The node's check ``check_id``; failing, the node's error and the checks it has (an
    unreachable node has none: once on a loaded runner this was a bare StopIteration)."""
    found = [c for c in node_doc.get("checks", []) if c["id"] == check_id]
    assert found, (f"no check {check_id} for {node_doc.get('name')}: error "
                   f"{node_doc.get('error')!r}, checks "
                   f"{[(c['id'], c['status']) for c in node_doc.get('checks', [])]}")
    return found[0]


def test_image_ships_no_kvikio_and_rollout_installs_it_from_the_index(node: Any,
                                                                      repo: dict[str, Any]
                                                                      ) -> None:
    name = node.names[0]
    bare = node.exec(name, "python3 -c 'import kvikio' || python3 -c 'import cupy'; "
                     f"ls {VENV} {FACT}", check=False)
    assert bare.returncode != 0 and "No module named" in bare.stderr, bare
    report = node.tmp / "rollout.json"
    # --allow-reboot: the p2pdma module options take effect at boot (the p2pdma role)
    proc = provisioner(node, "rollout", "--io-size", "16M", "--plain", "--allow-reboot",
                       "--json", str(report))
    assert proc.returncode == 0, _explain(proc)
    doc = json.loads(report.read_text())
    assert doc["status"] == "succeeded"
    assert {n["step"] for n in doc["nodes"]} == {"compliant"}
    # the role installed the stand-in wheels through pip, from the stand-in index
    fact = json.loads(node.exec(name, f"cat {FACT}").stdout)
    assert fact["python"] == f"{VENV}/bin/python" and fact["source"] == "index"
    assert (fact["kvikio_package"], fact["cupy_package"], fact["cuda_major"]) == (
        "kvikio-cu12", "cupy-cuda12x", 12)
    log = repo["log"].read_text()
    assert "GET /pypi/simple/kvikio-cu12/ " in log
    assert "GET /pypi/simple/kvikio-cu12/kvikio_cu12-" in log
    assert "GET /pypi/simple/cupy-cuda12x/cupy_cuda12x-" in log
    installer = node.exec(name, f"cat {VENV}/lib/python3*/site-packages/kvikio_cu12-*"
                          ".dist-info/INSTALLER").stdout.strip()
    assert installer == "pip"
    assert node.exec(name, "python3 -c 'import kvikio'", check=False).returncode != 0
    # verify ran the I/O test with the venv's interpreter
    proc, rep = verify(node, "after-rollout")
    assert proc.returncode == 0, _explain(proc)
    io = rep["nodes"][0]["io_test"]
    assert io["path_taken"] == "direct"
    assert io["evidence"]["interpreter"] == {"python": f"{VENV}/bin/python",
                                             "source": "fact_file",
                                             "note": f"from {FACT}"}


def test_node_without_the_runtime_is_reported_clearly(node: Any) -> None:
    name = node.names[0]
    node.exec(name, f"rm -rf {VENV}")
    proc, rep = verify(node, "no-runtime")
    assert proc.returncode != 0
    n = rep["nodes"][0]
    assert n["compliant"] is False
    check = _check(n, "io.direct_path")
    assert check["status"] == "fail"
    assert "verification runtime missing" in check["message"]
    assert "gdsfleet.gds.verify_runtime" in check["message"]
    assert f"{VENV}/bin/python" in check["message"]
    # and with no fact file either: python3 is tried, the message says so
    node.exec(name, f"rm -f {FACT}")
    proc, rep = verify(node, "no-fact")
    check = _check(rep["nodes"][0], "io.direct_path")
    assert "verification runtime missing" in check["message"]
    assert f"no {FACT}" in check["message"]


def test_role_installs_from_a_wheel_folder_with_the_index_unreachable(node: Any,
                                                                      tmp_path: Path) -> None:
    """Air-gapped: the wheels come from a folder on the controller; the index URL points at a
    closed loopback port and pip runs with --no-index."""
    name = node.names[0]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for whl in (ROOT / ".lab" / "standin-repo" / "pypi" / "simple").glob("*/*.whl"):
        (wheels / whl.name).write_bytes(whl.read_bytes())
    closed = free_port()  # nothing listens there
    play = tmp_path / "runtime.yml"
    play.write_text("- hosts: gpu_nodes\n  become: true\n  gather_facts: true\n"
                    "  roles:\n    - gdsfleet.gds.verify_runtime\n")
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({
        "verify_runtime_source": "wheel_dir", "verify_runtime_wheel_dir": str(wheels),
        "verify_runtime_index_url": f"http://127.0.0.1:{closed}/pypi/simple",
        "cuda_version": "12.9"}))
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(node.inventory), str(play),
            "-e", f"@{extra}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env=_env(node.collections), check=False)
    assert proc.returncode == 0, _explain(proc)
    assert "changed=0" not in proc.stdout  # it did install
    fact = json.loads(node.exec(name, f"cat {FACT}").stdout)
    assert fact["source"] == "wheel_dir"
    listed = node.exec(name, "ls /opt/gdsfleet/wheels").stdout.split()
    assert "kvikio_cu12-26.10.0-py3-none-any.whl" in listed
    # idempotent: a second run changes nothing
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                           env=_env(node.collections), check=False)
    assert again.returncode == 0 and "changed=0" in again.stdout, _explain(again)
    proc2, rep = verify(node, "wheel-dir")
    assert proc2.returncode == 0, _explain(proc2)
    assert rep["nodes"][0]["compliant"] is True
