"""Execution nodes as podman containers, for ``provisioner rollout --executor ssh`` against the
simulated lab (issue 14's "Tests (this machine, loopback only)").

TEST HARNESS ONLY. An execution node here is a container of the lab node image
(localhost/gdsfleet-node:bookworm: Debian 12, python3 and sshd; the sim init starts sshd on
127.0.0.1:$GDSFLEET_SSH_PORT) on the host network, like the lab nodes, so it reaches them on
their 127.0.0.1 ports. It is prepared the way an operator prepares one: by running
``gdsfleet.gds.exec_node`` (playbooks/exec_node.yml) against it over SSH, here without any
network:

* python3-venv comes from the stand-in Debian archive of the stand-in repository (a Debian
  host has it from its distribution archive; the node image has no APT sources);
* ansible-core and ansible-runner come from a wheelhouse of the controller's own versions
  (``pip download`` with the controller venv's pip, cached per machine under
  ``~/.cache/gdsfleet/exec-wheels``; the node's ``/etc/pip.conf`` points pip at it);
* the collection's dependencies (ansible.posix, community.general) are tarballs packed from the
  controller's installed copies (``gdsfleet_exec_collection_dependencies``), since no Galaxy
  server is reachable.

Preparing costs CPU, so the prepared node is committed as an image per machine, tagged by the
versions, the base image and a hash of exec_node.yml (``localhost/gdsfleet-exec:<key>``); each
session only installs the collection tarball of the checkout fresh (it changes with every
commit), with the same ``ansible-galaxy collection install`` the playbook runs.

:class:`ExecNodes` writes the exec inventory (group ``gdsfleet_exec``, ``ansible_host``/port/
user/key) and a known_hosts file with each execution node's own host key (strict checking, the
key read from the container). The target inventory that the ssh executor sends names the lab's
key and known_hosts by their paths on the coordinator; :meth:`ExecNodes.trust` puts those two
files at the same paths on every execution node, as an operator gives an execution node the
nodes' SSH key and host keys (docs/scale.md, "Setting up an execution node").

``up(count, tarball, isolated=N)`` starts the last N nodes in network namespaces of their own
instead (``--network none``), joined to this machine's loopback by a relay the test owns
(tests/harness/netrelay.py: their sshd port outward, the ports given to :meth:`ExecNodes.reach`
inward, on the same numbers, so inventories do not change); :meth:`ExecNodes.partitioned` cuts
such a node off with a DROP rule in its namespace.

Containers are named ``gdsfleet-hx-<session token>-exec-N`` and labelled like the fixtures'
(``python -m tests.harness.lab gc`` removes what a crashed session left).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import lab as labmod
from tests.harness import netrelay
from tests.harness import run as runmod

VENV = "/opt/gdsfleet-exec"
RUNNER = f"{VENV}/bin/ansible-runner"
COLLECTIONS = f"{VENV}/collections"
WHEELS_IN_NODE = "/opt/gdsfleet-exec-wheels"
IMAGE_REPO = "localhost/gdsfleet-exec"
# the collections gdsfleet.gds's site.yml needs besides ansible-core (galaxy.yml's
# dependencies; kubernetes.core only serves the gpu_operator playbook, not run here)
DEPENDENCIES = ("ansible.posix", "community.general")
RECIPE = "1"  # bump when the preparation below changes in a way the key does not see
EXEC_NODE_PLAYBOOK = labmod.ROOT / "playbooks" / "exec_node.yml"


def cache_dir() -> Path:
    return Path(os.environ.get("GDSFLEET_CACHE_DIR", "~/.cache/gdsfleet")).expanduser()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def controller_versions() -> dict[str, str]:
    return {"ansible-core": importlib.metadata.version("ansible-core"),
            "ansible-runner": importlib.metadata.version("ansible-runner")}


def wheelhouse(python: str) -> Path:
    """The controller's ansible-core and ansible-runner (and their dependencies, at the
    controller's versions where it has them) as wheels for the node's Python ``python``
    (``3.11``), downloaded once per machine."""
    v = controller_versions()
    key = f"core{v['ansible-core']}-runner{v['ansible-runner']}-py{python}-{platform.machine()}"
    dest = cache_dir() / "exec-wheels" / key
    with _locked(cache_dir() / "exec-wheels" / f".{key}.lock"):
        if (dest / ".complete").exists():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=dest.parent))
        freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True,
                                text=True, check=True).stdout
        cons = tmp / "constraints.txt"
        cons.write_text("".join(ln + "\n" for ln in freeze.splitlines()
                                if "==" in ln and not ln.startswith("-e")))
        abi = "cp" + python.replace(".", "")
        arch = platform.machine()
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--abi", abi,
               "--platform", f"manylinux_2_28_{arch}", "--platform", f"manylinux_2_17_{arch}",
               "--platform", f"manylinux2014_{arch}", "--platform", "any",
               "-c", str(cons), "-d", str(tmp / "wheels"),
               f"ansible-core=={v['ansible-core']}", f"ansible-runner=={v['ansible-runner']}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"pip download of the execution node's wheels failed (a package "
                               f"index is needed once per machine): {proc.stderr[-1500:]}")
        (tmp / "wheels").rename(dest)
        shutil.rmtree(tmp, ignore_errors=True)
        (dest / ".complete").write_text(json.dumps(v) + "\n")
        return dest


def _installed_collection(fqcn: str) -> Path:
    """The controller's installed copy of ``fqcn`` (from the ``ansible`` package)."""
    ns, name = fqcn.split(".")
    for entry in sys.path:
        d = Path(entry) / "ansible_collections" / ns / name
        if (d / "MANIFEST.json").is_file():
            return d
    raise RuntimeError(f"the controller has no installed {fqcn} (the ansible package)")


