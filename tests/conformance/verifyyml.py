"""TEST STAND-IN (conformance matrix): playbooks/verify.yml's verdict on a simulated node.

Runs the playbook's own tasks in order, each by what its module would return on that node, and
evaluates every ``when``, ``set_fact`` and ``assert`` with ansible-core's templating engine (the
real Jinja filters and tests, and this collection's filters through the collection loader).
The modules are answered from the simulated node (tests/conformance/simnode.py): package_facts
as ansible-core's apt and rpm backends report (the RPM backend's ``version`` has no release:
ansible-core ``lib/ansible/modules/package_facts.py``, tests/fixtures/ansible-core/upstream.yml),
slurp/stat/find from its files, ``command`` through the shim's stand-in commands (grep is the
real grep on its /proc/kallsyms). The verdict: every task ran and every assert held; like
Ansible, the run stops at the host's first failure. Only the modules verify.yml uses are known: a
new one fails the test loudly, so the interpreter cannot drift silently from the playbook."""

from __future__ import annotations

import atexit
import base64
import fnmatch
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "verify.yml"
SHIM = Path(__file__).resolve().parent / "shim.py"
_RUN_CMD = ("import json, subprocess, sys\n"
            "argv = json.loads(sys.argv[1])\n"
            "try:\n"
            "    p = subprocess.run(argv, capture_output=True)\n"
            "    print(json.dumps([p.returncode, p.stdout.decode(), p.stderr.decode()]))\n"
            "except FileNotFoundError as exc:\n"
            "    print(json.dumps([2, '', str(exc)]))\n")
_loader_base: Path | None = None


def _collection_loader() -> None:
    """The collection loader, with gdsfleet.gds resolved to THIS checkout (a symlink in a
    temporary collections path): verify.yml's filters are the ones beside the playbook."""
    global _loader_base
    from ansible.plugins.loader import filter_loader, test_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    finder = AnsibleCollectionConfig.collection_finder
    if (_loader_base is not None and finder is not None
            and str(_loader_base) in AnsibleCollectionConfig.collection_paths):
        return
    if _loader_base is None:
        _loader_base = Path(tempfile.mkdtemp(prefix="gdsfleet-conformance-collections-"))
        atexit.register(shutil.rmtree, _loader_base, True)
        (_loader_base / "ansible_collections" / "gdsfleet").mkdir(parents=True)
        (_loader_base / "ansible_collections" / "gdsfleet" / "gds").symlink_to(ROOT)
    # another test of this process may have used Ansible first (a Templar with no collection
    # finder imports `ansible_collections` as a plain namespace package of site-packages, where
    # gdsfleet.gds is not): that import, the finder and the lookups cached are dropped
    for name in [m for m in sys.modules
                 if m == "ansible_collections" or m.startswith("ansible_collections.")]:
        del sys.modules[name]
    _AnsibleCollectionFinder(paths=[str(_loader_base)])._install()
    for loader in (filter_loader, test_loader):
        loader._clear_caches()


