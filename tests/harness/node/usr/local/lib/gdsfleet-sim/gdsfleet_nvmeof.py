# TEST STAND-IN (gdsfleet test harness): simulated NVMe over Fabrics for the `nvme` stand-in
# (usr/local/sbin/nvme) and gdsfleet-sim-init. Not nvme-cli, not the kernel's nvme-fabrics.
#
# The "fabric" (which subsystems a target offers on which transport/address/port) comes from
# /etc/gdsfleet-sim/fabric.json when a test writes one, else from the default written by
# gdsfleet-sim-init when the container got GDSFLEET_SIM_NVMEOF=<loop device>[,...] (the block
# devices that back the target's namespaces, as GDSFLEET_SIM_NVME backs /dev/nvme0n1).
#
# Connected controllers live in /run/gdsfleet-sim/nvmeof-state.json and are rendered into the
# sysfs entries a real host has, in their real formats (Linux 6.x drivers/nvme/host/core.c,
# fabrics.c): /sys/class/nvme/nvmeN/{transport,address,subsysnqn,state,hostnqn,hostid,cntlid,
# model,serial,firmware_rev}, /sys/class/nvme-subsystem/nvme-subsysN/{subsysnqn,model,serial,
# iopolicy,subsystype,nvmeN/}, plus the namespace's block node /dev/nvmeXnY (X: the subsystem
# instance with native multipath, the controller instance without, as the kernel names them).
# /sys/class has no nvme entries on these machines (no NVMe driver in the host kernel), so the
# init shadows /sys/class with a tmpfs whose entries are bind mounts of the real ones.
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid

import gdsfleet_sim as sim

FABRIC_FILE = "/etc/gdsfleet-sim/fabric.json"
FABRIC_DEFAULT = sim.RUN + "/fabric.json"
BACKING_FILE = sim.RUN + "/nvmeof-backing"
STATE_FILE = sim.RUN + "/nvmeof-state.json"
SYS_CLASS = "/sys/class"
SYS_CLASS_ORIG = sim.RUN + "/sys-class-orig"
NVME_CLASS = SYS_CLASS + "/nvme"
SUBSYS_CLASS = SYS_CLASS + "/nvme-subsystem"
TRANSPORT_MODULES = {"rdma": "nvme_rdma", "tcp": "nvme_tcp", "fc": "nvme_fc", "loop": "nvme_loop"}
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"


def default_fabric() -> dict:
    """One target subsystem exported on an RDMA port and on a TCP port of the same address
    (what nvmet allows: a subsystem linked to several ports), namespace 1 backed by the first
    GDSFLEET_SIM_NVMEOF device."""
    return {
        "ports": [
            {"portid": 1, "trtype": "rdma", "adrfam": "ipv4", "traddr": "192.168.100.10",
             "trsvcid": "4420"},
            {"portid": 2, "trtype": "tcp", "adrfam": "ipv4", "traddr": "192.168.100.10",
             "trsvcid": "4420"},
        ],
        "subsystems": [
            {"nqn": "nqn.2026-01.io.gdsfleet.sim:gds-target", "model": "Linux",
             "serial": "8f3a51c2d9e04b17", "firmware_rev": "6.1.0", "ports": [1, 2],
             "namespaces": [{"nsid": 1, "backing": 0}]},
        ],
    }


def fabric() -> dict:
    for path in (FABRIC_FILE, FABRIC_DEFAULT):
        text = sim.read(path)
        if text.strip():
            return json.loads(text)
    return {"ports": [], "subsystems": []}


def backing() -> list[str]:
    return [ln.strip() for ln in sim.read(BACKING_FILE).splitlines() if ln.strip()]


def load_state() -> dict:
    try:
        return json.loads(sim.read(STATE_FILE) or "{}") or {"controllers": {}}
    except ValueError:
        return {"controllers": {}}


def save_state(state: dict) -> None:
    with open(STATE_FILE + ".tmp", "w") as fh:
        json.dump(state, fh, indent=1, sort_keys=True)
    os.replace(STATE_FILE + ".tmp", STATE_FILE)


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text + "\n")


