"""The collection tarball holds the collection's content and nothing else, whatever a checkout
holds beside it: `pip install .` leaves build/ and *.egg-info, ansible-lint leaves .ansible/
(with other collections in it), people leave virtual environments and notes. galaxy.yml's
`manifest` is an allowlist; this builds from a deliberately dirty copy and lists the tarball."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GALAXY = Path(sys.executable).with_name("ansible-galaxy")

# Top-level entries a Galaxy collection of this project may ship.
ALLOWED_TOP = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.rst", "meta",
               "roles", "playbooks", "plugins", "changelogs", "docs", "tests", "monitoring"}

JUNK = {
    "build/lib/provisioner/cli.py": "print('a copy of the Python package')\n",
    "gdsfleet.egg-info/PKG-INFO": "Metadata-Version: 2.1\n",
    "provisioner.egg-info/SOURCES.txt": "x\n",
    ".ansible/collections/ansible_collections/other/thing/galaxy.yml": "namespace: other\n",
    ".ansible/roles/x/tasks/main.yml": "---\n",
    ".venv/bin/python": "#!/bin/sh\n",
    "notes.txt": "operator's notes\n",
    "roles/cuda/tasks/__pycache__/x.cpython-311.pyc": "",
    "roles/cuda/tasks/main.yml.swp": "",
    "plugins/filter/__pycache__/cufile.cpython-311.pyc": "",
    "docs/evidence/h100/huge.log": "evidence is not collection content\n",
    "dist/gdsfleet-0.1.0-py3-none-any.whl": "",
}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return [p for p in out.splitlines() if (ROOT / p).is_file()]


@pytest.fixture(scope="module")
def dirty_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    if not GALAXY.exists():
        pytest.skip("ansible-galaxy is not in this virtual environment")
    src = tmp_path_factory.mktemp("checkout")
    tracked = _tracked()
    for rel in tracked:
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    for rel, text in JUNK.items():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    out = tmp_path_factory.mktemp("out")
    res = subprocess.run([str(GALAXY), "collection", "build", "--output-path", str(out), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    (tarball,) = out.glob("gdsfleet-gds-*.tar.gz")
    with tarfile.open(tarball) as tf:
        names = [m.name for m in tf.getmembers() if m.isfile()]
    return src, names


def test_tarball_holds_only_collection_content(dirty_build: tuple[Path, list[str]]) -> None:
    _, names = dirty_build
    tops = {n.split("/", 1)[0] for n in names}
    assert tops <= ALLOWED_TOP, sorted(tops - ALLOWED_TOP)
    for junk in JUNK:
        assert junk not in names
    bad = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".swp"))
           or "/." in "/" + n or n.startswith(("build/", "docs/evidence/"))]
    assert not bad
    # tests/ ships only ansible-test's sanity ignore files, never the Python suite.
    assert all(n.startswith("tests/sanity/ignore-") for n in names if n.startswith("tests/"))


def test_tarball_keeps_every_tracked_content_file(dirty_build: tuple[Path, list[str]]) -> None:
    """The allowlist must not drop content: every tracked file of the collection's own
    directories ships (hidden files aside)."""
    _, names = dirty_build
    shipped = set(names)
    content = [p for p in _tracked()
               if p.split("/", 1)[0] in {"roles", "playbooks", "plugins", "meta", "monitoring"}
               and not any(part.startswith(".") for part in p.split("/"))]
    assert content, "no collection content found in git ls-files"
    missing = [p for p in content if p not in shipped]
    assert not missing, missing
    for required in ("README.md", "LICENSE", "CHANGELOG.rst", "meta/runtime.yml",
                     "changelogs/changelog.yaml"):
        assert required in shipped, required