def _trust(value: Any) -> Any:
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def package_facts(model: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """ansible_facts.packages as package_facts builds it: apt's version is the whole Debian
    version (with the revision); rpm's is VERSION, the release a field of its own."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in model["packages"]:
        if model["manager"] == "rpm":
            entry = {"name": p["name"], "version": p["version"], "release": p["release"],
                     "epoch": None, "arch": "x86_64", "source": "rpm"}
        else:
            entry = {"name": p["name"], "version": p["version"], "arch": "amd64",
                     "category": "misc", "origin": "", "source": "apt"}
        out.setdefault(p["name"], []).append(entry)
    return out


def _mounts(root: Path) -> list[dict[str, Any]]:
    mounts = []
    for line in (root / "proc/self/mounts").read_text().splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] not in ("proc", "sysfs"):
            mounts.append({"mount": f[1], "device": f[0], "fstype": f[2], "options": f[3]})
    return mounts


def _command(root: Path, argv: list[str]) -> dict[str, Any]:
    if argv[0] == "grep":  # the real grep, on the node's file
        args = [str(root / a.lstrip("/")) if a.startswith(("/proc/", "/sys/")) else a
                for a in argv]
        p = subprocess.run(args, capture_output=True, text=True, check=False)
        rc, err = p.returncode, p.stderr
        out = p.stdout.replace(str(root) + "/", "/")  # grep -H names the node's paths
    else:
        p = subprocess.run([sys.executable, str(SHIM), str(root), json.dumps(argv)],
                           input=_RUN_CMD.encode(), capture_output=True, check=True)
        rc, out, err = json.loads(p.stdout)
    return {"rc": rc, "stdout": out.rstrip("\n"), "stdout_lines": out.splitlines(),
            "stderr": err, "changed": False}


def _module(task: dict[str, Any]) -> tuple[str, Any]:
    for key, value in task.items():
        if key.startswith("ansible.builtin."):
            return key.rsplit(".", 1)[1], value
    raise AssertionError(f"verify.yml task {task.get('name')!r}: no ansible.builtin module")


def run(root: Path, model: dict[str, Any], inventory: dict[str, Any]) -> dict[str, Any]:
    """verify.yml on the simulated node: ``{"verdict": pass|fail, "failed": [task names]}``."""
    _collection_loader()
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    play = yaml.safe_load(PLAYBOOK.read_text())[0]
    hostvars: dict[str, Any] = {**_trust(play.get("vars") or {}), **inventory}
    hostvars["ansible_facts"] = {"kernel": model["kernel"], "mounts": _mounts(root)}
    loader = DataLoader()
    failed: list[str] = []
    warnings: list[str] = []
    for task in play["tasks"]:
        task = _trust(task)
        name = str(task.get("name"))
        variables = {**hostvars, **(task.get("vars") or {})}
        templar = Templar(loader=loader, variables=variables)
        when = task.get("when")
        if when is not None and not all(templar.evaluate_conditional(w) for w in (
                when if isinstance(when, list) else [when])):
            if task.get("register"):
                hostvars[task["register"]] = {"skipped": True, "changed": False}
            continue
        module, args = _module(task)
        args = templar.template(args) if module not in ("assert", "set_fact") else args
        result: dict[str, Any]
        if module == "package_facts":
            hostvars["ansible_facts"]["packages"] = package_facts(model)
            continue
        if module == "slurp":
            path = root / str(args["src"]).lstrip("/")
            result = ({"content": base64.b64encode(path.read_bytes()).decode(), "source":
                       args["src"]} if path.is_file() else
                      {"failed": True, "msg": f"file not found: {args['src']}"})
        elif module == "stat":
            result = {"stat": {"exists": (root / str(args["path"]).lstrip("/")).exists()}}
        elif module == "find":
            paths = args["paths"] if isinstance(args["paths"], list) else [args["paths"]]
            pats = args.get("patterns") or "*"
            pats = [pats] if isinstance(pats, str) else list(pats)
            files = []
            for d in (root / str(p).lstrip("/") for p in paths):
                files += sorted(f for f in d.iterdir() if any(fnmatch.fnmatch(f.name, p)
                                                              for p in pats)) if d.is_dir() else []
            result = {"matched": len(files),
                      "files": [{"path": "/" + str(f.relative_to(root))} for f in files]}
        elif module == "command":
            argv = args["argv"] if isinstance(args, dict) else str(args).split()
            result = _command(root, [str(a) for a in argv])
        elif module == "set_fact":
            for key, value in args.items():
                hostvars[key] = templar.template(value)
            continue
        elif module == "assert":
            if not all(templar.evaluate_conditional(c) for c in args["that"]):
                failed.append(name)
                break  # the host has failed: Ansible runs no further task on it
            continue
        elif module == "debug":
            warnings.append(str(args.get("msg", "")))  # a warning: never the verdict
            continue
        else:
            raise AssertionError(f"verify.yml uses {module!r}, unknown to this interpreter "
                                 f"(task {name!r}): teach tests/conformance/verifyyml.py")
        if result.get("failed") and task.get("failed_when") is None:
            failed.append(name)  # the module itself fails the host
            break
        if task.get("register"):
            hostvars[task["register"]] = result
    return {"verdict": "fail" if failed else "pass", "failed": failed, "warnings": warnings}
