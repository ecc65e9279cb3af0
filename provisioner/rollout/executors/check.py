"""``provisioner exec-nodes check``: is each execution node reachable, and does it run what
this controller runs?

Per execution node, over the same OpenSSH hop the ssh executor uses (its host key checked the
same way): ``ansible-runner worker --worker-info`` (YAML: runner version, CPUs, memory, uuid),
then the ansible-core version and the ``gdsfleet.gds`` collection (version, and the SHA-256 of
its ``MANIFEST.json``, which lists every file's checksum) as that runner's Python sees them:
the first ``ansible_collections/gdsfleet/gds`` of ansible-core's collection search path
(``COLLECTIONS_PATHS``, then ``sys.path``), the order ansible-playbook resolves it in. The
same probe runs here for the controller. ``rollout --executor ssh`` refuses (exit 64) an
unreachable or mismatched execution node before any change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.rollout.executors.ssh import ExecNode, SshOptions, _find_runner, ssh_argv

MARK = "#gdsfleet-versions#"
MAX_OUT = 256 << 10
COLLECTION = "gdsfleet.gds"

# Run by the execution node's runner Python (argv[1]: the runner's folder). Fixed text, no
# secret: it may show in the node's process list.
PROBE = r"""
import hashlib, json, os, sys
out = {"ansible_core": None, "collection": None, "collection_sha256": None}
try:
    from ansible.release import __version__ as v
    out["ansible_core"] = str(v)
except Exception:
    pass
try:
    from ansible import constants as C
    paths = [os.path.expanduser(p) for p in (C.COLLECTIONS_PATHS or [])]
    if getattr(C, "COLLECTIONS_SCAN_SYS_PATH", True):
        paths += [p for p in sys.path if p]
    for base in paths:
        top = base if os.path.basename(base) == "ansible_collections" else os.path.join(
            base, "ansible_collections")
        m = os.path.join(top, "gdsfleet", "gds", "MANIFEST.json")
        if os.path.isfile(m):
            with open(m, "rb") as fh:
                raw = fh.read(1 << 20)
            out["collection_sha256"] = hashlib.sha256(raw).hexdigest()
            info = json.loads(raw).get("collection_info") or {}
            out["collection"] = str(info.get("version"))
            break
except Exception:
    pass
