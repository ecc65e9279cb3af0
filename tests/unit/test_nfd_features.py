"""The NFD feature file `provisioner verify --nfd` writes: labels from verification reports,
checked with a validator written from NFD's documentation (tests/nfd_rules.py), the expiry
directive, the atomic write through a dot file, and the CLI/inventory switches."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from provisioner.verify import nfd
from provisioner.verify.model import CommandResult
from tests import nfd_rules

WHEN = datetime(2026, 11, 22, 18, 18, 35, tzinfo=timezone.utc)


def report(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "gpu-01", "reachable": True, "compliant": True, "route": "nvfs",
        "io_test": {"path_taken": "direct"},
        "facts": {"operator": {"managed": True}, "nvfs": {"version": "2.25.7"}},
    }
    doc.update(over)
    return doc


def test_validator_rejects_what_nfd_rejects() -> None:
    # the validator itself must fail on the documented violations
    bad = ("kubernetes.io/x=1\nnode.kubernetes.io/y=1\nfoo=bar\nvendor.io/" + "n" * 64 + "=1\n"
           "vendor.io/ok=has space\nvendor.io/ok2=-dash\n# +expiry-time=2026-11-22 18:00\n"
           "# +unknown\n")
    _, errors, _ = nfd_rules.parse(bad)
    assert len(errors) == 8, errors
    good = ("# comment\nfeature.node.kubernetes.io/a\ngds.feature.node.kubernetes.io/b=x.y_z-1\n"
            "vendor.io/c=\n# +expiry-time=2080-07-28T11:22:33Z\n")
    labels, errors, expiry = nfd_rules.parse(good)
    assert errors == [] and labels["feature.node.kubernetes.io/a"] == "true"
    assert expiry == datetime(2080, 7, 28, 11, 22, 33, tzinfo=timezone.utc)


@pytest.mark.parametrize("over", [
    {},
    {"compliant": False, "route": "compat", "io_test": {"path_taken": "compat"}},
    {"compliant": False, "route": "none", "io_test": {"path_taken": "failed"}, "facts": {}},
    {"route": "p2pdma", "facts": {"operator": {"managed": False}}},
])
def test_rendered_file_follows_nfds_rules(over: dict[str, Any]) -> None:
    doc = report(**over)
    text = nfd.render(nfd.labels(doc, WHEN), WHEN, ttl_hours=168)
    labels, errors, expiry = nfd_rules.parse(text)
    assert errors == [], (errors, text)
    ns = "gds.feature.node.kubernetes.io"
    assert labels[f"{ns}/compliant"] == ("true" if doc["compliant"] else "false")
    assert labels[f"{ns}/route"] == doc["route"]
    assert labels[f"{ns}/io-path"] == doc["io_test"]["path_taken"]
    assert labels[f"{ns}/verified-at"] == "20261122T181835Z"
    assert expiry == WHEN + timedelta(hours=168)
    assert all(k.startswith(ns + "/") for k in labels)


def test_no_expiry_when_ttl_is_zero_and_odd_values_are_made_valid() -> None:
    doc = report(facts={"nvfs": {"version": "2.26 (proc)"}})
    text = nfd.render(nfd.labels(doc, WHEN), WHEN, ttl_hours=0)
    labels, errors, expiry = nfd_rules.parse(text)
    assert errors == [] and expiry is None
    assert labels["gds.feature.node.kubernetes.io/nvidia-fs"] == "2.26--proc"
    assert nfd.label_value("-x y-") == "x-y"
    assert nfd.label_value("a" * 80) == "a" * 63


class ShellRunner:
    """Runs the write command here, under a chosen directory (as the node's shell would)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.commands.append(command)
        proc = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True,
                              timeout=timeout, check=False)
        return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(), 0.0)


def test_write_is_atomic_0644_and_replaces(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the writer runs as root or through sudo -n")
    d = tmp_path / "features.d"
    runner = ShellRunner()
    res = nfd.write(runner, "a.feature.node.kubernetes.io/x=1\n", str(d), "gdsfleet-gds")
    assert res == {"path": f"{d}/gdsfleet-gds", "written": True, "error": None}
    f = d / "gdsfleet-gds"
    assert f.read_text() == "a.feature.node.kubernetes.io/x=1\n"
    assert f.stat().st_mode & 0o777 == 0o644
    nfd.write(runner, "a.feature.node.kubernetes.io/x=2\n", str(d), "gdsfleet-gds")
    assert f.read_text().endswith("x=2\n")
    assert sorted(p.name for p in d.iterdir()) == ["gdsfleet-gds"]  # no dot file left
    assert "os.replace" in runner.commands[0]


def test_write_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = nfd.write(ShellRunner(), "x\n", str(blocker / "features.d"), "gdsfleet-gds")
    assert res["written"] is False and "needs root" in res["error"]


def test_cli_and_inventory_switches(tmp_path: Path) -> None:
    from provisioner.inventory import truthy

    assert truthy("yes") and truthy(True) and not truthy("false")
    assert not truthy(None)
    from provisioner.cli import main
    from provisioner.exitcodes import Exit

    code = main(["verify", "--local", "--nfd", "--nfd-ttl", "-1", "--no-ledger"])
    assert code == Exit.USAGE
