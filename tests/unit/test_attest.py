"""``attest`` (issue 44) on simulated node trees: every regression kind, its line and fix, the
exit codes, the JSON document, the textfile and the NFD file. The trees are conformance
profiles' (tests/conformance/simnode.py, SYNTHETIC) completed by tests/unit/attestnode.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.unit import attestnode as an

NODE_LINE = re.compile(r"^[a-z][a-z.]+: .+; fix: .+$")


@pytest.fixture
def node(tmp_path: Path) -> Path:
    an.build(tmp_path)
    an.write_record(tmp_path)
    return tmp_path


def _one(root: Path) -> tuple[int, list[str]]:
    code, out, err = an.attest(root)
    assert not err, err
    lines = out.splitlines()
    for line in lines:
        assert len(line) <= 200, line
        assert not re.search(r"[\x00-\x1f\x7f]", line), line
    return code, lines


def test_a_node_as_verified_is_ok(node: Path) -> None:
    code, lines = _one(node)
    assert code == 0
    assert lines == [lines[0]] and lines[0].startswith("ok: gds-01 as verified at ")
    assert "nvidia-fs 2.26.6" in lines[0] and "xfs on /mnt/gds" in lines[0]


def test_never_verified_says_so_and_exits_1(tmp_path: Path) -> None:
    an.build(tmp_path)
    code, lines = _one(tmp_path)
    assert code == 1
    assert lines == ["attest.unverified: last verify, compliant -> never (no record "
                     "/var/lib/gdsfleet/verified.json); fix: `provisioner verify` the node (as "
                     "root: it writes the record)"]


def test_last_verify_not_compliant_is_not_ok(tmp_path: Path) -> None:
    an.build(tmp_path)
    an.write_record(tmp_path, compliant=False)
    code, lines = _one(tmp_path)
    assert code == 1
    assert lines[0].startswith("attest.unverified: last verify, compliant -> NOT compliant at ")
    assert "(failing: io.direct_path)" in lines[0] and "fix the failing checks" in lines[0]


def _regressed(root: Path, rid: str) -> str:
    code, lines = _one(root)
    assert code == 1, lines
    assert [ln.split(":", 1)[0] for ln in lines] == [rid], lines
    assert NODE_LINE.match(lines[0]), lines[0]
    return lines[0]


def test_nvidia_fs_unloaded(node: Path) -> None:
    an.unlink_tree(node / "sys/module/nvidia_fs")
    line = _regressed(node, "attest.nvfs.loaded")
    assert "nvidia-fs, loaded -> not loaded; fix: `modprobe nvidia_fs`" in line


def test_nvidia_fs_version_changed(node: Path) -> None:
    an.put(node, "/sys/module/nvidia_fs/version", "2.28.4\n")
    line = _regressed(node, "attest.nvfs.version")
    assert "nvidia-fs, 2.26.6 srcversion 6E1B2C3D4F5A -> 2.28.4 srcversion 6E1B2C3D4F5A" in line


def test_nvidia_fs_rebuilt_from_other_sources(node: Path) -> None:
    an.put(node, "/sys/module/nvidia_fs/srcversion", "FFFFFFFFFFFFFFFFFFFFFFF\n")
    assert "srcversion FFFF" in _regressed(node, "attest.nvfs.version")


def test_the_storage_module_nvidia_fs_registers_with_was_replaced(node: Path) -> None:
    # the inbox nvme replacing DOCA's GDS-patched mlnx-nvme: another srcversion
    an.put(node, "/sys/module/nvme/srcversion", "0000000000000000000000A\n")
    line = _regressed(node, "attest.nvfs.modules")
    assert "nvme ? srcversion A1B2C3D4E5F6 -> nvme ? srcversion 000000000000" in line
    an.unlink_tree(node / "sys/module/nvme")
    assert "-> nvme not loaded" in _regressed(node, "attest.nvfs.modules")


def test_a_module_loaded_since_is_no_regression(node: Path) -> None:
    an.put(node, "/sys/module/rpcrdma/srcversion", "1111\n")
    assert _one(node)[0] == 0


def test_another_kernel(node: Path) -> None:
    an.put(node, "/proc/sys/kernel/osrelease", "6.8.0-62-generic\n")
    line = _regressed(node, "attest.kernel")
    assert "running kernel, 6.8.0-60-generic -> 6.8.0-62-generic" in line


def test_cufile_json_edited(node: Path) -> None:
    path = node / "etc/cufile.json"
    path.write_text(path.read_text().replace('"ERROR"', '"INFO"'))
    line = _regressed(node, "attest.cufile.digest")
    assert line.startswith("attest.cufile.digest: /etc/cufile.json, sha256:")


def test_cufile_json_allows_compat_mode_again(node: Path) -> None:
    path = node / "etc/cufile.json"
    path.write_text(path.read_text().replace('"allow_compat_mode": false',
                                             '"allow_compat_mode": true'))
    code, lines = _one(node)
    assert code == 1
    assert [ln.split(":", 1)[0] for ln in lines] == ["attest.cufile.digest",
                                                     "attest.cufile.compat"]
    assert "properties.allow_compat_mode, false -> true; fix: set " in lines[1]


def test_cufile_json_removed(node: Path) -> None:
    (node / "etc/cufile.json").unlink()
    code, lines = _one(node)
    assert code == 1 and "-> absent" in lines[0]
    assert "false -> unknown (absent)" in lines[1]


def test_gds_mount_gone(node: Path) -> None:
    mi = node / "proc/self/mountinfo"
    mi.write_text("".join(ln + "\n" for ln in mi.read_text().splitlines() if "/mnt/gds" not in ln))
    line = _regressed(node, "attest.mount")
    assert "-> not mounted (/mnt/gds is on /)" in line and "fix: mount it as verified" in line


def test_gds_mount_with_other_options_or_device(node: Path) -> None:
    mi = node / "proc/self/mountinfo"
    text = mi.read_text()
    mi.write_text(text.replace("/mnt/gds rw,noatime", "/mnt/gds rw,relatime"))
    assert ("GDS mount /mnt/gds, xfs noatime,rw /dev/nvme0n1 (259:0) -> xfs relatime,rw "
            "/dev/nvme0n1 (259:0); fix:") in _regressed(node, "attest.mount")
    mi.write_text(text.replace("259:0", "259:1"))
    assert "(259:1)" in _regressed(node, "attest.mount")


def test_libcufile_replaced(node: Path) -> None:
    lib = next(node.glob("usr/local/cuda-*/targets/x86_64-linux/lib/libcufile.so.1*"))
    lib.write_bytes(lib.read_bytes() + b"patched")
    assert ("libcufile, libcufile.so.1.15.1 (89 bytes) in /usr/local/c... -> "
            "libcufile.so.1.15.1 (96") in _regressed(node, "attest.libcufile")
    # another release installed, the link moved to it
    new = lib.with_name("libcufile.so.1.16.0")
    new.write_bytes(b"x")
    link = lib.with_name("libcufile.so.0")
    link.unlink()
    link.symlink_to(new.name)
    assert "-> libcufile.so.1.16.0 (1 bytes) in /usr/local/cu" in _regressed(
        node, "attest.libcufile")


def test_several_regressions_one_line_each(node: Path) -> None:
    an.unlink_tree(node / "sys/module/nvidia_fs")
    an.put(node, "/proc/sys/kernel/osrelease", "6.11.0-1-generic\n")
    (node / "etc/cufile.json").write_text("{}")
    code, lines = _one(node)
    assert code == 1
    assert [ln.split(":", 1)[0] for ln in lines] == [
        "attest.kernel", "attest.nvfs.loaded", "attest.cufile.digest", "attest.cufile.compat"]


@pytest.mark.parametrize("pid", ["host-ubuntu2404-p2pdma-local", "host-rhel9-nvfs-local",
                                 "netfs-host-ubuntu2404-nfs-rdma",
                                 "operator-host-driver-rhel9-nvfs",
                                 "host-debian12-nvfs-raid0-cuda128"])
def test_other_profiles_attest_ok_then_regress(tmp_path: Path, pid: str) -> None:
    m = an.build(tmp_path, pid)
    an.write_record(tmp_path, route=m["mount"]["fstype"])
    assert _one(tmp_path)[0] == 0
    mi = tmp_path / "proc/self/mountinfo"
    mi.write_text(mi.read_text().replace(" /mnt/gds ", " /mnt/other "))
    assert _one(tmp_path)[1][0].startswith("attest.mount: ")


def test_p2pdma_node_without_nvidia_fs_stays_ok_and_flags_it_loaded(tmp_path: Path) -> None:
    an.build(tmp_path, "host-ubuntu2404-p2pdma-local")
    an.write_record(tmp_path, route="p2pdma")
    assert _one(tmp_path)[0] == 0
    an.put(tmp_path, "/sys/module/nvidia_fs/version", "2.28.4\n")
    assert "nvidia-fs, not loaded (as verified) -> loaded" in _regressed(
        tmp_path, "attest.nvfs.loaded")


def test_json_document(node: Path) -> None:
    an.put(node, "/proc/sys/kernel/osrelease", "6.8.0-62-generic\n")
    code, out, _ = an.attest(node, "--json")
    doc = json.loads(out)
    assert code == 1
    assert set(doc) >= {"schema", "node", "status", "verified_at", "checked_at", "simulated",
                        "regressions", "job"}
    assert doc["schema"] == "gdsfleet.attest/1" and doc["status"] == "regressed"
    assert doc["node"] == "gds-01" and doc["simulated"] is False and doc["job"] is None
    assert isinstance(doc["verified_at"], float) and doc["checked_at"] >= doc["verified_at"]
    assert doc["regressions"] == [{"id": "attest.kernel", "what": "running kernel",
                                   "expected": "6.8.0-60-generic",
                                   "observed": "6.8.0-62-generic",
                                   "fix": "boot the verified kernel, or `provisioner verify` "
                                          "the node"}]


def test_simulated_record_says_so(tmp_path: Path) -> None:
    an.build(tmp_path)
    an.write_record(tmp_path, simulated=True)
    code, out, _ = an.attest(tmp_path)
    assert code == 0 and "[SIMULATED node]" in out
    assert json.loads(an.attest(tmp_path, "--json")[1])["simulated"] is True


def test_textfile_metrics(node: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    prom = node / "attest.prom"
    an.put(node, "/proc/driver/nvidia-fs/stats",
           (node / "proc/driver/nvidia-fs/stats").read_text())
    assert an.attest(node, "--textfile", str(prom))[0] == 0
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["gdsfleet_attest_ok"].samples[0].value == 1
    assert fams["gdsfleet_attest_regressions"].samples[0].value == 0
    assert "gdsfleet_attest_verified_timestamp_seconds" in fams
    assert "gdsfleet_attest_simulated" in fams
    assert oct(prom.stat().st_mode & 0o777) == "0o644"
    an.unlink_tree(node / "sys/module/nvidia_fs")
    assert an.attest(node, "--textfile", str(prom))[0] == 1
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["gdsfleet_attest_ok"].samples[0].value == 0
    assert [(s.labels, s.value) for s in fams["gdsfleet_attest_regression"].samples] == [
        ({"check": "attest.nvfs.loaded"}, 1)]
    assert not [p for p in os.listdir(node) if p.startswith(".attest.prom")]  # no temp left


def test_textfile_nvfs_counters_with_rw_stats(node: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.unit import nodefacts as nf

    an.put(node, "/proc/driver/nvidia-fs/stats", nf.stats_io(write_mib=64, read_mib=32))
    prom = node / "attest.prom"
    an.attest(node, "--textfile", str(prom))
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    got = {(s.labels["path"], s.labels["op"]): s.value for s in fams["gdsfleet_nvfs_bytes"].samples}
    assert got == {("nvfs", "read"): 32 << 20, ("nvfs", "write"): 64 << 20}


def test_nfd_labels_follow_the_verdict(node: Path, tmp_path: Path) -> None:
    feat = tmp_path / "features.d" / "gdsfleet-gds"
    feat.parent.mkdir()
    an.write_record(node, labels={"gds.feature.node.kubernetes.io/compliant": "true",
                                  "gds.feature.node.kubernetes.io/io-path": "direct",
                                  "gds.feature.node.kubernetes.io/route": "nvfs"})
    assert an.attest(node, "--nfd", str(feat))[0] == 0
    text = feat.read_text()
    assert "gds.feature.node.kubernetes.io/io-path=direct" in text
    assert "gds.feature.node.kubernetes.io/compliant=true" in text
    assert re.search(r"^# \+expiry-time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text, re.M)
    an.unlink_tree(node / "sys/module/nvidia_fs")
    assert an.attest(node, "--nfd", str(feat))[0] == 1
    text = feat.read_text()
    assert "io-path" not in text  # the `gds direct` label is gone the moment it regressed
    assert "gds.feature.node.kubernetes.io/compliant=false" in text
    assert "gds.feature.node.kubernetes.io/regressed=true" in text


def test_exit_70_when_a_file_cannot_be_read(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open
    record = str(node / "var/lib/gdsfleet/verified.json")

    def deny(path: str, *a: object, **k: object) -> int:  # EACCES, as for a non-root caller
        if str(path) == record:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", deny)
    code, out, err = an.attest(node)
    assert code == 70 and not out
    assert "cannot judge the node: cannot read /var/lib/gdsfleet/verified.json" in err


def test_bad_options_exit_70(node: Path) -> None:
    for argv in (["--deadline", "0"], ["--since", "yesterday", "--job", "1"], ["--job-start"],
                 ["--pid", "-3"], ["--job", "../x", "--since", "0"]):
        code, out, err = an.attest(node, *argv)
        assert code == 70 and not out and err.startswith("gdsfleet-attest: "), (argv, err)


def test_an_unwritable_output_is_attests_own_failure(node: Path) -> None:
    code, out, err = an.attest(node, "--textfile", str(node / "no" / "such" / "dir" / "x.prom"))
    assert code == 70 and "output NOT written" in err


def test_the_deadline_is_hard(node: Path) -> None:
    """A read that hangs (a stand-in: snapshot made to sleep, as a dead device would) ends at
    --deadline with exit 70 and one line, in a child process (the watchdog exits the process)."""
    import subprocess
    import sys
    import time

    code = (
        "import sys, time\n"
        "from provisioner.commands.attest import modules\n"
        "mods = modules()\n"
        "mods['attest_state'].snapshot = lambda *a, **k: time.sleep(30)\n"
        f"sys.exit(mods['attest'].main(['--root', {str(node)!r}, '--deadline', '0.5'], mods))\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    took = time.monotonic() - t0
    assert proc.returncode == 70 and proc.stdout == ""
    assert proc.stderr.startswith("gdsfleet-attest: deadline of 0.5s hit while reading the "
                                  "node's state; the node was not judged (exit 70)")
    assert took < 20  # not the 30 s the read would take (start-up included, under load)