print(json.dumps(out))
"""


@dataclass
class NodeInfo:
    name: str
    reachable: bool
    error: str | None = None
    worker_info: dict[str, Any] = field(default_factory=dict)
    ansible_core: str | None = None
    collection: str | None = None
    collection_sha256: str | None = None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reachable": self.reachable, "error": self.error,
                "runner_version": self.worker_info.get("runner_version"),
                "cpu_count": self.worker_info.get("cpu_count"),
                "mem_in_bytes": self.worker_info.get("mem_in_bytes"),
                "uuid": self.worker_info.get("uuid"),
                "worker_errors": self.worker_info.get("errors") or [],
                "ansible_core": self.ansible_core, "collection": self.collection,
                "collection_sha256": self.collection_sha256, "problems": self.problems}


def _str(value: Any, limit: int = 80) -> str | None:
    from provisioner.sanitize import printable

    # scalars only: str() of a YAML structure built from aliases can be exponentially long
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    return printable(str(value)[:limit])[:limit]


def parse_worker_info(text: str) -> dict[str, Any]:
    """``ansible-runner worker --worker-info``'s YAML flow mapping, fields checked and bounded;
    ValueError when it is not one."""
    import yaml

    try:
        doc = yaml.safe_load(text[:MAX_OUT])
    except yaml.YAMLError:
        raise ValueError("worker --worker-info did not print YAML") from None
    if not isinstance(doc, Mapping) or "runner_version" not in doc:
        raise ValueError("worker --worker-info printed no runner_version")
    out: dict[str, Any] = {"runner_version": _str(doc.get("runner_version"), 40),
                           "uuid": _str(doc.get("uuid"), 64)}
    for key in ("cpu_count", "mem_in_bytes"):
        v = doc.get(key)
        out[key] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    errs = doc.get("errors")
    out["errors"] = [_str(e, 200) for e in errs[:5]] if isinstance(errs, list) else []
    return out


def parse_probe(text: str) -> dict[str, str | None]:
    try:
        doc = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, Mapping):
        doc = {}
    return {k: _str(doc.get(k), 80) for k in ("ansible_core", "collection", "collection_sha256")}


def controller_info(env: Mapping[str, str] | None = None) -> NodeInfo:
    """The same facts for this machine (ansible-runner beside this Python)."""
    from ansible_runner.__main__ import VERSION

    full = dict(os.environ)
    full.update(env or {})
    info = NodeInfo("controller", True, worker_info={"runner_version": str(VERSION)})
    try:
        r = subprocess.run([sys.executable, "-c", PROBE, str(Path(sys.executable).parent)],
                           capture_output=True, text=True, timeout=180, env=full, check=False)
        probe = parse_probe(r.stdout)
    except (OSError, subprocess.TimeoutExpired):
        probe = {}
    info.ansible_core = probe.get("ansible_core")
    info.collection = probe.get("collection")
    info.collection_sha256 = probe.get("collection_sha256")
    return info


def probe_node(node: ExecNode, known_hosts: Path, opts: SshOptions,
               timeout: float = 180.0) -> NodeInfo:
    remote = (_find_runner(node) + f"\"$R\" worker --worker-info || exit $?; echo '{MARK}'; "
              "PY=$(sed -n '1s/^#! *//p' \"$R\"); exec $PY -c " + _quote(PROBE)
              + " \"${R%/*}\"")
    try:
        r = subprocess.run(ssh_argv(node, known_hosts, opts, remote), capture_output=True,
                           timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return NodeInfo(node.name, False, error=f"no answer within {timeout:.0f} s")
    out = r.stdout[:MAX_OUT].decode("utf-8", "replace")
    err = _tail(r.stderr)
    if r.returncode == 255:
        return NodeInfo(node.name, False, error=f"ssh failed: {err or 'rc 255'}")
    if r.returncode == 127 or (r.returncode != 0 and MARK not in out):
        return NodeInfo(node.name, True, error=f"ansible-runner ({node.runner}) did not run "
                        f"there (rc {r.returncode}: {err or 'no message'})")
    head, _, tail = out.partition(MARK)
    info = NodeInfo(node.name, True)
    try:
        info.worker_info = parse_worker_info(head)
    except ValueError as exc:
        info.error = str(exc)
        return info
    probe = parse_probe(tail)
    info.ansible_core = probe["ansible_core"]
    info.collection = probe["collection"]
    info.collection_sha256 = probe["collection_sha256"]
    return info


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _tail(raw: bytes) -> str:
    from provisioner.redact import redact_text
    from provisioner.sanitize import printable

    lines = raw[-4096:].decode("utf-8", "replace").strip().splitlines()
    return printable(redact_text(" ".join(lines[-2:])))[:300]


def compare(info: NodeInfo, ctl: NodeInfo) -> list[str]:
    """What differs from the controller (empty: the node can run this controller's jobs)."""
    if not info.reachable or info.error:
        return [info.error or "unreachable"]
    out = []
    for label, mine, theirs in (
        ("ansible-runner", ctl.worker_info.get("runner_version"),
         info.worker_info.get("runner_version")),
        ("ansible-core", ctl.ansible_core, info.ansible_core),
        (f"{COLLECTION} version", ctl.collection, info.collection),
        (f"{COLLECTION} MANIFEST.json sha256", ctl.collection_sha256, info.collection_sha256),
    ):
        if mine != theirs:
            out.append(f"{label} {theirs or 'missing'} (controller: {mine or 'missing'})")
    return out


def check_nodes(nodes: Sequence[ExecNode], known: Mapping[str, Path], opts: SshOptions,
                ctl: NodeInfo) -> list[NodeInfo]:
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(nodes)))) as pool:
        infos = list(pool.map(lambda n: probe_node(n, known[n.name], opts), nodes))
    for info in infos:
        info.problems = compare(info, ctl)
    return infos


FIX = ("prepare it with playbooks/exec_node.yml (ansible-core, ansible-runner and the "
       "collection at the controller's versions), or drop it from the exec inventory; "
       "`provisioner exec-nodes check` shows each node")


def refusal(infos: Sequence[NodeInfo]) -> str | None:
    bad = [i for i in infos if i.problems]
    if not bad:
        return None
    shown = "; ".join(f"{i.name}: {', '.join(i.problems)[:300]}" for i in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"execution node(s) not ready, nothing was changed: {shown}{more}; {FIX}"
