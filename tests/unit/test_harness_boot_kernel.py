"""The simulated node's boot loader and booted kernel (TEST STAND-INS, issue 29): which kernel a
simulated reboot lands in (gdsfleet_sim.grub_boot_kernel, as GRUB picks its default entry) and
the preloaded uname() stand-in that makes the node report it (uname-shim.c). No container: the
resolution is plain Python run against a temporary /boot and /etc/default, and the shim is
built with the host's compiler and preloaded into `uname -r` and Python here."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.kernel_gate_standins import grub_cfg

SIMDIR = Path(__file__).resolve().parents[1] / "harness/node/usr/local/lib/gdsfleet-sim"
HOST, NEW = "6.18.44-fc-v595", "6.18.45-fc-v595"
ADV = "gnulinux-advanced-UUID"


def _sim(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_gdsfleet_sim_boot", SIMDIR / "gdsfleet_sim.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.BOOT_DIR = str(root / "boot")
    mod.GRUB_CFG = str(root / "boot/grub/grub.cfg")
    mod.GRUBENV = str(root / "boot/grub/grubenv")
    mod.GRUB_DEFAULT_STATE = str(root / "var/grub-default")
    mod.GRUB_ETC_DEFAULT = str(root / "etc/default/grub")
    for d in ("boot/grub", "var", "etc/default/grub.d"):
        (root / d).mkdir(parents=True, exist_ok=True)
    return mod


@pytest.fixture
def node(tmp_path: Path) -> tuple[ModuleType, Path]:
    """A node with both kernels' images and the GRUB stand-in listing them (newest first)."""
    sim = _sim(tmp_path)
    for k in (HOST, NEW):
        (tmp_path / f"boot/vmlinuz-{k}").write_text("stand-in\n")
    (tmp_path / "boot/grub/grub.cfg").write_text(grub_cfg(NEW, HOST))
    return sim, tmp_path


def test_without_a_grub_stand_in_the_node_runs_the_host_kernel(tmp_path: Path) -> None:
    sim = _sim(tmp_path)
    assert sim.grub_boot_kernel(HOST)[0] == HOST


def test_grub_default_0_boots_the_newest_kernel_when_its_image_is_there(
        node: tuple[ModuleType, Path]) -> None:
    sim, root = node
    assert sim.grub_boot_kernel(HOST) == (NEW, "GRUB default '0': 'Debian GNU/Linux'")
    (root / f"boot/vmlinuz-{NEW}").unlink()  # GRUB cannot load a missing image
    release, how = sim.grub_boot_kernel(HOST)
    assert release == HOST and f"vmlinuz-{NEW} is missing" in how


def test_saved_entry_and_update_grubs_record_decide(node: tuple[ModuleType, Path]) -> None:
    sim, root = node
    (root / "etc/default/grub").write_text("GRUB_TIMEOUT=5\nGRUB_DEFAULT=saved\n")
    (root / "boot/grub/grubenv").write_text(
        f"# GRUB Environment Block\nsaved_entry={ADV}>gnulinux-{HOST}-advanced-UUID\n")
    assert sim.grub_boot_kernel(HOST)[0] == HOST
    (root / "etc/default/grub.d/99-pin.cfg").write_text('GRUB_DEFAULT="1>0"\n')  # last wins
    assert sim.grub_boot_kernel(HOST)[0] == NEW
    # grub-mkconfig read GRUB_DEFAULT when update-grub last ran: that is grub.cfg's default
    (root / "var/grub-default").write_text("saved\n")
    assert sim.grub_boot_kernel(HOST)[0] == HOST
    (root / "boot/grub/grubenv").write_text(f"saved_entry={ADV}>gnulinux-{NEW}-advanced-UUID\n")
    assert sim.grub_boot_kernel(HOST)[0] == NEW
    # a title works as GRUB takes it; an entry that does not exist falls back to entry 0
    (root / "var/grub-default").write_text(
        f"Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {HOST}\n")
    assert sim.grub_boot_kernel(HOST)[0] == HOST
    (root / "var/grub-default").write_text(f"{ADV}>gnulinux-9.9.9-advanced-UUID\n")
    release, how = sim.grub_boot_kernel(HOST)
    assert release == NEW and "names no entry" in how
    (root / "var/grub-default").write_text(f"{ADV}\n")  # a submenu boots nothing itself
    assert sim.grub_boot_kernel(HOST)[0] == NEW


