"""The per-node verify use case (provisioner/verify/usecase.py), and the rollout's
``SshVerifier`` calling it without going through the ``verify`` command."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.errors import ConnectError
from provisioner.inventory import Node, truthy
from provisioner.verify.model import NodeReport
from provisioner.verify.nfd import DEFAULT_TTL_HOURS
from provisioner.verify.usecase import NodeRequest, verify_one

MIB = 1 << 20


class StandInRunner:
    """A stand-in for an SSH runner: records connect/close, runs nothing."""

    def __init__(self, *, fail_connect: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_connect = fail_connect

    def connect(self) -> None:
        self.calls.append("connect")
        if self.fail_connect:
            raise ConnectError("n1 (root@192.0.2.1:22): connection refused")

    def close(self) -> None:
        self.calls.append("close")


def _node(name: str = "n1", **vars_: Any) -> Node:
    size = vars_.pop("verify_io_size", None)
    return Node(name=name, address="192.0.2.1", vars=vars_, verify_io_size=size)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """verify_node and nfd.publish replaced: what the use case hands them is recorded."""
    import provisioner.verify
    from provisioner.verify import nfd

    calls: list[tuple[str, Any]] = []

    def verify_node(runner: Any, name: str, policy: Any, io: Any) -> NodeReport:
        calls.append(("verify_node", (name, policy, io)))
        return NodeReport(name=name, reachable=True, compliant=True, route="nvfs")

    def publish(runner: Any, doc: dict[str, Any], *, ttl_hours: float | None) -> dict[str, Any]:
        calls.append(("nfd", ttl_hours))
        return {"written": True, "path": "features.d/gdsfleet-gds"}

    monkeypatch.setattr(provisioner.verify, "verify_node", verify_node)
    monkeypatch.setattr(nfd, "publish", publish)
    return calls


def test_truthy_reads_inventory_booleans_as_ansible_does() -> None:
    for yes in (True, 1, "yes", " True ", "ON", "1"):
        assert truthy(yes), yes
    for no in (False, 0, None, "", "no", "false", "off", "0", "nope"):
        assert not truthy(no), no


def test_request_for_an_inventory_node() -> None:
    from provisioner.verify.model import IoTestOptions

    io = IoTestOptions(size_bytes=64 * MIB)
    req = NodeRequest.for_node(_node(verify_io_size=32 * MIB, gds_nfd_features="yes"), "n1", io)
    assert (req.name, req.io.size_bytes, req.io.size_explicit) == ("n1", 32 * MIB, True)
    assert req.nfd_ttl_hours == DEFAULT_TTL_HOURS
    assert req.options() == {"nfd_ttl_hours": DEFAULT_TTL_HOURS}
    # an explicit --io-size wins over the inventory; no feature file unless asked for
    explicit = IoTestOptions(size_bytes=64 * MIB, size_explicit=True)
    req = NodeRequest.for_node(_node(verify_io_size=32 * MIB, gds_nfd_features="no"), "n1",
                               explicit)
    assert req.io is explicit and req.nfd_ttl_hours is None and req.options() == {}
    # --nfd --nfd-ttl 0 asks for every node: a file that never expires
    req = NodeRequest.for_node(_node(), "n1", io, nfd=True, nfd_ttl_hours=0.0)
    assert req.options() == {"nfd_ttl_hours": 0.0}


def test_request_for_the_local_machine() -> None:
    from provisioner.verify.model import IoTestOptions

    io = IoTestOptions()
    req = NodeRequest.for_node("this-host", "this-host", io)  # --local: a bare host name
    assert req == NodeRequest(name="this-host", io=io, nfd_ttl_hours=None)


def test_verify_one_connects_verifies_publishes_and_closes(seen: list[tuple[str, Any]]) -> None:
    runner = StandInRunner()
    doc = verify_one(runner, "n1", "policy", "io", nfd_ttl_hours=24.0)
    assert doc["name"] == "n1" and doc["compliant"] is True
    assert doc["nfd"]["written"] is True
    assert runner.calls == ["connect", "close"]
    assert seen == [("verify_node", ("n1", "policy", "io")), ("nfd", 24.0)]


def test_verify_one_turns_a_refused_connection_into_an_unreachable_report(
        seen: list[tuple[str, Any]]) -> None:
    runner = StandInRunner(fail_connect=True)
    doc = verify_one(runner, "n1", "policy", "io")
    assert doc["reachable"] is False and doc["compliant"] is False
    assert "connection refused" in doc["error"]
    assert runner.calls == ["connect", "close"] and seen == []


def test_ssh_verifier_calls_the_use_case(seen: list[tuple[str, Any]]) -> None:
    from provisioner.rollout.adapters import SshVerifier
    from provisioner.verify.model import IoTestOptions

    runners: dict[str, StandInRunner] = {}

    def make_runner(node: Node) -> StandInRunner:
        if node.name == "n3":
            raise ConnectError("n3: no route to host")
        return runners.setdefault(node.name, StandInRunner())

    nodes = {"n1": _node("n1", verify_io_size=32 * MIB, gds_nfd_features=True),
             "n2": _node("n2"), "n3": _node("n3")}
    full, cheap = IoTestOptions(size_bytes=64 * MIB), IoTestOptions(enabled=False)
    verifier = SshVerifier(nodes, policy="policy", io=full, cheap_io=cheap, parallel=2,
                           make_runner=make_runner)
    reported: list[str] = []
    out = verifier.verify(["n1", "n2", "n3"], cheap=False,
                          on_report=lambda d: reported.append(d["name"]))
    assert sorted(out) == sorted(reported) == ["n1", "n2", "n3"]
    assert out["n1"]["compliant"] and out["n2"]["compliant"]
    assert out["n3"]["reachable"] is False and "no route" in out["n3"]["error"]
    assert all(r.calls == ["connect", "close"] for r in runners.values())
    ios = {args[0]: args[2] for what, args in seen if what == "verify_node"}
    assert ios["n1"].size_bytes == 32 * MIB and ios["n2"] is full  # gds_verify_io_size
    assert [ttl for what, ttl in seen if what == "nfd"] == [DEFAULT_TTL_HOURS]  # n1 only
    seen.clear()
    verifier.verify(["n2"], cheap=True, on_report=lambda d: None)
    assert [args[2] for what, args in seen if what == "verify_node"] == [cheap]
