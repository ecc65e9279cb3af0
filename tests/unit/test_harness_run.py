"""A test run owns its stand-in repository server and its loopback ports (tests/harness/run.py):
it never attaches to a server it did not start, e.g. another checkout's lab on 127.0.0.1:8470
(that repository is signed with the other checkout's key: apt fails with NO_PUBKEY)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness import lab as labmod
from tests.harness import run as runmod

ROOT = Path(__file__).resolve().parents[2]
PROBE = "cuda/repos/debian12/x86_64/InRelease"


class Decoy:
    """A foreign repository server: answers the harness's probe with its own InRelease and
    counts the requests it gets."""

    def __init__(self, root: Path, port: int) -> None:
        (root / PROBE).parent.mkdir(parents=True, exist_ok=True)
        (root / PROBE).write_text("DECOY InRelease (another checkout's lab)\n")
        self.requests: list[str] = []
        decoy = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw) -> None:  # noqa: ANN002, ANN003
                super().__init__(*a, directory=str(root), **kw)

            def log_message(self, *args: object) -> None:
                decoy.requests.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _decoy(root: Path, port: int) -> Decoy | None:
    try:
        return Decoy(root, port)
    except OSError:  # taken: whatever listens there is a decoy for this test as well
        return None


@pytest.fixture
def decoys(tmp_path: Path) -> Iterator[list[Decoy]]:
    """Decoy servers on the old fixed port 8470 (when free) and on a free port."""
    made = [d for d in (_decoy(tmp_path / "d8470", runmod.DEFAULT_REPO_PORT),
                        _decoy(tmp_path / "dfree", runmod.free_loopback_port())) if d]
    yield made
    for d in made:
        d.close()


NESTED = '''
import os, urllib.request

def test_served_repository_is_this_runs(standin_repo):
    url = standin_repo.base_url + "/cuda/repos/debian12/x86_64/InRelease"
    got = urllib.request.urlopen(url, timeout=10).read()
    assert got == (standin_repo.directory / "cuda/repos/debian12/x86_64/InRelease").read_bytes()
    print("RUNPORT", standin_repo.base_url.rsplit(":", 1)[1], os.environ["GDSFLEET_REPO_PORT"])
'''


@pytest.mark.container  # builds the stand-in repository (build.sh), as setup.sh does
def test_a_run_never_attaches_to_a_repository_server_it_did_not_start(
        decoys: list[Decoy], tmp_path: Path) -> None:
    """A whole pytest session (the harness's own fixtures) with decoy servers on the old port
    8470 and on the port GDSFLEET_REPO_PORT names: the session serves its repository on a
    port of its own, and no decoy gets a single request."""
    test = tmp_path / "test_nested_repo.py"
    test.write_text(NESTED)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GDSFLEET_TEST_RUN"))}
    free_decoy = [d for d in decoys if d.port != runmod.DEFAULT_REPO_PORT]
    if free_decoy:
        env["GDSFLEET_REPO_PORT"] = str(free_decoy[0].port)  # e.g. exported for a lab
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                           "-p", "tests.harness.fixtures",
                           "-p", "no:cacheprovider", "-q", "-s", str(test)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("RUNPORT"))
    served, exported = line.split()[1:]
    assert served == exported  # what the run exported for containers is what it serves
    assert int(served) not in {d.port for d in decoys} | {runmod.DEFAULT_REPO_PORT}
    for d in decoys:
        assert d.requests == [], f"the decoy on {d.port} was asked: {d.requests}"
    # the run stopped its own server when it ended
    assert runmod.answers(int(served), timeout=1) is None


def _run_dir(tmp_path: Path, port: int) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"pid": os.getpid(), "repo_port": port}))
    return d


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / PROBE).parent.mkdir(parents=True)
    (repo / PROBE).write_text("this run's InRelease\n")
    return repo


def test_repo_server_refuses_a_port_someone_else_answers_on(tmp_path: Path) -> None:
    decoy = Decoy(tmp_path / "decoy", runmod.free_loopback_port())
    try:
        server = runmod.RepoServer(_run_dir(tmp_path, decoy.port))
        with pytest.raises(runmod.RunError, match="did not start answers"):
            server.ensure(_repo(tmp_path))
    finally:
        decoy.close()
    assert decoy.requests == [f"/{PROBE}"]  # probed once, never used
    assert not server.pidfile.exists()


def test_repo_server_serves_the_run_and_stops(tmp_path: Path) -> None:
    port = runmod.free_loopback_port()
    server = runmod.RepoServer(_run_dir(tmp_path, port))
    repo = _repo(tmp_path)
    try:
        assert server.ensure(repo) == f"http://127.0.0.1:{port}"
        pid = int(server.pidfile.read_text())
        assert server.ensure(repo) == f"http://127.0.0.1:{port}"  # a second worker: same one
        assert int(server.pidfile.read_text()) == pid
        assert runmod.answers(port) == b"this run's InRelease\n"
    finally:
        server.stop()
    assert runmod.answers(port, timeout=1) is None


def test_start_run_exports_a_port_of_its_own(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GDSFLEET_REPO_PORT", str(runmod.DEFAULT_REPO_PORT))
    monkeypatch.delenv(runmod.RUN_DIR_ENV, raising=False)
    d = runmod.start_run(tmp_path)
    try:
        port = int(os.environ["GDSFLEET_REPO_PORT"])
        assert port != runmod.DEFAULT_REPO_PORT
        assert Path(os.environ[runmod.RUN_DIR_ENV]) == d
        assert json.loads((d / "run.json").read_text())["repo_port"] == port
        assert labmod.repo_port() == port
    finally:
        runmod.finish_run(d)
    assert not d.exists()


def test_gc_removes_runs_whose_pytest_is_gone(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gone = tmp_path / "runs" / "gone"
    gone.mkdir(parents=True)
    (gone / "run.json").write_text(json.dumps({"pid": int(dead), "repo_port": 1}))
    live = tmp_path / "runs" / "live"
    live.mkdir()
    (live / "run.json").write_text(json.dumps({"pid": os.getpid(), "repo_port": 1}))
    assert runmod.gc_runs(tmp_path / "runs") == ["test run gone"]
    assert live.exists() and not gone.exists()


def test_reserved_ports_are_never_handed_out_twice(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runmod, "PORTS_FILE", tmp_path / "ports.json")
    monkeypatch.setattr(runmod, "_bindable", lambda port: True)  # the machine's own use aside
    # a port another live process (our parent) reserved, and one of a process that is gone
    (tmp_path / "ports.json").write_text(json.dumps({"23001": os.getppid(), "23002": 2**22 + 7}))
    # start=23000, end=23005: single ports are drawn from 23000..23003
    got = [runmod.reserve_ports(1, start=23000, end=23005) for _ in range(3)]
    assert sorted(got) == [23000, 23002, 23003]
    with pytest.raises(runmod.RunError, match="no 2 free consecutive"):
        runmod.reserve_ports(2, start=23000, end=23005)
    runmod.release_ports(got[0])
    assert runmod.reserve_ports(1, start=23000, end=23005) == got[0]


def test_lab_inventory_points_at_the_port_being_served(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GDSFLEET_REPO_PORT", "18555")
    lab = labmod.Lab(tmp_path, prefix="gdsfleet-hx-inv")
    node = labmod.LabNode("gdsfleet-hx-inv-01", 1, 24001, "nvfs", {})
    inv = yaml.safe_load(lab.inventory(tmp_path / "hosts.yml", [node]).read_text())
    common = inv["all"]["vars"]
    assert common["cuda_repo_base_url"] == "http://127.0.0.1:18555/cuda/repos"
    assert common["verify_runtime_index_url"] == "http://127.0.0.1:18555/pypi/simple"
    assert common["mofed_mlnx_ofed_tarball"].startswith("http://127.0.0.1:18555/mlnx_ofed/")
    assert "8470" not in json.dumps(common)


def test_lab_status_says_which_port_and_whose_server(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    decoy = Decoy(tmp_path / "decoy", runmod.free_loopback_port())
    monkeypatch.setenv("GDSFLEET_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("GDSFLEET_REPO_PORT", str(decoy.port))
    try:
        assert labmod.main(["status"]) == 0
    finally:
        decoy.close()
    out = capsys.readouterr().out
    assert f"stand-in repo on 127.0.0.1:{decoy.port}: ANSWERED BY ANOTHER SERVER" in out


def test_lab_repo_server_refuses_a_foreign_server(tmp_path: Path) -> None:
    """serve.sh start (the operator lab's `up`) fails with a one-line fix instead of adopting
    a server it did not start."""
    decoy = Decoy(tmp_path / "decoy", runmod.free_loopback_port())
    (tmp_path / "lab" / "standin-repo").mkdir(parents=True)
    env = dict(os.environ, GDSFLEET_LAB_DIR=str(tmp_path / "lab"),
               GDSFLEET_REPO_PORT=str(decoy.port))
    try:
        proc = subprocess.run(["bash", str(ROOT / "tests/harness/standin_repo/serve.sh"),
                               "start"], env=env, capture_output=True, text=True, timeout=60,
                              check=False)
    finally:
        decoy.close()
    assert proc.returncode == 1
    assert "set GDSFLEET_REPO_PORT to a free port" in proc.stderr


def test_free_port_helper_is_loopback_and_not_8470() -> None:
    port = runmod.free_loopback_port()
    assert port != runmod.DEFAULT_REPO_PORT
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


SCHEDULED = '''
import os
from pathlib import Path

import pytest

OUT = Path(os.environ["SCHED_OUT"])


@pytest.fixture(scope="module")
def module_sim_node():  # stands in for the harness's container factory (same name)
    return object()


@pytest.fixture(scope="module")
def fleet_a(module_sim_node):
    return "a"


@pytest.fixture(scope="module")
def fleet_b(module_sim_node):
    return "b"


@pytest.fixture(scope="module")
def cheap():
    return 1


def _record(name):
    (OUT / name).write_text(f"{os.getpid()}")


def test_a1(fleet_a): _record("a1")
def test_b1(fleet_b): _record("b1")
def test_c1(cheap): _record("c1")
def test_a2(fleet_a): _record("a2")
def test_alone(tmp_path): _record("alone")
def test_a3(fleet_a, cheap): _record("a3")
def test_c2(cheap): _record("c2")
'''


def test_schedule_keeps_tests_that_share_a_fleet_together(tmp_path: Path) -> None:
    """--gdsfleet-schedule (tests/harness/schedule.py): tests sharing a costly module fixture
    run on one worker, in file order; tests sharing a cheap module fixture stay with their
    file; the parts are what the workers recorded for the controller."""
    test = tmp_path / "test_sched.py"
    test.write_text(SCHEDULED)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GDSFLEET_TEST_RUN"))}
    env.update(PYTHONPATH=str(ROOT), SCHED_OUT=str(out))
    groups = tmp_path / "groups.json"
    plugin = tmp_path / "dump_parts.py"
    plugin.write_text(
        "import json, os\nfrom tests.harness import schedule\n"
        "def pytest_collection_finish(session):\n"
        f"    open({str(groups)!r}, 'w').write(json.dumps(schedule.parts(session.items)))\n")
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                           "-p", "tests.harness.fixtures", "-p", "dump_parts",
                           "-p", "no:cacheprovider", "-q", "-n", "3", "--dist", "loadfile",
                           "--gdsfleet-schedule", str(test)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "7 passed" in proc.stdout
    parts = {k.rsplit("::", 1)[1]: v["group"] for k, v in json.loads(groups.read_text()).items()}
    assert parts["test_a1"] == parts["test_a2"] == parts["test_a3"] != parts["test_b1"]
    assert parts["test_c1"] == parts["test_c2"]
    assert "::" not in parts["test_c1"]  # the file's group, not a test of its own
    assert parts["test_alone"].endswith("::test_alone")
    pid = {p.name: p.read_text() for p in out.iterdir()}
    assert pid["a1"] == pid["a2"] == pid["a3"]
    assert pid["c1"] == pid["c2"]


SLOW = '''
import time


def test_slow_with_reason():
    """Does something slow.

    Slow: stands in for two simulated reboots.
    """
    time.sleep(0.4)


def test_slow_without_reason():
    """Does something slow and says nothing about it."""
    time.sleep(0.4)


def test_fast():
    pass
'''


def test_tests_over_the_limit_without_a_reason_are_listed(tmp_path: Path) -> None:
    """tests/conftest.py: a test over the limit with no 'Slow:' line in its docstring (and not
    in docs/testing.md's table) is listed at the end of the run, with xdist too; the final
    summary line stays pytest's own."""
    test = tmp_path / "test_slow.py"
    test.write_text(SLOW)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GDSFLEET_TEST_RUN"))}
    env.update(PYTHONPATH=str(ROOT), GDSFLEET_SLOW_SECONDS="0.2")
    for extra in ([], ["-n", "2"]):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                               "-p", "tests.conftest", "-p", "no:cacheprovider", *extra,
                               str(test)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                              check=False)
        out = proc.stdout
        assert proc.returncode == 0, out[-3000:]
        listed = out.split("without a 'Slow:' line", 1)[1].split("\n=", 1)[0]
        assert "::test_slow_without_reason" in listed
        assert "test_slow_with_reason" not in listed and "test_fast" not in listed
        assert out.rstrip().splitlines()[-1].lstrip("= ").startswith("3 passed in ")


def test_the_run_uses_this_checkouts_node_image_by_recipe(node_image: str) -> None:
    """The node image is tagged by its recipe (tests/harness/node/ and the build script), so a
    checkout whose node/ differs neither rebuilds over this one's image nor runs on it."""
    recipe = labmod.node_recipe()
    assert node_image == labmod.recipe_image(recipe) == os.environ["GDSFLEET_NODE_IMAGE"]
    assert labmod._image_label(node_image) == recipe
