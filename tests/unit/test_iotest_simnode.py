"""verify_node against simulated nodes (podman containers of the harness image; marked
`container` automatically by the harness fixtures). The stand-in packages are installed from the
stand-in repository exactly as an operator would (apt), the stand-in NVMe is formatted and
mounted; the verification scripts run through `podman exec` the way the SSH transport runs them.

One container per route, reused within the module; each test leaves its node as it found it."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from provisioner.remote import load_script
from provisioner.verify import CommandResult, IoTestOptions, NodeReport, Policy, verify_node
from provisioner.verify.iotest import evaluate
from tests.harness import lab as labmod
from tests.harness.fixtures import SimNode, StandinRepo

IO = IoTestOptions(size_bytes=16 << 20, timeout_s=120)


class PodmanRunner:
    """CommandRunner over `podman exec -i` (stands in for the SSH transport in these tests)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        t0 = time.monotonic()
        proc = subprocess.run(["podman", "exec", "-i", self.node.name, "sh", "-c", command],
                              input=stdin, capture_output=True, timeout=timeout,
                              env=labmod.podman_env(), check=False)
        return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(),
                             time.monotonic() - t0)


def verify(node: SimNode, policy: Policy | None = None) -> NodeReport:
    report = verify_node(PodmanRunner(node), node.name, policy or Policy.default(), IO)
    assert report.error is None, report.raw.get("traceback")
    return report


def statuses(report: NodeReport) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


def prepare_gds_mount(node: SimNode) -> None:
    node.exec("mkfs.xfs -q -f /dev/nvme0n1 && mkdir -p /mnt/gds && mount /dev/nvme0n1 /mnt/gds")


def set_allow_compat(node: SimNode, value: bool) -> None:
    v = "true" if value else "false"
    node.exec(f"sed -i -E 's/(\"allow_compat_mode\"[[:space:]]*:[[:space:]]*)(true|false)/\\1{v}/'"
              " /etc/cufile.json")


@pytest.fixture(scope="module")
def nvfs_node(module_sim_node: Callable[..., SimNode],
              standin_repo: StandinRepo) -> Iterator[SimNode]:
    node = module_sim_node("nvfs", nvme=True, ssh=True)
    node.install_repo(standin_repo)
    node.apt_install("dkms", "linux-headers-$(uname -r)", "doca-ofed", "mlnx-nvme-dkms",
                     "nvidia-gds-12-9")
    node.exec("modprobe nvidia_fs && mkdir -p /etc/modules-load.d "
              "&& echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf")
    prepare_gds_mount(node)
    set_allow_compat(node, False)
    node.install_verify_runtime(standin_repo)  # kvikio + cupy, as site.yml's last role does
    yield node


def test_nvfs_node_is_compliant_with_counter_proof(nvfs_node: SimNode) -> None:
    report = verify(nvfs_node)
    failing = {k: v for k, v in statuses(report).items() if v == "fail"}
    assert report.compliant, failing
    assert report.route == "nvfs"
    io = report.io_test
    assert io.path_taken == "direct" and io.verified
    assert io.evidence["proof"] == "nvfs_counters"
    delta = io.evidence["counter_delta_direct"]
    assert delta["writes_n"] > 0 and delta["reads_n"] > 0
    assert delta["write_mib"] == 16 and delta["read_mib"] == 16
    # cuFile's test-scoped log (stand-in, libcufile 1.15 format) corroborates: 4 MiB kvikio
    # tasks, 4 writes + 4 reads through nvidia-fs, no compat line
    assert io.evidence["corroborated_by"] == "cufile_log"
    log = io.evidence["cufile_log"]
    assert log["mode"] == "nvfs" and log["nvfs_io_lines"] == 16 and log["compat_lines"] == 0
    assert io.evidence["kvikio_gds_threshold"] == 4096
    scope = io.evidence["cufile_scope"]
    assert scope["source"] == "/etc/cufile.json"
    assert scope["overrides"]["properties.allow_compat_mode"] is False
    assert nvfs_node.exec(f"ls -d {scope['log_dir']} 2>/dev/null || true").stdout.strip() == ""
    # rw_stats_enabled was switched on for the test and put back; the test file is gone
    assert io.evidence["rw_stats"]["during"] == "1"
    assert nvfs_node.read("/sys/module/nvidia_fs/parameters/rw_stats_enabled").strip() == "0"
    assert nvfs_node.exec("ls -A /mnt/gds").stdout.strip() == ""
    assert "NVMe" in report.raw["gdscheck"]


def test_nvfs_node_without_patched_nvme_runs_compat(nvfs_node: SimNode) -> None:
    nvfs_node.exec("dpkg -r --force-depends mlnx-nvme-dkms >/dev/null && gdsfleet-sim refresh")
    try:
        report = verify(nvfs_node)
        s = statuses(report)
        assert report.route == "compat" and not report.compliant
        assert s["nvfs.nvme.patched"] == "fail"
        assert s["gdscheck.nvme"] == "fail", report.raw.get("gdscheck")
        assert report.io_test.path_taken == "compat"  # refused direct, POSIX works
        assert "allow_compat_mode is false" in report.io_test.reason
        assert report.io_test.evidence["counter_delta_direct"]["writes_n"] == 0
        log = report.io_test.evidence["cufile_log"]
        assert "ERROR cufio-fs:199 NVMe Driver not registered with nvidia-fs!!!" in log["blockers"]
    finally:
        nvfs_node.apt_install("mlnx-nvme-dkms")
        nvfs_node.exec("gdsfleet-sim refresh")