# ----------------------------------------------------------------------------- boot (init)
def setup_sysfs(local_drives: list[str]) -> None:
    """Shadow /sys/class with a tmpfs of bind mounts of the real entries, add empty nvme and
    nvme-subsystem classes, and PCIe controllers for the local "NVMe" drives (nvme0..)."""
    os.makedirs(SYS_CLASS_ORIG, exist_ok=True)
    subprocess.run(["mount", "--bind", SYS_CLASS, SYS_CLASS_ORIG], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=4m", "gdsfleet-sim-class",
                    SYS_CLASS], check=True)
    for name in sorted(os.listdir(SYS_CLASS_ORIG)):
        os.makedirs(f"{SYS_CLASS}/{name}", exist_ok=True)
        subprocess.run(["mount", "--bind", f"{SYS_CLASS_ORIG}/{name}", f"{SYS_CLASS}/{name}"],
                       check=True)
    os.makedirs(NVME_CLASS, exist_ok=True)
    os.makedirs(SUBSYS_CLASS, exist_ok=True)
    for i, _src in enumerate(local_drives):
        serial = f"S6EXNS0W{500000 + i}"
        nqn = f"nqn.2014.08.org.nvmexpress:144d144dS6EXNS0W{500000 + i}SAMSUNG MZQL23T8HCLS-00A07"
        ctrl = {"transport": "pcie", "address": f"0000:{0x5e + i:02x}:00.0", "subsysnqn": nqn,
                "state": "live", "model": "SAMSUNG MZQL23T8HCLS-00A07", "serial": serial,
                "firmware_rev": "GDC5902Q", "cntlid": "6", "subsys": i, "local": True}
        _render_controller(f"nvme{i}", ctrl)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(STATE_FILE)


def _render_controller(name: str, c: dict) -> None:
    d = f"{NVME_CLASS}/{name}"
    for key in ("transport", "address", "subsysnqn", "state", "model", "serial",
                "firmware_rev", "cntlid"):
        _write(f"{d}/{key}", str(c.get(key, "")))
    if c.get("hostnqn"):
        _write(f"{d}/hostnqn", c["hostnqn"])
        _write(f"{d}/hostid", c.get("hostid", ""))
    s = f"{SUBSYS_CLASS}/nvme-subsys{c['subsys']}"
    for key, value in (("subsysnqn", c["subsysnqn"]), ("model", c.get("model", "")),
                       ("serial", c.get("serial", "")), ("iopolicy", "numa"),
                       ("subsystype", "nvm")):
        _write(f"{s}/{key}", value)
    os.makedirs(f"{s}/{name}", exist_ok=True)


def _remove_controller(name: str, c: dict) -> None:
    subprocess.run(["rm", "-rf", f"{NVME_CLASS}/{name}",
                    f"{SUBSYS_CLASS}/nvme-subsys{c['subsys']}/{name}"], check=False)
    s = f"{SUBSYS_CLASS}/nvme-subsys{c['subsys']}"
    if os.path.isdir(s) and not [e for e in os.listdir(s) if e.startswith("nvme")
                                 and not e.startswith("nvme-")]:
        subprocess.run(["rm", "-rf", s], check=False)


# ----------------------------------------------------------------------------- host side
def available() -> tuple[bool, str]:
    if not os.path.isdir(NVME_CLASS):
        return False, "Failed to open /dev/nvme-fabrics: No such file or directory"
    return True, ""


def multipath() -> bool:
    return sim.read(sim.SYS_MODULE + "/nvme_core/parameters/multipath").strip() != "N"


def _free(prefix: str, directory: str) -> int:
    used = set()
    for e in os.listdir(directory) if os.path.isdir(directory) else []:
        rest = e[len(prefix):]
        if e.startswith(prefix) and rest.isdigit():
            used.add(int(rest))
    i = 0
    while i in used:
        i += 1
    return i


def address_text(trtype: str, traddr: str, trsvcid: str, host_traddr: str = "") -> str:
    """The controller's sysfs `address` (nvmf_get_address): traddr, trsvcid, then
    host_traddr when given."""
    text = f"traddr={traddr},trsvcid={trsvcid}"
    if host_traddr:
        text += f",host_traddr={host_traddr}"
    return text


def find_port(trtype: str, traddr: str, trsvcid: str) -> dict | None:
    for p in fabric().get("ports", []):
        if p["trtype"] == trtype and p["traddr"] == traddr and str(p["trsvcid"]) == str(trsvcid):
            return p
    return None


def discovery_log(port: dict) -> list[dict]:
    """The entries the port's discovery controller returns: every subsystem linked to it."""
    out = []
    for s in fabric().get("subsystems", []):
        if port["portid"] in s.get("ports", []):
            out.append({"trtype": port["trtype"], "adrfam": port.get("adrfam", "ipv4"),
                        "subtype": "nvme subsystem", "portid": port["portid"],
                        "trsvcid": str(port["trsvcid"]), "subnqn": s["nqn"],
                        "traddr": port["traddr"]})
    return out


def connected(state: dict, nqn: str, trtype: str, traddr: str, trsvcid: str) -> str | None:
    for name, c in state["controllers"].items():
        if (c["subsysnqn"] == nqn and c["transport"] == trtype
                and c["address"].startswith(f"traddr={traddr},trsvcid={trsvcid}")):
            return name
    return None


