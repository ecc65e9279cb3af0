"""verify_node against simulated nodes (podman containers of the harness image; marked
`container` automatically by the harness fixtures). The stand-in packages are installed from the
stand-in repository exactly as an operator would (apt), the stand-in NVMe is formatted and
mounted; the verification scripts run through `podman exec` the way the SSH transport runs them.

One container per route, reused within the module; each test leaves its node as it found it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from provisioner.verify import CommandResult, IoTestOptions, NodeReport, Policy, verify_node
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
    node = module_sim_node("nvfs", nvme=True)
    node.install_repo(standin_repo)
    node.apt_install("dkms", "linux-headers-$(uname -r)", "doca-ofed", "mlnx-nvme-dkms",
                     "nvidia-gds-12-9")
    node.exec("modprobe nvidia_fs && mkdir -p /etc/modules-load.d "
              "&& echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf")
    prepare_gds_mount(node)
    set_allow_compat(node, False)
    yield node


def test_nvfs_node_is_compliant_with_counter_proof(nvfs_node: SimNode) -> None:
    report = verify(nvfs_node)
    failing = {k: v for k, v in statuses(report).items() if v == "fail"}
    assert report.compliant, failing
    assert report.route == "nvfs"
    io = report.io_test
    assert io.path_taken == "direct" and io.verified
    assert io.evidence["proof"] == "counters"
    delta = io.evidence["counter_delta_direct"]
    assert delta["writes_n"] > 0 and delta["reads_n"] > 0
    assert delta["write_mib"] == 16 and delta["read_mib"] == 16
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
    node = module_sim_node("p2pdma", nvme=True)
    node.install_repo(standin_repo, doca=False)
    node.apt_install("nvidia-gds-12-9")
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
    assert report.io_test.evidence["proof"] == "compat_off"
    s = statuses(report)
    assert s["p2pdma.nvidia_registry"] == s["p2pdma.modprobe_config"] == "pass"


def test_gpu_less_node_without_kvikio_is_a_clear_skip(
        module_sim_node: Callable[..., SimNode]) -> None:
    node = module_sim_node("nogpu")
    report = verify(node)
    s = statuses(report)
    assert report.route == "none" and not report.compliant
    assert s["gpu.present"] == "fail" and s["gpu.driver.loaded"] == "fail"
    assert report.io_test.path_taken == "skipped"
    assert report.io_test.reason
