"""The one cufile.json schema (plugins/module_utils/cufile_schema.json): right against the
vendor files NVIDIA ships, read the same way by the collection's filter and by verify's parser,
and carried inside the provisioner wheel without a second copy in git.

Vendor captures used (sources):
- tests/fixtures/h100/usr_local_cuda_gds_cufile.json: /usr/local/cuda/gds/cufile.json on the
  lent H100 (CUDA 13.0, libcufile-13-0 1.15.1.6), captured by the integrator 2026-11-22
  (scripts/gpu_capture.sh), byte for byte;
- tests/fixtures/gather/h100-ubuntu24.04_no-nvidia-fs.yml: the same machine's /etc/cufile.json
  inside gather.py's output (NVIDIA's file, put in place by the package);
- tests/fixtures/cufile/nvidia-default.cufile.json: an earlier GDS 1.x libcufile's file
  (TheAssembler1/gds_sandbox, header names the commit);
- tests/fixtures/h100/cufile_off_allowcompat_info.log: libcufile 1.15.1's own log at INFO,
  whose CUFILE CONFIGURATION block lists the settings as cuFile read them (display names).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from provisioner.verify.parsers import cufile as parser
from tests.unit.fixture_loader import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_JSON = ROOT / "plugins" / "module_utils" / "cufile_schema.json"


def _load_filter() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gdsfleet_cufile_filter_shared", ROOT / "plugins" / "filter" / "cufile.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


flt = _load_filter()
SCHEMA = flt.SCHEMA


def _h100_etc_cufile() -> str:
    doc = yaml.safe_load((FIXTURES / "gather" / "h100-ubuntu24.04_no-nvidia-fs.yml").read_text())
    items = json.loads(doc["output"][0])["items"]
    assert items["cufile_json"]["path"] == "/etc/cufile.json"
    return str(items["cufile_json"]["out"])


VENDOR_1_15 = (FIXTURES / "h100" / "usr_local_cuda_gds_cufile.json").read_text()
VENDOR_1_X = (FIXTURES / "cufile" / "nvidia-default.cufile.json").read_text()
VENDOR = {
    "cuda-13.0_libcufile-1.15.1_usr-local-cuda-gds": VENDOR_1_15,
    "cuda-13.0_libcufile-1.15.1_etc": _h100_etc_cufile(),
    "gds-1.x_gds_sandbox": VENDOR_1_X,
}
SOURCE_OF = {"vendor-1.15": VENDOR_1_15, "vendor-1.x": VENDOR_1_X}


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> value; a schema key's value (lists, mount tables) is one leaf."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and not SCHEMA.is_key(path):
            out.update(_leaves(value, path + "."))
        else:
            out[path] = value
    return out


def _commented_names(text: str) -> set[str]:
    """Key names that a vendor file shows commented out (//"rdma_dc_key": ...)."""
    return set(re.findall(r'//\s*"([A-Za-z_]+)"\s*:', text))


def _parsed(text: str) -> dict[str, Any]:
    cfg = parser.parse(text)
    assert cfg.valid, cfg.error
    return cfg.data


# --- the vendor files ---------------------------------------------------------------------


def test_h100_etc_cufile_is_the_vendor_file() -> None:
    assert _parsed(VENDOR["cuda-13.0_libcufile-1.15.1_etc"]) == _parsed(VENDOR_1_15)


@pytest.mark.parametrize("name", sorted(VENDOR))
def test_every_vendor_key_is_accepted_with_its_type(name: str) -> None:
    text = VENDOR[name]
    cfg = parser.parse(text)
    assert cfg.valid and cfg.had_comments
    assert cfg.unknown_keys == []
    assert cfg.type_errors == []
    assert flt.cufile_validate(cfg.data) == []
    leaves = _leaves(cfg.data)
    assert len(leaves) > 30
    for path, value in leaves.items():
        assert SCHEMA.is_key(path), path
        assert SCHEMA.type_problem(path, value) is None, (path, value)


@pytest.mark.parametrize("name", sorted(VENDOR))
def test_keys_the_vendor_file_shows_commented_out_are_known(name: str) -> None:
    names = _commented_names(VENDOR[name])
    assert {"dir", "rdma_dc_key", "rdma_access_mask", "mount_table"} <= names
    known_leaves = {p.rsplit(".", 1)[-1] for p in SCHEMA.keys}
    assert names <= known_leaves
    # and the commented examples have the documented types
    assert SCHEMA.type_problem("properties.rdma_dc_key", "0xffeeddcc") is None
    assert SCHEMA.type_problem("properties.rdma_access_mask", "0x1f") is None
    table = {"/beegfs/client1": {"rdma_dev_addr_list": ["172.172.1.40", "172.172.1.42"]}}
    assert SCHEMA.type_problem("fs.beegfs.mount_table", table) is None


@pytest.mark.parametrize("source", sorted(SOURCE_OF))
def test_schema_cites_a_vendor_file_exactly_for_the_keys_it_has(source: str) -> None:
    text = SOURCE_OF[source]
    present = set(_leaves(_parsed(text)))
    commented = _commented_names(text)
    cited = {k for k, e in SCHEMA.keys.items() if source in e.get("sources", [])}
    assert present <= cited, f"keys in {source} that the schema does not cite it for"
    for key in cited - present:
        assert key.rsplit(".", 1)[-1] in commented, f"{key} cites {source} but is not in it"


def test_defaults_match_the_newest_vendor_file() -> None:
    for path, value in _leaves(_parsed(VENDOR_1_15)).items():
        assert SCHEMA.keys[path]["default"] == value, path


def test_every_setting_libcufile_prints_maps_to_a_key() -> None:
    """libcufile 1.15.1 lists what it read under CUFILE CONFIGURATION: each name is a file key
    or a display name the schema maps (as an alias) to the key, or to no key at all."""
    log = (FIXTURES / "h100" / "cufile_off_allowcompat_info.log").read_text()
    block = log.split("CUFILE CONFIGURATION:", 1)[1].split("GPU INFO:", 1)[0]
    names = re.findall(r"\s((?:properties|fs|profile|execution|miscellaneous|logging|block)"
                       r"\.[a-z_.]+)\s*:", block)
    assert len(names) >= 30
    display_only = set()
    for name in names:
        if SCHEMA.is_key(name):
            continue
        leaf = name.rsplit(".", 1)[-1]
        alias = SCHEMA.aliases.get(name) or SCHEMA.aliases.get(leaf)
        if name == "fs.scatefs.posix_gds_min_kb":
            continue  # printed by libcufile, in no NVIDIA document or vendor file (see docs)
        assert alias is not None, name
        assert alias["key"] is None or SCHEMA.is_key(alias["key"]), name
        display_only.add(name)
    assert display_only == {
        "properties.use_compat_mode", "properties.max_batch_io_size",
        "properties.max_batch_io_timeout_msecs", "properties.rdma_peer_affinity_policy",
    }


# --- keys NVIDIA documents that the role used to refuse ------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("fs.nfs.use_pci_p2pdma", False),
        ("fs.lustre.use_pci_p2pdma", False),
        ("properties.force_odirect_mode", True),
        ("properties.prefer_iouring", True),
        ("properties.skip_topology_detection", True),
        ("logging.max_file_size_mb", -1),
        ("fs.weka.mount_table", {"/mnt/weka": {"rdma_dev_addr_list": ["192.0.2.1"]}}),
        ("miscellaneous.enable_static_routing", False),
        ("properties.gpu_bounce_buffer_slab_config.slab_count", [128, 8]),
    ],
)
def test_documented_keys_are_accepted_by_both(path: str, value: Any) -> None:
    doc: dict[str, Any] = {}
    node = doc
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    assert flt.cufile_validate(doc) == []
    cfg = parser.parse(json.dumps(doc))
    assert (cfg.unknown_keys, cfg.type_errors) == ([], [])


