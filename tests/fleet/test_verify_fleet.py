"""``provisioner verify`` over a simulated fleet of 8 nodes in 8 different states.

SIMULATED: the nodes are podman containers of the harness node image (stand-in GPU/GDS
"hardware"), with the stand-in NVIDIA/DOCA packages from the harness repository installed
directly with apt (the roles have their own molecule tests; this test is about classification
and the ledger), then each node is put into its state:

    01 nvfs profile, full nvfs stack                         -> COMPLIANT, route nvfs, direct
    02 p2pdma profile, p2pdma stack                          -> COMPLIANT, route p2pdma, direct
    03 nvfs stack, nvidia_fs unloaded (modprobe -r)          -> nvfs.module.loaded fails
    04 nvfs stack without the patched NVMe driver            -> nvfs.nvme.patched fails (compat)
    05 nvfs stack, /etc/cufile.json broken                   -> cufile.json.valid fails
    06 nvfs stack, ext4 mounted without data=ordered         -> fs.mount.options fails
    07 sshd stopped (port closed)                            -> UNREACHABLE, connection refused
    08 host key regenerated                                  -> UNREACHABLE, host key CHANGED

`verify --gdsio` on 01 (direct) and 04 (compat, allow_compat_mode false) runs the gds-tools gdsio
stand-in twice per node (GPU Direct, CPU only); a policy floor above the ratio fails it.

Between the runs, attest (issue 44) on node 01: the role installs gdsfleet-attest, which finds
the node as its verify recorded it (exit 0), then nvidia_fs unloaded through the stand-in
(exit 1, the line and its fix), then loaded again; `status --attest` brings the answers of 01
and 03 (whose verify failed) into the ledger.

A second run, after node 01 loses nvidia_fs, shows drift for 01 only.
"""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from tests.harness.fixtures import run_verify_runtime_role

pytestmark = pytest.mark.fleet

PROFILES = {"2": "p2pdma"}

# Installs the stand-in GDS stack (TEST STAND-IN packages from the harness repository) and
# prepares the node's GDS filesystem. Arguments: ROUTE (nvfs|p2pdma), PATCHED (1|0), FS (xfs|ext4)
PROVISION = r"""
set -eu
ROUTE=$1; PATCHED=$2; FS=$3
cat > /etc/apt/sources.list.d/gdsfleet-test.list <<LIST
deb [trusted=yes] http://127.0.0.1:${REPO_PORT}/cuda/repos/debian12/x86_64/ /
deb [trusted=yes] http://127.0.0.1:${REPO_PORT}/doca/3.1.0/debian12/x86_64/ /
LIST
APT="-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/gdsfleet-test.list
 -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 -o Acquire::Retries=3"
apt-get $APT update -qq >/dev/null 2>&1
if [ "$ROUTE" = nvfs ]; then
  PKGS="dkms linux-headers-$(uname -r) nvidia-gds-12-9"
  if [ "$PATCHED" = 1 ]; then PKGS="$PKGS doca-ofed mlnx-nvme-dkms"; fi
else
  PKGS="libcufile-12-9 gds-tools-12-9"
fi
DEBIAN_FRONTEND=noninteractive apt-get $APT install -y -qq --no-install-recommends $PKGS \
  >/dev/null 2>&1
if [ "$ROUTE" = nvfs ]; then
  dkms autoinstall >/dev/null 2>&1 || true
  modprobe nvidia_fs
  mkdir -p /etc/modules-load.d
  echo nvidia_fs > /etc/modules-load.d/nvidia_fs.conf
fi
python3 - "$ROUTE" <<'PY'
import json, re, sys
route = sys.argv[1]
text = re.sub(r"(?m)^\s*//.*$", "", open("/etc/cufile.json").read())
cfg = json.loads(re.sub(r",(\s*[}\]])", r"\1", text))
props = cfg.setdefault("properties", {})
props["allow_compat_mode"] = False
props["use_pci_p2pdma"] = route == "p2pdma"
cfg.setdefault("block", {}).setdefault("nvme", {})["use_pci_p2pdma"] = route == "p2pdma"
json.dump(cfg, open("/etc/cufile.json", "w"), indent=2)
PY
mkdir -p /mnt/gds
if [ "$FS" = xfs ]; then
  mkfs.xfs -q -f /dev/nvme0n1 && mount -o noatime /dev/nvme0n1 /mnt/gds
else
  mkfs.ext4 -q -F /dev/nvme0n1 && mount /dev/nvme0n1 /mnt/gds
fi
if [ "$ROUTE" = p2pdma ]; then
  # what the p2pdma role writes; the route works once a reboot puts it in effect (the fixture
  # reboots the node; fstab brings the mount back)
  cat > /etc/modprobe.d/zz-gdsfleet-p2pdma.conf <<'OPTIONS'
options nvme_core multipath=N
options nvidia NVreg_RegistryDwords="RMForceStaticBar1=1;RmForceDisableIomapWC=1;"
OPTIONS
  echo "/dev/nvme0n1 /mnt/gds $FS noatime 0 0" >> /etc/fstab
fi
"""

