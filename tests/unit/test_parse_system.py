"""Small system parsers. Inputs are SYNTHETIC examples in the formats the tools print (from their
documentation and the simulated node's stand-ins), not captures from a GPU node."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.verify.parsers import driver, kernel, os_release, packages, storage

KALLSYMS = """\
0000000000000000 T nvme_v1_register_nvfs_dma_ops\t[nvme]
0000000000000000 T nvme_v1_unregister_nvfs_dma_ops\t[nvme]
0000000000000000 d p2pdma_pgmap_ops
"""


def test_kallsyms_symbols_and_module() -> None:
    ks = kernel.parse_kallsyms(KALLSYMS)
    assert ks["nvfs_dma_ops"] == "nvme_v1_register_nvfs_dma_ops"
    assert ks["nvfs_dma_ops_module"] == "nvme"
    assert ks["p2pdma_pgmap_ops"] is True
    v2 = kernel.parse_kallsyms("ffffffffc0a1b2c0 T nvme_v2_register_nvfs_dma_ops [nvme]\n")
    assert v2["nvfs_dma_ops"] == "nvme_v2_register_nvfs_dma_ops"
    none = kernel.parse_kallsyms("")
    assert none["nvfs_dma_ops"] is None and none["p2pdma_pgmap_ops"] is False


def test_cmdline_and_iommu_state() -> None:
    off = kernel.parse_cmdline("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=off quiet")
    assert off["iommu_params"] == {"intel_iommu": "off"}
    assert kernel.iommu_state(off, [])["state"] == "off"
    pt = kernel.parse_cmdline("ro iommu=pt amd_iommu=on")
    assert kernel.iommu_state(pt, ["ivhd0"])["state"] == "pt"
    on = kernel.parse_cmdline("ro intel_iommu=on")
    assert kernel.iommu_state(on, ["dmar0", "dmar1"])["state"] == "on"
    # no parameter, nothing in /sys/class/iommu: off
    assert kernel.iommu_state(kernel.parse_cmdline("ro quiet"), [])["state"] == "off"
    # arguments after -- go to init and are ignored
    assert kernel.parse_cmdline("ro -- iommu=pt")["iommu_params"] == {}
    assert kernel.iommu_state(kernel.parse_cmdline("ro"), None)["state"] == "unknown"
    assert kernel.iommu_state(kernel.parse_cmdline("ro"), None, "disabled")["state"] == "off"


def test_os_release() -> None:
    info = os_release.parse('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                            'VERSION_ID="12"\n')
    assert info["ID"] == "debian" and info["VERSION_ID"] == "12"
    assert os_release.family(info) == "debian"
    assert os_release.family({"ID": "rocky", "ID_LIKE": "rhel centos fedora"}) == "redhat"
    assert os_release.family({"ID": "ubuntu", "ID_LIKE": "debian"}) == "debian"


def test_driver_flavor_from_proc_and_modinfo() -> None:
    open_ = driver.parse_proc_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Thu Mar 20 21:58:45 UTC 2025\nGCC version:  gcc 12\n")
    assert open_ == {"loaded": True, "flavor": "open", "version": "570.133.20"}
    prop = driver.parse_proc_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Release Build\n")
    assert prop["flavor"] == "proprietary" and prop["version"] == "570.133.20"
    assert driver.parse_proc_version("")["loaded"] is False
    assert driver.flavor_from_license("Dual MIT/GPL\n") == "open"
    assert driver.flavor_from_license("NVIDIA\n") == "proprietary"
    assert driver.flavor_from_license("") is None


def test_nvidia_smi_outputs() -> None:
    gpus = driver.parse_smi_list(
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-12345678-aaaa-bbbb-cccc-1234567890ab)\n")
    assert gpus == [{"index": "0", "name": "NVIDIA H100 80GB HBM3",
                     "uuid": "GPU-12345678-aaaa-bbbb-cccc-1234567890ab"}]
    q = driver.parse_smi_query("0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, 570.133.20, GPU-1\n")
    assert q[0]["driver_version"] == "570.133.20" and q[0]["pci_bus_id"] == "00000000:19:00.0"
    assert driver.parse_smi_query("No devices were found\n") == []


def test_package_list_dkms_and_ofed() -> None:
    pkgs = packages.parse_package_list(
        "nvidia-gds-12-9\t12.9.1-1\tii \nlibcufile-12-9\t1.14.1.1-1\tii \n"
        "nvidia-fs-dkms\t2.26.6-1\tii \nlibcufile0\t1.0-1\trc \ngds-tools-12-9\t1.14.1.1-1\tii \n")
    assert "libcufile0" not in pkgs  # removed, config files left
    g = packages.gds_packages(pkgs)
    assert g["libcufile"] == {"libcufile-12-9": "1.14.1.1-1"}
    assert g["nvidia_fs"] == {"nvidia-fs-dkms": "2.26.6-1"}
    assert g["distro_lookalikes"] == []
    dk = packages.parse_dkms_status(
        "nvidia-fs/2.26.6, 6.1.0-18-amd64, x86_64: installed\n"
        "mlnx-nvme, 24.10, 6.1.0-18-amd64, x86_64: installed\nnvidia-fs/2.25.7: added\n")
    assert dk[0] == {"module": "nvidia-fs", "version": "2.26.6", "kernel": "6.1.0-18-amd64",
                     "arch": "x86_64", "state": "installed"}
    assert dk[1]["module"] == "mlnx-nvme" and dk[1]["kernel"] == "6.1.0-18-amd64"
    assert dk[2] == {"module": "nvidia-fs", "version": "2.25.7", "kernel": None, "arch": None,
                     "state": "added"}
    assert packages.parse_ofed_info("MLNX_OFED_LINUX-23.10-2.1.3.1:\n") == {
        "flavor": "mlnx_ofed", "version": "23.10-2.1.3.1", "raw": "MLNX_OFED_LINUX-23.10-2.1.3.1"}
    assert packages.parse_ofed_info("OFED-internal-24.10-1.1.4:\n")["flavor"] == "doca"
    assert packages.parse_ofed_info("")["version"] is None


def test_mounts_and_lsblk() -> None:
    mounts = storage.parse_mounts(
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        "/dev/nvme0n1 /mnt/gds xfs rw,noatime,attr2,inode64 0 0\n"
        "/dev/md0 /raid ext4 rw,relatime,data=ordered 0 0\n"
        "/dev/sdb1 /mnt/with\\040space ext4 rw 0 0\n")
    assert storage.mount_for("/mnt/gds/sub/dir", mounts)["target"] == "/mnt/gds"
    assert storage.mount_for("/var/tmp", mounts)["target"] == "/"
    assert mounts[3]["target"] == "/mnt/with space"
    lsblk = json.dumps({"blockdevices": [
        {"name": "nvme0n1", "tran": "nvme", "type": "disk", "children": [
            {"name": "md0", "type": "raid0", "tran": None}]},
        {"name": "sda", "tran": "sata", "type": "disk", "children": [
            {"name": "sda1", "type": "part"}]}]})
    devs = storage.parse_lsblk(lsblk)
    assert {d["name"] for d in devs} == {"nvme0n1", "md0", "sda", "sda1"}
    assert storage.is_nvme_source("/dev/md0", devs) is True
    assert storage.is_nvme_source("/dev/sda1", devs) is False
    assert storage.nvme_mount_points(mounts, devs) == ["/mnt/gds", "/raid"]
    assert storage.parse_lsblk("not json") == []


def _os_release_by_shlex(value: str) -> str:
    """The parser's answer for one value before its fast path: shlex for every value."""
    import shlex

    try:
        parts = shlex.split(value[:os_release.MAX_VALUE_CHARS])
        return parts[0] if parts else ""
    except ValueError:
        return value[:os_release.MAX_VALUE_CHARS].strip().strip("\"'")


