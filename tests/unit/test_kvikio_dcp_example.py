"""The kvikio DCP example (docs/examples/kvikio_dcp/) and its run on the lent H100
(docs/evidence/kvikio-dcp/, made by docs/examples/kvikio_dcp/evidence.sh on 2026-11-22).

No torch here: the evidence is replayed (which path kvikio took, that the round trip matched,
that `provisioner export` today prints what the run used) and the example's pure-Python part
(dcp_layout.py: file layout, path description) is tested directly.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from provisioner.cli import main
from provisioner.store import Ledger

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "kvikio_dcp"
EVIDENCE = REPO / "docs" / "evidence" / "kvikio-dcp"


def _layout() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dcp_layout", EXAMPLE / "dcp_layout.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dcp_layout", mod)
    spec.loader.exec_module(mod)
    return mod


layout = _layout()


def _json(name: str) -> Any:
    return json.loads((EVIDENCE / name).read_text())


def _exit(name: str) -> int:
    return int(re.findall(r"^\[exit (\d+)\]$", (EVIDENCE / f"{name}.stderr").read_text(),
                          re.M)[-1])


# ------------------------------------------------------------------ the H100 run
def test_machine_is_the_h100_with_torch_and_kvikio() -> None:
    text = (EVIDENCE / "machine.txt").read_text()
    assert "NVIDIA H100 80GB HBM3" in text
    assert re.search(r"^torch 2\.11\.0\+cu130 cuda 13\.0$", text, re.M)
    assert "kvikio 26.10.00" in text and "cupy 14.2.0" in text


def test_run_with_the_exported_env_round_trips_through_compat() -> None:
    run = _json("run-exported-env.json")
    assert _exit("run-exported-env.json") == 0
    assert run["ok"] is True and run["differs"] == [] and run["items"] == 13
    assert run["bytes_written"] == run["bytes_read"] >= 1 << 30
    assert run["path_taken"]["path"] == "compat"
    kv = run["kvikio_after_save"]
    assert kv["compat_mode"] == "ON" and kv["compat_mode_preferred"] is True
    # the run used exactly what `provisioner export env` printed
    exported = dict(re.findall(r"^export (\w+)=(.*)$",
                               (EVIDENCE / "export-env.sh").read_text(), re.M))
    assert exported == {k: v for k, v in kv["env"].items() if v is not None}
    assert run["checkpoint"].startswith(exported["GDSFLEET_GDS_MOUNT"] + "/")
    assert run["page_cache_after_drop"][0][0] == 0  # the load read the disk, not the cache
    assert run["save_gbps"] > 0 and run["load_gbps"] > 0


def test_two_ranks_write_their_own_files_and_read_each_others() -> None:
    run = _json("run-two-ranks.json")
    assert _exit("run-two-ranks.json") == 0
    assert run["ok"] is True and run["world_size"] == 2 and run["path_taken"]["path"] == "compat"
    assert {"__0_data.kvikio", "__1_data.kvikio"} <= set(run["files"])
    ranks = run["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["differs"] == [] for r in ranks)
    # DCP spreads the shared items over both ranks; each rank loads the whole state_dict, so
    # it reads what the other rank wrote
    assert all(0 < r["bytes_written"] < r["bytes_read"] for r in ranks)
    assert sum(r["bytes_written"] for r in ranks) == run["bytes_written"]


def test_forcing_the_direct_path_on_the_h100_fails_loudly() -> None:
    run = _json("run-forced-direct.json")
    assert _exit("run-forced-direct.json") == 2
    assert run["ok"] is False
    assert "nvidia-fs driver is not loaded" in run["error"]
    assert run["kvikio_after_save"]["allow_compat_mode"] is False
    assert run["path_taken"]["path"] == "none"


def test_kvikio_default_auto_also_took_compat() -> None:
    run = _json("run-kvikio-default.json")
    assert run["ok"] is True and run["kvikio_after_save"]["compat_mode"] == "AUTO"
    assert run["kvikio_after_save"]["is_gds_available"] is False
    assert run["path_taken"]["path"] == "compat"


def test_export_today_prints_what_the_run_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The H100's own verify report, recorded through the Ledger API, exported again."""
    report = _json("verify-local.json")["nodes"][0]
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as led:
        run = led.start_run("verify", "h100")
        led.record_verification(run, report)
        led.finish_run(run, "done")
    stamp = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")
    for argv, name in ((["env"], "export-env.sh"), (["env", "--format", "json"],
                                                     "export-env.json"),
                       (["deepspeed"], "export-deepspeed.json")):
        code = main(["export", *argv, "--node", report["name"], "--ledger", str(ledger),
                     "--max-age", "0"])
        out, err = capsys.readouterr()
        assert code == _exit(name) == 0
        want = (EVIDENCE / name).read_text()
        if name.endswith(".json"):
            got_doc, want_doc = json.loads(out), json.loads(want)
            # "simulated" came after the capture (issue 47): the H100 is a real node
            assert got_doc.pop("simulated", False) is False
            for doc in (got_doc, want_doc):
                for key in ("verified_at", "run_id", "ledger", "reason"):
                    doc.pop(key, None)
            assert got_doc == want_doc
        else:
            assert out.splitlines()[1:] == want.splitlines()[1:]
        if name == "export-deepspeed.json":
            # stdout is DeepSpeed's JSON: the ledger it read is named on stderr's first line
            # (added after the capture was made)
            first, _, err = err.partition("\n")
            assert first.startswith("ledger ") and str(ledger) in first, first
        want_err = (EVIDENCE / f"{name}.stderr").read_text().rsplit("[exit", 1)[0]
        assert stamp.sub("T", err) == stamp.sub("T", want_err)


