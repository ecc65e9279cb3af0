"""Property-based fuzzing of what nodes, execution nodes and inventories send (issue 27).

Hypothesis builds hostile documents from the project's real captures (a gather of the lent
H100, a kvikio I/O test, gdsio and gdscheck outputs under tests/fixtures/) with fields
replaced by hostile values: lone surrogates, NUL, escape sequences, NaN, wrong types, deep
nesting, paths that climb out. Properties:

* ``verify`` never exits 70 (a bug) and a bad document costs only its node: the other node's
  verdict is the one it gets alone, both are recorded in the ledger, the hostile one is judged
  (no internal error);
* the parsers and the I/O-test and gdsio evaluations never raise and give what any ledger
  stores;
* a worker's event stream, through ansible-runner's Processor behind the stream reader, never
  raises and writes nothing outside the run's folder;
* ``plan`` on a hostile inventory never exits 70 and writes nothing outside its folders.

The fast lane runs a fixed seed (``derandomize``) and a few examples per property;
``GDSFLEET_FUZZ_EXAMPLES=N`` and ``GDSFLEET_FUZZ_RANDOM=1`` make the longer run of
docs/testing.md ("Fuzzing").
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from provisioner import redact  # noqa: E402
from provisioner.cli import main  # noqa: E402
from provisioner.exitcodes import Exit  # noqa: E402
from provisioner.store import _dumps  # noqa: E402
from provisioner.verify.model import CommandResult  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = int(os.environ.get("GDSFLEET_FUZZ_EXAMPLES", "0") or 0)


def fuzz(fast: int, **kw: Any) -> Any:
    """Hypothesis settings: ``fast`` examples from a fixed seed in the fast lane."""
    return settings(
        **kw,
        max_examples=EXAMPLES or fast,
        derandomize=not os.environ.get("GDSFLEET_FUZZ_RANDOM"),
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


# ----------------------------------------------------------------------------- strategies
NASTY = ["\ud800", "\udfff", "\x00", "\x1b[2J", "\x1b]0;owned\x07", "\r", "\x9b31m",
         "\u202e", "\u2028", "\ufffe", "[/x]", "[bold]", "NaN", "Infinity", "-1", "1e999",
         "9" * 40, "../../../x", "/etc/passwd", "{", "}", '"', "\\", "\n", "zipfile", "%s",
         "${x}", "$(id)", "`id`", "<x>", "&amp;", "]]>", "\t", " ", ""]
chars = st.characters(exclude_categories=())  # every code point, lone surrogates included
text = st.one_of(
    st.text(chars, max_size=60),
    st.sampled_from(NASTY),
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(chars, max_size=8)),
             max_size=6).map("".join),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), text)
values = st.recursive(scalars, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(text, c, max_size=4)), max_leaves=12)


def deep(n: int) -> Any:
    out: Any = "x"
    for _ in range(n):
        out = [out]
    return out


def _yaml_output(path: Path) -> str:
    return "\n".join(yaml.safe_load(path.read_text())["output"])


GATHER: dict[str, Any] = json.loads(
    _yaml_output(FIXTURES / "gather" / "h100-ubuntu24.04_no-nvidia-fs.yml"))
IOTEST: dict[str, Any] = json.loads(
    _yaml_output(FIXTURES / "iotest" / "h100-kvikio-26.10_no-nvidia-fs_1GiB.yml").splitlines()[-1])
ITEMS = sorted(GATHER["items"])


def _mutate(doc: Any, path: list[Any], value: Any) -> Any:
    """``doc`` with the value at ``path`` (indices into dicts and lists, taken modulo their
    sizes) replaced by ``value``."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return value
    if isinstance(doc, dict):
        key = sorted(doc, key=str)[path[0] % len(doc)]
        return {**doc, key: _mutate(doc[key], path[1:], value)}
    i = path[0] % len(doc)
    return [*doc[:i], _mutate(doc[i], path[1:], value), *doc[i + 1:]]


mutations = st.lists(st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=5),
                               st.one_of(values, st.just(deep(300)))), min_size=1, max_size=6)


