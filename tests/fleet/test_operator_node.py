"""A GPU Operator node on the SIMULATED lab (container with stand-in hardware, profile
`operator`: the driver container's nvidia / nvidia_fs loaded and visible in the host's /proc and
/sys, /run/nvidia/driver and /run/nvidia/validations present, no host driver/nvidia-fs/CUDA
package, no DKMS tree, no driver sources, no nvidia-smi on the host's PATH).

The real playbook gdsfleet.gds.gpu_operator prepares the node (preflight in operator mode, DOCA
with the patched nvme driver, cufile.json, the NVMe filesystem, the verification runtime) and
renders the chart values with the Helm step switched off (no Kubernetes API server can run
here); `provisioner verify --nfd` then recognises the operator-managed node, skips what does
not apply and says so, proves the direct path with the I/O test from /opt/gdsfleet/venv, and
writes the NFD feature file, checked with the validator written from NFD's docs.

One node, 16 MiB I/O test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import nfd_rules

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/gdsfleet-gds"
HOST_ONLY = ("nvfs.persist", "nvfs.dkms", "nvfs.dkms.boot_kernel", "libcufile.present",
             "packages.gds", "gdscheck.present")

pytestmark = pytest.mark.fleet

MOFED = r"""
set -eu
L=/etc/apt/sources.list.d/gdsfleet-test.list
printf 'deb [trusted=yes] {base}/cuda/repos/debian12/x86_64/ /\n' > $L
printf 'deb [trusted=yes] {base}/doca/3.1.0/debian12/x86_64/ /\n' >> $L
APT="-o Dir::Etc::sourcelist=$L -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0"
apt-get $APT update -qq >/dev/null 2>&1
DEBIAN_FRONTEND=noninteractive apt-get $APT install -y -qq --no-install-recommends \
  dkms linux-headers-$(uname -r) doca-ofed mlnx-nvme-dkms >/dev/null 2>&1