def dependency_tarballs() -> list[Path]:
    """Collection tarballs of :data:`DEPENDENCIES`, packed from the controller's installed
    copies; cached per machine. An installed collection keeps MANIFEST.json and FILES.json, the
    artifact's own metadata, so packed with them it is what ``ansible-galaxy collection
    install`` takes; the ``ansible`` package leaves out some files FILES.json lists (CI
    folders), so FILES.json here lists what is there and MANIFEST.json carries its new
    checksum (the installer still checks every file's own checksum against it)."""
    import io

    out = []
    for fqcn in DEPENDENCIES:
        src = _installed_collection(fqcn)
        manifest = json.loads((src / "MANIFEST.json").read_text())
        version = manifest["collection_info"]["version"]
        dest = cache_dir() / "exec-collections" / f"{fqcn.replace('.', '-')}-{version}.tar.gz"
        with _locked(dest.with_suffix(".lock")):
            if not dest.exists():
                files = json.loads((src / "FILES.json").read_text())
                kept = [f for f in files["files"] if f["name"] == "." or (
                    (src / f["name"]).is_dir() if f["ftype"] == "dir"
                    else (src / f["name"]).is_file())]
                files_raw = json.dumps({**files, "files": kept}, indent=4).encode()
                manifest["file_manifest_file"]["chksum_sha256"] = \
                    hashlib.sha256(files_raw).hexdigest()
                manifest_raw = json.dumps(manifest, indent=4).encode()
                tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
                with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
                    for name, raw in (("MANIFEST.json", manifest_raw), ("FILES.json", files_raw)):
                        info = tarfile.TarInfo(name)
                        info.size, info.mode, info.mtime = len(raw), 0o644, int(time.time())
                        tar.addfile(info, io.BytesIO(raw))
                    for f in kept:
                        if f["name"] != ".":
                            tar.add(src / f["name"], f["name"], recursive=False)
                tmp.rename(dest)
        out.append(dest)
    return out