SETUP: dict[int, tuple[str, str, str]] = {  # node -> (route, patched, fs)
    1: ("nvfs", "1", "xfs"),
    2: ("p2pdma", "0", "xfs"),
    3: ("nvfs", "1", "xfs"),
    4: ("nvfs", "0", "xfs"),
    5: ("nvfs", "1", "xfs"),
    6: ("nvfs", "1", "ext4"),
}

STOP_SSHD = "kill $(cat /run/sshd.pid)"
NEW_HOST_KEY = (
    "set -e; rm -f /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub; "
    "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key; "
    "kill $(cat /run/sshd.pid); sleep 0.3; "
    "/usr/sbin/sshd -p $GDSFLEET_SSH_PORT -o ListenAddress=127.0.0.1 "
    "-o HostKey=/etc/ssh/ssh_host_ed25519_key -o PermitRootLogin=prohibit-password -o UseDNS=no"
)


def _reboot(f: Any, name: str, timeout: float = 90) -> None:
    """Simulated reboot of a lab node (the stand-in `reboot`; podman restarts it)."""
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    before = f.exec(name, boot_id).stdout
    f.exec(name, "reboot")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        ready = f.exec(name, f"gdsfleet-sim-ready && {boot_id}", check=False)
        if ready.returncode == 0 and ready.stdout.strip() and ready.stdout != before:
            return
    raise AssertionError(f"{name} did not come back from the reboot")


@pytest.fixture(scope="module")
def fleet(lab_fleet: Any, standin_repo: Any) -> Any:
    f = lab_fleet(8, PROFILES)
    names = f.names
    port = os.environ.get("GDSFLEET_REPO_PORT", "8470")

    def provision(i: int) -> None:
        route, patched, fs = SETUP[i]
        f.exec(names[i - 1], f"REPO_PORT={port} bash -s {route} {patched} {fs} <<'GDSFLEET'\n"
               f"{PROVISION}\nGDSFLEET")

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(provision, sorted(SETUP)))
    # the verification runtime (kvikio + cupy), installed by its role as site.yml would, on
    # the nodes verify reaches (01-06): 07 and 08 are made unreachable below and no test
    # reaches them again, so the role's venv and pip install there bought nothing
    run_verify_runtime_role(str(f.inventory), standin_repo, limit=",".join(names[:6]))
    _reboot(f, names[1])  # the p2pdma node: its module options take effect at boot
    # perturb
    f.exec(names[2], "modprobe -r nvidia_fs")
    f.exec(names[4], "printf '{\\n  \"properties\": {\\n    \"allow_compat_mode\": false,,\\n'"
                     " > /etc/cufile.json")
    f.exec(names[6], STOP_SSHD)
    f.exec(names[7], NEW_HOST_KEY)
    return f


