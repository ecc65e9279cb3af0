"""The kernel gate on simulated nodes (issue 29): `provisioner rollout --playbook
gdsfleet.gds.kernel_update --allow-reboot` on two provisioned nodes, where a second kernel that
builds passes, becomes the default and the canary reboots into it and verifies compliant, while
a kernel without headers fails the other node (not rebooted, default kept, held, budget spent);
a kernel without headers fails the gate, the running kernel stays the default and the new one
is held; a GDS-patched nvme that exports only the v2 registration name while the built
nvidia-fs looks up v1 fails naming both (DOCA-OFED 26.01, gds-nvidia-fs issue #87:
tests/fixtures/kernel_gate/issue87.yml); a kernel installed behind gdsfleet's back goes through
the nvidia_fs role's kernel hook and does not become the default.

Nodes of profile nvfs with DOCA-OFED from the stand-in repository. /boot and /lib/modules show
the new kernel, the stand-in dkms builds genuine ELF stand-in modules
(tests/harness/standin_repo/payload/dkms), and the tests add what a real node has that the
simulated one lacks: GRUB (a grub.cfg as grub-mkconfig writes it and a grub-set-default that
writes grubenv) and the NVIDIA driver's module for each kernel (the project never installs the
driver). Each is a TEST STAND-IN. With the GRUB stand-in in place a simulated reboot lands in
the kernel GRUB would boot (docs/testing.md, "The booted kernel"); the host's kernel is still
the one underneath.

The two tests that differ only after the stack's converge (a kernel without headers gated by the
play, and one installed through the hook) start from one node converged per module and committed
as an image (the fixture ``converged``); the others converge their own (another nvidia-fs and the
DOCA 26.01 knob before the converge; a fleet provisioned by a rollout).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from gds_collection import VENV_BIN, ansible_env

from provisioner.exitcodes import Exit
from provisioner.remote import load_script
from provisioner.store import Ledger
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.harness import kernel_standins
from tests.harness import lab as labmod
from tests.harness.fixtures import SimNode, commit_node, remove_image

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
I87 = yaml.safe_load((ROOT / "tests/fixtures/kernel_gate/issue87.yml").read_text())
STACK = """
- name: The stack up to nvidia-fs, with DOCA-OFED
  hosts: gpu_nodes
  become: true
  roles:
    - role: gdsfleet.gds.preflight
    - role: gdsfleet.gds.mofed
    - role: gdsfleet.gds.cuda
    - role: gdsfleet.gds.nvidia_fs
"""
GATE = """
- name: The kernel gate
  hosts: gpu_nodes
  become: true
  gather_facts: false
  roles:
    - role: gdsfleet.gds.kernel_gate
"""
GATHER = load_script("gather.py")
STATE = "/var/lib/gdsfleet/kernel-gate.json"
HOOK = "/etc/kernel/postinst.d/zzz-gdsfleet-kernel-gate"
ADV = "gnulinux-advanced-UUID"


def put(node: Any, path: str, data: bytes, mode: str = "0644") -> None:
    b64 = base64.b64encode(data).decode()
    node.exec(f"mkdir -p $(dirname {path}) && echo {b64} | base64 -d > {path} && "
              f"chmod {mode} {path}")


def prepare(node: Any, repo: Any, *, next_headers: bool, install_next: bool = True,
            ) -> tuple[str, str]:
    """The node before the play: dkms and the running kernel's headers (and, unless
    install_next is false, the newer stand-in kernel, with or without its headers), GRUB and
    the driver's module for both kernels."""
    kernel = node.exec("uname -r").stdout.strip()
    node.install_repo(repo, doca=False)
    nxt = node.exec("apt-cache pkgnames linux-image- | sort | tail -n 1").stdout.strip()
    nxt = nxt.removeprefix("linux-image-")
    assert nxt and nxt != kernel
    pkgs = ["dkms", f"linux-headers-{kernel}"]
    if install_next:
        pkgs.append(f"linux-image-{nxt}")
        if next_headers:
            pkgs.append(f"linux-headers-{nxt}")
    node.apt_install(*pkgs)
    node.exec("rm -f /etc/apt/sources.list.d/gdsfleet-test.list && rm -rf /var/lib/apt/lists/*")
    # TEST STAND-INS: GRUB, the running kernel's image, the driver's module for both kernels
    # (tests/harness/kernel_standins.py, which the lab's `kernel-standins` installs too)
    kernel_standins.install(lambda c: str(node.exec(c).stdout), kernel, nxt)
    return kernel, nxt