# --- wrong keys: one verdict, one suggestion ------------------------------------------------

WRONG: dict[str, str | None] = {
    "execution.max_batch_io_size": "properties.io_batchsize",
    "properties.max_batch_io_size": "properties.io_batchsize",
    "properties.max_batch_io_size_kb": "properties.io_batchsize",
    "profile.io_batchsize": "properties.io_batchsize",
    "properties.max_pinned_memory_size": "properties.max_device_pinned_mem_size_kb",
    "properties.max_device_cache_size": "properties.max_device_cache_size_kb",
    "properties.poll_thresh_size": "properties.poll_mode_max_size_kb",
    "properties.use_compat_mode": "properties.allow_compat_mode",
    "properties.rdma_peer_affinity_policy": "properties.rdma_load_balancing_policy",
    "properties.max_batch_io_timeout_msecs": None,
    "logging.max_file_size_kb": "logging.max_file_size_mb",
    "properties.allow_compat_mod": "properties.allow_compat_mode",
    "profile.cufile_stat": "profile.cufile_stats",
    "allow_compat_mode": "properties.allow_compat_mode",
    "use_pci_p2pdma": "properties.use_pci_p2pdma",
    "allowlist": "denylist",
    "propertys": "properties",
    "CUFILE_ENV_PATH_JSON": None,
}


