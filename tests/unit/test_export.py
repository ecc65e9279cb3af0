"""``provisioner export deepspeed|env`` on ledgers written through the real Ledger API.

Nodes: a proven direct-path node (nvfs, nvidia-fs counters as proof), a second proven node,
the real H100 report (docs/evidence/h100/verify-local.json: compat, cuFile refused,
NOT compliant), an unreachable node, a node whose I/O ran with compat off but without proof,
a proven node that fails another check, and a node never verified.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.commands import export
from provisioner.exitcodes import Exit
from provisioner.store import Ledger
from provisioner.verify.model import CheckResult, IoTestResult, NodeReport
from provisioner.verify.node import unreachable_report

REPO = Path(__file__).resolve().parents[2]
H100_REPORT = REPO / "docs" / "evidence" / "h100" / "verify-local.json"


def _direct(name: str, *, proof: str | None = "nvfs_counters",
            compliant: bool = True, failing: str | None = None,
            mount: str = "/mnt/gds") -> dict[str, Any]:
    checks = [CheckResult("io.direct_path", "pass", "direct (proven)", "direct", "ok")]
    if failing:
        checks.append(CheckResult(failing, "fail", "x", "y", "fix it"))
    return NodeReport(
        name=name, reachable=True, compliant=compliant, route="nvfs", checks=checks,
        io_test=IoTestResult(path_taken="direct", verified=True, bytes=1 << 26, path=mount,
                             evidence={"proof": proof} if proof else {},
                             reason="direct path proven" if proof else "no counter moved"),
        facts={"cufile": {"present": True, "valid": True, "path": "/etc/cufile.json",
                          "allow_compat_mode": False},
               "io_path": mount,
               # what the gather of an nvfs node whose counters moved says (the proof must
               # agree with it: provisioner.verify.proof)
               "gpu": {"driver_loaded": True, "count": 1}, "nvfs": {"loaded": True}},
    ).to_dict()


def _h100(name: str = "h100") -> dict[str, Any]:
    doc = json.loads(H100_REPORT.read_text())["nodes"][0]
    return {**doc, "name": name}


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        # an older proven record of gpu-04 must not count: its latest is unreachable
        led.record_verification(run, _direct("gpu-04"))
        for doc in (_direct("gpu-01"), _direct("gpu-02"), _h100("gpu-03"),
                    unreachable_report("gpu-04", "connection refused").to_dict(),
                    _direct("gpu-05", proof=None, compliant=False),
                    _direct("gpu-06", compliant=False, failing="reboot.pending")):
            led.record_verification(run, doc)
        led.finish_run(run, "done")
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _ds(capsys: pytest.CaptureFixture[str], ledger: Path, *argv: str) -> tuple[int, Any, str]:
    code, out, err = _run(capsys, "deepspeed", "--ledger", str(ledger), *argv)
    if code in (Exit.OK, Exit.NOT_COMPLIANT):  # the ledger read, named first (issue 30)
        first, _, err = err.partition("\n")
        assert first == f"ledger {ledger}", first
    return code, (json.loads(out) if out.strip() else None), err


# ------------------------------------------------------------------ deepspeed, one node
def test_proven_node_gets_use_gds_with_current_key_names(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-01")
    assert code == Exit.OK and err == ""
    assert doc == {"aio": {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
                           "single_submit": False, "overlap_events": True, "use_gds": True}}


@pytest.mark.parametrize(("version", "key"), [
    ("0.15.0", "thread_count"), ("0.16.3", "thread_count"), ("0.16.4", "intra_op_parallelism"),
    ("v0.19.5", "intra_op_parallelism"), ("current", "intra_op_parallelism"),
])
def test_key_name_follows_the_deepspeed_release(
        ledger: Path, capsys: pytest.CaptureFixture[str], version: str, key: str) -> None:
    code, doc, _ = _ds(capsys, ledger, "--node", "gpu-01", "--deepspeed-version", version)
    assert code == Exit.OK
    other = {"thread_count", "intra_op_parallelism"} - {key}
    assert doc["aio"][key] == 1 and not other & set(doc["aio"])


def test_release_without_use_gds_is_refused(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-01", "--deepspeed-version", "0.14.4")
    assert code == Exit.USAGE and doc is None
    assert "no aio.use_gds" in err and "upgrade DeepSpeed to 0.15.0" in err


def test_newer_release_than_checked_says_so(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-01", "--deepspeed-version", "0.21.0")
    assert code == Exit.OK and "intra_op_parallelism" in doc["aio"]
    assert "newer than the newest release checked (0.19.5)" in err


@pytest.mark.parametrize(("node", "why"), [
    ("gpu-03", "direct path not proven at"),  # the real H100: compat
    ("gpu-04", "unreachable in its latest verification"),
    ("gpu-05", "direct path not proven"),  # compat off, but no proof
    ("gpu-99", "never verified in the ledger"),
])
def test_unproven_nodes_get_false_and_the_reason_on_stderr(
        ledger: Path, capsys: pytest.CaptureFixture[str], node: str, why: str) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", node)
    assert code == Exit.OK
    assert doc["aio"]["use_gds"] is False
    assert err.startswith(f"provisioner export deepspeed: {node}: use_gds false: {why}")
    code, doc, _ = _ds(capsys, ledger, "--node", node, "--require-gds")
    assert code == Exit.NOT_COMPLIANT and doc["aio"]["use_gds"] is False


def test_h100_reason_names_cufile_refusal(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = _ds(capsys, ledger, "--node", "gpu-03")
    assert "route compat, I/O path compat" in err
    assert "nvidia-fs driver is not loaded" in err


def test_proven_but_not_compliant_keeps_use_gds_with_a_note(
        ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-06")
    assert code == Exit.OK and doc["aio"]["use_gds"] is True
    assert "NOT COMPLIANT (failing/warning: reboot.pending)" in err


def test_stale_proof_is_not_used(ledger: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    later = export.utc_now() + timedelta(days=8)
    monkeypatch.setattr(export, "utc_now", lambda: later)
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-01")
    assert doc["aio"]["use_gds"] is False
    assert "proof is stale" in err and "8.0 days ago" in err
    for max_age in ("30d", "0"):
        _, doc, err = _ds(capsys, ledger, "--node", "gpu-01", "--max-age", max_age)
        assert doc["aio"]["use_gds"] is True and err == ""


@pytest.mark.parametrize("bad", ["soon", "-1d", "7w"])
def test_bad_max_age_is_refused(ledger: Path, capsys: pytest.CaptureFixture[str],
                                bad: str) -> None:
    code, doc, err = _ds(capsys, ledger, "--node", "gpu-01", f"--max-age={bad}")
    assert code == Exit.USAGE and doc is None and "--max-age" in err


def test_ledger_is_read_only_and_must_exist(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope" / "ledger.sqlite"
    code, _, err = _ds(capsys, missing, "--node", "gpu-01")
    assert code == Exit.LEDGER and "does not exist" in err
    assert not missing.parent.exists()
    before = ledger.read_bytes()
    _ds(capsys, ledger, "--node", "gpu-01", "--node", "gpu-03")
    assert ledger.read_bytes() == before


# ------------------------------------------------------------------ deepspeed, groups
def _inventory(tmp_path: Path, **host_vars: dict[str, Any]) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    hosts: dict[str, Any] = {f"gpu-0{i}": dict(host_vars.get(f"gpu-0{i}") or {})
                             for i in (1, 2, 3, 4)}
    (inv / "hosts.yml").write_text(json.dumps(
        {"all": {"children": {"gpu_nodes": {"hosts": hosts},
                              "rack_a": {"hosts": {"gpu-01": {}, "gpu-02": {}}}}}}))
    (inv / "group_vars" / "gpu_nodes.yml").write_text(
        "gds_deepspeed_aio_block_size: 2097152\ngds_deepspeed_aio_queue_depth: 32\n"
        "gds_deepspeed_aio_intra_op_parallelism: 4\n")
    return inv


def test_group_that_agrees_gets_one_block_from_inventory_settings(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path)
    code, doc, err = _ds(capsys, ledger, "-i", str(inv), "--group", "rack_a")
    assert code == Exit.OK and err == ""
    assert doc == {"aio": {"block_size": 2097152, "queue_depth": 32, "intra_op_parallelism": 4,
                           "single_submit": False, "overlap_events": True, "use_gds": True}}


def test_group_that_differs_prints_no_block_and_says_which_nodes(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path, **{"gpu-02": {"gds_deepspeed_aio_queue_depth": 64}})
    code, doc, err = _ds(capsys, ledger, "-i", str(inv), "--limit", "gpu_nodes")
    assert code == Exit.NOT_COMPLIANT and doc is None
    assert "gpu-03: use_gds false" in err and "gpu-04: use_gds false" in err
    assert "queue_depth 32 on gpu-01, gpu-03, gpu-04, 64 on gpu-02" in err
    assert "use_gds true on gpu-01, gpu-02, false on gpu-03, gpu-04" in err
    assert "--per-node" in err
    code, doc, _ = _ds(capsys, ledger, "-i", str(inv), "--limit", "gpu_nodes", "--per-node")
    assert code == Exit.OK
    assert {n: b["aio"]["use_gds"] for n, b in doc["nodes"].items()} == {
        "gpu-01": True, "gpu-02": True, "gpu-03": False, "gpu-04": False}
    assert doc["nodes"]["gpu-02"]["aio"]["queue_depth"] == 64


@pytest.mark.parametrize(("var", "value", "needle"), [
    ("gds_deepspeed_aio_thread_count", 4, "use gds_deepspeed_aio_intra_op_parallelism"),
    ("gds_deepspeed_aio_block_size", 1000, "not a multiple of 4096"),
    ("gds_deepspeed_aio_queue_depth", 0, "whole number >= 1"),
    ("gds_deepspeed_aio_single_submit", "maybe", "must be true or false"),
])
def test_bad_inventory_settings_are_refused(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], var: str,
        value: Any, needle: str) -> None:
    inv = _inventory(tmp_path, **{"gpu-01": {var: value}})
    code, doc, err = _ds(capsys, ledger, "-i", str(inv), "--node", "gpu-01")
    assert code == Exit.USAGE and doc is None
    assert "inventory host 'gpu-01'" in err and needle in err


def test_selection_errors(tmp_path: Path, ledger: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _ds(capsys, ledger, "--group", "gpu_nodes")
    assert code == Exit.USAGE and "needs -i INVENTORY" in err
    code, _, err = _ds(capsys, ledger)
    assert code == Exit.USAGE and "--node NAME" in err
    inv = _inventory(tmp_path)
    code, _, err = _ds(capsys, ledger, "-i", str(inv), "--node", "gpu-77")
    assert code == Exit.USAGE and "gpu-77 not in the inventory" in err


# ------------------------------------------------------------------ env
def test_env_of_a_proven_node(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "env", "--ledger", str(ledger), "--node", "gpu-01")
    assert code == Exit.OK and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("# gdsfleet: gpu-01: direct path proven at ")
    assert lines[1:] == ["export KVIKIO_COMPAT_MODE=OFF",
                         "export CUFILE_ENV_PATH_JSON=/etc/cufile.json",
                         "export CUFILE_ALLOW_COMPAT_MODE=false",
                         "export GDSFLEET_GDS_MOUNT=/mnt/gds"]
    _, out, _ = _run(capsys, "env", "--ledger", str(ledger), "--node", "gpu-01",
                     "--allow-fallback", "--format", "dotenv")
    assert out.splitlines() == ["KVIKIO_COMPAT_MODE=AUTO", "CUFILE_ENV_PATH_JSON=/etc/cufile.json",
                                "GDSFLEET_GDS_MOUNT=/mnt/gds"]


def test_env_of_the_h100_is_compat(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "env", "--ledger", str(ledger), "--node", "gpu-03",
                          "--format", "json")
    doc = json.loads(out)
    assert code == Exit.OK and doc["use_gds"] is False
    assert doc["env"] == {"KVIKIO_COMPAT_MODE": "ON", "CUFILE_ENV_PATH_JSON": "/etc/cufile.json",
                          "GDSFLEET_GDS_MOUNT": "/var/tmp/gdsfleet-io"}
    assert "nvidia-fs driver is not loaded" in doc["reason"]
    assert "gpu-03: direct path not usable, KVIKIO_COMPAT_MODE=ON" in err
    code, _, _ = _run(capsys, "env", "--ledger", str(ledger), "--node", "gpu-03",
                      "--require-gds")
    assert code == Exit.NOT_COMPLIANT


def test_env_of_an_unreachable_node_takes_the_mount_from_the_inventory(
        tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path, **{"gpu-04": {"nvme_mount_point": "/mnt/gds fast"}})
    code, out, err = _run(capsys, "env", "--ledger", str(ledger), "-i", str(inv),
                          "--node", "gpu-04")
    assert code == Exit.OK
    assert out.splitlines()[1:] == ["export KVIKIO_COMPAT_MODE=ON",
                                    "export GDSFLEET_GDS_MOUNT='/mnt/gds fast'"]
    assert "unreachable" in err and "CUFILE_ENV_PATH_JSON not set" in err
    _, out, _ = _run(capsys, "env", "--ledger", str(ledger), "-i", str(inv), "--node",
                     "gpu-04", "--format", "dotenv")
    assert "GDSFLEET_GDS_MOUNT='/mnt/gds fast'" in out.splitlines()


def test_env_needs_a_node(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["export", "env"])
    assert exc.value.code == 64  # Exit.USAGE: argparse's 2 is UNREACHABLE here (issue 47)
    assert "--node" in capsys.readouterr().err


def test_render_env_quotes_for_dotenv() -> None:
    text = export.render_env({"A": 'x "$y"'}, "dotenv")
    assert text == "A='x \"$y\"'\n"


# ------------------------------------------------------------------ env: which cufile.json
# The node's files as the gather reads them (provisioner/remote/gather.py, block "cufile.json
# files"): the H100's /usr/local/cuda/gds/cufile.json is NVIDIA's shipped file, captured on the
# lent H100 (tests/fixtures/h100/usr_local_cuda_gds_cufile.json, README there): allow_compat_mode
# true. STRICT is what the gdsfleet.gds.cufile role renders (allow_compat_mode false).
H100_CUFILE = (REPO / "tests" / "fixtures" / "h100" / "usr_local_cuda_gds_cufile.json").read_text()
STRICT = '{"properties": {"allow_compat_mode": false, "use_pci_p2pdma": false}}\n'
CUDA_JSON = "/usr/local/cuda/gds/cufile.json"


def _files_item(files: dict[str, str | None]) -> dict[str, Any]:
    return {"kind": "probe", "rc": 0, "err": "", "out": "\n".join(p for p, t in files.items() if t),
            "files": [{"path": p, "exists": t is not None, "text": t, "err": "",
                       "realpath": p if t is not None else None} for p, t in files.items()]}


def _proven_on(name: str, etc: str | None, files: dict[str, str | None]) -> dict[str, Any]:
    """A proven nvfs node whose facts come from a gather document through build_facts."""
    from provisioner.verify.facts import build_facts
    from tests.unit import nodefacts as nf

    doc = nf.gather_doc(cufile=etc if etc is not None else "MISSING")
    doc["items"]["cufile_files"] = _files_item(files)
    facts = build_facts(doc)
    facts["io_path"] = "/mnt/gds"
    report = NodeReport.from_dict(_direct(name))
    return NodeReport(name=name, reachable=True, compliant=True, route="nvfs",
                      checks=report.checks, io_test=report.io_test, facts=facts).to_dict()


@pytest.fixture
def cufile_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "cufile-ledger.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        for doc in (
            # /etc/cufile.json absent, the toolkit's file strict
            _proven_on("only-cuda", None, {"/etc/cufile.json": None, CUDA_JSON: STRICT}),
            # the H100's layout: both files NVIDIA's, compat allowed
            _proven_on("h100-like", H100_CUFILE, {"/etc/cufile.json": H100_CUFILE,
                                                  CUDA_JSON: H100_CUFILE}),
            # no cufile.json anywhere
            _proven_on("none", None, {"/etc/cufile.json": None, CUDA_JSON: None}),
            # /etc's allows compat, the toolkit's forbids it
            _proven_on("both", H100_CUFILE, {"/etc/cufile.json": H100_CUFILE,
                                             CUDA_JSON: STRICT}),
        ):
            led.record_verification(run, doc)
        led.finish_run(run, "done")
    return path


def _env(capsys: pytest.CaptureFixture[str], ledger: Path, node: str,
         *extra: str) -> tuple[int, dict[str, str], str]:
    code, out, err = _run(capsys, "env", "--ledger", str(ledger), "--node", node,
                          "--format", "json", *extra)
    return code, json.loads(out)["env"], err


def test_env_names_the_cufile_json_that_exists(
        cufile_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, env, err = _env(capsys, cufile_ledger, "only-cuda")
    assert code == Exit.OK and err == ""
    assert env["CUFILE_ENV_PATH_JSON"] == CUDA_JSON
    assert env["CUFILE_ALLOW_COMPAT_MODE"] == "false"


def test_env_prefers_a_cufile_json_that_forbids_compat(
        cufile_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, env, err = _env(capsys, cufile_ledger, "both")
    assert code == Exit.OK and err == ""
    assert env["CUFILE_ENV_PATH_JSON"] == CUDA_JSON


def test_env_overrides_a_cufile_json_that_allows_compat_and_says_so(
        cufile_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, env, err = _env(capsys, cufile_ledger, "h100-like")
    assert code == Exit.OK and env["KVIKIO_COMPAT_MODE"] == "OFF"
    assert env["CUFILE_ENV_PATH_JSON"] == "/etc/cufile.json"
    assert env["CUFILE_ALLOW_COMPAT_MODE"] == "false"
    assert ("h100-like: /etc/cufile.json allows compat mode (properties.allow_compat_mode "
            "true), unlike the I/O test's config; CUFILE_ALLOW_COMPAT_MODE=false") in err
    # --allow-fallback asked for the silent fallback: no override, no note
    code, env, err = _env(capsys, cufile_ledger, "h100-like", "--allow-fallback")
    assert env["KVIKIO_COMPAT_MODE"] == "AUTO" and "CUFILE_ALLOW_COMPAT_MODE" not in env
    assert err == ""


def test_env_without_any_cufile_json_sets_no_path_and_says_so(
        cufile_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, env, err = _env(capsys, cufile_ledger, "none")
    assert code == Exit.OK
    assert "CUFILE_ENV_PATH_JSON" not in env and env["CUFILE_ALLOW_COMPAT_MODE"] == "false"
    assert (f"no cufile.json found on the node in the latest verification (looked at: "
            f"/etc/cufile.json, {CUDA_JSON})") in err


def test_gather_records_each_cufile_json_and_facts_read_allow_compat_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gather's block runs for real on files in tmp_path; build_facts parses them."""
    from provisioner.remote import gather
    from provisioner.verify.facts import build_facts

    etc, cuda, bad = tmp_path / "etc.json", tmp_path / "cuda.json", tmp_path / "bad.json"
    etc.write_text(H100_CUFILE)
    cuda.write_text(STRICT)
    bad.write_text("{not json")
    monkeypatch.setattr(gather, "CUFILE_FILE_CANDIDATES",
                        (str(etc), str(cuda), str(bad), str(tmp_path / "missing.json")))
    monkeypatch.setattr(gather, "CUFILE_FILE_GLOB", str(tmp_path / "nothing-*"))
    item = json.loads(json.dumps(gather.cufile_files()))  # as it travels
    facts = build_facts({"gdsfleet_gather": 1, "items": {"cufile_files": item}})
    got = {Path(f["path"]).name: (f["exists"], f["valid"], f["allow_compat_mode"])
           for f in facts["cufile_files"]}
    assert got == {"etc.json": (True, True, True), "cuda.json": (True, True, False),
                   "bad.json": (True, False, None), "missing.json": (False, None, None)}
    assert "text" not in item["out"] and str(etc) in item["out"]


