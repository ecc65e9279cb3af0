"""Pytest fixtures of the test harness (loaded by tests/conftest.py).

TEST HARNESS ONLY. Simulated GPU nodes are podman containers of the node image; packages come
from the stand-in repository. Every fixture cleans up what it made, always (finalizers), and
never touches containers or loop devices it did not make: its containers are named
``gdsfleet-hx-<session token>-...`` / ``gdsfleet-fx-<session token>-NN`` and carry a label.

* ``node_image`` (session): the node image, built when missing or stale.
* ``standin_repo`` (session): the stand-in repository, built (cached) and served by this test
  run on a loopback port of its own (tests/harness/run.py: chosen when the run starts, exported
  as GDSFLEET_REPO_PORT; never a server the run did not start); returns a :class:`StandinRepo`
  with the URLs and key paths.
* ``sim_node`` (function) / ``module_sim_node`` (module): factories,
  ``sim_node(profile="nvfs", env={"SIM_IOMMU": "pt"}, ssh=True, nvme=True)`` -> :class:`SimNode`.
* ``lab_fleet`` (module): factory, ``lab_fleet(3, {"2": "p2pdma"})`` -> :class:`Fleet` with the
  inventory path (a standalone inventory of these nodes, the lab's group_vars included) and the
  node list. The same arguments within a module give back the same running fleet; other
  arguments replace it.

Tests that use these fixtures are marked ``container`` (``fleet`` for ``lab_fleet``)
automatically.

xdist: every fixture here is safe with several workers. Container names carry a token of the
process (and the xdist worker id), loopback ports come from tests/harness/run.py's machine-wide
reservations, the node image and the stand-in repository build under their own file locks, and
one repository server serves the whole run. Tests that share a module's fleet or node stay on
one worker: scripts/test.sh runs ``-n N --dist loadfile --gdsfleet-schedule``
(tests/harness/schedule.py), so a new test file needs nothing to be xdist-safe.
(``--dist loadgroup`` with xdist_group markers does not group under pytest 9.2 with
pytest-xdist 3.8.0: xdist renames ``item._nodeid``, which pytest 9.2 no longer reads.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import lab as labmod
from tests.harness import run as runmod

CONTAINER_FIXTURES = {"node_image", "standin_repo", "sim_node", "module_sim_node"}
FLEET_FIXTURES = {"lab_fleet"}
TOKEN = secrets.token_hex(3) + os.environ.get("PYTEST_XDIST_WORKER", "")
_RUN_DIR = pytest.StashKey[Path]()


# ------------------------------------------------------------------------------ the run
def pytest_configure(config: pytest.Config) -> None:
    """The controller (or the only process) starts the run before any xdist worker exists, so
    the workers inherit its directory and repository port through the environment."""
    if not hasattr(config, "workerinput"):
        config.stash[_RUN_DIR] = runmod.start_run(labmod.lab_dir())
        if "GDSFLEET_NODE_IMAGE" not in os.environ and shutil.which("podman"):
            # this checkout's image, by recipe (molecule reads the variable too)
            os.environ["GDSFLEET_NODE_IMAGE"] = labmod.recipe_image()
    if os.environ.get("GDSFLEET_NODE_IMAGE"):
        labmod.IMAGE = os.environ["GDSFLEET_NODE_IMAGE"]
    if hasattr(config, "workerinput") and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # execnet starts xdist workers with SIGINT ignored; tests of signal handling expect
        # Python's own handler, as in a serial run
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gdsfleet-schedule", action="store_true",
                     help="with -n: spread whole files over the workers, cutting a file at "
                          "its costly module fixtures, longest parts first "
                          "(tests/harness/schedule.py)")
    parser.addoption("--exec-nodes", action="store_true",
                     help="also run the execution-node container suite (marker execnodes: "
                          "about 11 minutes on 2 cores, so not in the default run; "
                          "docs/testing.md)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not config.getoption("gdsfleet_schedule"):
        return None
    from tests.harness import schedule

    return schedule.make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    d = config.stash.get(_RUN_DIR, None)
    if d is not None:
        runmod.finish_run(d)


# ------------------------------------------------------------------------------ markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & FLEET_FIXTURES:
            item.add_marker(pytest.mark.fleet)
            item.add_marker(pytest.mark.container)
        elif names & CONTAINER_FIXTURES:
            item.add_marker(pytest.mark.container)
        if item.get_closest_marker("execnodes") and not config.getoption("exec_nodes", False):
            item.add_marker(pytest.mark.skip(
                reason="the execution-node container suite runs with --exec-nodes "
                       "(bash scripts/test.sh --exec-nodes): about 11 minutes on 2 cores, "
                       "kept out of the 20-minute default run"))
    if config.getoption("gdsfleet_schedule", False):
        from tests.harness import schedule

        schedule.write_parts(items)  # before the worker reports its collection


def _need_podman() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/setup.sh installs it)")


# ------------------------------------------------------------------------------ session
@pytest.fixture(scope="session")
def node_image() -> str:
    _need_podman()
    labmod.ensure_image()
    return labmod.IMAGE


@dataclass(frozen=True)
class StandinRepo:
    directory: Path
    base_url: str
    cuda_url: str
    cuda_key_url: str
    doca_url: str
    doca_key_url: str
    mlnx_ofed_tarball_url: str
    mlnx_ofed_tarball_checksum: str
    cuda_key: Path
    doca_key: Path

    def group_vars(self) -> dict[str, str]:
        """The role variables that point the collection at this repository."""
        return {"cuda_repo_base_url": f"{self.base_url}/cuda/repos",
                "mofed_doca_repo_base_url": f"{self.base_url}/doca",
                "mofed_mlnx_ofed_tarball": self.mlnx_ofed_tarball_url,
                # served over plain http on loopback: the role wants the checksum
                "mofed_mlnx_ofed_tarball_checksum": self.mlnx_ofed_tarball_checksum,
                # the stand-in package index of the same server (gdsfleet.gds.verify_runtime)
                "verify_runtime_source": "index",
                "verify_runtime_index_url": f"{self.base_url}/pypi/simple"}


@pytest.fixture(scope="session")
def standin_repo() -> StandinRepo:
    """Build the repository (cached; under build.sh's lock) and serve it for this run: the
    first worker to ask starts the run's server on the run's port, the controller stops it."""
    labmod.build_repo()
    d = labmod.lab_dir() / "standin-repo"
    base = runmod.RepoServer(runmod.run_dir()).ensure(d)
    cuda = "cuda/repos/debian12/x86_64"
    return StandinRepo(
        directory=d, base_url=base, cuda_url=f"{base}/{cuda}/",
        cuda_key_url=f"{base}/{cuda}/3bf863cc.pub",
        doca_url=f"{base}/doca/3.1.0/debian12/x86_64/",
        doca_key_url=f"{base}/doca/GPG-KEY-Mellanox.pub",
        mlnx_ofed_tarball_url=f"{base}/mlnx_ofed/{labmod.MLNX_OFED_TARBALL}",
        mlnx_ofed_tarball_checksum=labmod.standin_tarball_checksum(),
        cuda_key=d / cuda / "3bf863cc.pub", doca_key=d / "doca" / "GPG-KEY-Mellanox.pub")


@dataclass
class PrivateRepo:
    """The stand-in repository served on a private loopback port for one test module, with the
    server's access log (what apt and pip fetched)."""

    repo: StandinRepo
    log: Path

    @property
    def base_url(self) -> str:
        return self.repo.base_url

    def group_vars(self) -> dict[str, str]:
        return self.repo.group_vars()


@pytest.fixture(scope="module")
def private_repo(standin_repo: StandinRepo,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRepo]:
    """The stand-in repository (built by `standin_repo`) served by a server of this module's
    own: a concurrent pytest session stopping the shared server cannot break a rollout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = tmp_path_factory.mktemp("private-repo") / "access.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                 "--directory", str(standin_repo.directory), str(port)],
                                stdout=fh, stderr=subprocess.STDOUT)
    old, base = standin_repo.base_url, f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                url = f"{base}/cuda/repos/debian12/x86_64/Packages"  # http on loopback only
                with urllib.request.urlopen(url, timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the private stand-in repo on {base} did not answer: "
                                       f"{log.read_text()[-500:]}") from None
                time.sleep(0.2)
        moved = dataclasses.replace(
            standin_repo, base_url=base,
            cuda_url=standin_repo.cuda_url.replace(old, base),
            cuda_key_url=standin_repo.cuda_key_url.replace(old, base),
            doca_url=standin_repo.doca_url.replace(old, base),
            doca_key_url=standin_repo.doca_key_url.replace(old, base),
            mlnx_ofed_tarball_url=standin_repo.mlnx_ofed_tarball_url.replace(old, base))
        yield PrivateRepo(repo=moved, log=log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def private_collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gdsfleet.gds built from this checkout and installed into a path of this module's own
    (no race with another session's install); point ANSIBLE_COLLECTIONS_PATH at it."""
    tmp = tmp_path_factory.mktemp("collection")
    galaxy_bin = str(Path(sys.executable).with_name("ansible-galaxy"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    root = Path(__file__).resolve().parents[2]

    def galaxy(*args: str) -> None:
        proc = subprocess.run([galaxy_bin, "collection", *args], capture_output=True, text=True,
                              env=env, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ansible-galaxy collection {args[0]} failed: "
                               f"{proc.stderr[-2000:]}")

    galaxy("build", "--force", "--output-path", str(tmp / "build"), str(root))
    tarball = next((tmp / "build").glob("gdsfleet-gds-*.tar.gz"))
    galaxy("install", "--force", "--offline", "--no-deps", "-p", str(tmp / "collections"),
           str(tarball))
    return tmp / "collections"


# ------------------------------------------------------------------------------ sim nodes
def free_port(start: int = 23000, end: int = 29000) -> int:
    """A free loopback port reserved for this process (tests/harness/run.py: no other worker or
    concurrent run gets it while this process lives)."""
    return runmod.reserve_ports(1, start=start, end=end)


@dataclass
class SimNode:
    """One simulated node container."""

    name: str
    profile: str
    env: dict[str, str] = field(default_factory=dict)
    ssh_port: int | None = None
    loop: str | None = None
    backing: str | None = None
    fabric_loop: str | None = None
    fabric_backing: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None

    nvme = "/dev/nvme0n1"

    def exec(self, command: str, *, check: bool = True, env: Mapping[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a bash command in the node (as root); raises on failure when check."""
        cmd = ["podman", "exec"]
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        cmd += [self.name, "bash", "-c", command]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=labmod.podman_env(),
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.name}: `{command}` exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def probe(self, commands: Mapping[str, str]) -> dict[str, tuple[int, str]]:
        """Run several commands in ONE podman exec: {key: (exit status, stdout+stderr)}."""
        marker = f"@@gdsfleet-probe-{secrets.token_hex(4)}@@"
        script = "\n".join(
            f"echo '{marker}BEGIN {key}'; ( {cmd} ) 2>&1; rc=$?; echo; echo \"{marker}RC $rc\""
            for key, cmd in commands.items())
        result: dict[str, tuple[int, str]] = {}
        key: str | None = None
        buf: list[str] = []
        for line in self.exec(script, check=False).stdout.splitlines():
            if line.startswith(marker + "BEGIN "):
                key, buf = line[len(marker) + 6:], []
            elif line.startswith(marker + "RC ") and key is not None:
                result[key] = (int(line.split()[-1]), "\n".join(buf))
                key = None
            elif key is not None:
                buf.append(line)
        return result

    def read(self, path: str) -> str:
        return self.exec(f"cat {path}").stdout

    def boot_id(self) -> str:
        return self.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ok = self.exec("gdsfleet-sim-ready", check=False).returncode == 0
            if ok and (self.ssh_port is None or labmod.ssh_banner("127.0.0.1", self.ssh_port)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout}s")
            time.sleep(0.1)

    def reboot(self, timeout: float = 60) -> None:
        """Simulated reboot: the stand-in `reboot` stops PID 1, podman restarts the container."""
        before = self.boot_id()
        # The reboot ends the session that runs it, as on a real node (ssh would say 255):
        # podman may lose the exec session's exit status with the container ("exec died
        # event", 255; a fresh-clone run met it). Whether the node rebooted is what the boot id
        # below proves, not the command's status.
        self.exec("reboot", check=False)
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(0.3)
            with contextlib.suppress(AssertionError, subprocess.SubprocessError):
                if self.exec("gdsfleet-sim-ready", check=False).returncode == 0 \
                        and self.boot_id() != before:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not come back from reboot")
        self.wait_ready(timeout)

    def ansible_host_vars(self) -> dict[str, Any]:
        """Inventory variables that reach this node as Ansible reaches a real one: SSH to its
        loopback sshd (start the node with ``ssh=True``) as root with the harness key, the host
        key checked strictly against the node's own known_hosts, and pipelining on.

        SSH with pipelining sends a task's module through the open (ControlMaster) connection
        on ssh's stdin: one ssh session per task. Ansible's podman connection has no pipelining
        and spends several ``podman exec`` / ``podman cp`` processes on every task, which is
        what made the container tests CPU-bound on small CI machines (docs/testing.md).
        The simulated reboot keeps the host key (/etc/ssh of the same container) and
        :meth:`reboot` waits for sshd's banner, so a connection after a reboot is checked
        against the same known_hosts line."""
        if self.ssh_port is None or self.key_file is None or self.known_hosts is None:
            raise RuntimeError(f"{self.name} was started without sshd: ask the sim_node "
                               "fixture for it with ssh=True")
        return {"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                "ansible_port": self.ssh_port, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key_file),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={self.known_hosts} "
                                           "-o StrictHostKeyChecking=yes",
                "ansible_ssh_pipelining": True,
                "ansible_python_interpreter": "/usr/bin/python3"}

    def install_repo(self, repo: StandinRepo, *, doca: bool = True) -> None:
        """Point the node's APT at the stand-in repository (signed-by keys), apt-get update."""
        lines = [f"deb [signed-by=/etc/apt/keyrings/gdsfleet-test-cuda.asc] {repo.cuda_url} /"]
        if doca:
            lines.append(
                f"deb [signed-by=/etc/apt/keyrings/gdsfleet-test-doca.asc] {repo.doca_url} /")
        script = (
            "set -e; install -d -m 0755 /etc/apt/keyrings\n"
            f"python3 -c 'import urllib.request as u,sys; "
            f"open(sys.argv[2],\"wb\").write(u.urlopen(sys.argv[1]).read())' "
            f"{repo.cuda_key_url} /etc/apt/keyrings/gdsfleet-test-cuda.asc\n"
            f"python3 -c 'import urllib.request as u,sys; "
            f"open(sys.argv[2],\"wb\").write(u.urlopen(sys.argv[1]).read())' "
            f"{repo.doca_key_url} /etc/apt/keyrings/gdsfleet-test-doca.asc\n"
            f"printf '%s\\n' {' '.join(repr(x) for x in lines)} "
            "> /etc/apt/sources.list.d/gdsfleet-test.list\n"
            "apt-get update -qq")
        self.exec(script)

    def install_verify_runtime(self, repo: StandinRepo, **role_vars: Any
                               ) -> subprocess.CompletedProcess[str]:
        """Install the verification runtime (kvikio + cupy) as a rollout does: the role
        gdsfleet.gds.verify_runtime of this checkout, run against the node over SSH with
        pipelining when the node runs sshd (``ssh=True``, :meth:`ansible_host_vars`), else over
        Ansible's podman connection; python3-venv from the stand-in distribution archive, the
        stand-in wheels from the stand-in package index."""
        labmod.configure_distro_archive(self.name, repo.base_url)
        if self.ssh_port is not None:
            return run_verify_runtime_role({self.name: self.ansible_host_vars()}, repo,
                                           **role_vars)
        return run_verify_runtime_role(f"{self.name},", repo, connection="containers.podman.podman",
                                       **role_vars)

    def apt_install(self, *packages: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.exec("DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                         "--no-install-recommends " + " ".join(packages), check=check)


def run_verify_runtime_role(inventory: str | Mapping[str, Mapping[str, Any]], repo: StandinRepo,
                            *, connection: str | None = None, limit: str | None = None,
                            **role_vars: Any) -> subprocess.CompletedProcess[str]:
    """Run the role gdsfleet.gds.verify_runtime (from roles/ of this checkout) on the nodes of
    ``inventory`` (an inventory source, or {host: variables}) with the stand-in package index
    of ``repo``; raises when the play fails. Pipelining is on: SSH nodes get a task's module
    through the open connection (the podman connection has none and ignores it)."""
    import json
    import tempfile

    variables: dict[str, Any] = {"verify_runtime_source": "index",
                                 "verify_runtime_index_url": f"{repo.base_url}/pypi/simple",
                                 "verify_runtime_cuda_major": "12",
                                 # the lab's CUDA (roles/cuda's default): the role pins the
                                 # cuFile wheel to it where a node has no libcufile package
                                 "cuda_version": "12.9",
                                 "verify_runtime_lock_timeout": 60,
                                 "ansible_python_interpreter": "/usr/bin/python3"}
    variables.update(role_vars)
    with tempfile.TemporaryDirectory(prefix="gdsfleet-runtime-") as tmp:
        play = Path(tmp) / "runtime.yml"
        play.write_text("- hosts: all\n  gather_facts: false\n  roles:\n    - verify_runtime\n")
        extra = Path(tmp) / "vars.json"
        extra.write_text(json.dumps(variables))
        if not isinstance(inventory, str):
            hosts = Path(tmp) / "hosts.json"
            hosts.write_text(json.dumps({"all": {"hosts": {k: dict(v)
                                                           for k, v in inventory.items()}}}))
            inventory = str(hosts)
        cmd = [str(labmod.ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", inventory,
               str(play), "-e", f"@{extra}"]
        if connection:
            cmd += ["-c", connection]
        if limit:
            cmd += ["--limit", limit]
        env = labmod.podman_env()
        env.update(ANSIBLE_ROLES_PATH=str(labmod.ROOT / "roles"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_PIPELINING="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                              check=False)
    if proc.returncode != 0:
        raise AssertionError(f"gdsfleet.gds.verify_runtime failed on {inventory} "
                             f"({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    return proc


def on_each(nodes: Iterable[SimNode], action: Callable[[SimNode], Any]) -> list[Any]:
    """``action(node)`` for every node at once (threads: the work is in the node, the caller
    waits on podman exec or apt), results in the nodes' order; the first error is raised."""
    todo = list(nodes)
    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
        return list(pool.map(action, todo))


class SimNodeFactory:
    def __init__(self, scope_tag: str) -> None:
        self.scope_tag = scope_tag
        self.nodes: list[SimNode] = []
        self.reserved: list[int] = []
        self.count = 0
        self._lock = threading.Lock()

    def many(self, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, SimNode]:
        """Start several nodes at once (threads; each start is mostly waiting on podman and
        the node's boot): {key: keyword arguments of a single call} -> {key: node}. The nodes
        are the same as those of one call each; all are cleaned up with the factory."""
        _need_podman()
        labmod.ensure_image()
        with ThreadPoolExecutor(max_workers=max(1, len(specs))) as pool:
            futures = {key: pool.submit(lambda kw: self(**kw), dict(kw))
                       for key, kw in specs.items()}
            return {key: f.result() for key, f in futures.items()}

    def __call__(self, profile: str = "nvfs", env: Mapping[str, str] | None = None, *,
                 ssh: bool | int = False, nvme: bool = False, loop_size: str = "512M",
                 name: str | None = None, nvmeof: bool = False,
                 image: str | None = None) -> SimNode:
        """A node of the node image, or of ``image``: one that :func:`commit_node` made of a
        node (the same profile; pass the committed node's ``GDSFLEET_SIM_SEED`` in ``env`` to
        keep its simulated hardware identity). Starting it is a simulated boot of that node's
        disk: what was only in memory (loaded modules, /run) is as the boot makes it."""
        _need_podman()
        labmod.ensure_image()
        with self._lock:  # many() starts nodes from threads
            self.count += 1
            node = SimNode(name or f"gdsfleet-hx-{TOKEN}-{self.scope_tag}-{self.count}",
                           profile, dict(env or {}))
            self.nodes.append(node)
        cmd = ["podman", "run", "-d", "--privileged", "--network", "host", "--restart", "always",
               "--name", node.name, "--hostname", node.name,
               "--label", f"{labmod.LABEL}=fixtures#{TOKEN}",
               "--label", f"gdsfleet.pid={os.getpid()}",
               "-e", f"GDSFLEET_SIM_PROFILE={profile}"]
        if "GDSFLEET_SIM_SEED" not in node.env:
            cmd += ["-e", f"GDSFLEET_SIM_SEED={node.name}"]
        for k, v in sorted(node.env.items()):
            cmd += ["-e", f"{k}={v}"]
        if ssh:
            if isinstance(ssh, int) and ssh is not True:
                node.ssh_port = ssh
            else:
                node.ssh_port = free_port()
                with self._lock:
                    self.reserved.append(node.ssh_port)
            node.key_file = labmod.ensure_ssh_key()
            pub = Path(str(node.key_file) + ".pub").read_text().strip()
            cmd += ["-e", f"GDSFLEET_SSH_PORT={node.ssh_port}",
                    "-e", f"GDSFLEET_SSH_AUTHORIZED_KEY={pub}"]
        if nvme:
            d = labmod.lab_dir() / "fixtures-loop"
            d.mkdir(parents=True, exist_ok=True)
            node.backing = str(d / f"{node.name}.img")
            labmod.run(["truncate", "-s", loop_size, node.backing])
            node.loop = labmod.run(["losetup", "-f", "--show", node.backing]).stdout.strip()
            cmd += ["-v", f"{node.loop}:{node.loop}", "-e", f"GDSFLEET_SIM_NVME={node.loop}"]
        if nvmeof:
            # the simulated NVMe-oF target's namespace (gdsfleet_nvmeof.py in the image)
            d = labmod.lab_dir() / "fixtures-loop"
            d.mkdir(parents=True, exist_ok=True)
            node.fabric_backing = str(d / f"{node.name}-fabric.img")
            labmod.run(["truncate", "-s", loop_size, node.fabric_backing])
            node.fabric_loop = labmod.run(["losetup", "-f", "--show", node.fabric_backing]
                                          ).stdout.strip()
            cmd += ["-v", f"{node.fabric_loop}:{node.fabric_loop}",
                    "-e", f"GDSFLEET_SIM_NVMEOF={node.fabric_loop}"]
        cmd.append(image or labmod.IMAGE)
        labmod.run(cmd)
        node.wait_ready()
        if ssh:
            pub = node.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
            node.known_hosts = labmod.lab_dir() / "fixtures-ssh" / f"{node.name}.known_hosts"
            node.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            node.known_hosts.write_text(f"[127.0.0.1]:{node.ssh_port} {' '.join(pub)}\n")
        return node

    def cleanup(self) -> None:
        errors = []
        for node in reversed(self.nodes):
            proc = subprocess.run(["podman", "rm", "-f", "-t", "0", node.name],
                                  capture_output=True, text=True, env=labmod.podman_env(),
                                  check=False)
            if proc.returncode != 0 and "no such container" not in proc.stderr.lower():
                errors.append(proc.stderr.strip())
            if node.loop and node.backing:
                if labmod.Lab._loop_backs(node.loop, node.backing):
                    subprocess.run(["losetup", "-d", node.loop], check=False)
                with contextlib.suppress(OSError):
                    os.unlink(node.backing)
            if node.fabric_loop and node.fabric_backing:
                if labmod.Lab._loop_backs(node.fabric_loop, node.fabric_backing):
                    subprocess.run(["losetup", "-d", node.fabric_loop], check=False)
                with contextlib.suppress(OSError):
                    os.unlink(node.fabric_backing)
            if node.known_hosts:
                with contextlib.suppress(OSError):
                    node.known_hosts.unlink()
        self.nodes.clear()
        for port in self.reserved:
            runmod.release_ports(port)
        self.reserved.clear()
        if errors:
            raise RuntimeError("; ".join(errors))


SNAPSHOT_LABEL = "gdsfleet.snapshot-pid"


def commit_node(node: SimNode) -> str:
    """The node's disk as an image of this session (``podman commit``), for tests that start
    from one converged node instead of converging it again each (``sim_node(...,
    image=...)``). Remove it with :func:`remove_image`; ``lab.gc()`` removes those of
    sessions that are gone. TEST HARNESS ONLY."""
    tag = f"localhost/{node.name}:converged"
    labmod.podman("commit", "-q", "--change", f"LABEL {SNAPSHOT_LABEL}={os.getpid()}",
                  node.name, tag, timeout=600)
    return tag


def remove_image(tag: str) -> None:
    labmod.podman("rmi", "-f", tag, check=False, timeout=300)


@pytest.fixture
def sim_node(request: pytest.FixtureRequest) -> Iterator[Callable[..., SimNode]]:
    factory = SimNodeFactory("f")
    request.addfinalizer(factory.cleanup)
    yield factory


@pytest.fixture(scope="module")
def module_sim_node(request: pytest.FixtureRequest) -> Iterator[Callable[..., SimNode]]:
    factory = SimNodeFactory("m")
    request.addfinalizer(factory.cleanup)
    yield factory


# ------------------------------------------------------------------------------ lab fleets
@dataclass
class Fleet:
    inventory: Path
    nodes: list[labmod.LabNode]
    lab: labmod.Lab
    key: tuple[Any, ...] = ()

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def exec(self, node: str, command: str, *, check: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["podman", "exec", node, "bash", "-c", command],
                              capture_output=True, text=True, env=labmod.podman_env(),
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{node}: `{command}` exited {proc.returncode}\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc


class FleetFactory:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.current: Fleet | None = None
        self.count = 0

    def __call__(self, nodes: int = 2, profiles: Mapping[Any, Any] | None = None, *,
                 group_vars: Mapping[str, Any] | None = None, fresh: bool = False) -> Fleet:
        _need_podman()
        key = (nodes, repr(sorted((str(k), repr(v)) for k, v in (profiles or {}).items())),
               repr(sorted((group_vars or {}).items())))
        if self.current is not None and self.current.key == key and not fresh:
            return self.current
        self.teardown()
        self.count += 1
        state = self.tmp / f"fleet{self.count}"
        prefix = f"gdsfleet-fx-{TOKEN}-{self.count}"
        base = self._port_base(nodes)
        lab = labmod.Lab(state, prefix=prefix, port_base=base)
        # record the fleet before starting it, so a failing `up` is still torn down
        self.current = Fleet(state / "inventory" / "hosts.yml", [], lab, key)
        # node names in profile maps may use the lab's names (gdsfleet-lab-NN) or numbers
        pmap: dict[str, Any] = {}
        for k, v in (profiles or {}).items():
            k = str(k)
            if k.startswith(labmod.LAB_PREFIX + "-"):
                k = str(int(k.rsplit("-", 1)[1]))
            pmap[k] = v
        lab_nodes = lab.up(nodes, pmap, serve_repo=False)  # the run serves the repository
        self.current.nodes = lab_nodes
        lab.inventory(self.current.inventory, lab_nodes, group_vars)
        return self.current

    @staticmethod
    def _port_base(nodes: int) -> int:
        """Node i listens on base + i: reserve base+1 .. base+nodes for this process."""
        return runmod.reserve_ports(nodes, start=24000, end=29000) - 1

    def teardown(self) -> None:
        if self.current is not None:
            fleet, self.current = self.current, None
            try:
                fleet.lab.down(stop_repo_server=False)
            finally:
                runmod.release_ports(fleet.lab.port_base + 1, fleet.key[0])


@pytest.fixture(scope="module")
def lab_fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              standin_repo: StandinRepo) -> Iterator[Callable[..., Fleet]]:
    """Fleets whose inventories point at this run's repository (the run serves it)."""
    factory = FleetFactory(tmp_path_factory.mktemp("fleet"))
    request.addfinalizer(factory.teardown)
    yield factory
