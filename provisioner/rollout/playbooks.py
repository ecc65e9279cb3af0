"""Which playbook a rollout runs, found the way ``ansible-playbook`` finds it.

By default the rollout runs the *installed* collection's playbooks by their FQCN
(``gdsfleet.gds.site``, ``gdsfleet.gds.reboot``), so a wheel-installed ``provisioner`` works
from any directory: it never looks for files beside its own package. ``--playbook`` takes a
file path or another FQCN.

An FQCN is resolved before anything changes, by ansible-core's own collection loader run in a
child process with the environment the playbook run gets (``ANSIBLE_COLLECTIONS_PATH``,
``ANSIBLE_CONFIG`` and its ``collections_path``, the default paths, and ``ansible_collections``
folders on the Python path): a collection that is not installed is refused with how to install
it, instead of every node failing later.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import UsageError

COLLECTION = "gdsfleet.gds"
SITE = f"{COLLECTION}.site"
REBOOT = f"{COLLECTION}.reboot"
# the checkout this package runs from, when it is an editable install
_REPO = Path(__file__).resolve().parents[2]

# namespace.collection.playbook (playbook names may carry sub-folders as dotted parts)
_FQCN_RE = re.compile(r"^[A-Za-z_]\w*\.[A-Za-z_]\w*(\.\w+)+$")

# Passed to the playbook run as they are (see runner.run_playbook).
FORWARDED_ENV = ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS", "ANSIBLE_CONFIG",
                 "ANSIBLE_ROLES_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH")

_PROBE = r"""
import json, sys
out = {"path": None, "collection_dir": None, "search": [], "config": None, "error": None}
try:
    from ansible import constants as C
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader()
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.utils.collection_loader._collection_finder import (
        _get_collection_playbook_path)
    out["config"] = C.CONFIG_FILE
    out["search"] = [str(p) for p in C.COLLECTIONS_PATHS]
    out["scanned"] = [str(p) for p in AnsibleCollectionConfig.collection_paths]
    out["scan_sys_path"] = bool(C.COLLECTIONS_SCAN_SYS_PATH)
    ns, name = sys.argv[1].split(".")[:2]
    try:
        import importlib
        pkg = importlib.import_module(f"ansible_collections.{ns}.{name}")
        out["collection_dir"] = list(pkg.__path__)[0]
    except ImportError:
        pass
    found = _get_collection_playbook_path(sys.argv[1])
    if found:
        out["path"] = found[1]
    if out["collection_dir"]:
        # the collection's own dependencies (MANIFEST.json), found by the same loader
        from ansible.galaxy.dependency_resolution.versioning import meets_requirements
        import os
        deps = []
        try:
            with open(os.path.join(out["collection_dir"], "MANIFEST.json")) as fh:
                wanted = json.load(fh)["collection_info"].get("dependencies") or {}
        except (OSError, ValueError, KeyError, TypeError):
            wanted = {}
        for dep, req in sorted(wanted.items()):
            entry = {"name": dep, "wanted": str(req), "version": None, "path": None, "ok": False}
            try:
                mod = importlib.import_module("ansible_collections." + dep)
                entry["path"] = list(mod.__path__)[0]
                with open(os.path.join(entry["path"], "MANIFEST.json")) as fh:
                    entry["version"] = json.load(fh)["collection_info"]["version"]
                entry["ok"] = meets_requirements(entry["version"], str(req))
            except ImportError:
                pass
            except (OSError, ValueError, KeyError, TypeError):
                entry["ok"] = True  # found without a MANIFEST (a source checkout): no version
            deps.append(entry)
        out["dependencies"] = deps
except Exception as exc:  # reported to the caller, which refuses with it
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


# A dependency of gdsfleet.gds that only some of its playbooks use (galaxy.yml lists it for
# them): its absence refuses only those (kubernetes.core: roles/gpu_operator's Helm module).
PARTIAL_DEPENDENCIES = {"kubernetes.core": (f"{COLLECTION}.gpu_operator",)}