def image_key(base_image_id: str, python: str) -> str:
    h = hashlib.sha256()
    for part in (RECIPE, base_image_id, python, json.dumps(controller_versions(), sort_keys=True),
                 EXEC_NODE_PLAYBOOK.read_text(),
                 *(p.name for p in dependency_tarballs())):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------ containers
@dataclass
class ExecNode:
    name: str  # the exec inventory's name
    container: str
    port: int
    host_key: str = ""  # "ssh-ed25519 AAAA..."
    isolated: bool = False  # in a network namespace of its own, behind a relay


def _podman_env() -> dict[str, str]:
    return labmod.podman_env()


def _start(container: str, image: str, port: int, pubkey: str, token: str,
           extra: Sequence[str] = (), *, network: str = "host") -> None:
    labmod.podman("run", "-d", "--privileged", "--network", network,
                  "--name", container, "--hostname", container,
                  "--label", f"{labmod.LABEL}=fixtures#{token}",
                  "--label", f"gdsfleet.pid={os.getpid()}",
                  "-e", "GDSFLEET_SIM_PROFILE=nogpu", "-e", f"GDSFLEET_SIM_SEED={container}",
                  "-e", f"GDSFLEET_SSH_PORT={port}",
                  "-e", f"GDSFLEET_SSH_AUTHORIZED_KEY={pubkey}", *extra, image)


def _wait_ready(container: str, port: int, timeout: float = 90) -> str:
    """Wait for the sim init and sshd; the node's host key ("type base64")."""
    deadline = time.monotonic() + timeout
    while True:
        ok = labmod.podman("exec", container, "gdsfleet-sim-ready", check=False).returncode == 0
        if ok and labmod.ssh_banner("127.0.0.1", port):
            pub = labmod.podman("exec", container, "cat",
                                "/etc/ssh/ssh_host_ed25519_key.pub").stdout
            return " ".join(pub.split()[:2])
        if time.monotonic() > deadline:
            logs = labmod.podman("logs", "--tail", "20", container, check=False)
            raise RuntimeError(f"{container} did not become ready: {logs.stdout}{logs.stderr}")
        time.sleep(0.2)


def write_exec_inventory(path: Path, nodes: Sequence[ExecNode], key: Path) -> Path:
    lines = ["# TEST HARNESS: execution nodes as podman containers (tests/harness/execnode.py)",
             "[gdsfleet_exec]"]
    lines += [f"{n.name} ansible_host=127.0.0.1 ansible_port={n.port} ansible_user=root "
              f"ansible_ssh_private_key_file={key}" for n in nodes]
    lines += ["", "[gdsfleet_exec:vars]", f"gdsfleet_exec_runner={RUNNER}",
              f"gdsfleet_exec_collections_path={COLLECTIONS}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_known_hosts(path: Path, nodes: Sequence[ExecNode]) -> Path:
    path.write_text("".join(f"[127.0.0.1]:{n.port} {n.host_key}\n" for n in nodes))
    os.chmod(path, 0o600)
    return path


def _ansible_env(collections: Path) -> dict[str, str]:
    env = labmod.podman_env()
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_RETRY_FILES_ENABLED="False")
    return env


def run_exec_node_playbook(inventory: Path, known_hosts: Path, tarball: Path,
                           collections: Path, deps: Sequence[Path], *,
                           limit: str | None = None) -> None:
    """``gdsfleet.gds.exec_node`` against ``inventory``, as an operator runs it (docs/scale.md),
    with the controller's versions; raises with the play's tail when it fails."""
    extra = {"gdsfleet_exec_runner_version": controller_versions()["ansible-runner"],
             "gdsfleet_exec_collection_tarball": str(tarball),
             "gdsfleet_exec_collection_dependencies": [str(p) for p in deps],
             "gdsfleet_exec_venv": VENV,
             "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts} "
                                        "-o StrictHostKeyChecking=yes"}
    with tempfile.TemporaryDirectory(prefix="gdsfleet-execprep-") as tmp:
        vars_file = Path(tmp) / "vars.json"
        vars_file.write_text(json.dumps(extra))
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
             "gdsfleet.gds.exec_node", "-e", f"@{vars_file}",
             *(["--limit", limit] if limit else [])],
            capture_output=True, text=True, env=_ansible_env(collections), timeout=900,
            check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"gdsfleet.gds.exec_node failed ({proc.returncode}):\n"
                           f"{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")