# ------------------------------------------------------------------ proofs of older releases
@pytest.mark.parametrize("kind", ["counters", "compat_off"])
def test_old_proof_kinds_prove_nothing_in_export_and_status(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Records as earlier releases wrote them: compliant, io.direct_path passed, proof
    ``counters`` (any counter movement) or ``compat_off`` (compat mode switched off)."""
    path = tmp_path / "old.sqlite"
    with Ledger.open(path) as led:
        run = led.start_run("verify", "fleet")
        led.record_verification(run, _direct("old", proof=kind))
        led.record_verification(run, _direct("new"))
        led.finish_run(run, "done")
    code, doc, err = _ds(capsys, path, "--node", "old")
    assert code == Exit.OK and doc["aio"]["use_gds"] is False
    assert f"its proof kind '{kind}' was written by an earlier release" in err
    code, out, err = _run(capsys, "env", "--ledger", str(path), "--node", "old")
    assert "export KVIKIO_COMPAT_MODE=ON" in out.splitlines()
    code, out, _ = _run(capsys, "env", "--ledger", str(path), "--node", "new")
    assert "export KVIKIO_COMPAT_MODE=OFF" in out.splitlines()
    assert main(["status", "--ledger", str(path), "--json"]) == Exit.OK
    rows = {r["node"]: r for r in json.loads(capsys.readouterr().out)["nodes"]}
    assert rows["old"]["result"] == "NOT COMPLIANT" and "io.direct_path" in rows["old"]["failing"]
    assert "earlier release" in rows["old"]["proof_refused"]
    assert rows["new"]["result"] == "COMPLIANT" and rows["new"]["proof_refused"] is None


def test_cufile_honours_the_allow_compat_mode_override_on_the_h100() -> None:
    """The fact CUFILE_ALLOW_COMPAT_MODE=false rests on (tests/fixtures/cufile/
    allow-compat-mode-override.md): on the real H100, cufile.json says allow_compat_mode true,
    and cuFile reports false to kvikio when the variable is set, true when it is not."""
    import yaml

    from provisioner.verify.facts import build_facts

    fixtures = REPO / "tests" / "fixtures"
    gather = yaml.safe_load((fixtures / "gather" / "h100-ubuntu24.04_no-nvidia-fs.yml").read_text())
    facts = build_facts(json.loads(gather["output"][0]))
    assert facts["cufile"]["path"] == "/etc/cufile.json"
    assert facts["cufile"]["allow_compat_mode"] is True
    io = yaml.safe_load((fixtures / "iotest" / "h100-kvikio-26.10_no-nvidia-fs_1GiB.yml")
                        .read_text())
    attempts = {a["mode"]: a for a in json.loads(io["output"][0])["attempts"]}
    assert attempts["OFF"]["env"] == {"CUFILE_ALLOW_COMPAT_MODE": "false",
                                      "KVIKIO_COMPAT_MODE": "OFF"}
    assert attempts["OFF"]["cufile_allow_compat_mode"] is False
    assert "CUFILE_ALLOW_COMPAT_MODE" not in attempts["ON"]["env"]
    assert attempts["ON"]["cufile_allow_compat_mode"] is True