@pytest.mark.parametrize("image", ["/boot/vmlinuz-$(reboot)", "/boot/vmlinuz-", "/boot/bzImage",
                                   "/boot/vmlinuz-" + "9" * 80, "/boot/vmlinuz--rc1"])
def test_an_image_that_is_no_kernel_release_boots_the_host_kernel(
        node: tuple[ModuleType, Path], image: str) -> None:
    sim, root = node
    (root / "boot/grub/grub.cfg").write_text(
        f"menuentry 'odd' --id odd {{\n\tlinux {image} ro\n}}\n")
    assert sim.grub_boot_kernel(HOST)[0] == HOST


@given(st.text(alphabet=st.sampled_from(list("menuetrysubk{}'\"$ >\n\tlinx/vmlz-0123456789.")),
               max_size=400),
       st.text(alphabet=st.sampled_from(list("0123>gnulixsaved-UID")), max_size=30))
def test_any_grub_cfg_and_default_boot_a_listed_image_or_the_host(text: str, default: str
                                                                  ) -> None:
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"gdsfleet-boot-prop-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    try:
        sim = _sim(root)
        (root / "boot/grub/grub.cfg").write_text(text)
        (root / "var/grub-default").write_text(default + "\n")
        (root / f"boot/vmlinuz-{NEW}").write_text("stand-in\n")
        entries = sim.grub_entries(text)
        assert len(entries) <= sim.GRUB_MAX_ENTRIES
        release, how = sim.grub_boot_kernel(HOST)
        assert release in (HOST, NEW) and how
        if release == NEW:
            assert f"vmlinuz-{NEW}" in text
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_grub_cfg_is_read_bounded(node: tuple[ModuleType, Path]) -> None:
    sim, root = node
    many = "".join(f"menuentry 'e{i}' --id e{i} {{\n linux /boot/vmlinuz-{HOST}\n}}\n"
                   for i in range(sim.GRUB_MAX_ENTRIES + 50))
    (root / "boot/grub/grub.cfg").write_text(many)
    assert len(sim.grub_entries(many)) == sim.GRUB_MAX_ENTRIES


# ------------------------------------------------------------------------------- uname-shim.c
@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The shim as build_node_image.sh builds it, reading a temporary file instead of
    /run/gdsfleet-sim/booted-kernel."""
    if not shutil.which("gcc"):
        pytest.skip("no gcc (scripts/setup.sh installs it)")
    d = tmp_path_factory.mktemp("shim")
    so, state = d / "shim.so", d / "booted-kernel"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    "-U_FORTIFY_SOURCE", f'-DBOOTED_KERNEL="{state}"', "-o", str(so),
                    str(SIMDIR / "uname-shim.c")], check=True, timeout=60)
    return so, state


def _releases(so: Path) -> tuple[str, str]:
    env = dict(os.environ, LD_PRELOAD=str(so))
    uname = subprocess.run(["uname", "-r"], env=env, capture_output=True, text=True, check=True)
    py = subprocess.run([sys.executable, "-c", "import platform; print(platform.uname().release)"],
                        env=env, capture_output=True, text=True, check=True)
    return uname.stdout.strip(), py.stdout.strip()


@pytest.mark.parametrize("content,reported", [
    (None, "host"),
    (b"6.18.45-fc-v595\n", "6.18.45-fc-v595"),
    (b"5.14.0-503.el9.x86_64", "5.14.0-503.el9.x86_64"),
    (b"6.8.0-51-generic\n\n", "host"),            # one trailing newline only
    (b"6.8.0;reboot\n", "host"),                   # not a release's characters
    (b"-rc1\n", "host"),                           # starts with a letter or digit
    (b"", "host"),
    (b"6." + b"1" * 70 + b"\n", "host"),          # longer than 64 bytes
    (b"6.8.0\x00evil\n", "host"),
])
def test_the_shim_reports_a_valid_booted_kernel_and_nothing_else(
        shim: tuple[Path, Path], content: bytes | None, reported: str) -> None:
    so, state = shim
    state.unlink(missing_ok=True)
    if content is not None:
        state.write_bytes(content)
    host = os.uname().release
    assert _releases(so) == ((host, host) if reported == "host" else (reported, reported))
