"""A framed report or comparison that is still being drawn says so, then replaces itself with the drawing.

A first drawing takes seconds (``orchestrator.web.render`` draws in a subprocess: 4-7 s for a report), and a frame
that waits for it stays blank. :func:`framed` starts the drawing in a worker thread of its own and waits
:data:`FIRST_WAIT_S` for it: drawn by then (or cached), the page is the drawing, or its error page, as before.
Else the page is streamed: at once a line saying what is being drawn, then, when the drawing is done, the drawing
itself, which hides that line (a style rule: no script runs in the sandboxed frame, which also refuses a
``<meta http-equiv="refresh">``), or the reason it could not be drawn.

One drawing per set of runs is under way at a time, whoever asks for it (a page and its frame opened twice).
"""

from __future__ import annotations

import html
import logging
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from labcontract.errors import InputError, LabError, ServiceError
from orchestrator.web import queries
from orchestrator.web import render as drawing

log = logging.getLogger(__name__)

# the embedded report: no script, no request but data: images, framed only by this site
FRAME_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'self'; "
             "base-uri 'none'; form-action 'none'")
FIRST_WAIT_S = 0.5       # a drawing done (or cached) within this is the page at once
WORKERS = drawing.MAX_CONCURRENT + drawing.MAX_WAITING   # render refuses (Busy) beyond those anyway
NAMES = {"report": "report", "compare": "comparison"}

Key = tuple[str, tuple[str, ...]]


@dataclass
class Drawings:
    """The drawings under way, one per (kind, runs); each is forgotten when it is done (the cache of
    ``orchestrator.web.render`` keeps a drawing of ended runs; runs in progress are drawn again)."""

    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS, "draw"))
    jobs: dict[Key, Future[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, key: Key, draw: Callable[[], str]) -> Future[str]:
        """The drawing of ``key``: the one under way, else ``draw`` started."""
        with self.lock:
            fut = self.jobs.get(key)
            if fut is None:
                fut = self.jobs[key] = self.pool.submit(draw)
                fut.add_done_callback(lambda f: self._forget(key, f))
            return fut

    def _forget(self, key: Key, fut: Future[str]) -> None:
        with self.lock:
            if self.jobs.get(key) is fut:
                del self.jobs[key]


_made = threading.Lock()


def drawings(request: Request) -> Drawings:
    extras = request.app.state.web.extras
    with _made:
        found = extras.get("drawings")
        if found is None:
            found = extras["drawings"] = Drawings()
    assert isinstance(found, Drawings)
    return found


def report_response(text: str) -> HTMLResponse:
    """A drawing, framed by this site only, with no script."""
    return HTMLResponse(text, headers={**HEADERS, "Cache-Control": "private, max-age=60"})


HEADERS = {"Content-Security-Policy": FRAME_CSP, "X-Frame-Options": "SAMEORIGIN"}
STYLE = ("body { font: 14px/1.45 system-ui, -apple-system, \"Segoe UI\", Roboto, \"DejaVu Sans\", sans-serif; "
         "color: #1b1b1b; } #drawing { margin: 1.5rem; } #drawing .muted { color: #555; } "
         ".error { color: #b42318; font-weight: 600; }")


def being_drawn(kind: str, run_ids: list[str]) -> str:
    """The start of a streamed page: what is being drawn (hidden by the drawing once it follows)."""
    what = html.escape(NAMES.get(kind, kind))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>Drawing the {what}</title><style>{STYLE}</style>'
            f'</head><body><div id="drawing" role="status"><p>The {what} of {html.escape(", ".join(run_ids))} is '
            f'being drawn…</p><p class="muted">It takes this page\'s place when it is ready; a first drawing takes a '
            f"few seconds.</p></div>\n")


def drawn_body(report: str) -> str:
    """The rest of a streamed page: the drawing's styles and body (its head's title is the page's), and a rule
    hiding the "being drawn" line."""
    head, sep, body = report.partition("<body>")
    if not sep:
        return '<style>#drawing { display: none; }</style>' + report
    styles = "".join(re.findall(r"<style>.*?</style>", head, flags=re.S))
    return f'<style>#drawing {{ display: none; }}</style>{styles}{body}'


def failed_body(kind: str, e: BaseException) -> str:
    """The rest of a streamed page when the drawing failed: the reason and every problem, as the error page
    says them (``#detail``, ``#problems``)."""
    detail = (e.summary if isinstance(e, InputError) else str(e).splitlines()[0] if str(e) else type(e).__name__)
    problems = "".join(f"<li>{html.escape(str(p))}</li>" for p in getattr(e, "problems", []))
    listed = f'<ul class="problems" id="problems">{problems}</ul>' if problems else ""
    return (f'<style>#drawing {{ display: none; }}</style><section><h1>The {html.escape(NAMES.get(kind, kind))} '
            f'cannot be drawn</h1><p class="error" role="alert" id="detail">{html.escape(detail)}</p>{listed}'
            "</section></body></html>\n")


def _stream(kind: str, run_ids: list[str], fut: Future[str]) -> Iterator[str]:
    yield being_drawn(kind, run_ids)
    try:
        report = fut.result(timeout=drawing.DEFAULT_TIMEOUT_S + drawing.WAIT_S)
    except FutureTimeout:
        yield failed_body(kind, ServiceError(f"drawing the {kind} took too long; try again later"))
    except LabError as e:
        yield failed_body(kind, e)
    except Exception as e:             # the drawing's own failure: said in the page, logged, never a broken page
        log.warning("drawing the %s of %s failed: %r", kind, ", ".join(run_ids), e)
        yield failed_body(kind, ServiceError(f"drawing the {kind} failed"))
    else:
        yield drawn_body(report)


def framed(request: Request, kind: str, run_ids: list[str]) -> Response:
    """The ``report`` of a run or the ``compare`` of runs for a frame: the drawing when it is ready within
    :data:`FIRST_WAIT_S`, else a page saying it is being drawn, streamed on with the drawing (see the module)."""
    web = request.app.state.web
    cfg = web.cfg
    with web.sessions() as s:
        ended = [queries.get_run(s, rid).ended_at for rid in run_ids]
    cache = drawing.cache_path(cfg.cache_dir, kind, run_ids, ended)

    def draw() -> str:
        return drawing.render(kind, run_ids, store_url=cfg.store_url, artifact_dir=cfg.artifact_dir, cache=cache,
                              work_dir=cfg.cache_dir / "tmp")

    fut = drawings(request).start((kind, tuple(run_ids)), draw)
    try:
        return report_response(fut.result(timeout=FIRST_WAIT_S))
    except FutureTimeout:
        return StreamingResponse(_stream(kind, run_ids, fut), media_type="text/html; charset=utf-8",
                                 headers={**HEADERS, "Cache-Control": "no-store"})
