"""The simulated GDS lab: podman containers that stand in for bare-metal GPU nodes.

    python -m tests.harness.lab up [--nodes N] [--profile-map FILE] [--profile NAME]
    python -m tests.harness.lab down
    python -m tests.harness.lab status
    python -m tests.harness.lab gc      # what crashed test sessions left behind

TEST HARNESS ONLY. Each node is a privileged container of the node image
(localhost/gdsfleet-node:bookworm, tests/harness/node/) named gdsfleet-lab-NN, with sshd on
127.0.0.1:(2200+NN), root login with the key .lab/ssh/id_ed25519, its host key collected into
.lab/ssh/known_hosts, and one 512 MiB loop device as its "NVMe" (/dev/nvme0n1 inside). The
stand-in package repository (tests/harness/standin_repo/) is built and served on 127.0.0.1:8470.

`up` is idempotent (running nodes with the same profile are kept); `down` always removes the
lab's containers and detaches the loop devices it attached, and only those: containers carry a
label naming the lab's state directory and loop devices are recorded with their backing file.

A profile map (YAML or JSON) gives nodes different simulated hardware:

    gdsfleet-lab-01: nvfs
    gdsfleet-lab-02: {profile: p2pdma, env: {SIM_IOMMU: pt}}
    "3": proprietary            # by node number
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "harness"
DEFAULT_IMAGE = "localhost/gdsfleet-node:bookworm"
IMAGE = os.environ.get("GDSFLEET_NODE_IMAGE", DEFAULT_IMAGE)
CONTAINERS_CONF = HARNESS / "containers.conf"
LAB_PREFIX = "gdsfleet-lab"
LAB_PORT_BASE = 2200
LOOP_SIZE = "512M"
LABEL = "gdsfleet.harness"
PROFILES = ("nvfs", "p2pdma", "proprietary", "nogpu", "dkmsfail", "iommu", "operator")


class LabError(RuntimeError):
    """The lab could not be brought into the requested state."""


def lab_dir() -> Path:
    return Path(os.environ.get("GDSFLEET_LAB_DIR", str(ROOT / ".lab")))


def stop_repo_gpg_agent(base: Path | None = None) -> bool:
    """Stop the gpg-agent that signing the stand-in repository started (its GNUPGHOME is
    ``.lab/standin-repo-gnupg``, build.sh); teardown left it running (issue 30 item 9).
    True when there was a key home to stop an agent of."""
    home = (base or lab_dir()) / "standin-repo-gnupg"
    if not home.is_dir():
        return False
    if shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--kill", "gpg-agent"],
                       env={**os.environ, "GNUPGHOME": str(home)},
                       capture_output=True, check=False, timeout=30)
    return True


DEFAULT_REPO_PORT = 8470  # what inventories/lab/group_vars/all/repositories.yml names


def repo_port() -> int:
    """The stand-in repository's port: the lab's (GDSFLEET_REPO_PORT, default 8470); inside a
    test run, the run's own (tests/harness/run.py exports it)."""
    value = os.environ.get("GDSFLEET_REPO_PORT", "") or str(DEFAULT_REPO_PORT)
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise LabError(f"GDSFLEET_REPO_PORT={value!r} is not a port number: "
                       "set it to a free TCP port, e.g. 8471")
    return int(value)


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def run(cmd: list[str], *, check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=podman_env(),
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                       f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


def podman(*args: str, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run(["podman", *args], check=check, timeout=timeout)


# ------------------------------------------------------------------------------ shared setup
_IMAGE_CHECKED: list[bool] = []


def node_recipe() -> str:
    """The node image's recipe hash, computed exactly as build_node_image.sh does (same
    pipeline, same locale)."""
    script = ('(cat "$1"; find "$2" -type f -not -path \'*/__pycache__/*\' -print0 | sort -z '
              '| xargs -0 cat) | sha256sum | cut -c1-16')
    return run(["bash", "-c", script, "recipe", str(HARNESS / "build_node_image.sh"),
                str(HARNESS / "node")]).stdout.strip()


def recipe_image(recipe: str | None = None) -> str:
    """The tag of this checkout's node image: one per recipe, so checkouts whose node/ differs
    never rebuild over each other's image (the shared :bookworm tag is the lab's)."""
    return f"{DEFAULT_IMAGE.rsplit(':', 1)[0]}:recipe-{recipe or node_recipe()}"


def _image_label(image: str) -> str | None:
    proc = podman("image", "inspect", "--format", '{{ index .Config.Labels "gdsfleet.recipe" }}',
                  image, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_image() -> None:
    """Build the node image when missing or stale (the script caches on a recipe hash);
    checked once per process. A test run's image is its recipe's tag (recipe_image): when
    only :bookworm of the same recipe exists (setup.sh built it), it is tagged, not rebuilt."""
    if not _IMAGE_CHECKED:
        recipe = IMAGE.rsplit(":recipe-", 1)[1] if ":recipe-" in IMAGE else None
        if recipe and _image_label(IMAGE) is None and _image_label(DEFAULT_IMAGE) == recipe:
            podman("tag", DEFAULT_IMAGE, IMAGE)
        run(["bash", str(HARNESS / "build_node_image.sh")], timeout=1200)
        _IMAGE_CHECKED.append(True)


def build_repo() -> None:
    """Build the stand-in repository into <lab dir>/standin-repo (cached; build.sh locks)."""
    run(["bash", str(HARNESS / "standin_repo" / "build.sh")], timeout=600)


def ensure_repo() -> bool:
    """The operator lab's server: build (cached) and serve the stand-in repository on
    repo_port(). True when this call started the server; False when the server this checkout
    started is already up. serve.sh refuses (LabError) a port where a server it did not start
    answers."""
    build_repo()
    return _serve_lab_repo()


def _serve_lab_repo() -> bool:
    serve = str(HARNESS / "standin_repo" / "serve.sh")
    if run(["bash", serve, "ours"], check=False).returncode == 0:
        return False
    run(["bash", serve, "start"], timeout=60)
    return True


STANDIN_DISTRO_KEY = "/etc/apt/keyrings/gdsfleet-standin-debian.asc"


def configure_distro_archive(container: str, base: str | None = None) -> bool:
    """TEST HARNESS STAND-IN: a real Debian node has its distribution archive configured; the
    node image has no APT sources. Point the node at the stand-in "distribution archive" of the
    stand-in repository (real Debian 12 packages such as python3-venv; build.sh), so roles
    install such packages through apt as on a real node. False when the repository lacks it."""
    key = lab_dir() / "standin-repo" / "debian" / "archive-key.asc"
    if not key.exists():
        return False
    base = base or f"http://127.0.0.1:{repo_port()}"
    line = f"deb [signed-by={STANDIN_DISTRO_KEY}] {base}/debian/bookworm/ /"
    script = ('mkdir -p /etc/apt/keyrings && printf "%s" "$1" > "$2" && printf "%s\\n%s\\n" '
              '"# TEST HARNESS STAND-IN for the Debian 12 archive (gdsfleet lab)" "$3" '
              '> /etc/apt/sources.list.d/debian.list')
    podman("exec", container, "sh", "-c", script, "sh", key.read_text(), STANDIN_DISTRO_KEY, line)
    return True


def stop_repo() -> None:
    run(["bash", str(HARNESS / "standin_repo" / "serve.sh"), "stop"], check=False)


def ensure_ssh_key(base: Path | None = None) -> Path:
    ssh = (base or lab_dir()) / "ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    os.chmod(ssh, 0o700)
    key = ssh / "id_ed25519"
    lock = ssh / ".keygen.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gdsfleet-lab (TEST ONLY)",
                 "-f", str(key)])
    return key


# ------------------------------------------------------------------------------ profiles
@dataclass(frozen=True)
class NodeSpec:
    profile: str = "nvfs"
    env: Mapping[str, str] = field(default_factory=dict)

    def digest(self) -> str:
        blob = json.dumps({"p": self.profile, "e": dict(sorted(self.env.items()))})
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_spec(value: Any) -> NodeSpec:
    if isinstance(value, NodeSpec):
        return value
    if isinstance(value, str):
        return NodeSpec(value)
    if isinstance(value, Mapping):
        env = {str(k): str(v) for k, v in dict(value.get("env") or {}).items()}
        bad = [k for k in env if not k.startswith("SIM_")]
        if bad:
            raise LabError(f"profile overrides must be SIM_* variables, not {bad}")
        return NodeSpec(str(value.get("profile", "nvfs")), env)
    raise LabError(f"cannot read a node profile from {value!r}")


def load_profile_map(path: str | Path) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # PyYAML is in the project's requirements

        data = yaml.safe_load(text)
    if not isinstance(data, Mapping):
        raise LabError(f"profile map {path} must map node names (or numbers) to profiles")
    return dict(data)


# ------------------------------------------------------------------------------ the lab
@dataclass
class LabNode:
    name: str
    index: int
    port: int
    profile: str
    env: dict[str, str]
    loop: str | None = None
    backing: str | None = None
    nvme: str = "/dev/nvme0n1"
    host: str = "127.0.0.1"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Lab:
    """A set of simulated nodes sharing a state directory (lab.json, loop files, known_hosts).

    The operator's lab is Lab() (.lab, gdsfleet-lab-NN, ports 2200+NN); the pytest fixtures use
    their own state directory, name prefix and ports so they never touch the operator's lab.
    """

    def __init__(self, state_dir: Path | None = None, *, prefix: str = LAB_PREFIX,
                 port_base: int = LAB_PORT_BASE, known_hosts: Path | None = None,
                 key: Path | None = None, loop_size: str = LOOP_SIZE) -> None:
        self.base = lab_dir()
        self.state_dir = Path(state_dir) if state_dir else self.base
        self.prefix = prefix
        self.port_base = port_base
        self.key = key or self.base / "ssh" / "id_ed25519"
        self.known_hosts = known_hosts or (self.state_dir / "ssh" / "known_hosts")
        self.loop_size = loop_size
        self.state_file = self.state_dir / (
            "lab.json" if prefix == LAB_PREFIX else f"lab-{prefix}.json")
        self.label = f"{LABEL}={self.state_dir.resolve()}#{prefix}"

    # -- state
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / f".{self.prefix}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def load_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {"nodes": [], "started_repo": False}

    def save_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)

    def node_name(self, index: int) -> str:
        return f"{self.prefix}-{index:02d}"

    # -- loop devices
    def _attach_loop(self, name: str, recorded: Mapping[str, Any] | None) -> tuple[str, str]:
        loopdir = self.state_dir / "loop"
        loopdir.mkdir(parents=True, exist_ok=True)
        backing = loopdir / f"{name}.img"
        if (recorded and recorded.get("loop") and recorded.get("backing") == str(backing)
                and self._loop_backs(recorded["loop"], backing)):
            return str(recorded["loop"]), str(backing)
        if not backing.exists():
            run(["truncate", "-s", self.loop_size, str(backing)])
        dev = run(["losetup", "-f", "--show", str(backing)]).stdout.strip()
        return dev, str(backing)

    @staticmethod
    def _loop_backs(dev: str, backing: Path | str) -> bool:
        out = run(["losetup", "-n", "-O", "NAME,BACK-FILE", "-j", str(backing)], check=False).stdout
        return any(line.split()[:1] == [dev] for line in out.splitlines() if line.strip())

    def _detach_loop(self, dev: str | None, backing: str | None) -> None:
        if not dev or not backing:
            return
        if self._loop_backs(dev, backing):
            run(["losetup", "-d", dev], check=False)
        with contextlib.suppress(OSError):
            Path(backing).unlink()

    # -- containers
    def _inspect(self, name: str) -> dict[str, Any] | None:
        proc = podman("container", "inspect", name, check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)
        return data[0] if data else None

    def _owned(self, info: Mapping[str, Any]) -> bool:
        labels = (info.get("Config") or {}).get("Labels") or {}
        return labels.get(LABEL) == self.label.split("=", 1)[1]

    def _start_node(self, node: LabNode, spec: NodeSpec, pubkey: str) -> None:
        cmd = ["run", "-d", "--privileged", "--network", "host", "--restart", "always",
               "--hostname", node.name, "--name", node.name,
               "--label", self.label, "--label", f"gdsfleet.spec={spec.digest()}",
               "--label", f"gdsfleet.pid={os.getpid()}",
               "-e", f"GDSFLEET_SIM_PROFILE={spec.profile}",
               "-e", f"GDSFLEET_SSH_PORT={node.port}",
               "-e", f"GDSFLEET_SSH_AUTHORIZED_KEY={pubkey}",
               "-e", f"GDSFLEET_SIM_SEED={node.name}"]
        for k, v in sorted(spec.env.items()):
            cmd += ["-e", f"{k}={v}"]
        if node.loop:
            cmd += ["-v", f"{node.loop}:{node.loop}", "-e", f"GDSFLEET_SIM_NVME={node.loop}"]
        cmd.append(IMAGE)
        podman(*cmd)

    def _wait_ready(self, node: LabNode, deadline: float) -> str:
        """Wait for the hardware layer and sshd; return the node's host key line."""
        while True:
            ready = podman("exec", node.name, "gdsfleet-sim-ready", check=False).returncode == 0
            if ready and ssh_banner(node.host, node.port):
                pub = podman("exec", node.name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
                return " ".join(pub.split()[:2])
            if time.monotonic() > deadline:
                logs = podman("logs", "--tail", "20", node.name, check=False)
                raise LabError(f"{node.name} did not become ready (sshd on 127.0.0.1:"
                               f"{node.port}): {logs.stdout}{logs.stderr}")
            time.sleep(0.2)

    def _write_known_hosts(self, keys: Mapping[int, str]) -> None:
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        prefixes = tuple(f"[127.0.0.1]:{p} " for p in keys)
        old = self.known_hosts.read_text().splitlines() if self.known_hosts.exists() else []
        lines = [ln for ln in old if not ln.startswith(prefixes)]
        lines += [f"[127.0.0.1]:{port} {key}" for port, key in sorted(keys.items())]
        self.known_hosts.write_text("\n".join(lines) + "\n")
        os.chmod(self.known_hosts, 0o600)

    # -- public API
    def up(self, nodes: int = 2, profile_map: Mapping[str, Any] | None = None,
           default_profile: str = "nvfs", *, build: bool = True,
           serve_repo: bool = True, timeout: float = 120) -> list[LabNode]:
        """Start (or keep) the nodes. ``serve_repo``: also serve the stand-in repository on
        repo_port() (the operator's lab, benchmarks); test runs pass False: they serve their
        own (tests/harness/run.py)."""
        if not 1 <= nodes <= 99:
            raise LabError("--nodes must be between 1 and 99")
        with self._locked():
            if build:
                ensure_image()
                build_repo()
            started_repo = _serve_lab_repo() if build and serve_repo else False
            if self.prefix == LAB_PREFIX:  # the operator's lab keeps the shared server alive
                users = self.base / "standin-repo-users"
                users.mkdir(parents=True, exist_ok=True)
                (users / "lab").touch()
            key = ensure_ssh_key(self.base)
            pubkey = Path(str(key) + ".pub").read_text().strip()
            state = self.load_state()
            if started_repo:
                state["started_repo"] = True
            recorded = {n["name"]: n for n in state.get("nodes", [])}
            pmap = dict(profile_map or {})
            image_id = podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
            out: list[LabNode] = []
            # nodes beyond the requested count (from an earlier, larger `up`) go away
            for name, rec in list(recorded.items()):
                if rec.get("index", 0) > nodes:
                    self._remove_node(rec)
                    recorded.pop(name)
            for i in range(1, nodes + 1):
                name = self.node_name(i)
                spec = parse_spec(pmap.get(name, pmap.get(str(i), pmap.get(i, default_profile))))
                if spec.profile not in PROFILES:
                    raise LabError(f"{name}: unknown profile {spec.profile!r} "
                                   f"(one of {', '.join(PROFILES)})")
                rec = recorded.get(name)
                node = LabNode(name, i, self.port_base + i, spec.profile, dict(spec.env))
                info = self._inspect(name)
                if info is not None and not self._owned(info):
                    raise LabError(f"a container named {name} exists and was not made by this "
                                   f"lab ({self.state_dir}); remove it or pick another prefix")
                keep = (info is not None and info.get("State", {}).get("Running")
                        and info.get("Image") == image_id
                        and ((info.get("Config") or {}).get("Labels") or {}).get(
                            "gdsfleet.spec") == spec.digest()
                        and rec is not None and rec.get("loop")
                        and self._loop_backs(rec["loop"], rec.get("backing", "")))
                if keep:
                    assert rec is not None
                    node.loop, node.backing = rec["loop"], rec["backing"]
                else:
                    if info is not None:
                        podman("rm", "-f", "-t", "0", name, check=False)
                    node.loop, node.backing = self._attach_loop(name, rec)
                    recorded[name] = node.as_dict()
                    state["nodes"] = list(recorded.values())
                    self.save_state(state)
                    self._start_node(node, spec, pubkey)
                recorded[name] = node.as_dict()
                out.append(node)
            state["nodes"] = [n.as_dict() for n in out]
            state["prefix"], state["port_base"] = self.prefix, self.port_base
            self.save_state(state)
            deadline = time.monotonic() + timeout
            keys = {n.port: self._wait_ready(n, deadline) for n in out}
            self._write_known_hosts(keys)
            for n in out:
                configure_distro_archive(n.name)
            return out

    def _remove_node(self, rec: Mapping[str, Any]) -> None:
        info = self._inspect(rec["name"])
        if info is not None and self._owned(info):
            podman("rm", "-f", "-t", "0", rec["name"], check=False, timeout=60)
        self._detach_loop(rec.get("loop"), rec.get("backing"))

    def down(self, *, stop_repo_server: bool | None = None) -> list[str]:
        """Remove this lab's containers and loop devices (all of them, whatever fails)."""
        removed: list[str] = []
        with self._locked():
            state = self.load_state()
            names = {n["name"]: n for n in state.get("nodes", [])}
            # containers of this lab that the state file lost track of
            proc = podman("ps", "-a", "--filter", f"label={self.label}", "--format",
                          "{{.Names}}", check=False)
            for name in proc.stdout.split():
                names.setdefault(name, {"name": name})
            errors: list[str] = []
            for rec in names.values():
                try:
                    self._remove_node(rec)
                    removed.append(rec["name"])
                except Exception as exc:  # keep cleaning the rest
                    errors.append(f"{rec['name']}: {exc}")
            started = state.get("started_repo", False)
            if self.prefix == LAB_PREFIX:
                with contextlib.suppress(OSError):
                    (self.base / "standin-repo-users" / "lab").unlink()
            self.save_state({"nodes": [], "started_repo": False})
            if (stop_repo_server if stop_repo_server is not None else started):
                stop_repo()
            stop_repo_gpg_agent(self.base)
            if errors:
                raise LabError("; ".join(errors))
        return removed

    def status(self) -> list[dict[str, Any]]:
        rows = []
        for rec in self.load_state().get("nodes", []):
            info = self._inspect(rec["name"])
            running = bool(info and info.get("State", {}).get("Running"))
            rows.append({**rec, "running": running,
                         "ssh": running and ssh_banner(rec["host"], rec["port"])})
        return rows

    def inventory(self, path: Path, nodes: list[LabNode], group_vars: Mapping[str, Any]
                  | None = None) -> Path:
        """Write a standalone inventory (absolute connection paths) for these nodes."""
        import yaml

        common = load_lab_group_vars()
        # the lab's group_vars name the default port; point them at the one served now
        default, now = (f"http://127.0.0.1:{p}/" for p in (DEFAULT_REPO_PORT, repo_port()))
        common = {k: v.replace(default, now) if isinstance(v, str) else v
                  for k, v in common.items()}
        common.update(group_vars or {})
        if not (group_vars or {}).get("mofed_mlnx_ofed_tarball_checksum"):
            # the stand-in tarball is served over plain http: the role wants its checksum
            checksum = standin_tarball_checksum()
            if checksum:
                common["mofed_mlnx_ofed_tarball_checksum"] = checksum
        hosts = {}
        for n in nodes:
            hosts[n.name] = {
                "ansible_host": n.host, "ansible_port": n.port, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts} "
                                            "-o StrictHostKeyChecking=yes"),
                "nvme_devices": [n.nvme],
            }
        data = {"all": {"vars": common, "children": {"gpu_nodes": {"hosts": hosts}}}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# SIMULATED lab inventory written by tests/harness/lab.py "
                        "(containers, not GPU nodes)\n" + yaml.safe_dump(data, sort_keys=True))
        return path


