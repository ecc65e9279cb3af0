"""The cufile and nvme roles refuse bad input and drives with data before any change, plan a
RAID0 the kernel here cannot build, and wipe only when told to, saying what they wiped.

One simulated node for the module (tests/harness sim_node with its loop "NVMe" /dev/nvme0n1),
two extra small loop devices for the RAID0 plan, ansible-playbook over SSH to the node's
loopback sshd with the collection built from this checkout. Each test puts the drive in the
state it needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gds_collection import VENV_BIN, ansible_env

NVME = "/dev/nvme0n1"
VENDOR_CUFILE = '{\n  // vendor file (stand-in)\n  "properties": {"allow_compat_mode": true}\n}\n'


class Node:
    """The simulated node plus an ansible-playbook runner against it."""

    def __init__(self, sim: Any, workdir: Path) -> None:
        self.sim = sim
        self.workdir = workdir
        self.inventory = workdir / "hosts.json"
        # SSH on a loopback port with pipelining: several times faster than `podman exec`.
        self.inventory.write_text(
            json.dumps({"all": {"hosts": {sim.name: sim.ansible_host_vars()}}}))

    def sh(self, command: str, check: bool = True) -> str:
        return str(self.sim.exec(command, check=check).stdout)

    def play(self, role: str, variables: dict[str, Any], *, check_mode: bool = False
             ) -> subprocess.CompletedProcess[str]:
        playbook = self.workdir / f"{role}.yml"
        playbook.write_text(
            f"- hosts: all\n  gather_facts: false\n  roles:\n    - gdsfleet.gds.{role}\n"
        )
        extra = self.workdir / "vars.json"
        extra.write_text(json.dumps(variables))
        cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook),
               "-e", f"@{extra}"]
        if check_mode:
            cmd += ["--check", "--diff"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                              env=ansible_env())

    def sha(self, path: str) -> str:
        return self.sh(f"sha256sum {path} | cut -d' ' -f1").strip()

    def reset_drive(self) -> None:
        """A blank drive, nothing mounted, no fstab line, no record of earlier runs."""
        self.sh("umount /mnt/gds /srv/data 2>/dev/null; wipefs -a -q " + NVME
                + "; sed -i '\\# /mnt/gds #d' /etc/fstab"
                + "; rm -f /etc/ansible/facts.d/gdsfleet_nvme.fact", check=False)
        assert self.signatures(NVME) == []

    def signatures(self, device: str) -> list[dict[str, Any]]:
        out = self.sh(f"wipefs --no-act --json {device}").strip()
        return list(json.loads(out)["signatures"]) if out else []


def recap(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stdout.splitlines() if " changed=" in line]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return lines[-1]


def failed_task(proc: subprocess.CompletedProcess[str]) -> str:
    """Name of the task that failed (the last TASK header before the first 'fatal:')."""
    current = ""
    for line in proc.stdout.splitlines():
        if line.startswith("TASK ["):
            current = line.split("[", 1)[1].split("]", 1)[0]
        if line.startswith("fatal:"):
            return current
    raise AssertionError("no task failed:\n" + proc.stdout[-3000:])


@pytest.fixture(scope="module")
def node(module_sim_node: Callable[..., Any], installed_collection: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Node:
    sim = module_sim_node("nvfs", nvme=True, ssh=True)
    return Node(sim, tmp_path_factory.mktemp("bad-input"))


@pytest.fixture(scope="module")
def extra_loops(node: Node) -> Iterator[list[str]]:
    """Two more small loop devices for the RAID0 plan, visible in the node; detached always."""
    made: list[tuple[str, str]] = []
    token = secrets.token_hex(3)
    try:
        for i in (1, 2):
            backing = f"/var/tmp/gdsfleet-tbi-{token}-{i}.img"
            subprocess.run(["truncate", "-s", "64M", backing], check=True)
            made.append(("", backing))
            loop = subprocess.run(["losetup", "-f", "--show", backing], check=True,
                                  capture_output=True, text=True).stdout.strip()
            made[-1] = (loop, backing)
            major, minor = Path(f"/sys/block/{Path(loop).name}/dev").read_text().split(":")
            node.sh(f"test -b {loop} || mknod {loop} b {major} {minor.strip()}")
        yield [loop for loop, _ in made]
    finally:
        for loop, backing in made:
            if loop:
                attached = subprocess.run(["losetup", "-n", "-O", "BACK-FILE", loop],
                                          capture_output=True, text=True, check=False)
                if attached.stdout.strip() == backing:
                    subprocess.run(["losetup", "-d", loop], check=False)
            with contextlib.suppress(OSError):
                os.unlink(backing)


# --- cufile ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cufile_config", "route", "says"),
    [
        ({"properties": {"max_pinned_memory_size": 1048576}}, "nvfs",
         "did you mean properties.max_device_pinned_mem_size_kb"),
        ({"properties": {"allow_compat_mode": "no"}}, "nvfs",
         "properties.allow_compat_mode: expected a boolean"),
        ({"block": {"nvme": {"use_pci_p2pdma": False}}}, "p2pdma",
         "block.nvme.use_pci_p2pdma: set to false, but gds_route is p2pdma"),
    ],
    ids=["unknown-key", "wrong-type", "route-conflict"],
)
def test_bad_cufile_config_fails_before_any_change(
    node: Node, cufile_config: dict[str, Any], route: str, says: str
) -> None:
    node.sh(f"cat > /etc/cufile.json <<'EOF'\n{VENDOR_CUFILE}EOF\nrm -f /etc/cufile.json.*")
    before = node.sha("/etc/cufile.json")
    proc = node.play("cufile", {"cufile_config": cufile_config, "gds_route": route})
    assert proc.returncode != 0
    assert failed_task(proc) == "gdsfleet.gds.cufile : Refuse an invalid cufile_config"
    assert says in proc.stdout
    assert "nothing was changed" in proc.stdout
    assert node.sha("/etc/cufile.json") == before
    assert node.sh("ls /etc/cufile.json.* 2>/dev/null", check=False).strip() == ""


def test_valid_cufile_config_renders_plain_json_with_backup(node: Node) -> None:
    node.sh(f"cat > /etc/cufile.json <<'EOF'\n{VENDOR_CUFILE}EOF\nrm -f /etc/cufile.json.*")
    proc = node.play("cufile", {"gds_route": "p2pdma",
                                "cufile_config": {"blacklist": {"devices": ["/dev/nvme9n1"]}}})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "legacy name of denylist" in proc.stdout  # the alias is accepted with a warning
    doc = json.loads(node.sh("cat /etc/cufile.json"))
    assert doc["properties"]["allow_compat_mode"] is False
    assert doc["properties"]["use_pci_p2pdma"] is True
    assert doc["block"]["nvme"]["use_pci_p2pdma"] is True
    assert doc["denylist"]["devices"] == ["/dev/nvme9n1"] and "blacklist" not in doc
    backups = node.sh("ls /etc/cufile.json.*").split()
    assert len(backups) == 1 and "// vendor file" in node.sh(f"cat {backups[0]}")


# --- nvme: refusals in the assert step ----------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "task", "says"),
    [
        ({"nvme_devices": ["/dev/nvme7n1"]}, "Refuse drives that do not exist",
         "nvme_devices: /dev/nvme7n1 does not exist"),
        ({"nvme_device_patterns": ["nvme-NOSUCHSERIAL*"]}, "Refuse drives that do not exist",
         "matches nothing under /dev/disk/by-id"),
        ({"nvme_devices": [NVME], "nvme_filesystem": "ext4",
          "nvme_mount_options": ["defaults", "data=journal"]},
         "Refuse data= modes GDS does not accept", "data=journal and data=writeback are refused"),
    ],
    ids=["missing-device", "pattern-matches-nothing", "ext4-data-journal"],
)
def test_bad_nvme_input_fails_in_the_assert_step(
    node: Node, variables: dict[str, Any], task: str, says: str
) -> None:
    node.reset_drive()
    fstab = node.sha("/etc/fstab")
    proc = node.play("nvme", variables)
    assert proc.returncode != 0
    assert failed_task(proc) == f"gdsfleet.gds.nvme : {task}"
    assert says in proc.stdout
    assert node.signatures(NVME) == []  # nothing formatted
    assert node.sha("/etc/fstab") == fstab


def test_check_mode_on_a_blank_drive_changes_nothing(node: Node) -> None:
    """Also selects the drive by a /dev/disk/by-id glob, as operators do with serials."""
    node.reset_drive()
    node.sh("mkdir -p /dev/disk/by-id && ln -sfn ../../nvme0n1 "
            "/dev/disk/by-id/nvme-GDSFLEET_STANDIN_SERIAL0001")
    fstab = node.sha("/etc/fstab")
    proc = node.play("nvme", {"nvme_device_patterns": ["nvme-GDSFLEET_STANDIN_*"]},
                     check_mode=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in recap(proc)
    # --diff shows the record it would write, with the drive the glob resolved to
    assert "gdsfleet_nvme.fact" in proc.stdout
    assert f'"target": "{NVME}"' in proc.stdout
    assert node.signatures(NVME) == []
    assert node.sha("/etc/fstab") == fstab
    assert node.sh("findmnt -n /mnt/gds", check=False).strip() == ""
    assert node.sh("test -e /etc/ansible/facts.d/gdsfleet_nvme.fact && echo yes",
                   check=False).strip() == ""


# --- nvme: a drive with data ------------------------------------------------------------------


def _drive_with_a_file(node: Node) -> tuple[str, str]:
    node.reset_drive()
    node.sh(f"mkfs.xfs -q -L data {NVME} && mkdir -p /srv/data && mount {NVME} /srv/data "
            "&& head -c 1048576 /dev/urandom > /srv/data/precious && sync")
    digest = node.sha("/srv/data/precious")
    uuid = node.sh(f"blkid -p -o value -s UUID {NVME}").strip()
    node.sh("umount /srv/data")
    return digest, uuid


def test_drive_with_a_filesystem_is_refused_and_its_data_kept(node: Node) -> None:
    digest, uuid = _drive_with_a_file(node)
    fstab = node.sha("/etc/fstab")
    proc = node.play("nvme", {"nvme_devices": [NVME]})
    assert proc.returncode != 0
    assert failed_task(proc) == "gdsfleet.gds.nvme : Refuse drives that hold data"
    assert f"{NVME} has xfs signature" in proc.stdout
    assert uuid in proc.stdout and "nvme_force_format: true" in proc.stdout
    assert node.sha("/etc/fstab") == fstab
    node.sh(f"mount -o ro {NVME} /srv/data")
    try:
        assert node.sha("/srv/data/precious") == digest
    finally:
        node.sh("umount /srv/data")


def test_mounted_drive_is_refused_even_with_force(node: Node) -> None:
    _drive_with_a_file(node)
    node.sh(f"mount {NVME} /srv/data")
    try:
        proc = node.play("nvme", {"nvme_devices": [NVME], "nvme_force_format": True})
        assert proc.returncode != 0
        assert "is mounted at /srv/data (unmount it first)" in proc.stdout
        assert node.sh("test -f /srv/data/precious && echo ok").strip() == "ok"
    finally:
        node.sh("umount /srv/data")


def test_force_format_wipes_says_what_and_is_then_idempotent(node: Node) -> None:
    _, uuid = _drive_with_a_file(node)
    proc = node.play("nvme", {"nvme_devices": [NVME], "nvme_force_format": True})
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = proc.stdout
    assert f"nvme_force_format: wiping {NVME}" in out
    assert f"wipefs -n {NVME} before wiping" in out and uuid in out  # what was there
    assert "bytes were erased" in out  # what wipefs did
    assert node.sh(f"blkid -p -o value -s LABEL {NVME}").strip() == "gdsfleet"
    assert node.sh("findmnt -n -o FSTYPE /mnt/gds").strip() == "xfs"
    assert node.sh("test -e /mnt/gds/precious || echo gone").strip() == "gone"
    fact = json.loads(node.sh("cat /etc/ansible/facts.d/gdsfleet_nvme.fact"))
    new_uuid = node.sh(f"blkid -p -o value -s UUID {NVME}").strip()
    assert fact["filesystems"]["/mnt/gds"]["uuid"] == new_uuid
    assert f"UUID={new_uuid} /mnt/gds xfs" in node.sh("cat /etc/fstab")
    # The role's own filesystem is recognised: no wipe, no change, force or not.
    again = node.play("nvme", {"nvme_devices": [NVME], "nvme_force_format": True})
    assert again.returncode == 0
    assert " changed=0 " in recap(again)
    assert "nvme_force_format: wiping" not in again.stdout


# --- nvme: RAID0 --------------------------------------------------------------------------------


def test_raid0_is_planned_in_check_mode_and_refused_when_the_kernel_cannot(
    node: Node, extra_loops: list[str]
) -> None:
    a, b = extra_loops
    variables = {"nvme_devices": [a, b], "nvme_mount_point": "/mnt/raid"}
    command = (f"mdadm --create /dev/md/gds --run --level=0 --metadata=1.2 --chunk=512 "
               f"--raid-devices=2 {a} {b}")
    planned = node.play("nvme", variables, check_mode=True)
    assert planned.returncode == 0, planned.stdout[-3000:]
    assert f"RAID0 array /dev/md/gds over 2 drives: {a}, {b}" in planned.stdout
    assert f"command: {command}" in planned.stdout
    assert node.signatures(a) == [] and node.signatures(b) == []
    if Path("/proc/mdstat").exists():
        pytest.skip("this kernel has md: a real run would build the array")
    real = node.play("nvme", variables)
    assert real.returncode != 0
    assert failed_task(real) == "gdsfleet.gds.nvme : Refuse a RAID0 the kernel cannot assemble"
    assert ("RAID0 needs the md/raid0 kernel module; /proc/mdstat is absent: load raid0 or use "
            "a single device") in real.stdout
    assert command in real.stdout
    assert node.signatures(a) == [] and node.signatures(b) == []
    assert "/mnt/raid" not in node.sh("cat /etc/fstab")


def test_raid_on_the_p2pdma_route_is_refused_before_any_change(
    node: Node, extra_loops: list[str]
) -> None:
    """GDS with PCI P2PDMA does not support RAID: two drives on gds_route p2pdma fail in the
    assert step, and neither drive, fstab, mdadm.conf nor the loaded modules change."""
    a, b = extra_loops
    node.reset_drive()
    before = {
        "fstab": node.sha("/etc/fstab"),
        "mdadm": node.sh("cat /etc/mdadm/mdadm.conf 2>/dev/null; true"),
        "modules": node.sh("ls /sys/module"),
        "md": node.sh("ls /dev/md 2>/dev/null; true"),
    }
    proc = node.play("nvme", {"nvme_devices": [a, b], "nvme_mount_point": "/mnt/raid",
                              "gds_route": "p2pdma"})
    assert proc.returncode != 0
    assert failed_task(proc) == "gdsfleet.gds.nvme : Refuse RAID on the p2pdma route"
    assert f"gds_route is p2pdma and 2 drives are selected ({a}, {b})" in proc.stdout
    assert "GDS with PCI P2PDMA does not support RAID" in proc.stdout
    assert "Nothing was changed" in proc.stdout and "use gds_route nvfs" in proc.stdout
    assert "changed=0" in recap(proc)
    assert node.signatures(a) == [] and node.signatures(b) == []
    assert {
        "fstab": node.sha("/etc/fstab"),
        "mdadm": node.sh("cat /etc/mdadm/mdadm.conf 2>/dev/null; true"),
        "modules": node.sh("ls /sys/module"),
        "md": node.sh("ls /dev/md 2>/dev/null; true"),
    } == before
    # one drive on the same route passes the assert step (check mode: nothing is made)
    single = node.play("nvme", {"nvme_devices": [a], "nvme_mount_point": "/mnt/raid",
                                "gds_route": "p2pdma"}, check_mode=True)
    assert single.returncode == 0, single.stdout[-3000:]
    assert node.signatures(a) == []