def play(tmp: Path, node: Any, repo: Any, text: str, nvfs: str,
         playbook: str | None = None, **extra: Any) -> tuple[int, dict[str, Any], str]:
    (tmp / "play.yml").write_text(text)
    (tmp / "hosts.json").write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {node.name: node.ansible_host_vars()},
        "vars": {"mofed_flavor": "doca", "cuda_version": "12.9",
                 "cuda_nvidia_fs_version": nvfs, **repo.group_vars(), **extra},
    }}}}))
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "hosts.json", playbook or "play.yml"],
        cwd=tmp, env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True, text=True, timeout=1200)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def task(report: dict[str, Any], name: str) -> dict[str, Any]:
    for p in report["plays"]:
        for t in p["tasks"]:
            if t["task"]["name"] == name:
                return dict(next(iter(t["hosts"].values())))
    raise AssertionError(f"no task {name!r}")


def state(node: Any) -> dict[str, Any]:
    return dict(json.loads(node.exec(f"cat {STATE}").stdout))


def saved_entry(node: Any) -> str:
    return str(node.exec("sed -n 's/^saved_entry=//p' /boot/grub/grubenv", check=False)
               .stdout.strip())


def gate_check(node: Any) -> CheckResult:
    """Run the real gather script on the node and evaluate gate.boot_kernel."""
    b64 = base64.b64encode(GATHER).decode()
    out = node.exec(f"echo {b64} | base64 -d > /tmp/gdsfleet-gather.py && "
                    "python3 /tmp/gdsfleet-gather.py").stdout
    facts = build_facts(json.loads(out))
    route = checks.determine_route(facts)
    io = iotest.evaluate({"gdsfleet_iotest": 1, "status": "skipped", "reason": "not run",
                          "attempts": []}, route=route)
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route=route)
    return next(c for c in results if c.id == "gate.boot_kernel")


def held(node: Any) -> set[str]:
    return set(node.exec("apt-mark showhold").stdout.split())


