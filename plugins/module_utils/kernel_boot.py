# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Which kernel a node boots next, and keeping a kernel that failed the gate from booting.

- ``next_boot``: grubby's default (RHEL family), GRUB's saved entry when ``GRUB_DEFAULT=saved``,
  else the newest ``/boot/vmlinuz-*``; ``parse_grub_default``, ``parse_saved_entry`` and
  ``entry_kernel`` are its readings of GRUB's files (``provisioner verify`` reads a node's
  GRUB files with the same functions).
- ``protect``: make the running kernel the default boot entry (``keep_default``) and hold the
  failing kernel's packages (``hold_packages``); ``record``: the gate's verdict per kernel in
  the node's state file, which ``provisioner verify`` reads.
- ``package_manager_pid`` and ``regate_after``: when the kernel hook must defer its verdict
  (the image is configured before its headers), gate again once the package manager that ran
  the hook has exited.

Pure standard library, Python 3.8+: kernel_gate.py (the gate's policy) loads it from beside
itself in the kernel hook; inside Ansible, AnsiballZ ships it with the module.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # node Pythons older than 3.9 cannot evaluate list[str] at run time
    from collections.abc import Callable

    Runner = Callable[[list[str]], tuple[int, str]]

STATE_PATH = "/var/lib/gdsfleet/kernel-gate.json"
STATE_MAX_KERNELS = 16


# --- which kernel boots next -----------------------------------------------------------------

def _release_order(release: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", release)[:12])


def _read(path: str, limit: int = 1024 * 1024) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def parse_grub_default(text: str | None) -> str | None:
    """The last GRUB_DEFAULT= assignment of /etc/default/grub then grub.d/*.cfg (as
    grub-mkconfig sources them in order)."""
    value = None
    for line in (text or "").splitlines():
        m = re.match(r"^\s*GRUB_DEFAULT=(['\"]?)(.*?)\1\s*$", line)
        if m:
            value = m.group(2)[:256]
    return value


def parse_saved_entry(grubenv: str | None) -> str | None:
    """saved_entry of a grubenv block."""
    for line in (grubenv or "").splitlines():
        if line.startswith("saved_entry="):
            return line[len("saved_entry="):].strip()[:512] or None
    return None


def grub_default(etc: str = "/etc") -> str | None:
    files = [os.path.join(etc, "default/grub")]
    files += sorted(glob.glob(os.path.join(etc, "default/grub.d/*.cfg")))
    return parse_grub_default("\n".join(_read(f) or "" for f in files))


def entry_kernel(entry: str | None, kernels: list[str]) -> str | None:
    """The kernel a GRUB entry (id ``gnulinux-<K>-advanced-...`` or title ``..., with Linux
    <K>``, possibly behind ``submenu>``) boots, if it names an installed one."""
    if not entry:
        return None
    last = entry.split(">")[-1]
    for k in sorted(kernels, key=len, reverse=True):
        if f"gnulinux-{k}-" in last or last.endswith(f"Linux {k}") or f"Linux {k} " in last:
            return k
    return None


def next_boot(boot_dir: str = "/boot", etc: str = "/etc") -> dict:
    """The kernel the node boots next: grubby's default (RHEL family); GRUB's saved entry when
    GRUB_DEFAULT=saved (how the gate keeps a kernel the default on Debian/Ubuntu); else the
    newest /boot/vmlinuz-* (GRUB_DEFAULT=0)."""
    try:
        names = os.listdir(boot_dir)
    except OSError:
        names = []
    kernels = sorted((n[8:] for n in names if n.startswith("vmlinuz-") and len(n) > 8
                      and not n.endswith((".old", ".bak", ".efi.signed"))), key=_release_order)
    grubby = shutil.which("grubby")
    if grubby:
        try:
            out = subprocess.run([grubby, "--default-kernel"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if "vmlinuz-" in out:
            return {"kernel": out.splitlines()[0].rsplit("vmlinuz-", 1)[1].strip(),
                    "source": "grubby --default-kernel", "kernels": kernels}
    if grub_default(etc) == "saved":
        k = entry_kernel(parse_saved_entry(_read(os.path.join(boot_dir, "grub/grubenv"), 4096)),
                         kernels)
        if k:
            return {"kernel": k, "source": "GRUB saved_entry", "kernels": kernels}
    return {"kernel": kernels[-1] if kernels else None, "source": "newest /boot/vmlinuz-*",
            "kernels": kernels}


# --- keeping a failing kernel from booting ----------------------------------------------------

GRUB_DROPIN = "/etc/default/grub.d/99-gdsfleet-kernel-gate.cfg"


def _grub_entry_id(kernel: str, grub_cfg: str) -> str | None:
    """``submenu-id>entry-id`` of kernel's normal (not recovery) entry in grub.cfg."""
    text = _read(grub_cfg, 4 * 1024 * 1024) or ""
    sub = None
    for line in text.splitlines():
        s = line.strip()
        m = re.search(r"\$menuentry_id_option\s+'([^']+)'", s)
        if not m:
            continue
        if s.startswith("submenu "):
            sub = m.group(1)
        elif s.startswith("menuentry ") and m.group(1).startswith(f"gnulinux-{kernel}-advanced-"):
            return f"{sub}>{m.group(1)}" if sub else m.group(1)
    return None


def _run(argv: list[str], runner: Runner) -> tuple[int, str]:
    try:
        rc, out = runner(argv)
    except OSError as exc:
        return 127, str(exc)
    return rc, out


def default_runner(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, (proc.stdout + proc.stderr)[-2000:]


def hold_argv(kernel: str, family: str, runner: Runner = default_runner) -> list[str] | None:
    """The command that holds the failing kernel's packages (and the installed meta packages
    that pull new kernels), or None when nothing of it is installed."""
    if family == "redhat":
        names = ("kernel", "kernel-core", "kernel-modules", "kernel-devel")
        return ["dnf", "-y", "versionlock", "exclude", *(f"{n}-{kernel}" for n in names)]
    rc, out = _run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\\n",
                    "linux-image-*", "linux-headers-*", "linux-modules-*", "linux-generic*",
                    "linux-virtual*", "linux-nvidia*"], runner)
    pkgs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("i"):
            name = parts[1]
            if kernel in name or not re.search(r"[0-9]+\.[0-9]+\.[0-9]+-", name):
                pkgs.append(name)
    pkgs = sorted(set(pkgs))[:64]
    return ["apt-mark", "hold", *pkgs] if pkgs else None


def hold_packages(kernel: str, family: str, runner: Runner = default_runner,
                  defer: bool = False) -> tuple[bool, str]:
    """Hold the failing kernel's packages. ``defer`` (the kernel hook, which runs inside the
    package manager's transaction and its lock): a detached process runs the hold once the
    package manager lets go (retrying for up to an hour)."""
    argv = hold_argv(kernel, family, runner)
    if argv is None:
        return False, f"no installed package of {kernel} found to hold"
    text = " ".join(argv)
    if defer:
        loop = ('for i in $(seq 360); do "$@" >/dev/null 2>&1 && exit 0; sleep 10; done; '
                'logger -t gdsfleet-kernel-gate "could not run: $*" 2>/dev/null; exit 1')
        try:
            subprocess.Popen(["sh", "-c", loop, "gdsfleet-kernel-gate-hold", *argv],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return False, f"{text}: {exc}"
        return True, f"{text} (scheduled: runs once the package manager lets go)"
    rc, out = _run(argv, runner)
    return rc == 0, text + ("" if rc == 0 else f": {out.strip()}")


def keep_default(running: str, family: str, runner: Runner = default_runner,
                 boot_dir: str = "/boot", etc: str = "/etc") -> tuple[bool, str]:
    """Make ``running`` (the running kernel, or a kernel that passed the gate) the one the node
    boots next."""
    if family == "redhat" or shutil.which("grubby"):
        rc, out = _run(["grubby", f"--set-default={boot_dir}/vmlinuz-{running}"], runner)
        return rc == 0, f"grubby --set-default {boot_dir}/vmlinuz-{running}" + (
            "" if rc == 0 else f": {out.strip()}")
    dropin = os.path.join(etc, "default/grub.d/99-gdsfleet-kernel-gate.cfg")
    if grub_default(etc) != "saved":
        os.makedirs(os.path.dirname(dropin), exist_ok=True)
        with open(dropin, "w", encoding="utf-8") as fh:
            fh.write("# Managed by gdsfleet kernel gate: boot the entry grub-set-default saved,\n"
                     "# so a kernel that failed the GDS gate is not booted.\nGRUB_DEFAULT=saved\n")
        rc, out = _run(["update-grub"], runner)
        if rc != 0:
            return False, f"update-grub failed: {out.strip()}"
    entry = _grub_entry_id(running, os.path.join(boot_dir, "grub/grub.cfg"))
    if entry is None:
        return False, (f"no GRUB entry for {running} in {boot_dir}/grub/grub.cfg: set it the "
                       "default by hand (grub-set-default '<submenu id>><entry id>')")
    rc, out = _run(["grub-set-default", entry], runner)
    return rc == 0, f"grub-set-default {entry}" + ("" if rc == 0 else f": {out.strip()}")


def load_state(path: str = STATE_PATH) -> dict:
    text = _read(path, 256 * 1024)
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def record(gate: dict, *, running: str, nxt: dict, actions: list[dict],
           path: str = STATE_PATH, now: str | None = None) -> dict:
    """Write the gate's result for its kernel into the node's state file (atomically)."""
    doc = load_state(path)
    old = doc.get("kernels")
    kernels: dict[str, Any] = old if isinstance(old, dict) else {}
    kernels[gate["kernel"]] = {
        "passed": gate["passed"],
        "deferred": bool(gate.get("deferred")),
        "reason": gate["reason"][:2000],
        "fix": gate["fix"][:2000],
        "checked_at": now or datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"),
        "actions": actions,
    }
    while len(kernels) > STATE_MAX_KERNELS:
        kernels.pop(next(iter(kernels)))
    doc = {"gdsfleet_kernel_gate": 1, "running": running, "next_boot": nxt.get("kernel"),
           "next_boot_source": nxt.get("source"), "kernels": kernels}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
    return doc


def protect(gate: dict, *, running: str, family: str, runner: Runner = default_runner,
            boot_dir: str = "/boot", etc: str = "/etc", defer_hold: bool = False) -> list[dict]:
    """After a failed gate for a kernel other than the running one: keep the running kernel
    the default and hold the failing kernel's packages. Returns what was done."""
    actions: list[dict] = []
    if gate["passed"] or gate["kernel"] == running:
        return actions
    ok, what = keep_default(running, family, runner, boot_dir, etc)
    actions.append({"action": "keep_default", "ok": ok, "detail": what})
    ok, what = hold_packages(gate["kernel"], family, runner, defer=defer_hold)
    actions.append({"action": "hold", "ok": ok, "detail": what})
    return actions


def os_family() -> str:
    text = _read("/etc/os-release", 65536) or ""
    ids = " ".join(re.findall(r"^(?:ID|ID_LIKE)=\"?([^\"\n]*)", text, re.M)).split()
    return "redhat" if any(i in ("rhel", "fedora", "centos", "rocky", "almalinux")
                           for i in ids) else "debian"


# --- deferring the verdict until the package manager is done ----------------------------------

# The processes that run /etc/kernel/postinst.d hooks (through dpkg) for a whole transaction;
# comm is cut to 15 characters ("unattended-upgrades" -> "unattended-upgr").
PACKAGE_MANAGERS = ("apt", "apt-get", "aptitude", "unattended-upgr", "dpkg")


def _stat(proc_root: str, pid: int) -> tuple[str, int] | None:
    """(comm, ppid) of a process from /proc/<pid>/stat (comm may hold spaces and parens)."""
    text = _read(os.path.join(proc_root, str(pid), "stat"), 4096)
    if not text or ")" not in text:
        return None
    comm = text[text.find("(") + 1:text.rfind(")")]
    rest = text[text.rfind(")") + 1:].split()
    if len(rest) < 2 or not rest[1].isdigit():
        return None
    return comm, int(rest[1])


def package_manager_pid(proc_root: str = "/proc", start: int | None = None) -> int | None:
    """The outermost package manager among this process's ancestors (apt over the dpkg it
    runs: one apt run may configure the kernel image and its headers in separate dpkg runs),
    or None when the hook was not run by one."""
    pid = os.getppid() if start is None else start
    found = None
    for _hop in range(64):
        st = _stat(proc_root, pid)
        if st is None:
            break
        if st[0] in PACKAGE_MANAGERS:
            found = pid
        if st[1] <= 1:
            break
        pid = st[1]
    return found


def regate_after(pid: int, argv: list[str], *, tries: int = 360,
                 interval: float = 10) -> tuple[bool, str]:
    """Run ``argv`` (the gate with --protect) in a detached process once process ``pid`` (the
    package manager) has exited, waiting ``tries`` x ``interval`` seconds at most (an hour);
    its verdict goes to the journal."""
    loop = (f'pid=$1; shift; i=0; while [ "$i" -lt {int(tries)} ] && kill -0 "$pid" '
            f'2>/dev/null; do sleep {float(interval)}; i=$((i+1)); done; out=$("$@" 2>&1); '
            'printf "%s\\n" "$out" | logger -t gdsfleet-kernel-gate -p user.warning '
            '2>/dev/null; exit 0')
    try:
        subprocess.Popen(["sh", "-c", loop, "gdsfleet-kernel-gate-regate", str(pid), *argv],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return False, f"could not schedule the gate after process {pid}: {exc}"
    return True, (f"gates again with protection once the package manager (process {pid}) has "
                  "exited")