_CONNECTION_KEYS = {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
                    "ansible_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args"}


MLNX_OFED_TARBALL = "MLNX_OFED_LINUX-23.10-2.1.3.1-debian12.1-x86_64.tgz"


def standin_tarball_checksum() -> str:
    """``sha256:<hex>`` of the built stand-in MLNX_OFED tarball ("" before it is built), for
    mofed_mlnx_ofed_tarball_checksum: the lab serves the tarball over plain http on loopback,
    which the mofed role refuses without a checksum."""
    import hashlib

    tarball = lab_dir() / "standin-repo" / "mlnx_ofed" / MLNX_OFED_TARBALL
    if not tarball.is_file():
        return ""
    return "sha256:" + hashlib.sha256(tarball.read_bytes()).hexdigest()


def load_lab_group_vars() -> dict[str, Any]:
    """inventories/lab/group_vars/all/*.yml without the connection settings."""
    import yaml

    out: dict[str, Any] = {}
    for f in sorted((ROOT / "inventories" / "lab" / "group_vars" / "all").glob("*.yml")):
        data = yaml.safe_load(f.read_text()) or {}
        out.update({k: v for k, v in data.items() if k not in _CONNECTION_KEYS})
    return out


def gc() -> list[str]:
    """Remove what crashed test sessions left: harness containers (gdsfleet-hx-*, gdsfleet-fx-*)
    whose pytest process is gone, and loop devices backed by <such a container>.img whose
    container no longer exists, and the images tests committed of a node (fixtures.commit_node)
    whose pytest process is gone. Never touches the operator's lab (gdsfleet-lab-NN). Also stops
    the repository servers of test runs whose pytest is gone (tests/harness/run.py)."""
    from tests.harness import run as runmod

    done: list[str] = runmod.gc_runs(lab_dir() / "runs")
    fmt = '{{.Names}} {{index .Labels "gdsfleet.pid"}}'
    proc = podman("ps", "-a", "--filter", f"label={LABEL}", "--format", fmt, check=False)
    for line in proc.stdout.splitlines():
        name, _, pid = line.partition(" ")
        if not name.startswith(("gdsfleet-hx-", "gdsfleet-fx-")) or not pid.strip().isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its session is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        podman("rm", "-f", "-t", "0", name, check=False)
        done.append(f"container {name}")
    # images that tests committed of a converged node (tests/harness/fixtures.py commit_node)
    fmt = '{{.Id}} {{index .Labels "gdsfleet.snapshot-pid"}}'
    proc = podman("images", "--filter", "label=gdsfleet.snapshot-pid", "--format", fmt,
                  check=False)
    for line in proc.stdout.splitlines():
        image, _, pid = line.partition(" ")
        if not pid.strip().isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        podman("rmi", "-f", image, check=False)
        done.append(f"image {image[:12]}")
    names = set(podman("ps", "-a", "--format", "{{.Names}}", check=False).stdout.split())
    listing = run(["losetup", "-n", "-O", "NAME,BACK-FILE"], check=False).stdout
    for line in listing.splitlines():
        parts = line.split(None, 1)
        if len(parts) != 2:
            continue
        dev, backing = parts[0], parts[1].strip()
        base = Path(backing.replace(" (deleted)", "")).name
        owner = base[:-4] if base.endswith(".img") else ""
        if owner.startswith(("gdsfleet-hx-", "gdsfleet-fx-")) and owner not in names:
            run(["losetup", "-d", dev], check=False)
            with contextlib.suppress(OSError):
                Path(backing).unlink()
            done.append(f"loop {dev} ({backing})")
    return done


