"""The HTML report in a real headless browser (Debian's chromium).

The page is rendered from a ledger of four nodes (compliant with gdsio figures, failing,
unreachable, drifted), loaded by chromium with every network path closed, and asserted on the
DOM chromium built; the screenshot is kept as a test artifact ($GDSFLEET_TEST_ARTIFACTS, else
.lab/test-artifacts/) and its path printed. Skipped, with the reason, only when chromium is not
installed (scripts/setup.sh installs it, so CI runs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.exitcodes import Exit
from tests.unit import reportsfleet as rf

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it: "
                             "apt-get install chromium)")
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.items: list[Node | str] = []  # text and children, in document order

    def all(self) -> list[Node]:
        out = [self]
        for c in self.children:
            out.extend(c.all())
        return out

    def content(self) -> str:
        parts = [i if isinstance(i, str) else i.content() for i in self.items]
        return " ".join(" ".join(parts).split())

    def find(self, **attrs: str) -> list[Node]:
        return [n for n in self.all()
                if all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


class Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        self.cur.items.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.items.append(data)


def _artifacts() -> Path:
    where = Path(os.environ.get("GDSFLEET_TEST_ARTIFACTS") or ROOT / ".lab" / "test-artifacts")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           # an air-gapped bastion: nothing outside the file may load
           "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HOME": str(tmp)})


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("browser")
    ledger, run_id = rf.build(tmp)
    html = tmp / "report.html"
    here = Path.cwd()
    os.chdir(tmp)  # the page shows the ledger as given: no machine path in the screenshot
    try:
        assert main(["report", run_id, "--ledger", Path(ledger).name, "--html",
                     str(html)]) == Exit.OK
    finally:
        os.chdir(here)
    return tmp, html


def test_chromium_renders_the_report(page: tuple[Path, Path]) -> None:
    tmp, html = page
    shot = _artifacts() / "report-html-verify.png"
    shot.unlink(missing_ok=True)
    res = _chromium(tmp, "--window-size=1280,2600", f"--screenshot={shot}", html.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"\nscreenshot of the HTML report: {shot}")

    res = _chromium(tmp, "--dump-dom", html.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    tree = Tree()
    tree.feed(res.stdout)
    dom = tree.root
    assert [n.tag for n in dom.all() if n.tag in ("script", "link", "img", "iframe")] == []

    # fleet summary first: the counts
    def count(tile: str) -> str:
        return dom.find(id=f"count-{tile}")[0].content().split()[0]

    assert [count(t) for t in ("total", "compliant", "not-compliant", "unreachable",
                               "drift")] == ["4", "2", "1", "1", "2"]
    route_rows = [r.content() for r in dom.find(id="by-route")[0].all() if r.tag == "tr"]
    assert "p2pdma 1 0 0 0 1" in route_rows and "unknown 0 0 1 0 1" in route_rows
    path_rows = [r.content() for r in dom.find(id="by-io-path")[0].all() if r.tag == "tr"]
    assert "direct 2 0 0 0 2" in path_rows

    # failing nodes next, with what to do and drift marked
    failing = dom.find(id="failing")[0]
    assert [n.attrs["data-node"] for n in failing.all() if "data-node" in n.attrs] == [
        "gpu-02", "gpu-03"]
    gpu02 = dom.find(id="failing-gpu-02")[0]
    assert "DRIFT" in gpu02.content() and "compliance lost" in gpu02.content()
    row = gpu02.find(data_check="nvfs.nvme_registered")[0]
    assert rf.FIX_NVME in row.content() and "FAIL" in row.content()
    assert "connection refused" in dom.find(id="failing-gpu-03")[0].content()

    # throughput as an SVG chart: one bar per figure, gdsio's GDS and CPU bars on gpu-01
    bars = [n for n in dom.all() if n.tag == "rect" and n.attrs.get("class") == "bar"]
    series = {(b.attrs["data-node"], b.attrs["data-series"]) for b in bars}
    assert ("gpu-01", "gdsio GDS") in series and ("gpu-01", "gdsio CPU (bounce buffer)") in series
    assert ("gpu-02", "I/O test read") in series and not any(n == "gpu-03" for n, _ in series)
    widths = {s: float(b.attrs["width"]) for b in bars if b.attrs["data-node"] == "gpu-01"
              for s in [b.attrs["data-series"]]}
    assert widths["I/O test read"] == max(float(b.attrs["width"]) for b in bars)

    # then every node's checks, gdsio figures in the table
    table = dom.find(id="node-table")[0]
    gpu01 = [r for r in table.all() if r.attrs.get("data-node") == "gpu-01"][0]
    assert "6.25 / 2.50 (2.50, min 1.20)" in gpu01.content()
    assert dom.find(id="node-gpu-04")[0].find(data_check="gpu.driver_loaded")
    assert "gdsio.ratio" in dom.find(id="node-gpu-01")[0].content()


def test_page_text_is_escaped() -> None:
    from provisioner.reports.html import to_html

    doc = {"kind": "verify", "run_id": "r", "nodes": [rf.node("<b>x</b>", ok=False)]}
    page = to_html(doc)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