@st.composite
def hostile_gathers(draw: Any) -> str:
    """A gather's stdout: the captured document with items or fields replaced, an item's
    text made hostile, or no document at all."""
    kind = draw(st.sampled_from(["fields", "items", "text", "raw"]))
    doc = GATHER
    if kind == "fields":
        for path, value in draw(mutations):
            doc = _mutate(doc, [1, *path], value)  # under "items"
    elif kind == "items":
        items = dict(doc["items"])
        for key in draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=6)):
            field = draw(st.sampled_from(["out", "err", "rc", "path", "argv", "files", "text"]))
            item = items[key] if isinstance(items[key], dict) else {}
            items[key] = {**item, field: draw(st.one_of(text, values))}
        doc = {**doc, "items": items}
    elif kind == "text":
        key = draw(st.sampled_from(ITEMS))
        items = dict(doc["items"])
        out = str((items[key] or {}).get("out") or "") if isinstance(items[key], dict) else ""
        cut = draw(st.integers(0, len(out)))
        items[key] = {**items[key], "out": out[:cut] + draw(text) + out[cut:]}
        doc = {**doc, "items": items}
    else:
        return draw(st.one_of(text, values.map(lambda v: json.dumps(v))))
    return json.dumps(doc) + "\n"


# ----------------------------------------------------------------------------- sandbox
@contextlib.contextmanager
def sandbox(root: Path) -> Iterator[Path]:
    """A folder that is the whole world of one command: cwd, HOME, state and temp in it."""
    for sub in ("cwd", "home", "state", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(root / "cwd")
        mp.setenv("HOME", str(root / "home"))
        mp.setenv("XDG_STATE_HOME", str(root / "state"))
        mp.setenv("TMPDIR", str(root / "tmp"))
        mp.delenv("GDSFLEET_LEDGER", raising=False)
        mp.delenv("GDSFLEET_DEBUG_LOG", raising=False)
        redact.forget_all()
        yield root
    finally:
        mp.undo()
        redact.forget_all()


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if not p.is_dir()}


# ============================================================ verify: a fleet, one node hostile
class InProcessNode:
    """A stand-in node: every command it is given answers ``stdout`` (the gather's document);
    no process, so many examples fit the fast lane."""

    def __init__(self, name: str, stdout: str) -> None:
        self.name = name
        self.stdout = stdout

    def run(self, command: str, *, timeout: float, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        return CommandResult(exit_status=0, stdout=self.stdout, stderr="", duration_s=0.01)

    def close(self) -> None:
        pass


def _verify(root: Path, answers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import provisioner.ssh

    inv = root / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + "".join(
        f"        {n}: {{ansible_host: 127.0.0.1, ansible_user: root}}\n" for n in answers))
    report = root / "out" / "r.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(provisioner.ssh, "runner_factory",
                   lambda _s: lambda node: InProcessNode(node.name, answers[node.name]))
        code = main(["verify", "-i", str(inv), "--no-io-test", "-q", "--parallel", "1",
                     "--ledger", str(root / "out" / "ledger.sqlite"), "--json", str(report)])
    doc = json.loads(report.read_text()) if report.exists() else {}
    return code, doc


def _verdict(node: dict[str, Any]) -> tuple[Any, ...]:
    return (node.get("compliant"), node.get("reachable"),
            tuple((c.get("id"), c.get("status")) for c in node.get("checks") or []))


@pytest.fixture(scope="module")
def good_alone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    root = tmp_path_factory.mktemp("alone")
    with sandbox(root):
        code, doc = _verify(root, {"good1": json.dumps(GATHER) + "\n"})
    assert code in (Exit.OK, Exit.NOT_COMPLIANT), code
    return _verdict(doc["nodes"][0])


