"""nvfs.nvme.patched requires the nvme registration name the LOADED nvidia-fs looks up
(issue 28 item 5). nvidia-fs 2.28.2+ built against a 6.17+ kernel looks up
nvme_v2_register_nvfs_dma_ops, every other build nvme_v1_... (NVIDIA/gds-nvidia-fs src/nvfs-dma.c
at v2.28.2/v2.28.4, ChangeLog 2.28.2; fixture tests/fixtures/kallsyms/nvfs-dma-modules-list.yml).
A driver exporting the other name never registers: NVIDIA/gds-nvidia-fs#87. SYNTHETIC gather
documents (tests/unit/nodefacts.py) with the kernel, the nvidia-fs version and kallsyms set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from provisioner.remote import gather
from provisioner.verify import checks, iotest
from provisioner.verify.facts import build_facts
from provisioner.verify.parsers import kernel
from provisioner.verify.policy import Policy
from tests.unit import nodefacts as nf

UPSTREAM = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "kallsyms"
                           / "nvfs-dma-modules-list.yml").read_text())
V1 = "nvme_v1_register_nvfs_dma_ops"
V2 = "nvme_v2_register_nvfs_dma_ops"


def _doc(*, release: str, nvfs: str, exported: list[str],
         nvfs_syms: list[str] | None = None) -> dict[str, Any]:
    doc = nf.gather_doc(route="nvfs")
    it = doc["items"]
    it["kernel_release"] = {"rc": 0, "out": release, "err": ""}
    params = json.loads(it["nvfs_module"]["out"])
    it["nvfs_module"] = {"rc": 0, "out": json.dumps(params), "err": "", "version": nvfs}
    lines = [f"ffffffffc0a1b2c0 T {s}\t[nvme]" for s in exported]
    lines += [f"ffffffffc1a1b2c0 t {s}\t[nvidia_fs]" for s in nvfs_syms or []]
    it["kallsyms"] = {"rc": 0, "out": "\n".join(lines), "err": ""}
    it["dkms_status"] = {"rc": 0, "out": f"nvidia-fs/{nvfs}, {release}, x86_64: installed\n",
                         "err": ""}
    return doc


def _patched(doc: dict[str, Any]) -> Any:
    facts = build_facts(doc)
    io = iotest.evaluate(nf.direct_nvfs_io(), route="nvfs")
    _, results, _ = checks.evaluate(facts, io, Policy.default(), route="nvfs", io_path="/mnt/gds")
    return next(c for c in results if c.id == "nvfs.nvme.patched")


def test_the_rule_is_upstreams() -> None:
    rule = UPSTREAM["lookup_rule"]
    assert tuple(int(x) for x in rule["v2_from_nvfs"].split(".")) == kernel.NVFS_V2_MIN_VERSION
    assert tuple(int(x) for x in rule["v2_from_kernel"].split(".")) == kernel.NVFS_V2_MIN_KERNEL
    assert rule["v2_build_symbol"] == kernel.NVFS_BLK_ITER_SYMBOL
    assert rule["v2_build_symbol"] in gather.KALLSYMS_NVFS_BUILD
    # the tags before 2.28.2 know only the v1 name
    for tag, names in UPSTREAM["tags"].items():
        assert (V2 in names["nvme"]) is (tag >= "v2.28.2"), tag


@pytest.mark.parametrize(("release", "nvfs", "want"), [
    ("6.8.0-60-generic", "2.26.6", V1),
    ("6.8.0-60-generic", "2.28.4", V1),  # built without blk_rq_dma_map_iter: v1
    ("6.17.0-5-generic", "2.26.6", V1),
    ("6.17.0-5-generic", "2.28.2", V2),
    ("6.17.0-5-generic", "2.28.4", V2),
    ("5.14.0-503.el9.x86_64", "2.25.7", V1),
])
def test_lookup_name_by_version_and_kernel(release: str, nvfs: str, want: str) -> None:
    good = _patched(_doc(release=release, nvfs=nvfs, exported=[want]))
    assert good.status == "pass", good
    assert want in good.expected and want in good.message
    other = V2 if want == V1 else V1
    bad = _patched(_doc(release=release, nvfs=nvfs, exported=[other]))
    assert bad.status == "fail", bad
    # the failure names both: what nvidia-fs looks up and what nvme exports
    assert want in bad.message and other in bad.message
    assert "gds-nvidia-fs#87" in bad.message


def test_doca_26_01_exports_v2_while_nvidia_fs_looks_up_v1_is_a_failure() -> None:
    # NVIDIA/gds-nvidia-fs#87: nvme exports only the v2 name, nvidia-fs 2.26.6 looks up v1
    res = _patched(_doc(release="6.8.0-60-generic", nvfs="2.26.6", exported=[V2]))
    assert res.status == "fail"
    assert res.observed.startswith(V2)


def test_the_loaded_modules_own_symbols_win_over_its_version() -> None:
    # a 2.28.4 module whose symbols show the blk_rq_dma_map_iter build looks up v2, one whose
    # symbols lack it looks up v1 (whatever the version/kernel rule would guess)
    v2_build = ["nvfs_blk_rq_dma_map_iter_start", "nvfs_mgroup_get"]
    assert _patched(_doc(release="6.17.0-5-generic", nvfs="2.28.4", exported=[V1],
                         nvfs_syms=["nvfs_mgroup_get"])).status == "pass"
    res = _patched(_doc(release="6.17.0-5-generic", nvfs="2.28.4", exported=[V1],
                        nvfs_syms=v2_build))
    assert res.status == "fail" and V2 in res.message


def test_an_unknown_lookup_accepts_either_name() -> None:
    lookup = kernel.nvfs_lookup({}, None, (6, 17))
    assert lookup["symbol"] is None
    # major.minor 2.28 on 6.17: 2.28.0 looks up v1, 2.28.2 v2: not decidable
    assert kernel.nvfs_lookup({}, "2.28", (6, 17))["symbol"] is None
    assert kernel.nvfs_lookup({}, "2.28", (6, 8))["symbol"] == V1


def test_gather_keeps_the_build_symbol_past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [f"ffffffffc1{i:06x} t nvfs_fn_{i}\t[nvidia_fs]\n" for i in range(1500)]
    text = "".join(lines) + "ffffffffc2000000 t nvfs_blk_rq_dma_map_iter_start\t[nvidia_fs]\n"

    import io as _io

    def fake_open(path: str, mode: str = "r", *a: Any, **kw: Any) -> Any:
        assert path == "/proc/kallsyms"
        return _io.BytesIO(text.encode())

    monkeypatch.setattr("builtins.open", fake_open)
    out = gather.grep_kallsyms()["out"]
    assert kernel.parse_kallsyms(out)["nvfs_blk_iter"] is True


NVME_RDMA = "nvme_rdma_v1_register_nvfs_dma_ops"
BLK_ITER = "nvfs_blk_rq_dma_map_iter_start"
_ALPHABET = ["\t", " ", "\n", "[", "]", "nvidia_fs", "nvme", V1, V2, NVME_RDMA, BLK_ITER,
             "pci_p2pdma_add_resource", "T", "t", "ffff", "\x00", "é", "x" * 300, "\ud800"]


@given(pieces=st.lists(st.one_of(st.sampled_from(_ALPHABET), st.text(max_size=20)), max_size=60),
       version=st.one_of(st.none(), st.sampled_from(["", "2.28", "2.28.4", "x.y", "9" * 50,
                                                       "2.26.6\n"]), st.text(max_size=12)),
       kernel_rel=st.one_of(st.sampled_from(["", "6.17.0-5-generic", "garbage", "4.18.0"]),
                            st.text(max_size=24), st.just((6, 17)), st.just([])),
       nvme_patched=st.booleans(), rdma_patched=st.booleans())
def test_the_shared_rules_hold_on_hostile_kallsyms(pieces: list[str], version: Any,
                                                   kernel_rel: Any, nvme_patched: bool,
                                                   rdma_patched: bool) -> None:
    """Property: any text a node returns gives a bounded symbol table and a verdict in the
    rule's domain, never an exception."""
    from provisioner import collection_utils

    syms = collection_utils.load("nvfs_symbols.py")
    table = syms.kallsyms_modules("".join(pieces))
    assert all(len(k) <= 200 and (m is None or len(m) <= 64) for k, m in table.items())
    reg = syms.registration(table, version, kernel_rel, nvme_patched, rdma_patched)
    assert reg["wanted"] in (None, V1, V2)
    assert isinstance(reg["ok"], bool) and isinstance(reg["message"], str)
    assert syms.p2pdma_symbol(table) in (None, *syms.P2PDMA_SYMBOLS)


def test_a_huge_kallsyms_gives_a_bounded_table() -> None:
    from provisioner import collection_utils

    syms = collection_utils.load("nvfs_symbols.py")
    assert len(syms.kallsyms_modules("a b c\n" * 10_000)) <= 1


def test_verify_yml_filter_names_both_on_a_mismatch() -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "plugins" / "filter" / "nvfs_symbols.py"
    spec = importlib.util.spec_from_file_location("gdsfleet_test_filter_nvfs_symbols", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    filters = mod.FilterModule().filters()
    lines = [f"ffffffffc0a1b2c0 T {V2}\t[nvme]"]
    reg = filters["nvfs_registration"](lines, "2.26.6", "6.8.0-60-generic")
    assert reg["ok"] is False and reg["mismatch"] is True
    assert V1 in reg["message"] and V2 in reg["message"] and "#87" in reg["message"]
    assert filters["nvfs_registration"](lines, "2.28.4", "6.17.0-5-generic")["ok"] is True
    assert filters["p2pdma_symbol"](["ffffffff81a2b3c0 T pci_p2pdma_add_resource"]) == (
        "pci_p2pdma_add_resource")
    assert filters["p2pdma_symbol"]("") is None
