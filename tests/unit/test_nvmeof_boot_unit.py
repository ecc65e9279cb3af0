"""The NVMe-oF boot unit of gdsfleet.gds.nvmeof (templates/nvmeof-connect.service.j2), rendered as
the role renders it: it must pull in the passive target it orders itself before (issue 28).

systemd.special(7): remote-fs-pre.target is a passive target, "not started unless pulled in" by a
unit that wants it (as iscsid or nfs-client do); ``Before=`` alone orders against a target that is
never started, so the remote mounts could start before the connect."""

from __future__ import annotations

from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles" / "nvmeof" / "templates" / "nvmeof-connect.service.j2"
# systemd.special(7): the passive targets a service may order itself before
PASSIVE = {"remote-fs-pre.target", "local-fs-pre.target", "network-pre.target",
           "nss-lookup.target", "nss-user-lookup.target", "time-set.target"}


def _unit() -> dict[str, list[str]]:
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)  # noqa: S701
    text = env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed", __nvmeof_nvme="/usr/sbin/nvme",
        __nvmeof_persist={"connect": [{"transport": "rdma", "address": "192.0.2.10",
                                       "service_id": "4420", "nqn": "nqn.2014-08.org.example:s1",
                                       "host_traddr": ""}]})
    section = ""
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            keys.setdefault(f"{section}.{key}", []).extend(value.split())
    return keys


def test_the_unit_wants_the_passive_target_it_orders_before() -> None:
    unit = _unit()
    before = set(unit.get("Unit.Before", []))
    assert "remote-fs-pre.target" in before
    assert before & PASSIVE <= set(unit.get("Unit.Wants", [])), unit


def test_the_unit_still_waits_for_the_network() -> None:
    unit = _unit()
    assert "network-online.target" in unit["Unit.Wants"]
    assert "network-online.target" in unit["Unit.After"]