@fuzz(fast=25)
@given(stdout=hostile_gathers())
def test_fuzz_verify_a_hostile_gather_costs_only_its_node(
        stdout: str, good_alone: tuple[Any, ...], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("fleet")
    with sandbox(root):
        code, doc = _verify(root, {"good1": json.dumps(GATHER) + "\n", "bad1": stdout})
    assert code in (Exit.OK, Exit.NOT_COMPLIANT, Exit.UNREACHABLE), code
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert _verdict(nodes["good1"]) == good_alone
    assert not nodes["bad1"].get("internal_error"), nodes["bad1"].get("error")
    from provisioner.store import Ledger

    with Ledger.open(str(root / "out" / "ledger.sqlite")) as led:
        recorded = {v["node"] for v in led.run_verifications(doc["run_id"])}
    assert recorded == {"good1", "bad1"}
    # nothing written but the ledger, the report and the state folder's files
    for rel in files_under(root):
        assert rel.parts[0] in ("out", "state", "hosts.yml"), rel


# ============================================================ parsers and evaluations, directly
@fuzz(fast=60)
@given(text=st.one_of(text, st.lists(text, max_size=20).map("\n".join)))
def test_fuzz_parsers_never_raise(text: str) -> None:
    from provisioner.verify.parsers import (
        cufile,
        cufile_log,
        driver,
        gdscheck,
        gdsio,
        kernel,
        modprobe,
    )

    results: list[Any] = [
        gdscheck.parse(text), gdsio.parse(text), cufile.parse(text), cufile_log.parse(text),
        driver.parse_proc_version(text), driver.flavor_from_license(text),
        driver.parse_smi_list(text), driver.parse_smi_query(text),
        driver.parse_gpu_information(text), kernel.parse_kallsyms(text),
        kernel.parse_cmdline(text), kernel.parse_kernel_version(text),
        modprobe.parse_nvidia_params(text), modprobe.configured_options(text, text),
    ]
    for r in results:
        doc = r.to_dict() if hasattr(r, "to_dict") else r
        _dumps(doc).encode("utf-8")


@fuzz(fast=60)
@given(muts=mutations, route=st.sampled_from([None, "nvfs", "p2pdma", "none"]))
def test_fuzz_io_test_document_is_judged_never_raises(muts: Any, route: Any) -> None:
    from provisioner.verify.iotest import evaluate

    doc: Any = IOTEST
    for path, value in muts:
        doc = _mutate(doc, path, value)
    if not isinstance(doc, dict):
        doc = {"attempts": doc}
    result = evaluate(doc, route=route)
    _dumps(result.to_dict()).encode("utf-8")


GDSIO_LINE = _yaml_output(FIXTURES / "gdsio" / "nvidia-docs_nvme_cpuonly-read.yml")


@fuzz(fast=60)
@given(muts=mutations, floor=st.one_of(st.none(), st.floats(0, 10)))
def test_fuzz_gdsio_document_is_judged_never_raises(muts: Any, floor: Any) -> None:
    from provisioner.verify.gdsio import evaluate
    from provisioner.verify.model import GdsioOptions

    doc: Any = {"gdsfleet_gdsio": 1, "runs": [
        {"transfer": "gpu_direct", "rc": 0, "stdout": GDSIO_LINE, "stderr": ""},
        {"transfer": "cpu_only", "rc": 0, "stdout": GDSIO_LINE, "stderr": ""}]}
    for path, value in muts:
        doc = _mutate(doc, path, value)
    if not isinstance(doc, dict):
        doc = {"runs": doc}
    result, check = evaluate(doc, GdsioOptions(), floor)
    out = {"check": check.to_dict(), "result": result.to_dict() if result else None}
    _dumps(out).encode("utf-8")


# ============================================================ a worker's event stream
def _zip_escape(outside: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        link = zipfile.ZipInfo("lnk")
        link.create_system = 3
        link.external_attr = (0o777 | 0xA000) << 16
        zf.writestr(link, str(outside))
        zf.writestr("lnk/pwned", "written through the link")
        zf.writestr("../climbed", "written above the folder")
    return buf.getvalue()


@st.composite
def worker_streams(draw: Any, outside: Path) -> bytes:
    """What a worker may send: status lines, events with hostile fields, archives announced
    every way JSON allows (with a symlink out of the folder in them), lines that are not
    objects, bytes that are not JSON, a stream cut anywhere."""
    raw = _zip_escape(outside)
    b64 = base64.b64encode(raw)
    announce = [b'{"zipfile": %d}' % len(raw), b' {"zipfile": %d}' % len(raw),
                b'{"\\u007aipfile": %d}' % len(raw), b'{"x": 1, "zipfile": %d}' % len(raw)]
    line = st.one_of(
        st.builds(lambda s: json.dumps({"status": s}).encode(),
                  st.sampled_from(["starting", "running", "successful", "failed", "error"])),
        st.builds(lambda ev, counter, created, data: json.dumps(
            {"event": ev, "uuid": "u", "counter": counter, "created": created,
             "event_data": data}).encode(),
            st.one_of(st.sampled_from(["runner_on_ok", "runner_on_failed", "playbook_on_stats",
                                       "verbose"]), text),
            st.one_of(st.integers(1, 10**6), text, values), st.one_of(text, values),
            st.one_of(st.fixed_dictionaries({"host": text, "task": text, "res": values}),
                      values)),
        st.sampled_from(announce).map(lambda a: a + b"\n" + b64),
        values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=40),
    )
    lines = draw(st.lists(line, max_size=12))
    stream = b"\n".join(lines) + b"\n" + draw(st.sampled_from([b'{"eof": true}\n', b""]))
    return stream[:draw(st.integers(0, len(stream)))] if draw(st.booleans()) else stream


@pytest.mark.filterwarnings("ignore")
@fuzz(fast=40)
@given(data=st.data())
def test_fuzz_worker_stream_never_raises_nor_writes_outside(
        data: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    import ansible_runner

    from provisioner.rollout.events import EventLog, shard_limits
    from provisioner.rollout.executors.stream import _BoundedReader
    from provisioner.rollout.runner import EventCollector

    root = tmp_path_factory.mktemp("stream")
    outside = root / "outside"
    outside.mkdir()
    pdd = root / "pdd"
    stream = data.draw(worker_streams(outside))
    log = EventLog(pdd / "artifacts" / "x" / "events.jsonl")
    collector = EventCollector(["h1"], sink=log, limits=shard_limits(1))
    try:
        ansible_runner.run(streamer="process", _input=_BoundedReader(io.BytesIO(stream)),
                           private_data_dir=str(pdd), ident="x", quiet=True,
                           event_handler=collector.handle,
                           status_handler=lambda d, runner_config=None: None,
                           settings={"suppress_output_file": True},
                           cancel_callback=lambda: False)
    finally:
        log.close()
    collector.outcomes()
    assert not any(outside.iterdir()), sorted(outside.iterdir())
    for rel in files_under(root):
        assert rel.parts[0] == "pdd", rel


# ============================================================ inventories through plan
@st.composite
def hostile_hosts(draw: Any) -> dict[str, Any]:
    """The second host of an inventory, one thing about it hostile: its name, address, user, or
    one more variable."""
    name, hostvars = "node02", {"ansible_host": "127.0.0.2", "ansible_user": "root"}
    which = draw(st.sampled_from(["name", "ansible_host", "ansible_user", "var"]))
    if which == "name":
        name = draw(text)
    elif which == "var":
        var = draw(st.sampled_from([
            "ansible_port", "ansible_ssh_common_args", "ansible_ssh_extra_args",
            "gds_verify_io_size", "ansible_connection", "ansible_ssh_executable",
            "nvme_devices", "ansible_python_interpreter", "gds_target", "rack"]))
        hostvars[var] = draw(st.one_of(text, values))
    else:
        hostvars[which] = draw(st.one_of(text, values))
    return {name: hostvars}


@fuzz(fast=15)
@given(host=hostile_hosts())
def test_fuzz_plan_a_hostile_inventory_never_crashes(
        host: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("plan")
    inv = root / "inv.yml"
    hosts = {"node01": {"ansible_host": "127.0.0.1"}, **host}
    try:
        inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}},
                                      allow_unicode=True))
    except (UnicodeEncodeError, yaml.YAMLError):
        inv.write_bytes(json.dumps(
            {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}).encode())
    with sandbox(root):
        code = main(["plan", "-i", str(inv), "--ledger", str(root / "out" / "l.sqlite")])
    assert code in (Exit.OK, Exit.USAGE, Exit.LEDGER), code
    for rel in files_under(root):
        assert rel.parts[0] in ("inv.yml", "out", "state"), rel
