"""The node-side scripts are assembled at send time from their source and the shared modules
they declare (provisioner/remote/bundle.py): what a node runs imports only the standard
library, runs on its own, and every parser it shares with the controller exists once."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.remote import bundle as bundler
from provisioner.remote import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("gather.py", "iotest.py", "gdsio.py")
# Where a parser shared by the node side, the controller side and the collection may live.
SHARED_DIRS = ("provisioner/remote", "provisioner/verify/parsers", "plugins/module_utils",
               "plugins/filter")
# Names that several of those files define on purpose, each its own thing: a script's entry
# point, a parser module's parse(), an Ansible filter plugin's class, a loader per module.
CONVENTIONAL = {"main", "parse", "FilterModule", "_load_schema_module", "_norm"}


def _imports(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _bundled_sources(script: str) -> dict[str, str]:
    """The bundled script and every module source embedded in it, by name."""
    text = load_script(script).decode("utf-8")
    out = {script: text}
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_GDSFLEET_SHARED"
                        for t in node.targets)):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Constant)
                out[f"{script}:{key.value}"] = value.value
    return out


# -- what a node runs --------------------------------------------------------------------------
@pytest.mark.parametrize("script", SCRIPTS)
def test_bundled_script_imports_only_the_stdlib_and_parses_as_python_3_8(script: str) -> None:
    sources = _bundled_sources(script)
    for name, text in sources.items():
        tree = ast.parse(text, filename=name, feature_version=(3, 8))
        outside = _imports(tree) - set(sys.stdlib_module_names) - {"__future__"}
        assert outside <= {"cupy", "kvikio"}, (name, outside)  # the node's own, imported lazily
    # the modules the script declares are in it, once, and nothing else is
    text = (ROOT / "provisioner" / "remote" / script).read_text()
    assert sorted(n.split(":", 1)[1] for n in sources if ":" in n) == bundler.declared(text)
    assert "provisioner.remote.bundle" not in sources[script]


def test_the_scripts_declare_the_shared_parsers() -> None:
    assert bundler.declared((ROOT / "provisioner/remote/iotest.py").read_text()) == [
        "_iostats.py", "_libcufile.py", "_nodefs.py", "attest_counters.py", "cufile_json.py"]
    assert bundler.declared((ROOT / "provisioner/remote/gather.py").read_text()) == [
        "_netfs_state.py", "modprobe_conf.py"]


def test_bundle_is_deterministic_and_cached() -> None:
    text = (ROOT / "provisioner/remote/iotest.py").read_text()
    assert bundler.bundle_text(text) == bundler.bundle_text(text)
    assert bundler.bundle_text(text).encode() == load_script("iotest.py")
    assert load_script("iotest.py") is load_script("iotest.py")


def _isolated(script: str, *args: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> dict:
    """Run the bundled script as a node does: stdin, no PYTHONPATH, no site-packages, a folder
    without gdsfleet in it."""
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-I", "-S", "-", *args], input=load_script(script),
                          capture_output=True, timeout=120, env=full, cwd=cwd, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_bundled_gather_runs_alone_and_sends_kmods_directories(tmp_path: Path) -> None:
    from provisioner.remote import gather  # the source, imported on the controller

    doc = _isolated("gather.py", cwd=tmp_path)
    assert "error" not in doc
    modprobe = json.loads(doc["items"]["modprobe_options"]["out"])
    assert set(modprobe) == {"files", "texts", "truncated", "kmod_version"}
    mod = gather.modprobe_options()
    assert json.loads(mod["out"])["files"] == modprobe["files"]
    # the one list of kmod's directories (plugins/module_utils/modprobe_conf.py)
    from provisioner.verify.parsers import modprobe as parser

    assert gather.MODPROBE_DIRS is parser._conf.MODPROBE_DIRS


def test_bundled_iotest_strips_cufile_json_with_the_shared_parser(tmp_path: Path) -> None:
    """The node-side copy of the node's cufile.json: comments and trailing commas go, a string
    that holds ", ]" stays as written (iotest's own stripper removed that comma too)."""
    cfg = tmp_path / "cufile.json"
    cfg.write_text('{ // NVIDIA ships comments\n "denylist": {"mounts": ["/mnt/a, ]",],},\n'
                   ' /* block */ "properties": {"max_direct_io_size_kb": 16384,},}\n')
    probe = (
        "import json, sys, tempfile\n"
        "ns = {'__name__': 'gdsfleet_node'}\n"
        "exec(compile(sys.stdin.read(), 'iotest.py', 'exec'), ns)\n"
        "d = tempfile.mkdtemp(dir=sys.argv[1])\n"
        "info = ns['scoped_cufile_json'](d)\n"
        "print(json.dumps({'info': info, 'doc': json.load(open(info['json']))}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CUFILE_ENV_PATH_JSON"] = str(cfg)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(tmp_path)],
                          input=load_script("iotest.py"), capture_output=True, timeout=60,
                          env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = json.loads(proc.stdout)
    assert "error" not in out["info"]
    doc = out["doc"]
    assert doc["properties"]["max_direct_io_size_kb"] == 16384
    assert doc["properties"]["allow_compat_mode"] is False  # the scoped override
    assert doc["logging"]["level"] == "TRACE"
    assert doc["denylist"]["mounts"] == ["/mnt/a, ]"]  # iotest's own stripper gave "/mnt/a ]"