def ssh_banner(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


# ------------------------------------------------------------------------------ kernel update
def kernel_update_standins(lab: Lab) -> int:
    """Install tests/harness/kernel_standins.py's TEST STAND-INS on every running lab node
    (after lab.sh's rollout: the roles configured the stand-in repository that offers the
    newer kernel) and print the next kernel and the commands of docs/lifecycle.md."""
    from tests.harness import kernel_standins

    names = [r["name"] for r in lab.status() if r["running"]]
    if not names:
        print("lab: no lab node is running; bring the lab up first (bash scripts/lab.sh)",
              file=sys.stderr)
        return 1
    found: set[str] = set()
    for name in names:
        def on_node(command: str, node: str = name) -> str:
            return str(podman("exec", node, "sh", "-c", command).stdout)

        running, nxt = kernel_standins.kernels(on_node)
        if not nxt or nxt == running:
            print(f"lab: {name} is offered no kernel newer than {running}; run lab.sh's "
                  f"rollout first (it configures the stand-in repository)", file=sys.stderr)
            return 1
        kernel_standins.install(on_node, running, nxt)
        found.add(nxt)
        print(f"{name}: TEST STAND-INS installed (GRUB, /boot/vmlinuz-{running}, nvidia.ko for "
              f"{running} and {nxt}); it runs {running}, the repository offers {nxt}")
    print('Then, from the checkout (docs/lifecycle.md, "In the lab"):')
    for label, cmd in kernel_standins.lab_commands(sorted(found)[-1]):
        print(f"  {label + ':':<22}{cmd}")
    return 0


# ------------------------------------------------------------------------------ CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.lab",
                                     description="The SIMULATED GDS lab (containers on loopback).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start (or update) the lab; idempotent")
    p_up.add_argument("--nodes", type=int, default=int(os.environ.get("GDSFLEET_LAB_NODES", "8")),
                      help="how many of the inventory's 8 nodes to start (default 8)")
    p_up.add_argument("--profile-map", help="YAML/JSON: node name or number -> profile")
    p_up.add_argument("--profile", default="nvfs", choices=PROFILES,
                      help="profile of nodes the map does not name (default nvfs)")
    p_down = sub.add_parser("down", help="remove the lab's containers and loop devices")
    p_down.add_argument("--stop-repo", action="store_true",
                        help="also stop the stand-in repository server")
    sub.add_parser("status", help="show the lab's nodes")
    sub.add_parser("gc", help="remove containers/loop devices left by crashed test sessions")
    sub.add_parser("kernel-standins",
                   help="TEST STAND-INS (GRUB, the running kernel's image, the NVIDIA driver's "
                        "module) on the rolled-out lab nodes, so that a gated kernel update "
                        "runs end to end (docs/lifecycle.md, 'In the lab')")
    args = parser.parse_args(argv)
    lab = Lab()
    try:
        if args.cmd == "up":
            pmap = load_profile_map(args.profile_map) if args.profile_map else {}
            nodes = lab.up(args.nodes, pmap, args.profile)
            for n in nodes:
                print(f"{n.name}  ssh root@127.0.0.1 -p {n.port}  profile={n.profile}"
                      f"{' ' + json.dumps(n.env) if n.env else ''}  nvme={n.nvme} ({n.loop})")
            print(f"inventory: {ROOT / 'inventories' / 'lab'}  (first {len(nodes)} hosts are up)")
            print(f"stand-in repo: http://127.0.0.1:{repo_port()}/  (GDSFLEET_REPO_PORT; "
                  f"the inventory names {DEFAULT_REPO_PORT})")
        elif args.cmd == "kernel-standins":
            return kernel_update_standins(lab)
        elif args.cmd == "gc":
            for item in gc():
                print(f"removed {item}")
        elif args.cmd == "down":
            removed = lab.down(stop_repo_server=True if args.stop_repo else None)
            print(f"removed {len(removed)} node(s): {' '.join(sorted(removed)) or '-'}")
        else:
            rows = lab.status()
            if not rows:
                print("lab is down")
            for r in rows:
                print(f"{r['name']}  {'running' if r['running'] else 'STOPPED'}  "
                      f"ssh={'ok' if r['ssh'] else 'no'}  port={r['port']}  "
                      f"profile={r['profile']}  loop={r['loop']}")
            serve = str(HARNESS / "standin_repo" / "serve.sh")
            if run(["bash", serve, "ours"], check=False).returncode == 0:
                state = "up (this checkout's server)"
            elif run(["bash", serve, "status"], check=False).returncode == 0:
                state = "ANSWERED BY ANOTHER SERVER (not this checkout's; set GDSFLEET_REPO_PORT)"
            else:
                state = "down"
            print(f"stand-in repo on 127.0.0.1:{repo_port()}: {state}")
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if shutil.which("podman") is None:
        print("lab: podman is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        sys.exit(1)
    sys.exit(main())
