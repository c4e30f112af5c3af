"""Framed drawings and wide tables on the web (issue 27) over a real lab and its web service (tests/webfix.py), in
headless Chromium (tests/chromium.py):

* a comparison being drawn says so: the frame shows at once a line saying what is being drawn (a first drawing
  takes seconds), and the comparison takes its place when it is drawn (the page is streamed: the sandboxed frame
  runs no script and refuses a meta refresh), with no console error; a drawing that fails says why there;
* tables wrap or scroll within their own box, never the page: at a narrow viewport the compare page, its framed
  report and a report file have no page-level horizontal overflow, every table wider than its box is inside a box
  that scrolls, and no cell's content is cut.

The compared runs are stored directly (tests/unit/test_history.py's ``add_run``), as test_web_morning stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chromium import Chromium
from tests.integration.test_web_browser import Browser, browser  # noqa: F401  (its fixture)
from tests.unit.test_history import DAY, T0, add_run, noisy
from tests.webfix import WebHandle, web  # noqa: F401  (the module's lab and web service)

pytestmark = pytest.mark.integration

# cells with long names: the verdict and report tables are wider than a phone
CELLS = ("4k-random-read-sixteen-threads-sixteen-deep", "8k-random-seventy-thirty-mixed-ladder-point",
         "128k-sequential-read-after-the-full-device-fill")
RUNS = ("fr-a", "fr-b", "wd-a", "wd-b", "wd-c")

# what a reader sees of the page's tables: page-level overflow, tables wider than the page outside any box that
# scrolls, and cells whose content is cut (wider than the cell)
LAYOUT_JS = """() => {
  const doc = document.documentElement;
  const scroller = el => { for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX; if (o === 'auto' || o === 'scroll') return e; } return null; };
  const out = {overflow: Math.max(doc.scrollWidth, document.body.scrollWidth) - doc.clientWidth, unboxed: [],
               scrolled: 0, clipped: [], tables: 0, cramped: []};
  for (const t of document.querySelectorAll('table')) {
    out.tables += 1;
    const box = scroller(t);
    const r = t.getBoundingClientRect();
    if (box === null && r.right > doc.clientWidth + 1) out.unboxed.push(t.id || t.className || 'table');
    if (box !== null && box.scrollWidth > box.clientWidth + 1) {
      out.scrolled += 1;        // scrolling while the window has room to its right: cut at a column's width
      if (box.getBoundingClientRect().right < doc.clientWidth - 40) out.cramped.push(Math.round(box.clientWidth));
    }
    for (const c of t.querySelectorAll('th, td')) {
      if (c.scrollWidth > c.clientWidth + 1) out.clipped.push((c.textContent || '').trim().slice(0, 60));
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def seeded(web: WebHandle) -> None:  # noqa: F811
    """Runs of one suite (3 repeats a cell: the differences are judged), never drawn before."""
    with web.lab.sessions.begin() as s:
        for i, rid in enumerate(RUNS):
            add_run(s, rid, T0 + (40 + i) * DAY,
                    {cell: [{"iops": v, "lat_us": 1e6 / v} for v in noisy(3, 10_000 - 900 * i - 300 * k, seed=k + i)]
                     for k, cell in enumerate(CELLS)}, host="framehost", suite="frames")
        add_run(s, "lone-1", T0 + 50 * DAY, {"other-cell": [{"iops": 1.0}]}, host="framehost", suite="other")


def layout(frame: Any) -> dict[str, Any]:
    got: dict[str, Any] = frame.evaluate(LAYOUT_JS)
    return got


def assert_fits(where: str, got: dict[str, Any]) -> None:
    assert got["tables"], f"{where}: no table"
    assert got["overflow"] <= 0, f"{where}: the page scrolls sideways by {got['overflow']} px"
    assert not got["unboxed"], f"{where}: tables wider than the page, not in a box that scrolls: {got['unboxed']}"
    assert not got["clipped"], f"{where}: cells cut: {got['clipped'][:5]}"
    assert not got["cramped"], f"{where}: tables scroll in boxes {got['cramped']} px wide with room beside them"


def test_a_comparison_being_drawn_says_so_then_is_the_comparison(web: WebHandle, seeded: None) -> None:  # noqa: F811
    params = [("run", "fr-a"), ("run", "fr-b")]
    with web.client("viewer") as c, c.stream("GET", "/compare/view", params=params) as r:
        assert r.status_code == 200
        assert r.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'self'" in r.headers["content-security-policy"]
        chunks = r.iter_text()
        first = next(chunks)                      # at once, before the drawing (seconds) is done
        assert 'id="drawing"' in first and "The comparison of fr-a, fr-b is being drawn" in first, first
        assert "<figure" not in first
        rest = "".join(chunks)
    assert "#drawing { display: none; }" in rest and '<figure class="chart"' in rest, rest[:500]
    page = first + rest
    assert "<script" not in page and page.count("<body") == 1 and page.rstrip().endswith("</html>")
    with web.client("viewer") as c:
        again = c.get("/compare/view", params=params)          # drawn once: the cache, at once
        assert again.status_code == 200 and '<figure class="chart"' in again.text and 'id="drawing"' not in again.text
        assert c.get("/compare/view", params=[("run", "fr-a"), ("run", "nosuchrun01")]).status_code == 404
        # a drawing that fails after the page began: the reason in the page, where the comparison would be
        with c.stream("GET", "/compare/view", params=[("run", "fr-a"), ("run", "lone-1")]) as r:
            text = "".join(r.iter_text())
        assert 'id="detail"' in text and "no cell in common" in text, text[-800:]


def test_the_frame_replaces_its_being_drawn_page_with_the_comparison(
        browser: Browser, web: WebHandle, seeded: None) -> None:  # noqa: F811
    b = browser
    b.login(web.tokens["viewer"], "/")
    # (the page frames the comparison once it has loaded: static/frames.js)
    b.page.goto(web.url + "/compare?run=wd-a&run=wd-b", wait_until="domcontentloaded")
    frame = b.page.wait_for_selector("iframe#compare-frame", state="attached", timeout=30_000).content_frame()
    assert frame is not None
    frame.wait_for_selector("#drawing", state="visible", timeout=30_000)
    assert "The comparison of wd-a, wd-b is being drawn" in frame.inner_text("#drawing")
    frame.wait_for_selector("figure.chart", timeout=120_000)       # the comparison took the line's place
    assert frame.evaluate("() => document.querySelectorAll('figure.chart svg').length") > 0
    assert frame.is_hidden("#drawing")
    b.check("a comparison drawn in its frame")


@pytest.mark.parametrize("width", [390, 760, 1400])
def test_wide_tables_scroll_in_their_box_not_the_page(browser: Browser, web: WebHandle, seeded: None,  # noqa: F811
                                                       width: int) -> None:
    b = browser
    b.login(web.tokens["viewer"], "/")
    b.page.set_viewport_size({"width": width, "height": 900})
    for path in ("/compare?run=wd-a&run=wd-b&run=wd-c&baseline=wd-c", "/runs", "/regressions"):
        b.goto(path)
        assert_fits(f"{path} at {width} px", layout(b.page))
    b.goto("/compare?run=wd-a&run=wd-b&run=wd-c&baseline=wd-c")
    b.frames_drawn()            # framed once the page has loaded (static/frames.js)
    view = next(f for f in b.page.frames if "/compare/view?" in f.url)
    view.wait_for_selector("figure.chart", timeout=120_000)
    got = layout(view)
    assert_fits(f"the framed comparison at {width} px", got)
    assert got["scrolled"] > 0 or width >= 1400, "a wide table of the report scrolls in its box"
    b.check(f"tables at {width} px")


def test_a_report_file_keeps_its_tables_in_their_boxes(chromium: Chromium, web: WebHandle, seeded: None,  # noqa: F811
                                                        tmp_path: Path) -> None:
    out = tmp_path / "wide.html"
    res = web.lab.labctl("report", "wd-a", "wd-b", "wd-c", "--html", str(out))
    assert res.returncode == 0, res.stderr
    with chromium.page(out) as (page, summary):
        assert not summary.problems(), summary.problems()
        for width in (390, 760, 1400, 1900):
            page.set_viewport_size({"width": width, "height": 900})
            assert_fits(f"the report at {width} px", layout(page))


def test_a_run_report_being_drawn_says_so_then_is_the_report(web: WebHandle, seeded: None) -> None:  # noqa: F811
    """The run page's report frame, as the comparison's: at once a line, then the report in the same page."""
    with web.client("viewer") as c, c.stream("GET", "/runs/fr-a/report") as r:
        assert r.status_code == 200 and "frame-ancestors 'self'" in r.headers["content-security-policy"]
        chunks = r.iter_text()
        first = next(chunks)
        assert 'id="drawing"' in first and "fr-a is being drawn" in first, first
        rest = "".join(chunks)
    assert "#drawing { display: none; }" in rest and '<figure class="chart"' in rest, rest[:500]