# ------------------------------------------------------------------ dcp_layout
def test_aligned_offsets() -> None:
    assert layout.aligned_offsets([]) == ([], 0)
    assert layout.aligned_offsets([4096, 1, 0, 5000, 3]) == ([0, 4096, 8192, 8192, 16384],
                                                             16387)
    assert layout.aligned_offsets([10, 10], align=8) == ([0, 16], 26)
    with pytest.raises(ValueError):
        layout.aligned_offsets([-1])


@pytest.mark.parametrize(("value", "name"), [
    (0, "OFF"), (1, "ON"), (2, "AUTO"), ("1", "ON"), ("CompatMode.AUTO", "AUTO"), ("x", "UNKNOWN"),
])
def test_mode_name(value: Any, name: str) -> None:
    assert layout.mode_name(value) == name


@pytest.mark.parametrize(("settings", "io_ok", "path"), [
    ({"compat_mode": "ON", "compat_mode_preferred": True}, True, "compat"),
    ({"compat_mode": "AUTO", "compat_mode_preferred": True}, True, "compat"),
    ({"compat_mode": "AUTO", "compat_mode_preferred": False, "allow_compat_mode": False}, True,
     "unknown"),
    ({"compat_mode": "OFF", "compat_mode_preferred": False, "allow_compat_mode": False}, True,
     "direct"),
    ({"compat_mode": "OFF", "compat_mode_preferred": False, "allow_compat_mode": True}, True,
     "cufile-unproven"),
    ({"compat_mode": "OFF", "compat_mode_preferred": False, "allow_compat_mode": None}, True,
     "cufile-unproven"),
    ({"compat_mode": "OFF", "compat_mode_preferred": False, "allow_compat_mode": False}, False,
     "none"),
])
def test_describe_path(settings: dict[str, Any], io_ok: bool, path: str) -> None:
    got = layout.describe_path(settings, io_ok=io_ok)
    assert got["path"] == path and got["why"]


def test_narrow_spec() -> None:
    assert layout.narrow_spec([0, 4], [2, 3]) == [(0, 0, 2), (1, 4, 3)]
    assert layout.narrow_spec([], []) == []
    with pytest.raises(ValueError):
        layout.narrow_spec([0], [1, 2])
