"""The verification runtime that gdsfleet.gds.verify_runtime leaves on a node (testinfra):
a virtual environment (not the system Python) where kvikio and cupy for the node's CUDA major
import at the pinned versions, and the fact file `provisioner verify` reads."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from conftest import _role_defaults

if TYPE_CHECKING:
    import testinfra
    from conftest import GdsExpectation

FACT = "/etc/ansible/facts.d/gdsfleet_verify_runtime.fact"


def test_fact_file_names_the_venv_and_the_pinned_wheels(
    host: testinfra.host.Host, gds: GdsExpectation
) -> None:
    defaults = _role_defaults()
    fact = json.loads(host.file(FACT).content_string)
    major = int(gds.cuda_version.split(".")[0])
    venv = defaults["verify_runtime_venv"]
    assert fact["python"] == f"{venv}/bin/python"
    assert fact["cuda_major"] == major
    assert fact["kvikio_package"] == f"kvikio-cu{major}"
    assert fact["cupy_package"] == f"cupy-cuda{major}x"
    assert fact["kvikio_version"] == defaults["verify_runtime_kvikio_version"]
    assert fact["cupy_version"] == defaults["verify_runtime_cupy_version"]


def test_kvikio_and_cupy_import_in_the_venv_only(host: testinfra.host.Host) -> None:
    fact = json.loads(host.file(FACT).content_string)
    kv, cp = fact["kvikio_package"], fact["cupy_package"]
    probe = ("import importlib.metadata as m, json, kvikio, cupy; print(json.dumps("
             f'[m.version("{kv}"), m.version("{cp}"), kvikio.__file__]))')
    out = host.check_output(f"{fact['python']} -c '{probe}'")
    kvikio_v, cupy_v, path = json.loads(out)
    assert (kvikio_v, cupy_v) == (fact["kvikio_version"], fact["cupy_version"])
    assert path.startswith(fact["venv"] + "/")
    # never the system Python
    assert host.run("/usr/bin/python3 -c 'import kvikio'").rc != 0