def _os_release_before(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = _os_release_by_shlex(value)
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab 1.\t\r\n\x0b\xa0'\"\\$#=(")), max_size=24))
def test_os_release_values_read_as_shlex_reads_them(value: str) -> None:
    """The fast path for plain and whole-quoted values gives what shlex gave, for any value
    (quotes, backslashes, whitespace shlex does and does not split on, line breaks)."""
    text = f"K={value}\nID=x\n"
    assert os_release.parse(text) == _os_release_before(text), value


def test_os_release_real_files_read_the_same() -> None:
    text = ('NAME="Ubuntu"\nVERSION="24.04.1 LTS (Noble Numbat)"\nID=ubuntu\nID_LIKE=debian\n'
            "PRETTY_NAME='Red Hat Enterprise Linux 9.4 (Plow)'\nVERSION_ID=\"9.4\"\n"
            'ANSI_COLOR="0;31"\nCPE_NAME="cpe:/o:redhat:enterprise_linux:9::baseos"\n'
            'HOME_URL="https://www.ubuntu.com/"\nODD="a \\"b\\" c"\nBARE=one two\n')
    info = os_release.parse(text)
    for line in text.splitlines():
        key, _, value = line.partition("=")
        assert info[key] == _os_release_by_shlex(value), key
    assert info["ODD"] == 'a "b" c' and info["BARE"] == "one"
