"""The simulated node's profile knows only settings that do something (issue 16: the kvikio
switch, which did nothing since kvikio left the node image, is gone). No container: the stand-in's
profile resolution is plain Python, run here against the profiles of the image."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

NODE = Path(__file__).resolve().parents[1] / "harness" / "node"
WORD = "SIM_" + "KVIKIO"  # spelled in two parts so that this file is not a hit itself


def _sim(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    path = NODE / "usr" / "local" / "lib" / "gdsfleet-sim" / "gdsfleet_sim.py"
    spec = importlib.util.spec_from_file_location("_gdsfleet_sim_under_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "PROFILES_DIR", str(NODE / "etc" / "gdsfleet-sim" / "profiles"))
    return mod


@pytest.mark.parametrize("profile", sorted(
    p.stem for p in (NODE / "etc" / "gdsfleet-sim" / "profiles").glob("*.env")))
def test_no_profile_carries_sim_kvikio(monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    sim = _sim(monkeypatch)
    resolved = sim.resolve_profile({"GDSFLEET_SIM_PROFILE": profile})
    assert resolved["GDSFLEET_SIM_PROFILE"] == profile
    assert WORD not in resolved
    assert WORD not in sim.DEFAULTS and WORD not in sim.ALLOWED


def test_the_harness_and_docs_no_longer_mention_sim_kvikio() -> None:
    root = Path(__file__).resolve().parents[2]
    hits = [p for base in (root / "tests", root / "docs", root / "molecule", root / "scripts")
            for p in base.rglob("*") if p.is_file() and p.suffix in
            (".py", ".md", ".sh", ".env", ".yml", ".yaml", ".j2", "")
            and WORD in p.read_text(errors="replace")]
    assert hits == []
