"""Build hook for the provisioner wheel (metadata lives in pyproject.toml).

What the roles and the provisioner must agree on has one copy in git, in the collection's
plugins/module_utils/: the cufile.json schema (cufile_schema.json, read through
cufile_schema.py beside it), how cufile.json's comments are stripped (cufile_json.py) and how
kmod reads modprobe.d (modprobe_conf.py). The build copies those files into the wheel as
provisioner/_collection/; provisioner/collection_utils.py loads them from there, or from
plugins/module_utils/ when it runs from a checkout.
tests/unit/test_cufile_schema_shared.py builds a wheel and checks the copy.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHARED = tuple(f"plugins/module_utils/{name}" for name in
               ("cufile_schema.py", "cufile_schema.json", "modprobe_conf.py",
                "cufile_json.py", "nvfs_symbols.py", "kernel_gate.py", "kernel_elf.py",
                "kernel_boot.py"))
# the network filesystems' capability table and its rules
SHARED += ("plugins/module_utils/netfs_rules.py", "plugins/module_utils/netfs_caps.json")
# the node-side attest
SHARED += tuple(f"plugins/module_utils/{name}" for name in
               ("attest.py", "attest_state.py", "attest_compare.py", "attest_counters.py"))


class BuildPyWithCollectionSchema(build_py):
    """build_py, then the collection's shared module_utils into provisioner/_collection/."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, "provisioner", "_collection")
        self.mkpath(str(target))
        for source in SHARED:
            path = ROOT / source
            if not path.is_file():
                raise SystemExit(f"{source} is missing: the provisioner needs the collection's "
                                 "shared module_utils; build from a full checkout")
            self.copy_file(str(path), str(target / path.name))


setup(cmdclass={"build_py": BuildPyWithCollectionSchema})