def connect(trtype: str, traddr: str, trsvcid: str, nqn: str, hostnqn: str, hostid: str,
            host_traddr: str = "") -> tuple[int, str, str | None]:
    """Returns (exit status, message, controller name)."""
    ok, msg = available()
    if not ok:
        return 1, msg, None
    if not sim.module_loaded(TRANSPORT_MODULES.get(trtype, "nvme_" + trtype)):
        # the kernel finds no transport ops: nvmf_create_ctrl returns -EINVAL
        return 1, "Failed to write to /dev/nvme-fabrics: Invalid argument", None
    port = find_port(trtype, traddr, trsvcid)
    subsys = next((s for s in fabric().get("subsystems", []) if s["nqn"] == nqn), None)
    if port is None or subsys is None or port["portid"] not in subsys.get("ports", []):
        return 1, "could not add new controller: failed to write to nvme-fabrics device", None
    with sim.locked():
        state = load_state()
        have = connected(state, nqn, trtype, traddr, trsvcid)
        if have:
            return 114, "already connected", have
        n = _free("nvme", NVME_CLASS)
        sub = next((c["subsys"] for c in state["controllers"].values()
                    if c["subsysnqn"] == nqn), None)
        if sub is None:
            sub = _free("nvme-subsys", SUBSYS_CLASS)
        ctrl = {"transport": trtype, "address": address_text(trtype, traddr, trsvcid, host_traddr),
                "subsysnqn": nqn, "state": "live", "model": subsys.get("model", "Linux"),
                "serial": subsys.get("serial", ""), "firmware_rev": subsys.get("firmware_rev", ""),
                "cntlid": str(len(state["controllers"]) + 1), "subsys": sub,
                "hostnqn": hostnqn, "hostid": hostid, "namespaces": []}
        backs = backing()
        for ns in subsys.get("namespaces", []):
            idx = int(ns.get("backing", 0))
            if idx >= len(backs):
                continue
            inst = sub if multipath() else n
            dev = f"/dev/nvme{inst}n{ns['nsid']}"
            if not os.path.exists(dev):
                st = os.stat(backs[idx])
                os.mknod(dev, 0o660 | 0o060000, st.st_rdev)
            ctrl["namespaces"].append(dev)
        state["controllers"][f"nvme{n}"] = ctrl
        _render_controller(f"nvme{n}", ctrl)
        save_state(state)
    return 0, "", f"nvme{n}"


def disconnect(nqn: str | None = None, device: str | None = None) -> int:
    """Disconnect every controller of the subsystem NQN (or one device); returns how many."""
    count = 0
    with sim.locked():
        state = load_state()
        for name in sorted(state["controllers"]):
            c = state["controllers"][name]
            if (nqn and c["subsysnqn"] == nqn) or (device and device in (name, f"/dev/{name}")):
                del state["controllers"][name]
                others = [o for o in state["controllers"].values() if o["subsys"] == c["subsys"]]
                if not others:
                    for dev in c.get("namespaces", []):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(dev)
                _remove_controller(name, c)
                count += 1
        save_state(state)
    return count


def controllers() -> dict[str, dict]:
    """Every controller in sysfs (local PCIe ones included), read back from /sys/class/nvme."""
    out: dict[str, dict] = {}
    if not os.path.isdir(NVME_CLASS):
        return out
    for name in sorted(os.listdir(NVME_CLASS)):
        d = f"{NVME_CLASS}/{name}"
        out[name] = {k: sim.read(f"{d}/{k}").strip() for k in
                     ("transport", "address", "subsysnqn", "state", "model", "serial",
                      "firmware_rev", "hostnqn", "hostid")}
    return out


def subsystems() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if not os.path.isdir(SUBSYS_CLASS):
        return out
    for s in sorted(os.listdir(SUBSYS_CLASS)):
        out[s] = sorted(e for e in os.listdir(f"{SUBSYS_CLASS}/{s}")
                        if e.startswith("nvme") and not e.startswith("nvme-")
                        and os.path.isdir(f"{SUBSYS_CLASS}/{s}/{e}"))
    return out


def new_hostnqn() -> str:
    return f"nqn.2014-08.org.nvmexpress:uuid:{uuid.uuid4()}"


def parse_discovery_conf(text: str) -> list[dict[str, str]]:
    """/etc/nvme/discovery.conf: one discover invocation's options per line, # comments."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        out.append(parse_options(line.split()))
    return out


_LONG = {"-t": "transport", "-a": "traddr", "-s": "trsvcid", "-n": "nqn", "-q": "hostnqn",
         "-I": "hostid", "-w": "host-traddr", "-o": "output-format", "-d": "device"}


def parse_options(args: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
        elif a.startswith("--"):
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                opts[a[2:]] = args[i + 1]
                i += 1
            else:
                opts[a[2:]] = ""
        elif a in _LONG:
            if i + 1 < len(args):
                opts[_LONG[a]] = args[i + 1]
                i += 1
        elif a.startswith("-") and len(a) > 2 and a[:2] in _LONG:
            opts[_LONG[a[:2]]] = a[2:]
        else:
            opts.setdefault("_args", "")
            opts["_args"] = (opts["_args"] + " " + a).strip()
        i += 1
    return opts