@pytest.fixture(scope="module")
def first_run(fleet: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("verify")
    ledger = out / "ledger.sqlite"
    rc = main(["verify", "-i", str(fleet.inventory), "--ledger", str(ledger), "--io-size", "4M",
               "--retries", "1", "--connect-timeout", "5", "--ssh-config", "none",
               "--json", str(out / "report.json"), "--junit", str(out / "junit.xml"),
               "--html", str(out / "report.html"), "--prom-textfile", str(out / "textfile")])
    doc = json.loads((out / "report.json").read_text())
    return {"rc": rc, "doc": doc, "by": {n["name"]: n for n in doc["nodes"]}, "dir": out,
            "ledger": ledger, "names": fleet.names, "ports": [n.port for n in fleet.nodes]}


def _failing(node: dict[str, Any]) -> set[str]:
    return {c["id"] for c in node["checks"] if c["status"] == "fail"}


def test_exit_code_and_summary(first_run: dict[str, Any]) -> None:
    assert first_run["rc"] == Exit.UNREACHABLE
    s = first_run["doc"]["summary"]
    assert (s["total"], s["compliant"], s["not_compliant"], s["unreachable"]) == (8, 2, 4, 2)


def test_compliant_nodes(first_run: dict[str, Any]) -> None:
    n = first_run["names"]
    for name, route in ((n[0], "nvfs"), (n[1], "p2pdma")):
        node = first_run["by"][name]
        assert node["compliant"], (name, _failing(node))
        assert node["route"] == route
        assert node["io_test"]["path_taken"] == "direct"
        assert node["io_test"]["verified"] is True


@pytest.mark.parametrize(
    ("index", "check"),
    [(2, "nvfs.module.loaded"), (3, "nvfs.nvme.patched"), (4, "cufile.json.valid"),
     (5, "fs.mount.options")],
)
def test_not_compliant_nodes_name_the_cause(first_run: dict[str, Any], index: int,
                                            check: str) -> None:
    node = first_run["by"][first_run["names"][index]]
    assert node["reachable"] is True
    assert node["compliant"] is False
    assert check in _failing(node)
    if check in ("nvfs.module.loaded", "nvfs.nvme.patched"):
        # no direct path without the module or the patched driver: the I/O test proves it
        assert node["io_test"]["path_taken"] != "direct"


def test_unpatched_nvme_is_compat(first_run: dict[str, Any]) -> None:
    node = first_run["by"][first_run["names"][3]]
    assert node["route"] == "compat"


def test_unreachable_nodes(first_run: dict[str, Any]) -> None:
    names = first_run["names"]
    closed = first_run["by"][names[6]]
    assert closed["reachable"] is False
    assert "connection refused" in closed["error"]
    changed = first_run["by"][names[7]]
    assert changed["reachable"] is False
    assert "CHANGED" in changed["error"]
    port = first_run["ports"][7]
    assert f"ssh-keygen -R '[127.0.0.1]:{port}' -f " in changed["error"]


def test_junit_and_ledger_agree(first_run: dict[str, Any]) -> None:
    root = ET.parse(first_run["dir"] / "junit.xml").getroot()  # noqa: S314 - our own output
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == sorted(first_run["names"])
    with Ledger.open(first_run["ledger"]) as led:
        latest = {x["node"]: x for x in led.latest()}
        assert sorted(latest) == sorted(first_run["names"])
        for name, node in first_run["by"].items():
            assert latest[name]["compliant"] == node["compliant"]
            assert latest[name]["reachable"] == node["reachable"]
            assert latest[name]["run_id"] == first_run["doc"]["run_id"]
            if node["reachable"]:
                raw = led.raw_for(latest[name]["id"])
                assert raw, name  # raw outputs kept beside the parsed result
        assert led.drift() == []  # first run: nothing to drift from


def test_gdsio_runs_both_transfers_and_the_floor_decides(
        first_run: dict[str, Any], fleet: Any, tmp_path: Any) -> None:
    names = first_run["names"]
    common = ["verify", "-i", str(fleet.inventory), "--no-ledger", "--io-size", "4M", "-q",
              "--ssh-config", "none", "--gdsio", "--gdsio-size", "8M", "--gdsio-io-size", "1M",
              "--gdsio-workers", "2"]
    policy = tmp_path / "policy.yml"
    policy.write_text("gdsio_min_ratio: 1000\n")
    rc = main([*common, "--limit", f"{names[0]},{names[3]}", "--policy", str(policy),
               "--json", str(tmp_path / "floor.json"), "--html", str(tmp_path / "floor.html"),
               "--prom-textfile", str(tmp_path / "prom")])
    assert rc == Exit.NOT_COMPLIANT
    by = {n["name"]: n for n in json.loads((tmp_path / "floor.json").read_text())["nodes"]}
    direct = by[names[0]]
    g = direct["gdsio"]
    assert (g["io_type"], g["file_size_bytes"], g["io_size_bytes"], g["workers"]) == (
        "write", 8 << 20, 1 << 20, 2)
    assert g["file"].startswith("/mnt/gds/")
    assert [(r["transfer"], r["xfer_type"]) for r in g["runs"]] == [("gds", 0), ("cpu", 1)]
    gds, cpu = g["runs"]
    assert all(r["throughput_gibps"] > 0 and r["ops"] == 8 for r in g["runs"])
    assert g["ratio"] == round(gds["throughput_gibps"] / cpu["throughput_gibps"], 3)
    assert g["min_ratio"] == 1000
    check = {c["id"]: c for c in direct["checks"]}["gdsio.ratio"]
    assert check["status"] == "fail" and "floor 1000" in check["message"]
    assert direct["compliant"] is False and _failing(direct) == {"gdsio.ratio"}
    assert "IoType: WRITE XferType: GPUD Threads: 2" in direct["raw"]["gdsio"]
    # the same figures reach the Prometheus textfile (its own parser) and the HTML page
    from prometheus_client.parser import text_string_to_metric_families

    prom = {(x.name, tuple(sorted(x.labels.items()))): x.value
            for f in text_string_to_metric_families((tmp_path / "prom" / "gdsfleet.prom")
                                                    .read_text()) for x in f.samples}
    for run in g["runs"]:
        key = (("node", names[0]), ("transfer", run["transfer"]))
        assert prom[("gdsfleet_gdsio_throughput_bytes_per_second", key)] == pytest.approx(
            run["throughput_gibps"] * 2**30)
    assert prom[("gdsfleet_gdsio_ratio", (("node", names[0]),))] == pytest.approx(g["ratio"])
    assert prom[("gdsfleet_gdsio_min_ratio", (("node", names[0]),))] == 1000
    page = (tmp_path / "floor.html").read_text()
    cell = (f'{gds["throughput_gibps"]:.2f} / {cpu["throughput_gibps"]:.2f} '
            f'({g["ratio"]:.2f}, min 1000.00)')
    assert cell in page and f'id="failing-{names[0]}"' in page and "gdsio.ratio" in page
    # the test file is gone
    assert fleet.exec(names[0], "ls -A /mnt/gds").stdout.strip() == ""
    # compat node with allow_compat_mode false: gdsio's GPU Direct run is refused, no ratio
    compat = by[names[3]]["gdsio"]
    assert [r["transfer"] for r in compat["runs"]] == ["cpu"] and compat["ratio"] is None
    check = {c["id"]: c for c in by[names[3]]["checks"]}["gdsio.ratio"]
    assert check["status"] == "fail" and "file register error" in check["message"]
    # no floor: the figures are reported and the check passes
    rc = main([*common, "--limit", names[0], "--json", str(tmp_path / "plain.json")])
    node = json.loads((tmp_path / "plain.json").read_text())["nodes"][0]
    assert rc == Exit.OK and node["compliant"] is True
    assert node["gdsio"]["min_ratio"] is None and node["gdsio"]["ratio"] is not None
    assert {c["id"]: c["status"] for c in node["checks"]}["gdsio.ratio"] == "pass"


def test_html_and_textfile_of_the_real_run(first_run: dict[str, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The nvfs node's real nvidia-fs counters and I/O figures reach the textfile; the same
    run rendered later from the ledger gives the same figures."""
    from prometheus_client.parser import text_string_to_metric_families

    names, out = first_run["names"], first_run["dir"]

    def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples
                if s.name not in ("gdsfleet_report_generated_timestamp_seconds",)}

    live = values((out / "textfile" / "gdsfleet.prom").read_text())
    node = first_run["by"][names[0]]
    key = ("gdsfleet_nvfs_io_test_operations",
           (("attempt", "direct"), ("node", names[0]), ("op", "write")))
    assert live[key] == node["io_test"]["evidence"]["counter_delta_direct"]["writes_n"] > 0
    key = ("gdsfleet_io_test_throughput_bytes_per_second",
           (("direction", "read"), ("node", names[0])))
    assert live[key] == pytest.approx(node["io_test"]["read_gbps"] * 1e9)
    sim = "true" if first_run["by"][names[1]].get("simulated") else "false"
    assert live[("gdsfleet_node_compliant", (("io_path", "direct"), ("node", names[1]),
                                             ("route", "p2pdma"), ("simulated", sim)))] == 1
    assert main(["report", first_run["doc"]["run_id"], "--ledger", str(first_run["ledger"]),
                 "--prom-textfile", str(out / "again")]) == Exit.OK
    capsys.readouterr()
    assert values((out / "again" / "gdsfleet.prom").read_text()) == live
    page = (out / "report.html").read_text()
    assert f'id="failing-{names[2]}"' in page and f'id="failing-{names[0]}"' not in page


def _attest_role(inventory: str, limit: str) -> None:
    """The role gdsfleet.gds.attest from this checkout, as site.yml runs it."""
    import subprocess
    import tempfile
    from pathlib import Path

    from tests.harness import lab as labmod

    with tempfile.TemporaryDirectory(prefix="gdsfleet-attest-") as tmp:
        play = Path(tmp) / "attest.yml"
        play.write_text("- hosts: all\n  gather_facts: false\n  roles:\n    - attest\n")
        env = labmod.podman_env()
        env.update(ANSIBLE_ROLES_PATH=str(labmod.ROOT / "roles"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_PIPELINING="1")
        proc = subprocess.run([str(labmod.ROOT / ".venv" / "bin" / "ansible-playbook"), "-i",
                               inventory, str(play), "--limit", limit, "-e",
                               "ansible_python_interpreter=/usr/bin/python3"],
                              capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_attest_between_the_runs(first_run: dict[str, Any], fleet: Any,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 44 on a lab node: verify left its record; gdsfleet-attest (installed by its role)
    says ok, then names the regression and its fix, then ok again; status --attest records 01
    (ok) and 03 (last verify not compliant).
    Slow: one run of the role on a lab node and a few commands in it (about 30 s idle)."""
    names, ledger = first_run["names"], str(first_run["ledger"])
    assert first_run["by"][names[0]]["attest_record"]["written"] is True
    _attest_role(str(fleet.inventory), names[0])
    ok = fleet.exec(names[0], "/usr/local/sbin/gdsfleet-attest", check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"ok: {names[0]} as verified at ")
    assert "[SIMULATED node]" in ok.stdout
    fleet.exec(names[0], "modprobe -r nvidia_fs")
    try:
        bad = fleet.exec(names[0], "/usr/local/sbin/gdsfleet-attest", check=False)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert bad.stdout.splitlines() == [
            "attest.nvfs.loaded: nvidia-fs, loaded -> not loaded; fix: `modprobe nvidia_fs` (see "
            "`dkms status`), then `provisioner verify` the node"]
    finally:
        fleet.exec(names[0], "modprobe nvidia_fs")
    assert fleet.exec(names[0], "/usr/local/sbin/gdsfleet-attest", check=False).returncode == 0
    capsys.readouterr()
    rc = main(["status", "-i", str(fleet.inventory), "--ledger", ledger, "--attest", "--limit",
               f"{names[0]},{names[2]}", "--json"])
    rows = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert rc == Exit.OK
    assert rows[names[0]]["attest"]["status"] == "ok"
    assert rows[names[2]]["attest"]["status"] == "unverified"
    assert rows[names[2]]["attest"]["regressions"] == ["attest.unverified"]


def test_second_run_shows_drift(first_run: dict[str, Any], fleet: Any,
                                capsys: pytest.CaptureFixture[str]) -> None:
    names = first_run["names"]
    fleet.exec(names[0], "modprobe -r nvidia_fs")
    ledger = str(first_run["ledger"])
    out = first_run["dir"] / "second"
    rc = main(["verify", "-i", str(fleet.inventory), "--ledger", ledger, "--io-size", "4M",
               "--limit", ",".join(names[:6]), "-q", "--ssh-config", "none",
               "--html", str(out / "report.html"), "--prom-textfile", str(out)])
    assert rc == Exit.NOT_COMPLIANT
    # the live reports carry the ledger's drift: the HTML marks it, the textfile says 1
    from prometheus_client.parser import text_string_to_metric_families

    drift = {s.labels["node"]: s.value for f in text_string_to_metric_families(
        (out / "gdsfleet.prom").read_text()) if f.name == "gdsfleet_node_drift"
        for s in f.samples}
    assert drift == {n: (1.0 if n == names[0] else 0.0) for n in names[:6]}
    assert f'id="failing-{names[0]}"' in (out / "report.html").read_text()
    capsys.readouterr()
    assert main(["status", "--ledger", ledger, "--json"]) == Exit.OK
    status = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert status[names[0]]["result"] == "NOT COMPLIANT"
    assert status[names[0]]["drift"][0].startswith("compliance lost")
    assert any("+nvfs.module.loaded" in d for d in status[names[0]]["drift"])
    drifted = {n for n, s in status.items() if s["drift"]}
    assert drifted == {names[0]}
    assert main(["status", "--ledger", ledger, "--fail-on-drift"]) == Exit.NOT_COMPLIANT
    capsys.readouterr()
    assert main(["history", names[0], "--ledger", ledger, "--json"]) == Exit.OK
    hist = json.loads(capsys.readouterr().out)["history"]
    assert [h["compliant"] for h in hist] == [False, True]