def _doc(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    node = doc
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = 1
    return doc


@pytest.mark.parametrize("path", sorted(WRONG))
def test_both_consumers_give_the_same_verdict_and_suggestion(path: str) -> None:
    doc = _doc(path)
    errors = flt.cufile_validate(doc)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{path}: unknown cufile.json key")
    cfg = parser.parse(json.dumps(doc))
    assert cfg.unknown_keys == [path]
    assert cfg.suggestions.get(path) == WRONG[path]
    if WRONG[path] is not None:
        assert WRONG[path] in errors[0]
    else:
        assert "not a cufile.json setting" in errors[0]


def test_wrong_types_read_the_same_in_both() -> None:
    doc = {"properties": {"allow_compat_mode": "false", "io_priority": "urgent",
                          "per_buffer_cache_size_kb": 512},
           "logging": {"max_file_size_mb": 0}}
    errors = flt.cufile_validate(doc)
    assert errors == parser.parse(json.dumps(doc)).type_errors
    assert len(errors) == 4
    assert any("from 1024 to 16384" in e for e in errors)
    assert any("other than 0" in e for e in errors)


# --- one copy in git, one in the wheel --------------------------------------------------------


def test_git_holds_one_copy_of_the_schema() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    for name in ("cufile_schema.json", "cufile_schema.py"):
        assert [p for p in listed if Path(p).name == name] == [f"plugins/module_utils/{name}"]


def test_collection_build_ships_the_schema_and_not_the_provisioner(tmp_path: Path) -> None:
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    if not galaxy.exists():
        pytest.skip("ansible-galaxy is not in this virtual environment")
    proc = subprocess.run([str(galaxy), "collection", "build", "--output-path", str(tmp_path),
                           str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = tmp_path.glob("gdsfleet-gds-*.tar.gz")
    with tarfile.open(tarball) as tf:
        names = set(tf.getnames())
    assert "plugins/module_utils/cufile_schema.json" in names
    assert "plugins/module_utils/cufile_schema.py" in names
    assert not any(n.startswith("provisioner") for n in names)
    flt_text = (ROOT / "plugins" / "filter" / "cufile.py").read_text()
    schema_text = (ROOT / "plugins" / "module_utils" / "cufile_schema.py").read_text()
    for text in (flt_text, schema_text):
        assert not re.search(r"^\s*(from|import)\s+provisioner", text, re.M)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of what setup.py/pyproject.toml need (the checkout stays clean)."""
    if shutil.which("pip", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no pip beside this interpreter")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "provisioner", src / "provisioner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "plugins" / "module_utils", src / "plugins" / "module_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0 and "Could not find a version that satisfies" in proc.stderr:
        pytest.skip("no package index for the build backend (setuptools, wheel)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = list(out.glob("gdsfleet-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_carries_the_schema_and_verify_reads_it(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "provisioner/_collection/cufile_schema.json" in names
        assert "provisioner/_collection/cufile_schema.py" in names
        assert "provisioner/_collection/modprobe_conf.py" in names
        assert "provisioner/_collection/cufile_json.py" in names
        assert not any(n.startswith("plugins/") for n in names)
        data = zf.read("provisioner/_collection/cufile_schema.json")
        assert data == SCHEMA_JSON.read_bytes()
        assert json.loads(data)["keys"]["properties.io_batchsize"]["type"] == "int"
        zf.extractall(tmp_path / "site")  # noqa: S202 - a zip wheel this test just built
    # The unpacked wheel, outside the checkout: verify's parser loads the schema from the wheel.
    probe = (
        "import json, provisioner.verify.parsers.cufile as c\n"
        "cfg = c.parse('{\"execution\": {\"max_batch_io_size\": 128}}')\n"
        "import provisioner.verify.parsers.modprobe as m\n"
        "opts = m.configured_options({'files': ['/etc/modprobe.d/a.conf'], 'options': [\n"
        "    '/etc/modprobe.d/a.conf:options nvme-core multipath=N']})\n"
        "print(json.dumps({'pkg': c.__file__, 'schema': c._load_schema_module().__file__,\n"
        "                  'conf': m._conf.__file__, 'opts': opts,\n"
        "                  'unknown': cfg.unknown_keys, 'sug': cfg.suggestions}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    site = str(tmp_path / "site")
    assert got["pkg"].startswith(site)
    assert got["schema"] == str(tmp_path / "site" / "provisioner" / "_collection"
                                / "cufile_schema.py")
    assert got["unknown"] == ["execution.max_batch_io_size"]
    # ... and how kmod reads modprobe.d, from the same place
    assert got["conf"] == str(tmp_path / "site" / "provisioner" / "_collection"
                              / "modprobe_conf.py")
    assert got["opts"] == {"nvme_core": {"multipath": {"value": "N",
                                                       "file": "/etc/modprobe.d/a.conf"}}}
    assert got["sug"] == {"execution.max_batch_io_size": "properties.io_batchsize"}