def test_nvfs_node_with_compat_allowed_fails_the_cufile_check(nvfs_node: SimNode) -> None:
    set_allow_compat(nvfs_node, True)
    try:
        report = verify(nvfs_node)
        assert statuses(report)["cufile.compat_mode"] == "fail"
        assert report.io_test.path_taken == "direct"  # the route itself still works
        assert not report.compliant
    finally:
        set_allow_compat(nvfs_node, False)


def test_p2pdma_node_is_compliant_without_nvidia_fs(module_sim_node: Callable[..., SimNode],
                                                    standin_repo: StandinRepo) -> None:
    node = module_sim_node("p2pdma", nvme=True, ssh=True)
    node.install_repo(standin_repo, doca=False)
    node.apt_install("nvidia-gds-12-9")
    node.install_verify_runtime(standin_repo)
    # what the p2pdma role writes, in effect after a reboot (the route needs both on x86)
    node.exec("""cat > /etc/modprobe.d/zz-gdsfleet-p2pdma.conf <<'EOF'
options nvme_core multipath=N
options nvidia NVreg_RegistryDwords="RMForceStaticBar1=1;RmForceDisableIomapWC=1;"
EOF""")
    node.reboot()
    prepare_gds_mount(node)
    # what the cufile role renders for gds_route: p2pdma (plain JSON)
    node.exec("""cat > /etc/cufile.json <<'JSON'
{"logging": {"level": "ERROR"},
 "properties": {"allow_compat_mode": false, "use_pci_p2pdma": true},
 "block": {"nvme": {"use_pci_p2pdma": true}}}
JSON""")
    report = verify(node, Policy(expected_route="p2pdma"))
    failing = {k: v for k, v in statuses(report).items() if v == "fail"}
    assert report.route == "p2pdma", (report.facts["route_evidence"], report.facts["cufile"],
                                      report.facts["kallsyms"], report.raw.get("gdscheck"))
    assert report.compliant, failing
    io = report.io_test
    assert io.evidence["proof"] == "cufile_log"  # no nvidia-fs counters on this route
    log = io.evidence["cufile_log"]
    assert log["mode"] == "p2pdma" and log["p2pdma_io_lines"] == 8 and log["compat_lines"] == 0
    assert "p2p mode: 1 compat: 0" in log["direct"][0]
    assert log["driver_configuration"]["NVMe P2PDMA"] == "Supported"
    assert io.evidence["counter_delta_direct"] is None
    s = statuses(report)
    assert s["p2pdma.nvidia_registry"] == s["p2pdma.modprobe_config"] == "pass"

    # the same node with a cuFile that may fall back (the test-scoped config still says no, but
    # force_compat_mode makes cuFile serve everything through POSIX): the log says compat and
    # the node is not compliant, although compat mode was "off" for kvikio
    node.exec("sed -i 's/\"allow_compat_mode\": false/\"allow_compat_mode\": false, "
              "\"force_compat_mode\": true/' /etc/cufile.json")
    try:
        forced = verify(node, Policy(expected_route="p2pdma"))
    finally:
        node.exec("sed -i 's/, \"force_compat_mode\": true//' /etc/cufile.json")
    assert not forced.compliant
    assert forced.io_test.evidence["proof"] is None
    assert forced.io_test.path_taken in ("compat", "failed"), forced.io_test.reason


def run_iotest(node: SimNode, **opts: Any) -> dict[str, Any]:
    """The node script with hand-set options (what command() would not send)."""
    args = {"path": "/mnt/gds", "timeout_s": 120, "try_compat": False, **opts}
    # the verification runtime the role installed (install_verify_runtime in the fixtures)
    python = "/opt/gdsfleet/venv/bin/python"
    res = PodmanRunner(node).run(f"{python} - " + shlex.quote(json.dumps(args)), timeout=300,
                                 stdin=load_script("iotest.py"))
    assert res.exit_status == 0, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.mark.parametrize("threshold", [None, 8 << 20])
def test_nvfs_io_below_kvikios_gds_threshold_goes_posix_and_proves_nothing(
        nvfs_node: SimNode, threshold: int | None) -> None:
    # None: the stand-in kvikio's default threshold (16 KiB, as kvikio >= 25.04) with an 8 KiB
    # test; 8 MiB: the test sets KVIKIO_GDS_THRESHOLD above its 2 MiB size
    size = 8 << 10 if threshold is None else 2 << 20
    opts: dict[str, Any] = {"size_bytes": size}
    if threshold is not None:
        opts["gds_threshold"] = threshold
    doc = run_iotest(nvfs_node, **opts)
    att = doc["attempts"][0]
    assert att["ok"] and att["verified"], att
    assert att["gds_threshold"] == (16 << 10 if threshold is None else threshold)
    io = evaluate(doc, route="nvfs")
    assert io.evidence["proof"] is None and not io.direct_proven
    assert "proves nothing" in io.reason
    # kvikio (stand-in, like the real one) kept these calls away from cuFile: nvidia-fs did not
    # count them and cuFile's log has no per-I/O line
    delta = io.evidence["counter_delta_direct"]
    assert delta["writes_n"] == 0 and delta["write_mib"] == 0 and delta["reads_n"] == 0
    log = io.evidence["cufile_log"]
    assert log["nvfs_io_lines"] == 0 and log["p2pdma_io_lines"] == 0


def test_gpu_less_node_without_kvikio_is_a_clear_skip(
        module_sim_node: Callable[..., SimNode]) -> None:
    node = module_sim_node("nogpu")
    report = verify(node)
    s = statuses(report)
    assert report.route == "none" and not report.compliant
    assert s["gpu.present"] == "fail" and s["gpu.driver.loaded"] == "fail"
    assert report.io_test.path_taken == "skipped"
    assert report.io_test.reason
