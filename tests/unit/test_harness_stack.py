"""Stand-in packages + simulated hardware behave like the real stack (test harness).

One node per module gets the stand-in repository, DOCA with the patched NVMe driver and
nvidia-gds-12-9, and an XFS "NVMe" mounted at /mnt/gds; the tests then drive nvidia_fs,
cufile.json and the stand-in kvikio/gdscheck and look at what a verifier would see.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.harness.standin_repo.build_debs import NVFS_VERSIONS

pytestmark = pytest.mark.container

KVIKIO_IO = r"""
import sys, cupy, kvikio
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8 << 20
a = cupy.random.randint(0, 256, size=n, dtype=cupy.uint8)
with kvikio.CuFile(sys.argv[1], "w") as f:
    assert f.write(a) == n
b = cupy.empty(n, dtype=cupy.uint8)
with kvikio.CuFile(sys.argv[1], "r") as f:
    assert f.pread(b).get() == n
assert cupy.array_equal(a, b)
print(kvikio.cufile_driver.properties.is_gds_available, kvikio.defaults.is_compat_mode_preferred())
"""


VENV_PYTHON = "/opt/gdsfleet/venv/bin/python"


def counters(text: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        if ":" not in line or "=" not in line:
            continue
        head, _, rest = line.partition(":")
        key = head.strip()
        vals = dict(re.findall(r"([\w()/-]+)=(\d+)", rest))
        out.setdefault(key, {}).update({k: int(v) for k, v in vals.items()})
    return out


@pytest.fixture(scope="module")
def node(module_sim_node, standin_repo):
    n = module_sim_node("nvfs", nvme=True, ssh=True)
    n.install_repo(standin_repo)
    n.apt_install("dkms", "linux-headers-$(uname -r)", "doca-ofed", "mlnx-nvme-dkms",
                  "nvidia-gds-12-9", "cuda-toolkit-12-9")
    n.install_verify_runtime(standin_repo)  # the stand-in kvikio/cupy wheels, through the role
    n.exec("mkfs.xfs -q -f /dev/nvme0n1 && mkdir -p /mnt/gds && mount /dev/nvme0n1 /mnt/gds")
    yield n
    n.exec("umount /mnt/gds", check=False)


def run_io(node, env: dict[str, str], path: str = "/mnt/gds/t.bin",
           check: bool = True):
    return node.exec(f"{VENV_PYTHON} -c '{KVIKIO_IO}' {path}", env=env, check=check)


def set_allow_compat(node, value: bool) -> None:
    node.exec(
        "python3 - <<'EOF'\n"
        "import json, sys\n"
        "sys.path.insert(0, '/usr/local/lib/gdsfleet-sim')\n"
        "import gdsfleet_sim as s\n"
        "cfg = json.loads(s.strip_json_comments(open('/etc/cufile.json').read()))\n"
        f"cfg['properties']['allow_compat_mode'] = {value!r}\n"
        "open('/etc/cufile.json', 'w').write(json.dumps(cfg, indent=2))\n"
        "EOF")


def test_packages_and_dkms(node) -> None:
    status = node.exec("dkms status").stdout
    kr = node.exec("uname -r").stdout.strip()
    # nvidia-fs is not pinned here, so it floats to the newest in the repository
    newest = NVFS_VERSIONS[-1]  # the stand-in repository's newest (2.28.4: builds on 6.17+)
    assert f"nvidia-fs/{newest}, {kr}, x86_64: installed" in status.splitlines()
    assert node.exec("ofed_info -s").stdout.strip() == "OFED-internal-25.07-0.9.7:"
    assert node.exec("grep -wE 'nvme_v[12]_register_nvfs_dma_ops' /proc/kallsyms").returncode == 0
    assert node.exec("readlink -f /usr/local/cuda").stdout.strip() == "/usr/local/cuda-12.9"
    assert "// NOTE" in node.read("/etc/cufile.json")  # NVIDIA-style, with comments
    assert node.exec("dpkg-query -W -f='${Version}' libcufile-12-9").stdout == "1.14.1.1-1"


def test_kvikio_off_without_nvidia_fs(node) -> None:
    node.exec("modprobe -r nvidia_fs")
    set_allow_compat(node, False)
    r = run_io(node, {"KVIKIO_COMPAT_MODE": "OFF"}, check=False)
    assert r.returncode != 0
    assert "RuntimeError" in r.stderr or "CUfileException" in r.stderr
    assert "nvidia-fs driver is not loaded" in r.stderr
    # allow_compat_mode true: cuFile's own compat mode carries the I/O, no error
    set_allow_compat(node, True)
    r = run_io(node, {"KVIKIO_COMPAT_MODE": "OFF"})
    assert r.stdout.split() == ["False", "False"]


def test_direct_io_moves_counters_only_with_rw_stats(node) -> None:
    node.exec("modprobe -r nvidia_fs; modprobe nvidia_fs rw_stats_enabled=1")
    before = counters(node.read("/proc/driver/nvidia-fs/stats"))
    assert before["Writes"]["n"] == 0
    r = run_io(node, {"KVIKIO_COMPAT_MODE": "OFF"})
    assert r.stdout.split() == ["True", "False"]
    stats = node.read("/proc/driver/nvidia-fs/stats")
    after = counters(stats)
    assert "IO stats: Enabled" in stats
    assert after["Writes"]["n"] >= 1 and after["Writes"]["writeMiB"] == 8
    assert after["Reads"]["n"] >= 1 and after["Reads"]["readMiB"] == 8
    assert after["Mmap"]["n"] == before["Mmap"]["n"] + 2
    assert re.search(r"^GPU 0000:41:00\.0 uuid:[0-9a-f-]{36} : Registered_MiB=0", stats, re.M)
    # AUTO with a usable route also goes direct; ON is POSIX and leaves the counters alone
    run_io(node, {"KVIKIO_COMPAT_MODE": "ON"})
    assert counters(node.read("/proc/driver/nvidia-fs/stats"))["Writes"]["n"] == \
        after["Writes"]["n"]
    # without rw_stats the Reads/Writes n= counters are not printed (older layout), but
    # Mmap/Bar1-map still count
    node.exec("echo 0 > /sys/module/nvidia_fs/parameters/rw_stats_enabled")
    run_io(node, {"KVIKIO_COMPAT_MODE": "OFF"})
    stats = node.read("/proc/driver/nvidia-fs/stats")
    assert "IO stats: Disabled" in stats
    assert re.search(r"^Writes\s+: err=0 io_state_err=0 pg-cache=0", stats, re.M)
    assert "writeMiB" not in stats and "Batches" not in stats
    assert counters(stats)["Mmap"]["n"] == after["Mmap"]["n"] + 2
    # writing to the stats file resets the counters (like the real driver)
    node.exec("echo 1 > /proc/driver/nvidia-fs/stats")
    node.exec("for i in $(seq 50); do grep -q 'Mmap.*: n=0 ' /proc/driver/nvidia-fs/stats "
              "&& exit 0; sleep 0.1; done; exit 1")


def test_unsupported_filesystem_is_refused(node) -> None:
    node.exec("modprobe nvidia_fs")
    set_allow_compat(node, False)
    try:
        r = run_io(node, {"KVIKIO_COMPAT_MODE": "OFF"}, path="/tmp/t.bin", check=False)
        assert r.returncode != 0 and "not supported by GDS" in r.stderr
    finally:
        set_allow_compat(node, True)


def test_gdscheck_follows_state(node) -> None:
    gdscheck = "/usr/local/cuda/gds/tools/gdscheck -p"
    node.exec("modprobe nvidia_fs")
    out = node.exec(gdscheck).stdout
    assert " GDS release version: 1.14.1.1" in out
    assert re.search(r"^ NVMe\s+: Supported$", out, re.M)
    assert " properties.allow_compat_mode : true" in out
    assert " IOMMU: disabled" in out
    assert "Nvidia Driver Info Status: Supported(Nvidia Open Driver Installed)" in out
    assert out.rstrip().endswith("Platform verification succeeded")
    node.exec("modprobe -r nvidia_fs")
    out = node.exec(gdscheck).stdout
    assert re.search(r"^ NVMe\s+: Unsupported$", out, re.M)
    assert "Platform verification succeeded" in out  # capable platform, route not active
    set_allow_compat(node, False)
    try:
        r = node.exec(gdscheck, check=False)
        assert r.returncode != 0 and "Platform verification error" in r.stdout
        assert "CUFILE CONFIGURATION" not in r.stdout
    finally:
        set_allow_compat(node, True)
        node.exec("modprobe nvidia_fs")
    # a GDS 1.16-style release prints the modes
    node.apt_install("gds-tools-13-1")
    out = node.exec("/usr/local/cuda-13.1/gds/tools/gdscheck -p").stdout
    assert re.search(r"^ NVMe\s+: nvfs, compat$", out, re.M)


def test_reboot_applies_boot_config(node) -> None:
    node.exec("echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf && "
              "echo 'options nvme_core multipath=N' > /etc/modprobe.d/nvme.conf && "
              "echo 'options nvidia_fs rw_stats_enabled=1' > /etc/modprobe.d/nvidia-fs.conf && "
              "modprobe -r nvidia_fs")
    node.reboot()
    assert node.read("/sys/module/nvme_core/parameters/multipath").strip() == "N"
    assert node.read("/sys/module/nvidia_fs/parameters/rw_stats_enabled").strip() == "1"
    assert node.exec("grep -wE 'nvme_v[12]_register_nvfs_dma_ops' /proc/kallsyms").returncode == 0
    # the "NVMe" survives: mount it again
    node.exec("mount /dev/nvme0n1 /mnt/gds && test -f /mnt/gds/t.bin")


def test_dkms_build_failure(module_sim_node, standin_repo) -> None:
    n = module_sim_node("dkmsfail")
    n.install_repo(standin_repo, doca=False)
    r = n.apt_install("dkms", "linux-headers-$(uname -r)", "nvidia-fs-dkms=2.25.7-1",
                      check=False)
    assert r.returncode != 0
    assert "Bad return status for module build on kernel" in r.stdout + r.stderr
    assert n.exec("dkms status").stdout.strip() == "nvidia-fs/2.25.7: added"
    assert "error:" in n.read("/var/lib/dkms/nvidia-fs/2.25.7/build/make.log")
    assert n.exec("modprobe nvidia_fs", check=False).returncode == 1


P2PDMA_OPTIONS = ("options nvme_core multipath=N\noptions nvidia "
                  'NVreg_RegistryDwords="RMForceStaticBar1=1;RmForceDisableIomapWC=1;"\n')


def test_p2pdma_route_needs_its_module_options_in_effect(module_sim_node, standin_repo) -> None:
    """Like a real x86 node: no P2PDMA until multipath=N and the RegistryDwords keys are in
    effect (written to modprobe.d, then a reboot); block.nvme.use_pci_p2pdma may be absent
    (NVIDIA's P2PDMA guide sets only the properties key) but not false."""
    n = module_sim_node("p2pdma", nvme=True, ssh=True)
    n.install_repo(standin_repo, doca=False)
    n.apt_install("libcufile-12-9", "gds-tools-12-9")
    n.install_verify_runtime(standin_repo)
    gdscheck = "/usr/local/cuda-12.9/gds/tools/gdscheck -p"
    cfg: dict = {"properties": {"allow_compat_mode": False, "use_pci_p2pdma": True}}
    n.exec(f"echo '{json.dumps(cfg)}' > /etc/cufile.json")
    assert n.read("/sys/module/nvme_core/parameters/multipath").strip() == "Y"
    assert 'RegistryDwords: ""' in n.read("/proc/driver/nvidia/params").splitlines()
    n.exec("mkfs.xfs -q -f /dev/nvme0n1 && mkdir -p /mnt/gds && mount /dev/nvme0n1 /mnt/gds")
    try:
        r = run_io(n, {"KVIKIO_COMPAT_MODE": "OFF"}, check=False)
        assert r.returncode != 0 and "nvme_core multipath is Y" in r.stderr
        assert "Platform verification error" in n.exec(gdscheck, check=False).stdout
        # written but not rebooted: still not in effect
        n.exec(f"cat > /etc/modprobe.d/gdsfleet-test-p2pdma.conf <<'EOF'\n{P2PDMA_OPTIONS}EOF")
        r = run_io(n, {"KVIKIO_COMPAT_MODE": "OFF"}, check=False)
        assert r.returncode != 0 and "nvme_core multipath is Y" in r.stderr
    finally:
        n.exec("umount /mnt/gds", check=False)
    n.reboot()
    n.exec("mount /dev/nvme0n1 /mnt/gds")
    try:
        assert n.read("/sys/module/nvme_core/parameters/multipath").strip() == "N"
        assert ('RegistryDwords: "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"'
                in n.read("/proc/driver/nvidia/params").splitlines())
        r = run_io(n, {"KVIKIO_COMPAT_MODE": "OFF"})  # properties key only: direct
        assert r.stdout.split() == ["False", "False"]  # no nvidia-fs, still direct
        out = n.exec(gdscheck).stdout
        assert re.search(r"^ NVMe P2PDMA\s+: Supported$", out, re.M)
        assert n.exec("test -e /proc/driver/nvidia-fs", check=False).returncode == 1
        cfg["block"] = {"nvme": {"use_pci_p2pdma": False}}
        n.exec(f"echo '{json.dumps(cfg)}' > /etc/cufile.json")
        r = run_io(n, {"KVIKIO_COMPAT_MODE": "OFF"}, check=False)
        assert r.returncode != 0 and "block.nvme.use_pci_p2pdma is false" in r.stderr
        # one registry key only (and a reboot): not usable
        n.exec("sed -i 's/RmForceDisableIomapWC=1;//' /etc/modprobe.d/gdsfleet-test-p2pdma.conf")
    finally:
        n.exec("umount /mnt/gds", check=False)
    n.reboot()
    cfg["block"] = {"nvme": {"use_pci_p2pdma": True}}
    n.exec(f"echo '{json.dumps(cfg)}' > /etc/cufile.json")
    n.exec("mount /dev/nvme0n1 /mnt/gds")
    try:
        r = run_io(n, {"KVIKIO_COMPAT_MODE": "OFF"}, check=False)
        assert r.returncode != 0
        assert "RegistryDwords lacks RmForceDisableIomapWC=1" in r.stderr
    finally:
        n.exec("umount /mnt/gds", check=False)
        n.exec("rm -f /etc/modprobe.d/gdsfleet-test-p2pdma.conf", check=False)
