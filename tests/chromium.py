"""Headless Chromium (Debian's /usr/bin/chromium driven by Playwright) for checking HTML reports as a reader's
browser shows them.

Why a real browser and not an HTML parser: a figure that parses can still draw nothing (an SVG of zero size,
an axes holding only its frame, a broken clip-path id shared by two charts), and only a browser says whether
the page asks the network for something (a CDN script, a font) — which a report opened on a laptop with no
network must never do. :func:`open_report` loads one file with every request recorded (anything but the file
itself and ``data:`` URLs is a failure, and is aborted so nothing leaves), collects console errors / warnings
and page errors, and returns per figure what was drawn and the data table beneath it, so tests compare the
numbers with the store's.

Never downloads a browser: the executable is Debian's, started with the flags that keep it off the network
(no background networking, component updates, sync or QUIC) and a new empty user-data directory.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Request, Route, sync_playwright

if TYPE_CHECKING:
    from playwright._impl._api_structures import Clip  # the type of Page.screenshot's clip (not re-exported)

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# an axes group holding fewer data marks than this drew nothing but its frame
MIN_MARKS = 1
VIEWPORT = {"width": 1200, "height": 900}

# Per figure: what the browser drew. A "data mark" is a direct child group of a matplotlib axes group that is
# neither an axis (ticks, tick labels), a legend, a text (title, label), the axes background (its first patch)
# nor a spine (a patch that is one unfilled straight segment), and that holds a shape of non-zero size on screen.
_FIGURES_JS = """
() => Array.from(document.querySelectorAll('figure.chart')).map(fig => {
  const svg = fig.querySelector(':scope > svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  let marks = 0, axes = 0;
  if (svg) {
    for (const ax of svg.querySelectorAll('g[id]')) {
      if (!/axes_\\d+$/.test(ax.id)) continue;
      axes += 1;
      const kids = Array.from(ax.children).filter(k => k.tagName === 'g');
      kids.forEach((g, i) => {
        const id = g.id || '';
        if (/matplotlib\\.axis_|legend_|text_\\d+$/.test(id)) return;
        if (i === 0 && /patch_\\d+$/.test(id)) return;                       // axes background
        const shapes = Array.from(g.querySelectorAll('path, use, rect, polyline, polygon, image'));
        const spine = /patch_\\d+$/.test(id) && shapes.length === 1 &&
          /^M\\s*[-\\d.e]+\\s+[-\\d.e]+\\s*L\\s*[-\\d.e]+\\s+[-\\d.e]+\\s*$/.test(shapes[0].getAttribute('d') || '') &&
          /fill:\\s*none/.test(shapes[0].getAttribute('style') || '');
        if (spine) return;
        const drawn = shapes.some(s => { const r = s.getBoundingClientRect(); return r.width > 0 || r.height > 0; });
        if (drawn) marks += 1;
      });
    }
  }
  const table = fig.querySelector('table');
  const cells = tr => Array.from(tr.querySelectorAll('th, td')).map(c => c.textContent.trim());
  const n = fig.querySelector('figcaption .n');
  const title = fig.querySelector('h3');
  return {
    chart: fig.dataset.chart || '', id: fig.id, title: title ? title.textContent.trim() : '',
    points: parseInt(fig.dataset.points || '0', 10), n: n ? n.textContent.trim() : '',
    svg: !!svg, width: box.width, height: box.height, axes: axes, marks: marks,
    headers: table && table.tHead ? cells(table.tHead.rows[0]) : [],
    rows: table && table.tBodies.length ? Array.from(table.tBodies[0].rows).map(cells) : [],
  };
})
"""


@dataclass(frozen=True)
class FigureSummary:
    """One ``figure.chart`` as the browser rendered it."""

    chart: str
    id: str
    title: str
    points: int                  # data-points: what the chart module says it drew
    n: str                       # the caption's "n = ..." text
    svg: bool
    width: float                 # the svg's box on screen (CSS px)
    height: float
    axes: int
    marks: int                   # data marks drawn inside the axes (see _FIGURES_JS)
    headers: list[str]
    rows: list[list[str]]        # the data table, cell texts

    def problems(self) -> list[str]:
        """Why this figure is not a drawn chart with its n and its data (empty: it is)."""
        where = f"figure {self.id or '?'} ({self.chart or 'no data-chart'})"
        out = []
        if not self.svg:
            out.append(f"{where}: no inline <svg>")
        if self.width <= 0 or self.height <= 0:
            out.append(f"{where}: svg has no size on screen ({self.width}x{self.height})")
        if self.points <= 0:
            out.append(f"{where}: data-points={self.points}")
        if self.marks < MIN_MARKS:
            out.append(f"{where}: {self.axes} axes but no data mark drawn in them")
        if not self.n.startswith("n = "):
            out.append(f"{where}: caption has no n (got {self.n!r})")
        if not self.rows:
            out.append(f"{where}: data table has no row")
        if any("None" in c for r in self.rows for c in r):
            out.append(f"{where}: 'None' in the data table")
        return out

    def column(self, header: str) -> list[str]:
        """The cells of the column titled ``header`` (KeyError naming the headers there are)."""
        if header not in self.headers:
            raise KeyError(f"figure {self.id}: no column {header!r} (columns: {self.headers})")
        i = self.headers.index(header)
        return [r[i] for r in self.rows]


@dataclass
class PageSummary:
    """A report page: its figures, and everything the browser complained about or fetched."""

    url: str
    title: str = ""
    figures: list[FigureSummary] = field(default_factory=list)
    console: list[str] = field(default_factory=list)         # console messages of type error / warning
    page_errors: list[str] = field(default_factory=list)     # uncaught exceptions
    requests: list[str] = field(default_factory=list)        # every request but the file itself and data: URLs
    text: str = ""                                           # the page's visible text

    def kinds(self) -> set[str]:
        return {f.chart for f in self.figures}

    def of(self, chart: str) -> list[FigureSummary]:
        return [f for f in self.figures if f.chart == chart]

    def figure(self, fid: str) -> FigureSummary:
        for f in self.figures:
            if f.id == fid:
                return f
        raise KeyError(f"{self.url}: no figure {fid!r} (figures: {[f.id for f in self.figures]})")

    def problems(self) -> list[str]:
        """Everything wrong with the page as a reader would see it (empty: nothing)."""
        out = [f"console: {m}" for m in self.console] + [f"page error: {e}" for e in self.page_errors]
        out += [f"request leaving the page: {u}" for u in self.requests]
        if not self.figures:
            out.append(f"{self.url}: no figure.chart at all")
        if "None" in self.text.split():
            out.append(f"{self.url}: the page shows the word 'None'")
        for f in self.figures:
            out.extend(f.problems())
        return out


class Chromium:
    """One headless Chromium for many pages (starting it costs ~1 s); a fresh page per report."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context

    def _page(self, url: str, summary: PageSummary) -> Page:
        page = self.context.new_page()

        def on_console(msg: ConsoleMessage) -> None:
            if msg.type in ("error", "warning"):
                summary.console.append(f"{msg.type}: {msg.text}")

        def on_request(req: Request) -> None:
            if req.url != url and not req.url.startswith("data:"):
                summary.requests.append(req.url)

        def on_route(route: Route) -> None:
            if route.request.url == url or route.request.url.startswith("data:"):
                route.continue_()
            else:
                route.abort()       # recorded by on_request: nothing leaves, the failure is still seen

        page.on("console", on_console)
        page.on("pageerror", lambda exc: summary.page_errors.append(str(exc)))
        page.on("request", on_request)
        page.route("**/*", on_route)
        return page

    @contextmanager
    def page(self, report: Path) -> Iterator[tuple[Page, PageSummary]]:
        """The report loaded in a fresh page, with its summary (figures read once loaded)."""
        url = report.resolve().as_uri()
        summary = PageSummary(url)
        page = self._page(url, summary)
        try:
            page.goto(url, wait_until="load")
            summary.title = page.title()
            raw: list[dict[str, Any]] = page.evaluate(_FIGURES_JS)
            summary.figures = [FigureSummary(**f) for f in raw]
            summary.text = page.inner_text("body")
            yield page, summary
        finally:
            page.close()

    def open(self, report: Path) -> PageSummary:
        """Load ``report`` and return what the browser saw (see :class:`PageSummary`)."""
        with self.page(report) as (_page, summary):
            return summary

    def screenshot(self, report: Path, selector: str, out: Path, *, width: int = 900,
                   clip_height: int | None = None) -> Path:
        """A PNG of the element ``selector`` (e.g. ``#scaling-0-iops``, ``header``) at a ``width`` px wide
        viewport; ``clip_height`` cuts a tall element to its top. Raises LookupError naming the selector."""
        with self.page(report) as (page, _summary):
            page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
            el = page.query_selector(selector)
            if el is None:
                raise LookupError(f"{report}: no element {selector!r} to screenshot")
            out.parent.mkdir(parents=True, exist_ok=True)
            # the element's box in page coordinates (a full-page clip is relative to the page, not the viewport)
            box: dict[str, float] = el.evaluate(
                "e => { const r = e.getBoundingClientRect(); return {x: r.left + window.scrollX, "
                "y: r.top + window.scrollY, width: r.width, height: r.height}; }")
            if clip_height is not None and box["height"] > clip_height:
                clip: Clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": float(clip_height)}
                page.screenshot(path=str(out), full_page=True, clip=clip)
            else:
                el.screenshot(path=str(out))
        return out


def require_chromium() -> Path:
    """Debian's chromium, or an AssertionError saying how to get it (a browser test must never skip)."""
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; "
                             "`make test` does it through scripts/ensure-packages). Never download a browser.")
    return CHROMIUM


@contextmanager
def chromium() -> Iterator[Chromium]:
    """Start headless Debian Chromium with a new empty user-data directory; stopped and removed on exit."""
    exe = require_chromium()
    profile = Path(tempfile.mkdtemp(prefix="storagelab-chromium-"))
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                str(profile), executable_path=str(exe), headless=True, args=ARGS, viewport=VIEWPORT,  # type: ignore[arg-type]
                offline=True)
            try:
                yield Chromium(ctx)
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
