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
  - Fails the task when the gate fails (I(fail), the default), with one line saying the kernel,
    the reason, the fix and what protection did; the result carries the verdict either way. In
    check mode a kernel that is not installed yet cannot be gated - the result is then
    C(pending) and says which checks a real run makes once it is installed, instead of failing
    every check on the missing kernel.
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
  fail:
    description: Fail the task when the gate fails (one line - the kernel, the reason, the fix
      and what protection did). C(false) only reports it in the result (the role
      C(gdsfleet.gds.kernel_gate) fails the host itself, with more context).
    type: bool
    default: true
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
  description: Whether every check passed; null when the verdict is C(pending).
  type: bool
  returned: always
pending:
  description: Check mode and the kernel is not installed yet, so it could not be gated.
  type: bool
  returned: always
would_check:
  description: The checks a real run makes for the kernel (with C(pending)).
  type: list
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

# what one line of the task's message may hold (the role and a rollout print it; issue 47: a
# 700-character message with a literal \x0a in it, three times)
MSG_MAX = 600


def one_line(text: object, limit: int = 500) -> str:
    """``text`` on one line (newlines, tabs and runs of blanks as one blank), at most
    ``limit`` characters."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def installed(kernel: str, modules_root: str = "/lib/modules", boot_dir: str = "/boot") -> bool:
    """Is ``kernel`` installed: its image, or the modules.order its package ships? A modules
    folder alone is not: DKMS and driver packages leave theirs for kernels long removed."""
    return (os.path.exists(os.path.join(boot_dir, f"vmlinuz-{kernel}"))
            or os.path.exists(os.path.join(modules_root, kernel, "modules.order")))


def showhold(module: AnsibleModule) -> set[str] | None:
    """The packages APT holds (``apt-mark showhold``); None when it cannot be asked."""
    if not module.get_bin_path("apt-mark"):
        return None
    rc, out, _err = module.run_command(["apt-mark", "showhold"])
    return set(out.split()) if rc == 0 else None


def settle_holds(actions: list, held: set | None) -> None:
    """A hold reported FAILED whose packages APT does hold is done (issue 47: ``hold:
    FAILED`` while ``apt-mark showhold`` listed both packages, apt-mark having complained
    about another name); every detail on one line."""
    for a in actions:
        detail = str(a.get("detail") or "")
        if a.get("action") == "hold" and not a.get("ok") and held is not None \
                and detail.startswith("apt-mark hold "):
            wanted = [w for w in detail.split(":", 1)[0].split()[2:] if w]
            if wanted and all(w in held for w in wanted):
                said = detail.split(":", 1)[1] if ":" in detail else ""
                a["ok"] = True
                detail = (f"apt-mark hold {' '.join(wanted)}: held (apt-mark showhold lists "
                          f"them)" + (f"; apt-mark said: {said}" if said.strip() else ""))
        a["detail"] = one_line(detail)


def summary(result: dict) -> str:
    """The task's one-line message for a failed gate."""
    done = "; ".join(f"{a['action']}: {'done' if a['ok'] else 'FAILED'} ({a['detail']})"
                     for a in result.get("actions") or [])
    nxt = result.get("next_boot") or "unknown"
    text = (f"kernel gate FAILED for {result['kernel']}: {one_line(result.get('reason'), 300)}"
            f"; to fix: {one_line(result.get('fix'), 200)}"
            + (f"; {done}" if done else "")
            + f"; the node boots {nxt} next")
    return one_line(text, MSG_MAX)


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
            "fail": {"type": "bool", "default": True},
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
    checks = [str(r.get("check")) for r in gate.get("results") or []]
    if module.check_mode and kernel != running and not installed(kernel):
        # nothing of the kernel is there yet (kernel_update.yml in check mode installs
        # nothing): every check would fail on its absence, which says nothing about it
        module.exit_json(
            changed=False, running=running, next_boot=nxt.get("kernel"),
            next_boot_source=nxt.get("source"), actions=[], kernel=kernel, route=p["route"],
            passed=None, pending=True, would_check=checks, results=[], reason="", fix="",
            msg=one_line(f"check mode: kernel {kernel} is not installed, so it cannot be gated "
                         f"yet; a real run gates it once installed ({', '.join(checks)}) and, "
                         f"on a fail, keeps {running} the default and holds {kernel}'s "
                         f"packages", MSG_MAX))
    actions = []
    if p["protect"] and not module.check_mode:
        actions = kg.protect(gate, running=running, family=family)
        nxt = kg.next_boot()
    if p["make_default"] and gate["passed"] and nxt.get("kernel") != kernel \
            and not module.check_mode:
        ok, what = kg.keep_default(kernel, family)
        actions.append({"action": "make_default", "ok": ok, "detail": what})
        nxt = kg.next_boot()
    if any(a.get("action") == "hold" and not a.get("ok") for a in actions) \
            and family != "redhat":
        settle_holds(actions, showhold(module))
    else:
        settle_holds(actions, None)
    gate["reason"] = one_line(gate.get("reason"), 2000)
    gate["fix"] = one_line(gate.get("fix"), 2000)
    changed = bool(actions)
    if not module.check_mode:
        kg.record(gate, running=running, nxt=nxt, actions=actions, path=p["state_path"])
    result = {"changed": changed, "running": running, "next_boot": nxt.get("kernel"),
              "next_boot_source": nxt.get("source"), "actions": actions, "pending": False,
              "would_check": checks, **gate}
    if not gate["passed"] and p["fail"]:
        module.fail_json(msg=summary(result), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