def exec_image(tarball: Path, collections: Path, repo_base_url: str, token: str) -> str:
    """The prepared execution node image of this machine, built when missing (under a lock:
    concurrent sessions build it once)."""
    labmod.ensure_image()
    base_id = labmod.podman("image", "inspect", "--format", "{{.Id}}",
                            labmod.IMAGE).stdout.strip()
    with _locked(cache_dir() / "exec-image.lock"):
        python = labmod.podman("run", "--rm", "--network", "none", "--entrypoint", "python3",
                               labmod.IMAGE, "-c", "import sys; print('%d.%d' % "
                               "sys.version_info[:2])").stdout.strip()
        tag = f"{IMAGE_REPO}:{image_key(base_id, python)}"
        if labmod.podman("image", "exists", tag, check=False).returncode == 0:
            return tag
        build_exec_image(tag, python, tarball, collections, repo_base_url, token)
        return tag


def build_exec_image(tag: str, python: str, tarball: Path, collections: Path,
                     repo_base_url: str, token: str) -> None:
    wheels = wheelhouse(python)
    deps = dependency_tarballs()
    key = labmod.ensure_ssh_key()
    pub = Path(str(key) + ".pub").read_text().strip()
    port = runmod.reserve_ports(1, start=23000, end=29000)
    container = f"gdsfleet-hx-{token}-exprep"
    tmp = Path(tempfile.mkdtemp(prefix="gdsfleet-execprep-"))
    try:
        _start(container, labmod.IMAGE, port, pub, token,
               ["-v", f"{wheels}:{WHEELS_IN_NODE}:ro"])
        node = ExecNode("exprep", container, port, _wait_ready(container, port))
        # the base machine: python3-venv from the (stand-in) distribution archive, pip
        # pointed at the local wheelhouse (an offline site's pip.conf)
        if not labmod.configure_distro_archive(container, repo_base_url):
            raise RuntimeError("the stand-in repository has no Debian archive (python3-venv): "
                               "rebuild it (tests/harness/standin_repo/build.sh)")
        labmod.podman("exec", container, "sh", "-c",
                      "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                      "--no-install-recommends python3-venv >/dev/null && printf "
                      f"'[global]\\nno-index = true\\nfind-links = {WHEELS_IN_NODE}\\n' "
                      "> /etc/pip.conf", timeout=600)
        inv = write_exec_inventory(tmp / "exec.ini", [node], key)
        kh = write_known_hosts(tmp / "known_hosts", [node])
        run_exec_node_playbook(inv, kh, tarball, collections, deps)
        # what must not be shared by the nodes made from the image: host keys (each node
        # makes its own at boot), the login key, the local pip and APT settings, caches
        labmod.podman("exec", container, "sh", "-c",
                      "rm -rf /etc/ssh/ssh_host_* /root/.ssh /root/.ansible /root/.cache "
                      "/etc/pip.conf /etc/apt/sources.list.d/debian.list /var/lib/apt/lists/* "
                      "/tmp/* 2>/dev/null; true")
        labmod.podman("commit", "-q", "--change", f"LABEL gdsfleet.exec-image={tag}",
                      container, tag, timeout=300)
    finally:
        labmod.podman("rm", "-f", "-t", "0", container, check=False)
        runmod.release_ports(port)
        shutil.rmtree(tmp, ignore_errors=True)


