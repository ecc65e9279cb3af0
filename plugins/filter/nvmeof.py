# Copyright: (c) 2026, gdsfleet developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""NVMe over Fabrics: what nvme-cli says is connected, and what the nvmeof role must connect.

``nvmeof_paths(list_subsys_json)``: the live paths in ``nvme list-subsys -o json`` output, as
``{"nqn", "subsys", "controller", "transport", "traddr", "trsvcid", "state"}`` dicts. nvme-cli
2.x prints a list of hosts, each with ``Subsystems`` (2.0-2.3 print one host object); each
subsystem's ``Paths`` carry ``Name``, ``Transport``, ``Address`` (the controller's sysfs
``address``: ``traddr=...,trsvcid=...[,host_traddr=...]``) and ``State``.

``nvmeof_plan(targets, discover_results, live)``: the connections still to make. ``targets``
are the role's normalised targets; ``discover_results`` the registered loop results of
``nvme discover -o json`` for the discovery targets (``item`` and ``stdout``); ``live`` the
output of ``nvmeof_paths``. Returns ``{"connect": [...], "skipped": ["reason", ...]}``;
a discovery entry on another transport than the target's is skipped, never connected (a GDS
discovery controller may list NVMe/TCP ports).

``nvmeof_instances(list_subsys_json, targets, multipath)``: the instance numbers X of the block
devices ``/dev/nvmeXnY`` of the targets' subsystems: with native NVMe multipath the subsystem's
instance (``nvme-subsysX``), without it every controller's (``nvmeX``), as the kernel names
the namespaces.

``nvmeof_persist(targets)``: what to reconnect at boot, split by the mechanism that does it
right: ``{"discovery": [...], "connect": [...]}``. Discovery targets go to
``/etc/nvme/discovery.conf``, whose lines ``nvme connect-all`` (nvme-cli's
nvmf-autoconnect.service) runs as ``nvme discover`` and then connects every subsystem the
discovery log lists; they are de-duplicated on (transport, address, service id, host address),
the options one line carries. Targets given by subsystem NQN are connected one by one at boot
(``nvme connect``; the role's own systemd unit), de-duplicated on the same key plus the NQN:
writing them to discovery.conf would connect every subsystem the array exposes, and nothing at
all where the port runs no discovery service.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ADDR_RE = re.compile(r"(?:^|,)\s*(traddr|trsvcid|host_traddr|src_addr)=([^,]*)")
DISCOVERY_SUBTYPES = ("nvme subsystem", "nvm subsystem")


def parse_address(address: str) -> dict[str, str]:
    """``traddr=192.168.1.10,trsvcid=4420,src_addr=...`` -> {"traddr": ..., "trsvcid": ...}."""
    return {k: v.strip() for k, v in _ADDR_RE.findall(address or "")}


def _hosts(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict):
        return [doc]
    if isinstance(doc, list):
        return [h for h in doc if isinstance(h, dict)]
    return []


def _load(text: Any) -> Any:
    if isinstance(text, (list, dict)):
        return text
    try:
        return json.loads(text or "null")
    except ValueError:
        return None


def nvmeof_paths(list_subsys_json: Any) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for host in _hosts(_load(list_subsys_json)):
        for sub in host.get("Subsystems") or []:
            for path in sub.get("Paths") or []:
                addr = parse_address(str(path.get("Address") or ""))
                out.append({"nqn": str(sub.get("NQN") or ""), "subsys": str(sub.get("Name") or ""),
                            "controller": str(path.get("Name") or ""),
                            "transport": str(path.get("Transport") or "").lower(),
                            "traddr": addr.get("traddr", ""), "trsvcid": addr.get("trsvcid", ""),
                            "state": str(path.get("State") or "")})
    return out


def _is_live(live: list[dict[str, str]], nqn: str, transport: str, traddr: str,
             trsvcid: str) -> bool:
    return any(p["nqn"] == nqn and p["transport"] == transport and p["traddr"] == traddr
               and p["trsvcid"] == trsvcid and p["state"] in ("live", "connecting", "resetting")
               for p in live)


def nvmeof_plan(targets: list[dict[str, Any]], discover_results: list[dict[str, Any]],
                live: list[dict[str, str]]) -> dict[str, list[Any]]:
    connect: list[dict[str, Any]] = []
    skipped: list[str] = []
    wanted: list[dict[str, Any]] = [t for t in targets if not t.get("discovery")]
    for res in discover_results or []:
        t = res.get("item") or {}
        doc = _load(res.get("stdout") or "") or {}
        for rec in (doc.get("records") or []) if isinstance(doc, dict) else []:
            if str(rec.get("subtype", "")).lower() not in DISCOVERY_SUBTYPES:
                continue  # the discovery subsystem itself, referrals
            tr = str(rec.get("trtype", "")).lower()
            where = f"{rec.get('subnqn')} at {tr} {rec.get('traddr')}:{rec.get('trsvcid')}"
            if tr != t.get("transport"):
                skipped.append(f"{where}: listed by the {t.get('transport')} discovery controller "
                               f"{t.get('address')}, but on another transport")
                continue
            wanted.append(dict(t, discovery=False, nqn=str(rec.get("subnqn", "")),
                               address=str(rec.get("traddr", "")).strip(),
                               service_id=str(rec.get("trsvcid", "")).strip()))
    seen = set()
    for t in wanted:
        key = (t["nqn"], t["transport"], t["address"], str(t["service_id"]))
        if key in seen or _is_live(live, *key):
            seen.add(key)
            continue
        seen.add(key)
        connect.append(t)
    return {"connect": connect, "skipped": skipped}


def nvmeof_instances(list_subsys_json: Any, targets: list[dict[str, Any]],
                     multipath: bool = True) -> list[str]:
    """Instances of the block devices of the subsystems the targets name (or that were found
    through their discovery controllers: every subsystem with a path to their address)."""
    nqns = {t["nqn"] for t in targets if t.get("nqn")}
    addresses = {(t["transport"], t["address"]) for t in targets if t.get("discovery")}
    out: list[str] = []
    for p in nvmeof_paths(list_subsys_json):
        if p["nqn"] not in nqns and (p["transport"], p["traddr"]) not in addresses:
            continue
        name = p["subsys"][len("nvme-subsys"):] if multipath else p["controller"][len("nvme"):]
        if name.isdigit() and name not in out:
            out.append(name)
    return out


def _persist_key(t: dict[str, Any]) -> tuple[str, str, str, str]:
    return (str(t.get("transport") or ""), str(t.get("address") or ""),
            str(t.get("service_id") or ""), str(t.get("host_traddr") or ""))


def nvmeof_persist(targets: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    discovery: list[dict[str, Any]] = []
    connect: list[dict[str, Any]] = []
    seen_d: set[tuple[str, str, str, str]] = set()
    seen_c: set[tuple[str, str, str, str, str]] = set()
    for t in targets or []:
        key = _persist_key(t)
        if t.get("discovery"):
            if key not in seen_d:
                seen_d.add(key)
                discovery.append(t)
        elif (*key, str(t.get("nqn") or "")) not in seen_c:
            seen_c.add((*key, str(t.get("nqn") or "")))
            connect.append(t)
    return {"discovery": discovery, "connect": connect}


class FilterModule:
    """gdsfleet.gds.nvmeof_paths, nvmeof_plan, nvmeof_instances, nvmeof_persist."""

    def filters(self) -> dict[str, Any]:
        return {"nvmeof_paths": nvmeof_paths, "nvmeof_plan": nvmeof_plan,
                "nvmeof_instances": nvmeof_instances, "nvmeof_persist": nvmeof_persist}
