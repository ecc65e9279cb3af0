#!/usr/bin/python
# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Gate a kernel: may the node boot it without losing GPUDirect Storage?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_gate
short_description: Decide whether a node may boot a kernel without losing GPUDirect Storage
description:
  - Reads only the files of the kernel in question, never the running kernel, and passes only
    when DKMS shows nvidia-fs (nvfs route), mlnx-nvme (when DKMS knows it) and the NVIDIA
    driver (when it is a DKMS module) C(installed) for it, or an nvidia-fs DKMS did not build
    loads with its vermagic (the prebuilt linux-modules-nvidia-fs-<kernel> of linux-nvidia
    kernels); its headers are installed where DKMS still has to build one of them; the
    vermagic of each module that will load on it names it, or, for a module reached through
    C(weak-updates/) (RHEL kmod packages), its vermagic flags and symbol CRCs match the
    kernel's (C(/boot/symvers-<kernel>.gz)); the nvme registration symbol the built nvidia-fs
    looks up is exported by the nvme module that loads on it (read from the modules' ELF
    sections; for an nvme built into the kernel, from its Module.symvers), GPL-only on
    kernels from 6.6
    (whose C(__symbol_get()) refuses any other export); the NVIDIA driver built for it is the
    open kernel module; and, on the p2pdma route, C(/boot/config-<kernel>) has
    C(CONFIG_PCI_P2PDMA=y).
  - With I(protect), when the gate fails for a kernel other than the running one, keeps the
    running kernel the default boot entry (grubby --set-default; GRUB_DEFAULT=saved and
    grub-set-default on Debian/Ubuntu) and holds the failing kernel's packages (apt-mark hold;
    dnf versionlock exclude). Nothing is changed in check mode.
  - Records the result in I(state_path) (not in check mode), which C(provisioner verify) reads.
  - Never fails by itself; the result says C(passed) with the reason and the fix.
version_added: 0.1.0
author: gdsfleet developers (@gdsfleet)
options:
  kernel:
    description: Kernel release to gate; empty means the kernel the node boots next.
    type: str
    default: ""
  route:
    description: The GDS data route.
    type: str
    choices: [nvfs, p2pdma]
    default: nvfs
  mlnx_nvme:
    description: Require mlnx-nvme from DKMS (C(auto) when DKMS knows it for any kernel).
    type: str
    choices: [auto, "yes", "no"]
    default: auto
  nvidia_dkms:
    description: Require the NVIDIA driver from DKMS (C(auto) when DKMS knows it).
    type: str
    choices: [auto, "yes", "no"]
    default: auto
  check_nvme_symbol:
    description: Check the nvme registration symbol (nvfs route).
    type: bool
    default: true
  protect:
    description: On failure for a kernel other than the running one, keep the running kernel
      the default and hold the failing kernel's packages.
    type: bool
    default: false
  make_default:
    description: When the gate passes for a kernel the node does not boot next, make it the
      default boot entry (playbooks/kernel_update.yml). Not in check mode.
    type: bool
    default: false
  state_path:
    description: The node's gate state file.
    type: path
    default: /var/lib/gdsfleet/kernel-gate.json
"""

EXAMPLES = r"""
- name: Gate the kernel the node boots next
  gdsfleet.gds.kernel_gate:
    protect: true
  register: gate
"""

RETURN = r"""
kernel:
  description: The kernel gated.
  type: str
  returned: always
running:
  description: The running kernel.
  type: str
  returned: always
next_boot:
  description: The kernel the node boots next (after any protection).
  type: str
  returned: always
next_boot_source:
  description: How the next boot was found (grubby, GRUB saved_entry, newest vmlinuz).
  type: str
  returned: always
route:
  description: The route the kernel was gated for.
  type: str
  returned: always
passed:
  description: Whether every check passed.
  type: bool
  returned: always
results:
  description: Each check - check, ok, reason, fix.
  type: list
  returned: always
reason:
  description: Why the gate failed (empty when it passed).
  type: str
  returned: always
fix:
  description: What to do (empty when it passed).
  type: str
  returned: always
actions:
  description: What protection did - action (keep_default, hold, make_default), ok, detail.
  type: list
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gdsfleet.gds.plugins.module_utils import kernel_gate as kg  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str", "default": ""},
            "route": {"type": "str", "choices": ["nvfs", "p2pdma"], "default": "nvfs"},
            "mlnx_nvme": {"type": "str", "choices": ["auto", "yes", "no"], "default": "auto"},
            "nvidia_dkms": {"type": "str", "choices": ["auto", "yes", "no"], "default": "auto"},
            "check_nvme_symbol": {"type": "bool", "default": True},
            "protect": {"type": "bool", "default": False},
            "make_default": {"type": "bool", "default": False},
            "state_path": {"type": "path", "default": kg.STATE_PATH},
        },
        supports_check_mode=True,
    )
    p = module.params
    running = os.uname().release
    family = kg.os_family()
    nxt = kg.next_boot()
    kernel = p["kernel"] or nxt.get("kernel") or running
    try:
        gate = kg.evaluate(kernel, dkms_text=kg.dkms_status(), route=p["route"], family=family,
                           mlnx_nvme=p["mlnx_nvme"], nvidia_dkms=p["nvidia_dkms"],
                           check_nvme_symbol=p["check_nvme_symbol"])
    except kg.GateError as exc:
        module.fail_json(msg=f"kernel_gate: {exc}")
    actions = []
    if p["protect"] and not module.check_mode:
        actions = kg.protect(gate, running=running, family=family)
        nxt = kg.next_boot()
    if p["make_default"] and gate["passed"] and nxt.get("kernel") != kernel \
            and not module.check_mode:
        ok, what = kg.keep_default(kernel, family)
        actions.append({"action": "make_default", "ok": ok, "detail": what})
        nxt = kg.next_boot()
    changed = bool(actions)
    if not module.check_mode:
        kg.record(gate, running=running, nxt=nxt, actions=actions, path=p["state_path"])
    module.exit_json(changed=changed, running=running, next_boot=nxt.get("kernel"),
                     next_boot_source=nxt.get("source"), actions=actions, **gate)


if __name__ == "__main__":
    main()