@dataclass(frozen=True)
class Playbook:
    """What ``ansible-playbook`` is given (``spec``: an FQCN or an absolute path) and the file."""

    spec: str
    path: Path
    fqcn: bool


# Playbooks whose change a verification cannot see as done or not (a kernel update: the node
# verifies compliant before it as after it). A rollout with one of them provisions every selected
# node, as --force does, instead of only verifying the nodes the ledger says are compliant.
CHANGE_PLAYBOOKS = (f"{COLLECTION}.kernel_update",)
CHANGE_PLAYBOOK_FILES = ("kernel_update.yml",)


def always_provisions(pb: Playbook) -> bool:
    """Whether a rollout of ``pb`` provisions compliant nodes too (CHANGE_PLAYBOOKS, or the
    collection's playbook file of that name given by path)."""
    if pb.fqcn:
        return pb.spec in CHANGE_PLAYBOOKS
    return pb.path.name in CHANGE_PLAYBOOK_FILES and pb.path.parent.name == "playbooks"


def looks_like_fqcn(spec: str) -> bool:
    return bool(_FQCN_RE.match(spec)) and not Path(spec).exists()


def ansible_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The Ansible settings the playbook run inherits from this process.

    ansible-runner starts ``ansible-playbook`` in its own project folder, where the operator's
    ``./ansible.cfg`` would not be read: an ``ansible.cfg`` in the current directory is passed
    on as ``ANSIBLE_CONFIG`` (unless that is set), so the rollout sees what ``ansible-playbook``
    run from here sees.
    """
    src = os.environ if base is None else base
    env = {k: src[k] for k in FORWARDED_ENV if src.get(k)}
    if "ANSIBLE_CONFIG" not in env and Path("ansible.cfg").is_file():
        env["ANSIBLE_CONFIG"] = str(Path("ansible.cfg").resolve())
    return env


def checkout_collections() -> Path | None:
    """``.lab/collections`` of the checkout this package runs from (an editable install),
    where scripts/install_collection.sh installs the built collection; None for a normal
    install (the package then sits in site-packages, with no checkout around it)."""
    path = _REPO / ".lab" / "collections"
    return path if (_REPO / "galaxy.yml").is_file() and path.is_dir() else None


def run_env(*, pipelining: bool = True) -> dict[str, str]:
    """The Ansible environment a rollout's playbook runs get (and the probe that resolves
    them): :func:`ansible_env`, the connection settings, and in a checkout (an editable
    install) with no ANSIBLE_COLLECTIONS_PATH, its ``.lab/collections``, where
    scripts/install_collection.sh installs the collection. ``plan --playbook`` resolves with
    the same."""
    from provisioner.rollout.ansible_env import connection_env

    env = ansible_env()
    env.update(connection_env(pipelining=pipelining))
    lab = checkout_collections()
    if "ANSIBLE_COLLECTIONS_PATH" not in env and lab is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(lab)
    return env


def install_hint(fqcn: str) -> str:
    ns_name = ".".join(fqcn.split(".")[:2])
    return (
        f"install the collection {ns_name} where Ansible looks for collections: from a "
        f"checkout of gdsfleet, `ansible-galaxy collection build` then `ansible-galaxy "
        f"collection install {ns_name.replace('.', '-')}-<version>.tar.gz` (add `-p DIR` and "
        f"set ANSIBLE_COLLECTIONS_PATH=DIR for a private path; `scripts/install_collection.sh` "
        f"does both into .lab/collections), or pass --playbook with a playbook file"
    )


def _probe(fqcn: str, env: dict[str, str], cwd: Path | None) -> dict[str, object]:
    child_env = {k: v for k, v in os.environ.items() if k not in FORWARDED_ENV}
    child_env.update(env)
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, fqcn], capture_output=True,
                              text=True, env=child_env, cwd=cwd, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"cannot ask ansible-core where {fqcn} is: {exc}") from exc
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise UsageError(f"cannot ask ansible-core where {fqcn} is (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-500:]}") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"cannot ask ansible-core where {fqcn} is: {doc!r}")
    return doc


def _refuse_missing_dependencies(spec: str, doc: dict[str, object]) -> None:
    """The collection's dependencies (its MANIFEST.json's, as ``ansible-galaxy`` reads them)
    that Ansible would not find or finds in a version the collection does not accept: refused
    before anything runs, instead of every node failing on ``couldn't resolve module/action
    'ansible.posix.mount'`` (a collection installed ``--no-deps`` on an offline site, issue
    47). A dependency only other playbooks use (:data:`PARTIAL_DEPENDENCIES`) is not asked
    for."""
    deps = doc.get("dependencies")
    if not isinstance(deps, list):
        return
    bad: list[str] = []
    names: list[str] = []
    for d in deps:
        if not isinstance(d, dict) or d.get("ok"):
            continue
        name = str(d.get("name"))
        users = PARTIAL_DEPENDENCIES.get(name)
        if users is not None and spec not in users:
            continue
        names.append(name)
        bad.append(f"{name} {d.get('wanted')} (found {d.get('version')} at {d.get('path')})"
                   if d.get("path") else f"{name} {d.get('wanted')} (not found)")
    if not bad:
        return
    ns_name = ".".join(spec.split(".")[:2])
    paths = doc.get("search")
    search = ", ".join(str(p) for p in paths) if isinstance(paths, list) and paths else "none"
    also = (", plus ansible_collections folders on Python's path" if doc.get("scan_sys_path")
            else "; not Python's path: ANSIBLE_COLLECTIONS_SCAN_SYS_PATH is false")
    raise UsageError(
        f"playbook {spec}: the collection {ns_name} needs {', '.join(bad)}, which Ansible does "
        f"not find where it looks (COLLECTIONS_PATHS: {search}{also}); its tasks would fail "
        f"on every node with \"couldn't "
        f"resolve module/action\". To fix: `ansible-galaxy collection install "
        f"{' '.join(names)}` (add -p DIR for the path {ns_name} is in; offline: `ansible-galaxy "
        f"collection download {' '.join(names)}` on a machine with access, then install the "
        f"tarballs), or `pip install ansible`, which carries them")


def resolve(spec: str, *, env: dict[str, str] | None = None,
            run_dir: Path | None = None) -> Playbook:
    """The playbook ``spec`` names, or UsageError saying how to make it available.

    ``env`` is the Ansible environment of the playbook run (default :func:`ansible_env`);
    ``run_dir`` the folder the probe runs in (ansible-runner's project folder is not this one).
    """
    if not looks_like_fqcn(spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UsageError(f"playbook {spec!r} does not exist (give a playbook file or a "
                             f"collection playbook's FQCN such as {SITE})")
        return Playbook(str(path.resolve()), path.resolve(), fqcn=False)
    env = ansible_env() if env is None else env
    doc = _probe(spec, env, run_dir)
    if doc.get("path"):
        _refuse_missing_dependencies(spec, doc)
        return Playbook(spec, Path(str(doc["path"])), fqcn=True)
    search = [str(p) for p in doc.get("search") or []]  # type: ignore[attr-defined]
    where = ", ".join(search) or "none configured"
    config = doc.get("config") or "none"
    if doc.get("error"):
        raise UsageError(f"cannot resolve playbook {spec}: ansible-core failed: {doc['error']}")
    ns_name = ".".join(spec.split(".")[:2])
    if doc.get("collection_dir"):
        raise UsageError(
            f"playbook {spec}: the collection {ns_name} is installed at "
            f"{doc['collection_dir']} but has no playbook "
            f"{spec.split('.', 2)[2]}(.yml|.yaml) in its playbooks/ folder; install a version "
            f"that ships it, or pass --playbook with a playbook file")
    raise UsageError(
        f"playbook {spec}: the collection {ns_name} is not installed where Ansible looks "
        f"(COLLECTIONS_PATHS: {where}, plus ansible_collections folders on Python's path; "
        f"config file: {config}). To fix: {install_hint(spec)}")
