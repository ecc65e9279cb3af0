"""The check registry (provisioner/verify/checks/registry.py) against docs/checks.md and the
subsystem modules: every registered id is documented under its subsystem and every documented
id is registered; a subsystem module registers only ids under its own prefixes; the report
order is the registry's, and the one the report had before the checks were split up."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.verify import checks, gdsio, iotest
from provisioner.verify.checks import registry
from provisioner.verify.checks.registry import REGISTRY, SUBSYSTEMS, Context, check, ordered
from provisioner.verify.facts import build_facts
from provisioner.verify.model import CheckResult
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "checks.md"
PACKAGE = ROOT / "provisioner" / "verify" / "checks"
# modules of the package that are not subsystems (they register nothing)
INFRA = {"__init__", "registry", "evidence"}

# the report order of provisioner/verify/checks.py before it became a package (a node on the
# nvfs route with every conditional check present)
REPORT_ORDER = [
    "gpu.driver.loaded", "gpu.driver.open", "gpu.present", "gpu.driver.version",
    "kernel.version",
    "nvfs.module.loaded", "nvfs.version", "nvfs.nvme.patched", "nvfs.registered", "nvfs.persist",
    "nvfs.dkms",
    "mofed.installed", "nvfs.dkms.boot_kernel",
    "p2pdma.kernel", "p2pdma.nvme_multipath", "p2pdma.nvidia_registry",
    "p2pdma.modprobe_config", "p2pdma.cufile",
    "cufile.json.valid", "cufile.compat_mode", "libcufile.present", "packages.gds",
    "fs.mount.present", "fs.mount.type", "fs.mount.options", "fs.mount.nvme",
    "fs.mount.transport",
    "gdscheck.present", "gdscheck.nvme", "gdscheck.platform", "iommu.state", "pcie.acs",
    "route.expected", "reboot.pending", "secureboot.state",
    "io.direct_path", "io.data_integrity", "io.throughput", "io.libcufile", "io.cleanup",
    "io.rw_stats_restored",
    "gate.boot_kernel",  # issue 29: its own subsystem, after the others
]


def documented() -> dict[str, list[str]]:
    """id -> the subsystems it is documented under: the first-column ids of the tables in each
    `### ` section of "## Checks" (which names its subsystem on a `Subsystem `x`` line)."""
    found: dict[str, list[str]] = {}
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Checks\n", 1)[1]
    section = re.split(r"\n## (?!#)", section, maxsplit=1)[0]
    for part in re.split(r"\n### ", section)[1:]:
        heading = part.splitlines()[0]
        subs = re.findall(r"^Subsystem `([a-z0-9_]+)`", part, flags=re.M)
        ids = re.findall(r"^\| `([a-z0-9_.]+)` \|", part, flags=re.M)
        assert len(subs) == 1, f"docs/checks.md section {heading!r} names no single subsystem"
        for cid in ids:
            found.setdefault(cid, []).append(subs[0])
    return found


def test_every_registered_check_is_documented_under_its_subsystem() -> None:
    docs = documented()
    missing = sorted(c.id for c in ordered() if c.id not in docs)
    assert not missing, f"registered but not in docs/checks.md: {missing}"
    wrong = sorted((c.id, c.subsystem, docs[c.id]) for c in ordered()
                   if docs[c.id] != [c.subsystem])
    assert not wrong, f"documented under another subsystem (id, registry, docs): {wrong}"


def test_every_documented_check_is_registered() -> None:
    extra = sorted(set(documented()) - set(REGISTRY))
    assert not extra, f"in docs/checks.md but not registered: {extra}"


def test_each_subsystem_module_registers_only_its_prefixes() -> None:
    for rec in ordered():
        assert rec.module == f"provisioner.verify.checks.{rec.subsystem}", rec
        assert rec.id.startswith(SUBSYSTEMS[rec.subsystem]), rec
        if rec.fn is not None:
            assert rec.fn.__module__ == rec.module, rec
    # a prefix belongs to one subsystem, so an id names the one file that registers it
    owners: dict[str, str] = {}
    for sub, prefixes in SUBSYSTEMS.items():
        for prefix in prefixes:
            assert prefix not in owners, (prefix, sub, owners.get(prefix))
            owners[prefix] = sub
    for a in owners:
        for b in owners:
            assert a == b or not a.startswith(b), (a, b)


def test_subsystem_modules_and_files_agree() -> None:
    files = {p.stem for p in PACKAGE.glob("*.py")} - INFRA
    assert files == set(SUBSYSTEMS)


def test_package_modules_stay_under_600_lines() -> None:
    long = {p.name: n for p in PACKAGE.glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long


def test_a_module_cannot_register_a_foreign_id() -> None:
    def judge(ctx: Context) -> CheckResult | None:
        return None

    judge.__module__ = "provisioner.verify.checks.gpu"
    with pytest.raises(ValueError, match="the gpu module registers only gpu., kernel."):
        check("nvfs.stray", "a check in the wrong module")(judge)
    judge.__module__ = "provisioner.verify.checks.nowhere"
    with pytest.raises(ValueError, match="not a subsystem module"):
        check("nowhere.x", "a module outside SUBSYSTEMS")(judge)
    with pytest.raises(ValueError, match="registered twice"):
        registry.declare("gpu.present", "provisioner.verify.checks.gpu", "twice", emitted_by="x")
    assert "nvfs.stray" not in REGISTRY and "nowhere.x" not in REGISTRY


def test_a_judge_must_answer_for_its_own_id() -> None:
    ctx = Context(build_facts(nf.gather_doc(route="nvfs")), iotest.evaluate(
        nf.direct_nvfs_io(), route="nvfs"), Policy.default(), "nvfs", "/mnt/gds")
    real = REGISTRY["gpu.present"]
    stray = replace(real, id="gpu.elsewhere")
    with pytest.raises(ValueError, match="gpu.elsewhere returned a result for gpu.present"):
        stray.run(ctx)
    result = real.run(ctx)
    assert result is not None and result.id == "gpu.present"


def test_report_order_is_the_registry_order_and_unchanged() -> None:
    doc = nf.gather_doc(route="nvfs", gdscheck_nvme="compat")
    facts = build_facts(doc)
    io = iotest.evaluate(nf.direct_nvfs_io(), route="nvfs")
    io.evidence["file_removed"] = False
    io.evidence["rw_stats"] = {"before": 0, "after": 1, "restore_error": "EPERM"}
    _, results, _ = checks.evaluate(facts, io, Policy.default(), io_path="/mnt/gds")
    ids = [c.id for c in results]
    assert ids == REPORT_ORDER
    assert ids == [c.id for c in ordered() if c.fn is not None]


def test_checks_emitted_elsewhere_are_declared() -> None:
    assert REGISTRY[gdsio.CHECK_ID].emitted_by == "provisioner.verify.gdsio"
    for cid in ("node.reachable", "node.gather", "node.verify"):
        assert REGISTRY[cid].emitted_by == "provisioner.verify.node"
    src = (ROOT / "provisioner" / "verify" / "node.py").read_text(encoding="utf-8")
    emitted = set(re.findall(r'CheckResult\("(node\.[a-z_]+)"', src))
    assert emitted == {c.id for c in ordered() if c.subsystem == "node"}


def test_operator_skips_are_declared_and_documented() -> None:
    from provisioner.verify.checks.registry import operator_skipping

    text = DOC.read_text(encoding="utf-8")
    section = text.split("### GPU Operator nodes", 1)[1].split("\n### ", 1)[0]
    skipping = operator_skipping()
    assert skipping == ["nvfs.persist", "nvfs.dkms", "nvfs.dkms.boot_kernel",
                        "libcufile.present", "packages.gds", "gdscheck.present",
                        "gate.boot_kernel"]
    for cid in skipping:
        assert f"`{cid}`" in section, cid
    ctx = Context(build_facts(nf.gather_doc(route="nvfs")), iotest.evaluate(
        nf.direct_nvfs_io(), route="nvfs"), Policy.default(), "nvfs", "/mnt/gds")
    with pytest.raises(ValueError, match="operator_skip=True"):
        ctx.operator_skip("gpu.present", ">= 1 GPU", "not a host check")
