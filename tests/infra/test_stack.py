"""The GDS software stack that playbooks/site.yml leaves on a node (testinfra).

Package versions, the nvidia-fs pin, the module loaded now (/sys/module) and at boot, DKMS,
OFED and the GDS tools. Route-aware: nvfs-only tests skip on p2pdma nodes and the reverse.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import testinfra
    from conftest import GdsExpectation

# Names the distribution archives use for older, differently built GDS packages.
DISTRO_ARCHIVE_NAMES = ("libcufile0", "gds-tools", "libcufile-dev")


def test_cufile_and_gds_tools_come_from_the_cuda_repository(
    host: testinfra.host.Host, gds: GdsExpectation
) -> None:
    wanted = [f"libcufile-{gds.series}", f"libcufile-dev-{gds.series}", f"gds-tools-{gds.series}"]
    if gds.install_toolkit:
        wanted.append(f"cuda-toolkit-{gds.series}")
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"not installed: {missing}"
    stray = [name for name in DISTRO_ARCHIVE_NAMES if host.package(name).is_installed]
    assert not stray, f"distribution archive GDS packages installed: {stray}"


def test_nvidia_fs_is_installed_at_the_pinned_version(
    host: testinfra.host.Host, nvfs: GdsExpectation
) -> None:
    for name in ("nvidia-fs", "nvidia-fs-dkms", f"nvidia-gds-{nvfs.series}"):
        assert host.package(name).is_installed, name
    for name in ("nvidia-fs", "nvidia-fs-dkms"):
        version = host.package(name).version
        assert version.startswith(f"{nvfs.nvidia_fs_version}-"), f"{name} {version}"


def test_apt_holds_nvidia_fs_although_a_newer_one_is_available(
    host: testinfra.host.Host, nvfs: GdsExpectation
) -> None:
    if not host.exists("apt-cache"):
        # RPM systems hold it with dnf versionlock.
        locks = host.run("dnf versionlock list").stdout
        assert f"nvidia-fs-dkms-{nvfs.nvidia_fs_version}" in locks or "nvidia-fs-dkms" in locks
        return
    policy = host.check_output("apt-cache policy nvidia-fs-dkms")
    candidate = re.search(r"Candidate:\s*(\S+)", policy)
    assert candidate and candidate.group(1).startswith(f"{nvfs.nvidia_fs_version}-"), policy
    assert "1001" in policy, f"the pin (priority 1001) is not in force:\n{policy}"


def test_nvidia_fs_is_loaded(host: testinfra.host.Host, nvfs: GdsExpectation) -> None:
    assert host.file("/sys/module/nvidia_fs").is_directory
    assert host.file("/proc/driver/nvidia-fs/version").exists


def test_nvidia_fs_loads_at_boot(host: testinfra.host.Host, nvfs: GdsExpectation) -> None:
    conf = host.file("/etc/modules-load.d/nvidia_fs.conf")
    assert conf.is_file
    lines = [line.strip() for line in conf.content_string.splitlines()]
    assert "nvidia_fs" in lines


def test_nvidia_fs_is_built_by_dkms_for_the_running_kernel(
    host: testinfra.host.Host, nvfs: GdsExpectation
) -> None:
    kernel = host.check_output("uname -r")
    status = host.check_output(f"dkms status -m nvidia-fs -k {kernel}")
    assert re.search(r":\s*installed", status), status
    assert nvfs.nvidia_fs_version in status, status


def test_nvidia_fs_runs_with_the_configured_parameters(
    host: testinfra.host.Host, nvfs: GdsExpectation
) -> None:
    for key, value in nvfs.module_params.items():
        live = host.file(f"/sys/module/nvidia_fs/parameters/{key}").content_string.strip()
        live = {"Y": "1", "N": "0"}.get(live, live)
        assert live == str(value), f"{key}: loaded {live}, configured {value}"
    conf = host.file("/etc/modprobe.d/nvidia_fs.conf")
    if nvfs.module_params:
        for key, value in nvfs.module_params.items():
            assert f"{key}={value}" in conf.content_string
    else:
        assert not conf.exists


def test_ofed_reports_the_wanted_version(
    host: testinfra.host.Host, with_ofed: GdsExpectation
) -> None:
    out = host.check_output("ofed_info -s")
    if with_ofed.mofed_flavor == "doca":
        assert f"OFED-internal-{with_ofed.doca_ofed_version}" in out
        assert host.package("doca-ofed").is_installed
        nvme_pkgs = ("mlnx-nvme-dkms", "kmod-mlnx-nvme")
        assert any(host.package(name).is_installed for name in nvme_pkgs)
    else:
        assert f"MLNX_OFED_LINUX-{with_ofed.mlnx_ofed_version}" in out
        assert not host.package("doca-ofed").is_installed


def test_patched_nvme_driver_registers_with_nvidia_fs(
    host: testinfra.host.Host, with_ofed: GdsExpectation
) -> None:
    found = host.run("grep -c -w -E 'nvme_v[12]_register_nvfs_dma_ops' /proc/kallsyms")
    assert found.rc == 0, "the GDS-patched nvme driver is not loaded (reboot pending?)"


def test_gds_tools_are_where_operators_look(host: testinfra.host.Host, gds: GdsExpectation) -> None:
    tool = host.file(f"{gds.cuda_dir}/gds/tools/gdscheck")
    assert tool.exists and tool.mode & 0o111
    link = host.file("/usr/local/bin/gdscheck")
    assert link.is_symlink and link.linked_to == f"{gds.cuda_dir}/gds/tools/gdscheck"
    assert "/usr/local/cuda/gds/tools" in host.file("/etc/profile.d/gds-tools.sh").content_string


def test_gdscheck_reports_nvme_over_the_route(
    host: testinfra.host.Host, gds: GdsExpectation
) -> None:
    out = host.check_output("/usr/local/bin/gdscheck -p")
    nvme = [line.strip() for line in out.splitlines() if re.match(r"^\s*NVMe", line)]
    assert nvme, out
    if gds.route == "nvfs":
        ok = any(re.match(r"NVMe\s*:\s*(Supported|.*\bnvfs\b)", line) for line in nvme)
    else:
        ok = any(
            re.match(r"NVMe\s*P2PDMA\s*:\s*Supported", line) or re.match(r"NVMe\s*:.*\bp2p", line)
            for line in nvme
        )
    assert ok, nvme


def test_p2pdma_node_carries_no_nvidia_fs_and_no_ofed(
    host: testinfra.host.Host, p2pdma: GdsExpectation
) -> None:
    for name in ("nvidia-fs", "nvidia-fs-dkms", f"nvidia-gds-{p2pdma.series}", "doca-ofed"):
        assert not host.package(name).is_installed, name
    assert not host.file("/sys/module/nvidia_fs").exists
    assert not host.file("/etc/modules-load.d/nvidia_fs.conf").exists