rm -f $L
grep -qwE 'nvme_v[12]_register_nvfs_dma_ops' /proc/kallsyms
"""


def _env(collections: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(ROOT / "tests" / "harness" / "containers.conf")
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n"
            f"{proc.stderr[-4000:]}")


@pytest.fixture(scope="module")
def node(lab_fleet: Any, standin_repo: Any, private_collections: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("operator")
    fleet = lab_fleet(1, {1: "operator"},
                      group_vars=standin_repo.group_vars() | {"gds_verify_io_size": "16M"})
    fleet.tmp = tmp  # type: ignore[attr-defined]
    fleet.repo_base = standin_repo.base_url  # type: ignore[attr-defined]
    fleet.collections = private_collections  # type: ignore[attr-defined]
    return fleet


def test_operator_node_prepared_verified_and_labelled(node: Any) -> None:
    name = node.names[0]
    # the node looks like an operator node before anything runs
    before = node.exec(name, "ls /proc/driver/nvidia-fs/version /sys/module/nvidia_fs "
                       "/run/nvidia/validations/nvidia-fs-ready /run/nvidia/driver/usr; "
                       "dpkg-query -W 'nvidia-fs*' 'cuda-*' 'libcufile*' 2>&1; "
                       "ls -d /var/lib/dkms/nvidia-fs /usr/src/nvidia-* 2>&1; "
                       "command -v nvidia-smi || echo no-nvidia-smi", check=False)
    assert "No such file" not in before.stdout.split("dpkg-query")[0], before.stdout
    assert "no packages found matching nvidia-fs*" in before.stdout, before.stdout
    assert "no-nvidia-smi" in before.stdout

    # Host MOFED: the stand-in DOCA packages (GDS-patched nvme driver) straight from the harness
    # repository, as tests/fleet/test_verify_fleet.py does (the mofed role has its own molecule
    # tests; running it here would double this test's time). The CUDA repository is only the
    # lab's source of linux-headers-<kernel> (a real node's distribution archive) and is removed.
    node.exec(name, MOFED.format(base=node.repo_base), timeout=600)
    values = node.tmp / "values.yaml"
    play = [str(VENV_BIN / "ansible-playbook"), "-i", str(node.inventory),
            "gdsfleet.gds.gpu_operator", "--skip-tags", "mofed", "-e", "gpu_operator_helm=false",
            "-e", f"gpu_operator_values_file={values}"]
    # Debian 12 is not on NVIDIA's list for the operator's GDS (Ubuntu 22.04/24.04, OpenShift):
    # refused on the node before any change (issue 43: nvidia-fs-ctr would crash-loop there)
    proc = subprocess.run(play, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=_env(node.collections), check=False)
    assert proc.returncode != 0 and "not supported on this node" in proc.stdout, _explain(proc)
    assert "gpu-operator#2911" in proc.stdout and not values.exists()
    assert node.exec(name, "test -e /etc/cufile.json", check=False).returncode != 0
    # the lab's nodes are all Debian 12 (docs/testing.md): declared OpenShift nodes here, the
    # rest of the play runs; the rule itself is tests/unit/test_gpu_operator_gds_support.py's
    proc = subprocess.run([*play, "-e", "gpu_operator_openshift=true"], capture_output=True,
                          text=True, timeout=900, cwd=ROOT, env=_env(node.collections),
                          check=False)
    assert proc.returncode == 0, _explain(proc)
    # the Helm step is there and was skipped (gpu_operator_helm=false), the values rendered
    assert "Install or upgrade the GPU Operator release" in proc.stdout
    rendered = yaml.safe_load(values.read_text())
    # no gds.version: the chart pairs nvidia-fs with its own driver (the host pin 2.25.7 of
    # cuda_nvidia_fs_version never reaches the values; docs/gpu-operator.md)
    assert rendered["gds"] == {"enabled": True}
    assert rendered["driver"]["kernelModuleType"] == "open"
    assert rendered["driver"]["rdma"] == {"enabled": True, "useHostMofed": True}
    # no host CUDA or nvidia-fs came with it; DOCA's nvme driver did
    pkgs = node.exec(name, "dpkg-query -W -f '${Package}\\n'").stdout.split()
    assert not [p for p in pkgs if p.startswith(("nvidia-fs", "cuda-", "libcufile",
                                                 "nvidia-gds"))], pkgs
    assert "mlnx-nvme-dkms" in pkgs

    out = node.tmp / "verify.json"
    proc = subprocess.run(
        [str(VENV_BIN / "provisioner"), "verify", "-i", str(node.inventory), "--nfd",
         "--json", str(out), "--details", "--ledger", str(node.tmp / "ledger.sqlite")],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=_env(node.collections),
        check=False)
    assert proc.returncode == 0, _explain(proc)
    rep = json.loads(out.read_text())["nodes"][0]
    assert rep["compliant"] is True and rep["route"] == "nvfs"
    op = rep["facts"]["operator"]
    assert op["managed"] is True and op["driver_root"] == "/run/nvidia/driver"
    assert op["nvfs_ready"] is True
    by_id = {c["id"]: c for c in rep["checks"]}
    for cid in HOST_ONLY:
        assert by_id[cid]["status"] == "skip", by_id[cid]
        assert by_id[cid]["message"].startswith("operator-managed node: "), by_id[cid]
    assert "operator-managed node: " in proc.stdout  # --details prints the reasons
    for cid in ("gpu.driver.open", "nvfs.module.loaded", "nvfs.version", "nvfs.nvme.patched",
                "cufile.json.valid", "fs.mount.present", "io.direct_path"):
        assert by_id[cid]["status"] == "pass", by_id[cid]
    io = rep["io_test"]
    assert io["path_taken"] == "direct" and io["evidence"]["proof"] == "nvfs_counters"
    assert io["evidence"]["interpreter"]["python"] == "/opt/gdsfleet/venv/bin/python"

    # the NFD feature file: written atomically, 0644, by NFD's documented rules
    assert rep["nfd"]["written"] is True, rep["nfd"]
    st = node.exec(name, f"stat -c '%a %U' {FEATURES}; ls -a $(dirname {FEATURES})").stdout
    assert st.splitlines()[0] == "644 root"
    assert [n for n in st.split() if n.startswith(".") and n not in (".", "..")] == []
    text = node.exec(name, f"cat {FEATURES}").stdout
    labels, errors, expiry = nfd_rules.parse(text)
    assert errors == [], (errors, text)
    assert expiry is not None
    ns = "gds.feature.node.kubernetes.io"
    assert labels[f"{ns}/compliant"] == "true"
    assert labels[f"{ns}/route"] == "nvfs"
    assert labels[f"{ns}/io-path"] == "direct"
    assert labels[f"{ns}/operator-managed"] == "true"
    assert labels == rep["nfd"]["labels"]
