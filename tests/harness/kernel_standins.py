"""TEST STAND-INS that let the SIMULATED lab show a gated kernel update end to end.

A real Debian node has GRUB (a ``grub.cfg`` as grub-mkconfig writes it, ``grub-set-default``
writing ``grubenv``), the running kernel's image in ``/boot`` and the NVIDIA driver's module
for every kernel it installed (the project never installs the driver). The simulated nodes
have none of these; the kernel gate's own test (tests/molecule/test_kernel_gate_lab.py) adds
them before a ``kernel_update`` rollout, and so does ``python -m tests.harness.lab
kernel-standins`` for the operator's lab (docs/lifecycle.md, "In the lab"), from this one
place. Every file written here says it is a stand-in; the kernel packages, dkms and the
GDS modules come from the stand-in repository and the roles, as in the test.

With the GRUB stand-in in place a simulated reboot lands in the kernel GRUB would boot
(docs/testing.md, "The booted kernel"); the host's kernel is still the one underneath.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable

from tests.unit.kernel_gate_standins import elf_module, grub_cfg

GRUB_SET_DEFAULT = """#!/bin/sh
# TEST STAND-IN for grub-set-default (GRUB 2): records the saved entry in grubenv.
[ -n "${1:-}" ] || exit 1
mkdir -p /boot/grub
printf '# GRUB Environment Block\\nsaved_entry=%s\\n' "$1" > /boot/grub/grubenv
"""

# runs a shell command on the node and returns its stdout (raises when it fails)
Exec = Callable[[str], str]


def put(run: Exec, path: str, data: bytes, mode: str = "0644") -> None:
    b64 = base64.b64encode(data).decode()
    q = shlex.quote(path)
    run(f"mkdir -p $(dirname {q}) && echo {b64} | base64 -d > {q} && chmod {mode} {q}")


def kernels(run: Exec) -> tuple[str, str]:
    """(running kernel, the newest kernel the node's repositories offer): the stand-in
    repository carries a newer linux-image than the host's kernel."""
    running = run("uname -r").strip()
    newest = run("apt-cache pkgnames linux-image- | sort | tail -n 1").strip()
    return running, newest.removeprefix("linux-image-")


def install(run: Exec, running: str, nxt: str) -> None:
    """The stand-ins for a node that runs ``running`` and may update to ``nxt``."""
    # TEST STAND-IN: the running kernel's image, which a real node has in /boot
    run(f"test -e /boot/vmlinuz-{running} || echo stand-in > /boot/vmlinuz-{running}")
    put(run, "/boot/grub/grub.cfg", grub_cfg(nxt, running).encode())
    put(run, "/usr/local/sbin/grub-set-default", GRUB_SET_DEFAULT.encode(), "0755")
    for k in (running, nxt):  # TEST STAND-IN: the open driver's module, as its package does
        put(run, f"/lib/modules/{k}/kernel/drivers/video/nvidia.ko", elf_module(
            name="nvidia", vermagic=f"{k} SMP preempt mod_unload modversions ",
            license="Dual MIT/GPL"))


def lab_commands(nxt: str = "<next kernel>") -> list[tuple[str, str]]:
    """(label, command) of a gated kernel update in the lab, from the checkout; docs/lifecycle.md
    shows them as they are here (tests/unit/test_lifecycle_commands.py)."""
    pv = ".venv/bin/provisioner"
    update = "--playbook gdsfleet.gds.kernel_update"
    return [
        ("the gate, read-only", "ANSIBLE_COLLECTIONS_PATH=.lab/collections .venv/bin/ansible "
                                f"-i inventories/lab gpu_nodes -b -m gdsfleet.gds.kernel_gate "
                                f"-a kernel={nxt} -C"),
        ("what would change", f"{pv} plan -i inventories/lab {update}"),
        ("the gated update", f"{pv} rollout -i inventories/lab {update} -e kernel_target={nxt} "
                             f"--allow-reboot"),
    ]


__all__ = ["GRUB_SET_DEFAULT", "install", "kernels", "lab_commands", "put"]