class LabNode:
    """A lab fleet's node with the sim_node interface the helpers above use (exec)."""

    def __init__(self, fleet: Any, name: str) -> None:
        self.fleet, self.name = fleet, name

    install_repo = SimNode.install_repo
    apt_install = SimNode.apt_install

    def exec(self, command: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return cast("subprocess.CompletedProcess[str]", self.fleet.exec(self.name, command,
                                                                        check=check))


def rollout(inventory: Path, tmp: Path, collections: Path, *args: str
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`provisioner rollout` against the lab fleet, with a ledger and a JSON report in tmp."""
    report = tmp / f"rollout{len(list(tmp.glob('rollout*.json')))}.json"
    argv = [str(VENV_BIN / "provisioner"), "rollout", "-i", str(inventory), "--ledger",
            str(tmp / "ledger.sqlite"), "--events-log", str(report.with_suffix(".events")),
            "--plain",
            "--io-size", "16M", "--allow-reboot", "--json", str(report), *args]
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               ANSIBLE_COLLECTIONS_PATH=str(collections), PYTHONUNBUFFERED="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=1800, check=False)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return proc, doc


def booted(node: Any) -> tuple[str, str]:
    """(uname -r, boot id) of a node."""
    out = node.exec("uname -r; cat /proc/sys/kernel/random/boot_id").stdout.split()
    return out[0], out[1]


def test_kernel_update_rollout_reboots_into_a_gated_kernel_and_fails_one_without_headers(
    lab_fleet: Callable[..., Any], private_repo: Any, private_collections: Path,
    tmp_path: Path
) -> None:
    """The whole of issue 29 part 4 on two nodes provisioned by a site.yml rollout, then
    `provisioner rollout --playbook gdsfleet.gds.kernel_update -e kernel_target=<next>
    --allow-reboot` (canary first, no failure allowed after it):

    * the canary (an admin pinned its running kernel: GRUB_DEFAULT=saved) installs the next
      kernel with its headers; dkms builds, the gate passes and makes it the default; the
      rollout reboots it, the simulated GRUB boots the new kernel, nvidia-fs loads for it, the
      node verifies compliant and the ledger records the verification on the new kernel;
    * the second node's update brings no headers (its host var: the image only): the gate
      fails with its reason, the running kernel stays the default, the new kernel is held,
      the node is failed and not rebooted (same boot id), the wave is over its budget.
    Then, on the second node: a reboot stays on the gated kernel with GDS; booting the
    ungated kernel by hand shows what the gate prevented (no nvidia-fs for it).

    Slow: two rollouts of two nodes (site.yml with DOCA-OFED, CUDA and nvidia-fs DKMS, then
    kernel_update with a simulated reboot and verification); it replaces the one-node test
    that only made the passing kernel the default, so the lab provisions no more than before.
    """
    t0 = time.monotonic()
    fleet = lab_fleet(2, {1: "nvfs", 2: "nvfs"}, group_vars={
        **private_repo.group_vars(), "gds_route": "nvfs", "mofed_flavor": "doca",
        "cuda_version": "12.9", "cuda_nvidia_fs_version": "2.28.4"})
    good, bad = (LabNode(fleet, n) for n in fleet.names)
    kernel = good.exec("uname -r").stdout.strip()
    for node in (good, bad):  # dkms and the running kernel's headers, as prepare() installs
        node.install_repo(private_repo.repo, doca=False)
        node.apt_install("dkms", f"linux-headers-{kernel}")
        node.exec("rm -f /etc/apt/sources.list.d/gdsfleet-test.list && rm -rf /var/lib/apt/lists/*")
    proc, doc = rollout(fleet.inventory, tmp_path, private_collections, "--waves", "1,100%")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    provisioned = time.monotonic()

    nxt = good.exec("apt-cache pkgnames linux-image- | sort | tail -n 1").stdout.strip()
    nxt = nxt.removeprefix("linux-image-")
    assert nxt and nxt != kernel
    # TEST STAND-INS (GRUB and the driver, as a real node has them), put there as the lab's
    # `python -m tests.harness.lab kernel-standins` puts them (docs/lifecycle.md, "In the lab"),
    # then the commands it prints: the gate read-only (the kernel is not installed yet:
    # pending, never a failure) and the plan of the update (every node provisioned)
    assert labmod.kernel_update_standins(fleet.lab) == 0
    for label, cmd in kernel_standins.lab_commands(nxt)[:2]:
        words = shlex.split(cmd.replace("inventories/lab", str(fleet.inventory)))
        words = [w for w in words if not w.startswith("ANSIBLE_COLLECTIONS_PATH=")]
        words[0] = str(VENV_BIN / Path(words[0]).name)
        if "plan" in words:
            words += ["--ledger", str(tmp_path / "ledger.sqlite")]
        proc = subprocess.run(words, capture_output=True, text=True, cwd=ROOT, timeout=600,
                              env=ansible_env(ANSIBLE_COLLECTIONS_PATH=str(private_collections)))
        assert proc.returncode == 0, f"{label}: {proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        said = proc.stdout
        if "plan" in words:
            assert "every selected node is provisioned" in said, said
        else:  # both nodes: pending, with what a real run checks
            assert said.count('"pending": true') == 2, said[-3000:]
            assert f"check mode: kernel {nxt} is not installed" in said
    put(good, "/etc/default/grub", b"GRUB_DEFAULT=saved\n")  # an admin who pins entries
    good.exec(f"grub-set-default '{ADV}>gnulinux-{kernel}-advanced-UUID' && update-grub")
    inv = yaml.safe_load(fleet.inventory.read_text())
    inv["all"]["children"]["gpu_nodes"]["hosts"][bad.name]["kernel_update_packages"] = [
        f"linux-image-{nxt}"]  # an update that brings the kernel without its headers
    fleet.inventory.write_text(yaml.safe_dump(inv))
    good_boot, bad_boot = booted(good)[1], booted(bad)[1]

    proc, doc = rollout(fleet.inventory, tmp_path, private_collections, "--playbook",
                        "gdsfleet.gds.kernel_update", "-e", f"kernel_target={nxt}",
                        "--waves", "1,100%", "--max-failures", "0")
    assert proc.returncode == Exit.ABORTED, proc.stdout[-4000:] + proc.stderr[-4000:]
    updated = time.monotonic()
    assert "over its failure budget" in doc["message"], doc["message"]
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert doc["waves"][1]["failed"] == 1 and doc["waves"][1]["allowed_failures"] == 0

    # the canary: rebooted into the new kernel, compliant, the ledger says so
    assert nodes[good.name]["step"] == "compliant", nodes[good.name]
    release, boot_id = booted(good)
    assert release == nxt and boot_id != good_boot
    assert good.exec("cat /sys/module/nvidia_fs/version").stdout.strip() == "2.28.4"
    assert saved_entry(good) == f"{ADV}>gnulinux-{nxt}-advanced-UUID"
    gate = state(good)["kernels"][nxt]
    assert gate["passed"] is True and [a["action"] for a in gate["actions"]] == ["make_default"]
    assert not held(good)
    assert good.exec("test -e /var/lib/gdsfleet/reboot-required", check=False).returncode == 1
    c = gate_check(good)
    assert (c.status, c.observed.split(" (")[0]) == ("pass", nxt), c
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        steps = led.node_steps(doc["run_id"])
        verified = [v for v in led.run_verifications(doc["run_id"]) if v["node"] == good.name]
    assert steps[good.name]["step"] == "compliant"
    assert steps[good.name]["detail"].get("rebooted") is True, steps[good.name]
    last = verified[-1]
    assert last["compliant"] is True, last["failing"]
    kv = next(c for c in last["checks"] if c["id"] == "kernel.version")
    assert nxt in str(kv["observed"]), kv

    # the node without headers: failed with the gate's reason, not rebooted, held
    out = nodes[bad.name]
    assert out["step"] == "failed" and out["failure"] == "failed", out
    assert out["outcome"]["failed_task"] == "Fail with the reason and the fix", out["outcome"]
    assert f"no headers for {nxt}" in out["outcome"]["message"], out["outcome"]
    assert steps[bad.name]["step"] == "failed"
    assert booted(bad) == (kernel, bad_boot)
    events = (tmp_path / "rollout1.events").read_text().splitlines()  # this rollout's
    reboots = {e["host"] for e in map(json.loads, events) if e["playbook"] == "reboot"}
    assert bad.name not in reboots and good.name in reboots
    assert saved_entry(bad) == f"{ADV}>gnulinux-{kernel}-advanced-UUID"
    assert f"linux-image-{nxt}" in held(bad)
    doc_bad = state(bad)
    assert doc_bad["next_boot"] == kernel and doc_bad["kernels"][nxt]["passed"] is False

    # what the gate protects: a reboot keeps the gated kernel and GDS ...
    bad.exec("reboot")
    wait_boot(bad, bad_boot)
    assert booted(bad)[0] == kernel
    assert bad.exec("test -d /sys/module/nvidia_fs", check=False).returncode == 0
    # ... and the ungated kernel, booted by hand, comes up without nvidia-fs
    before = booted(bad)[1]
    bad.exec(f"grub-set-default '{ADV}>gnulinux-{nxt}-advanced-UUID' && reboot")
    wait_boot(bad, before)
    assert booted(bad)[0] == nxt
    assert bad.exec("test -d /sys/module/nvidia_fs", check=False).returncode == 1
    assert bad.exec("modprobe nvidia_fs", check=False).returncode != 0
    print(f"kernel update lab: provisioning {provisioned - t0:.0f} s, kernel_update rollout "
          f"{updated - provisioned:.0f} s, total {time.monotonic() - t0:.0f} s")


def wait_boot(node: Any, old_boot_id: str, timeout: float = 120) -> None:
    """Until the node answers with another boot id and its simulation is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = node.exec("test -e /run/gdsfleet-sim/ready && cat /proc/sys/kernel/random/boot_id",
                      check=False)
        if r.returncode == 0 and r.stdout.strip() not in ("", old_boot_id):
            return
        time.sleep(1)
    raise AssertionError(f"{node.name} did not come back from its reboot")


@dataclass(frozen=True)
class Converged:
    """A node converged with STACK (nvidia-fs 2.28.4) once per module, committed as an image
    (tests/harness/fixtures.py commit_node): each test that needs that node starts its own
    container of it instead of converging the stack again (about a minute of CPU each)."""

    image: str
    seed: str  # the converged node's GDSFLEET_SIM_SEED: the same simulated hardware
    kernel: str  # the running kernel
    nxt: str  # the newer stand-in kernel, not installed

    def start(self, sim_node: Callable[..., Any]) -> Any:
        node = sim_node("nvfs", ssh=True, image=self.image,
                        env={"GDSFLEET_SIM_SEED": self.seed})
        # starting the image is a simulated boot of the converged disk: the same kernel
        # (grub.cfg's default entry is the newer kernel, whose image is not installed) and
        # nvidia-fs loaded at boot, as the role configured it
        assert booted(node)[0] == self.kernel
        assert node.exec("test -d /sys/module/nvidia_fs", check=False).returncode == 0
        return node


@pytest.fixture(scope="module")
def converged(module_sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Converged]:
    """prepare() without the newer kernel, then the stack up to nvidia-fs with DOCA-OFED
    (STACK, nvidia-fs 2.28.4), committed; the image is removed at the module's end."""
    node = module_sim_node("nvfs", ssh=True)
    kernel, nxt = prepare(node, standin_repo, next_headers=False, install_next=False)
    tmp = tmp_path_factory.mktemp("converge")
    rc, report, stderr = play(tmp, node, standin_repo, STACK, "2.28.4")
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    assert node.exec(f"test -x {HOOK} && ! test -e {STATE}", check=False).returncode == 0
    image = commit_node(node)
    try:
        # its tests run containers of the image (the factory's cleanup accepts it gone)
        labmod.podman("rm", "-f", "-t", "0", node.name, check=False)
        yield Converged(image, node.name, kernel, nxt)
    finally:
        remove_image(image)


def test_a_kernel_without_headers_fails_keeps_the_default_and_is_held(
    sim_node: Callable[..., Any], standin_repo: Any, converged: Converged, tmp_path: Path
) -> None:
    """The converged node with the newer kernel installed without its headers before the
    kernel hook could see it (as a kernel installed before gdsfleet: the hook is moved aside
    for the install), then the kernel gate play."""
    node = converged.start(sim_node)
    kernel, nxt = converged.kernel, converged.nxt
    node.exec("apt-get update -qq")  # the repositories the roles configured
    node.exec(f"mv {HOOK} {HOOK}.aside")
    node.apt_install(f"linux-image-{nxt}")
    node.exec(f"mv {HOOK}.aside {HOOK}")
    assert node.exec(f"test -e /boot/vmlinuz-{nxt} && ! test -e /lib/modules/{nxt}/build && "
                     f"! test -e {STATE}", check=False).returncode == 0  # nothing gated it yet
    assert f"linux-image-{nxt}" not in held(node)
    rc, report, _ = play(tmp_path, node, standin_repo, GATE, "2.28.4")
    assert rc != 0
    gate = task(report, "gdsfleet.gds.kernel_gate : Gate the kernel the node will boot")
    assert gate["kernel"] == nxt and gate["passed"] is False
    assert f"no headers for {nxt}" in gate["reason"] and f"linux-headers-{nxt}" in gate["fix"]
    assert [(a["action"], a["ok"]) for a in gate["actions"]] == [("keep_default", True),
                                                                  ("hold", True)], gate
    failed = task(report, "gdsfleet.gds.kernel_gate : Fail with the reason and the fix")
    assert "FAILED" in failed["msg"] and f"boots {kernel} next" in failed["msg"]
    assert saved_entry(node) == f"gnulinux-advanced-UUID>gnulinux-{kernel}-advanced-UUID"
    assert f"linux-image-{nxt}" in held(node)
    doc = state(node)
    assert doc["next_boot"] == kernel and doc["kernels"][nxt]["passed"] is False
    c = gate_check(node)  # the node boots its running kernel: nothing to fail
    assert c.status == "skip" and c.observed.startswith(f"{kernel} (GRUB saved_entry)"), c
    # the pin undone by hand: verify fails before the reboot
    node.exec("rm -f /etc/default/grub.d/99-gdsfleet-kernel-gate.cfg")
    c = gate_check(node)
    assert c.status == "fail" and f"no headers for {nxt}" in c.message, c


def test_v2_only_nvme_and_v1_nvidia_fs_fail_naming_both(
    sim_node: Callable[..., Any], standin_repo: Any, installed_collection: Path, tmp_path: Path
) -> None:
    node = sim_node("nvfs", ssh=True)
    v1 = I87["nvidia_fs_without_blk_dma_iter"]["looks_up"]
    v2 = I87["doca_ofed_26_01"]["exports"]
    # TEST STAND-IN knob: the stand-in mlnx-nvme behaves as DOCA-OFED 26.01's (issue #87)
    put(node, "/etc/gdsfleet-sim/standin-dkms.env", f"MLNX_NVME_EXPORT={v2}\n".encode())
    kernel, nxt = prepare(node, standin_repo, next_headers=True)
    rc, report, stderr = play(tmp_path, node, standin_repo, STACK, "2.25.7")  # looks up v1
    assert rc == 0, stderr[-2000:] + json.dumps(report)[-3000:]
    rc, report, _ = play(tmp_path, node, standin_repo, GATE, "2.25.7")
    assert rc != 0
    gate = task(report, "gdsfleet.gds.kernel_gate : Gate the kernel the node will boot")
    bad = [r for r in gate["results"] if not r["ok"]]
    assert [r["check"] for r in bad] == ["nvme.symbol"], gate
    assert v1 in bad[0]["reason"] and v2 in bad[0]["reason"]
    assert f"/lib/modules/{nxt}/updates/dkms/nvme.ko" in bad[0]["reason"]
    assert saved_entry(node).endswith(f"gnulinux-{kernel}-advanced-UUID")


def test_an_unattended_kernel_install_through_the_hook_keeps_the_default(
    sim_node: Callable[..., Any], converged: Converged
) -> None:
    node = converged.start(sim_node)
    kernel, nxt = converged.kernel, converged.nxt
    assert node.exec(f"test -x {HOOK}", check=False).returncode == 0
    # as unattended-upgrades would: a kernel, no headers, no gdsfleet
    node.exec("apt-get update -qq")  # the repositories the roles configured
    out = node.apt_install(f"linux-image-{nxt}")
    # the image's hook ran before any headers: DKMS could not build, so the verdict waits for
    # the headers' hook (issue 43); the headers never come, so once apt-get has exited the
    # gate runs again and protects
    assert f"gdsfleet kernel gate: DEFERRED for kernel {nxt}" in out.stdout, out.stdout[-3000:]
    want = f"gnulinux-advanced-UUID>gnulinux-{kernel}-advanced-UUID"
    for _ in range(30):  # the re-run polls every 10 s; its hold runs once apt lets go
        if saved_entry(node) == want and f"linux-image-{nxt}" in held(node):
            break
        time.sleep(2)
    assert saved_entry(node) == want, out.stdout[-3000:]
    assert f"linux-image-{nxt}" in held(node)
    doc = state(node)
    assert doc["next_boot"] == kernel and doc["kernels"][nxt]["passed"] is False
    assert doc["kernels"][nxt]["deferred"] is False
    assert gate_check(node).status == "skip"