class ExecNodes:
    """K execution node containers of the prepared image, with the exec inventory and
    known_hosts written under ``root``."""

    def __init__(self, root: Path, image: str, token: str) -> None:
        self.root = root
        self.image = image
        self.token = token
        self.nodes: list[ExecNode] = []
        self.key = labmod.ensure_ssh_key()
        self.inventory = root / "exec.ini"
        self.known_hosts = root / "exec_known_hosts"
        self.tarball = Path()  # the collection installed by up()
        # isolated nodes (a network namespace of their own): their relays, and the ports of
        # this machine they reach through them (reach())
        self.relays: dict[str, netrelay.Relay] = {}
        self.reached: list[int] = []

    def up(self, count: int, tarball: Path, isolated: int = 0) -> ExecNodes:
        """``count`` nodes; the last ``isolated`` of them in network namespaces of their own
        (``--network none`` and a relay: tests/harness/netrelay.py), which can be
        partitioned; the others on the host network."""
        pub = Path(str(self.key) + ".pub").read_text().strip()
        self.tarball = tarball
        for i in range(1, count + 1):
            port = runmod.reserve_ports(1, start=23000, end=29000)
            self.nodes.append(ExecNode(f"exec{i}", f"gdsfleet-hx-{self.token}-exec-{i}", port,
                                       isolated=i > count - isolated))

        def one(n: ExecNode) -> None:
            _start(n.container, self.image, n.port, pub, self.token,
                   network="none" if n.isolated else "host")
            if n.isolated:
                self._relay(n)
            n.host_key = _wait_ready(n.container, n.port)
            self.install_collection(n, tarball)

        with ThreadPoolExecutor(max_workers=count) as pool:
            list(pool.map(one, self.nodes))
        write_exec_inventory(self.inventory, self.nodes, self.key)
        write_known_hosts(self.known_hosts, self.nodes)
        return self

    @staticmethod
    def install_collection(n: ExecNode, tarball: Path) -> None:
        """This checkout's collection, fresh: the command the exec_node playbook runs."""
        with open(tarball, "rb") as fh:
            proc = subprocess.run(
                ["podman", "exec", "-i", n.container, "sh", "-c",
                 f"cat > /tmp/gdsfleet-gds.tar.gz && {VENV}/bin/ansible-galaxy collection "
                 f"install --force --offline --no-deps -p {COLLECTIONS} /tmp/gdsfleet-gds.tar.gz"
                 " >/dev/null && rm -f /tmp/gdsfleet-gds.tar.gz"],
                stdin=fh, capture_output=True, env=_podman_env(), timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{n.container}: collection install failed: "
                               f"{proc.stderr.decode(errors='replace')[-1500:]}")

    def by_name(self, name: str) -> ExecNode:
        return next(n for n in self.nodes if n.name == name)

    def exec(self, name: str, command: str, *, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        n = self.by_name(name)
        proc = subprocess.run(["podman", "exec", n.container, "bash", "-c", command],
                              capture_output=True, text=True, env=_podman_env(),
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{n.container}: `{command}` exited {proc.returncode}\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def put(self, path: Path, data: bytes) -> None:
        """Write ``data`` at ``path`` (mode 0600, folders made) on every execution node."""
        for n in self.nodes:
            subprocess.run(["podman", "exec", "-i", n.container, "sh", "-c",
                            f"mkdir -p '{path.parent}' && umask 077 && cat > '{path}'"],
                           input=data, capture_output=True, env=_podman_env(), timeout=60,
                           check=True)

    def trust(self, key: Path, known_hosts: Path) -> None:
        """The target nodes' SSH key and known_hosts at the paths the target inventory names,
        on every execution node."""
        self.put(key, key.read_bytes())
        self.put(known_hosts, known_hosts.read_bytes())

    def kill(self, name: str) -> None:
        labmod.podman("kill", self.by_name(name).container)

    def restart(self, name: str) -> None:
        """Start a killed node again (same host key: the container's own /etc/ssh; an
        isolated one gets a new namespace, and so a new relay)."""
        n = self.by_name(name)
        if labmod.podman("container", "inspect", "--format", "{{.State.Running}}",
                         n.container).stdout.strip() != "true":
            labmod.podman("start", n.container)
            if n.isolated:
                self._relay(n)
        _wait_ready(n.container, n.port)

    def _relay(self, n: ExecNode) -> None:
        old = self.relays.pop(n.name, None)
        if old is not None:
            old.close()
        pid = int(labmod.podman("container", "inspect", "--format", "{{.State.Pid}}",
                                n.container).stdout.strip())
        relay = netrelay.Relay(pid)
        relay.outward(n.port)
        for port in self.reached:
            relay.inward(port)
        self.relays[n.name] = relay

    def reach(self, ports: Sequence[int]) -> None:
        """Let the isolated nodes reach this machine's 127.0.0.1:PORT for each of ``ports``
        (the lab nodes' sshd, the stand-in repository), on the same port numbers."""
        new = [p for p in ports if p not in self.reached]
        self.reached += new
        for relay in self.relays.values():
            for port in new:
                relay.inward(port)

    @contextlib.contextmanager
    def partitioned(self, name: str) -> Iterator[None]:
        """Cut execution node ``name`` (one started isolated) off from everything while it
        runs on: a DROP rule on the lo of its own network namespace, which every byte it
        sends or receives crosses (tests/harness/netrelay.py). Healed on the way out."""
        relay = self.relays.get(name)
        if relay is None:
            raise ValueError(f"{name} shares this machine's network: start it isolated "
                             f"(exec_nodes(count, isolated=N)) to partition it")
        with relay.partition():
            yield

    def running(self, name: str) -> bool:
        proc = labmod.podman("container", "inspect", "--format", "{{.State.Running}}",
                             self.by_name(name).container, check=False)
        return proc.stdout.strip() == "true"

    def down(self) -> None:
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()
        for n in self.nodes:
            labmod.podman("rm", "-f", "-t", "0", n.container, check=False)
            runmod.release_ports(n.port)
        self.nodes.clear()


@dataclass
class ExecNodesFactory:
    root: Path
    collections: Path
    repo_base_url: str
    token: str
    current: ExecNodes | None = None
    count: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def tarball(self) -> Path:
        """The collection tarball built with ``collections`` (fixtures.private_collections)."""
        return next((self.collections.parent / "build").glob("gdsfleet-gds-*.tar.gz"))

    def __call__(self, count: int = 2, isolated: int = 0) -> ExecNodes:
        if self.current is not None and len(self.current.nodes) == count and sum(
                n.isolated for n in self.current.nodes) == isolated:
            return self.current
        self.teardown()
        t0 = time.monotonic()
        image = exec_image(self.tarball(), self.collections, self.repo_base_url, self.token)
        self.timings["image"] = time.monotonic() - t0
        self.count += 1
        root = self.root / f"exec{self.count}"
        root.mkdir()
        self.current = ExecNodes(root, image, self.token)
        t0 = time.monotonic()
        try:
            self.current.up(count, self.tarball(), isolated)
        except BaseException:
            self.teardown()
            raise
        self.timings["up"] = time.monotonic() - t0
        return self.current

    def teardown(self) -> None:
        if self.current is not None:
            nodes, self.current = self.current, None
            nodes.down()


@pytest.fixture(scope="module")
def exec_nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               private_collections: Path, standin_repo: Any) -> Iterator[Callable[..., ExecNodes]]:
    """Factory: ``exec_nodes(2)`` -> :class:`ExecNodes` (the same running set for the same
    count within a module). Needs ``private_collections`` (the checkout's collection, the
    tarball it was built from) and the run's stand-in repository (python3-venv when the image
    is built)."""
    from tests.harness.fixtures import TOKEN

    factory = ExecNodesFactory(tmp_path_factory.mktemp("execnodes"), private_collections,
                               standin_repo.base_url, TOKEN)
    request.addfinalizer(factory.teardown)
    yield factory