def test_bundled_iotest_and_gdsio_run_alone(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    doc = _isolated("iotest.py", json.dumps({"path": str(missing), "size_bytes": 4096}),
                    cwd=tmp_path)
    assert doc["status"] == "skipped" and "does not exist" in doc["reason"]
    doc = _isolated("gdsio.py", json.dumps({"dir": str(missing), "size_bytes": 4096}),
                    cwd=tmp_path)
    assert doc["gdsfleet_gdsio"] == 1 and doc["status"] == "skipped"  # no gdsio, or no folder


# -- the bundler refuses what it cannot bundle --------------------------------------------------
def test_bundle_refuses_a_script_without_its_block() -> None:
    with pytest.raises(bundler.BundleError, match="exactly one"):
        bundler.bundle_text('x = _shared("cufile_json.py")\n')
    with pytest.raises(bundler.BundleError, match="exactly one"):
        bundler.bundle_text(f"{bundler.END}\n{bundler.BEGIN}\n")


def test_bundle_refuses_an_unknown_module() -> None:
    text = f'{bundler.BEGIN}\n{bundler.END}\nx = _shared("no_such_module.py")\n'
    with pytest.raises(bundler.BundleError, match="no_such_module.py not found"):
        bundler.bundle_text(text)


def test_python_m_bundle_prints_the_script_and_refuses_other_names() -> None:
    cmd = [sys.executable, "-m", "provisioner.remote.bundle"]
    proc = subprocess.run([*cmd, "gather.py"], capture_output=True, timeout=60, cwd=ROOT,
                          check=False)
    assert proc.returncode == 0 and proc.stdout == load_script("gather.py")
    proc = subprocess.run([*cmd, "../cli.py"], capture_output=True, timeout=60, cwd=ROOT,
                          check=False)
    assert proc.returncode == 64 and b"usage: python -m provisioner.remote.bundle" in proc.stderr
    assert proc.stdout == b""


# -- each parser exists once ----------------------------------------------------------------------
def _definitions() -> dict[str, list[tuple[str, str]]]:
    """name -> [(file, body without its docstring, as an AST dump)] of every top-level function
    and class in SHARED_DIRS."""
    out: dict[str, list[tuple[str, str]]] = {}
    for directory in SHARED_DIRS:
        for path in sorted((ROOT / directory).glob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    body = node.body
                    if (body and isinstance(body[0], ast.Expr)
                            and isinstance(body[0].value, ast.Constant)):
                        body = body[1:]
                    dump = "\n".join(ast.dump(b) for b in body)
                    out.setdefault(node.name, []).append(
                        (str(path.relative_to(ROOT)), dump))
    return out


def test_no_shared_function_is_defined_twice() -> None:
    defs = _definitions()
    twice = {name: [f for f, _ in where] for name, where in defs.items()
             if len({f for f, _ in where}) > 1 and name not in CONVENTIONAL}
    assert twice == {}
    bodies: dict[str, list[str]] = {}
    for name, where in defs.items():
        for path, dump in where:
            if dump.count("\n") >= 2:  # a body of three statements or more
                bodies.setdefault(dump, []).append(f"{path}:{name}")
    assert [v for v in bodies.values() if len(v) > 1] == []


def test_cufile_json_comment_stripping_and_kmod_directories_exist_once() -> None:
    strippers = [f"{path}:{name}" for name, where in _definitions().items()
                 if "comment" in name.lower() for path, _ in where]
    assert strippers == ["plugins/module_utils/cufile_json.py:strip_comments"]
    holders = []
    for directory in SHARED_DIRS:
        for path in sorted((ROOT / directory).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Tuple) and {"/etc/modprobe.d", "/run/modprobe.d"} <= {
                        getattr(e, "value", None) for e in node.elts}:
                    holders.append(str(path.relative_to(ROOT)))
    assert sorted(set(holders)) == ["plugins/module_utils/modprobe_conf.py"]


def test_every_reader_uses_the_one_stripper() -> None:
    spec = importlib.util.spec_from_file_location("gdsfleet_bundle_test_cufile_filter",
                                                  ROOT / "plugins" / "filter" / "cufile.py")
    assert spec and spec.loader
    cufile_filter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cufile_filter)
    from provisioner.remote import iotest
    from provisioner.verify.parsers import cufile as cufile_parser

    text = '{"a": "x, ]", // c\n "b": [1, 2,],}'
    want = {"a": "x, ]", "b": [1, 2]}
    for strip in (cufile_filter.strip_json_comments, cufile_parser.strip_comments,
                  iotest._cufile_json.strip_comments):
        assert json.loads(strip(text)) == want


def test_no_test_or_script_sends_a_node_side_script_unbundled() -> None:
    """A raw provisioner/remote/<script> cannot run on a node alone (its shared parsers are
    bundled in at send time): tests and scripts send ``load_script(name)``, as verify does."""
    import re

    root = Path(__file__).resolve().parents[2]
    raw = re.compile(r"""["']remote["']\s*/\s*["'](gather|iotest|gdsio)\.py["']\s*\)\s*\.read_""")
    found = [f"{path.relative_to(root)}:{n}"
             for base in ("tests", "scripts", "bench")
             for path in (root / base).rglob("*.py")
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if raw.search(line)]
    assert not found, f"send load_script(name) instead of the raw file: {found}"
