"""matplotlib, drawn to inline SVG: the one plotting entry point of the report's chart modules.

Why matplotlib SVG (docs/reports.md): it is the library a Python engineer already knows, it draws offline
with no JavaScript, the SVG is vector (sharp in print and zoom), and text stays text (``svg.fonttype:
none``: searchable, small). The Agg/SVG backends never open a window.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import matplotlib

matplotlib.use("svg", force=False)

from matplotlib.figure import Figure as MplFigure

RC: dict[Any, Any] = {
    "svg.fonttype": "none",            # text as <text>, not paths
    "svg.hashsalt": "storagelab",      # stable ids: the same data gives the same file
    "font.family": "sans-serif",
    "font.size": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "figure.dpi": 100,
}
_LOCK = threading.Lock()         # rcParams (rc_context) are global
_ID = re.compile(r'\bid="([^"]+)"')


@contextmanager
def figure(width: float = 7.5, height: float = 3.4, *, nrows: int = 1, ncols: int = 1,
           layout: Literal["tight", "constrained"] | None = "tight", **kw: Any) -> Iterator[tuple[MplFigure, Any]]:
    """A figure and its axes (an array when nrows/ncols > 1). ``layout="tight"`` fits labels and legends
    (also a legend anchored just outside an axes) in one pass; a chart that places things itself
    (``subplots_adjust``, a figure-level legend) passes ``layout=None``. No pyplot: nothing global to close."""
    with _LOCK, matplotlib.rc_context(RC):
        fig = MplFigure(figsize=(width, height), layout=layout)
        axes = fig.subplots(nrows, ncols, squeeze=nrows * ncols == 1, **kw)
        yield fig, axes


def legend_height(entries: int, *, ncol: int = 1, fontsize: float = 7.0) -> float:
    """Inches a legend of ``entries`` lines takes (for a legend placed above the axes)."""
    rows = -(-max(entries, 1) // ncol)
    return 0.12 + rows * fontsize * 1.5 / 72


def grouped_rows(groups: Sequence[str], names: Sequence[str], gap: float = 0.6) -> tuple[list[float], list[float]]:
    """The y of each row of a horizontal chart whose rows come in runs of one group (``groups[i]``: row i's
    group), a ``gap`` between runs; and the y of each group of ``names`` (its label: the middle of its rows)."""
    ys: list[float] = []
    y, prev = 0.0, None
    for group in groups:
        if prev is not None and group != prev:
            y += gap
        ys.append(y)
        prev = group
        y += 1.0
    ticks = []
    for name in names:
        pos = [yy for yy, group in zip(ys, groups, strict=True) if group == name]
        ticks.append(sum(pos) / len(pos))
    return ys, ticks


def text_width(text: str, fontsize: float = 9.0) -> float:
    """About the inches a label of sans-serif text takes (a fixed layout's margin)."""
    return len(text) * fontsize * 0.56 / 72


def margins(fig: MplFigure, *, left: float, bottom: float, top: float, right: float = 0.2) -> None:
    """A fixed layout, margins in inches: no layout engine pass (it measures every tick label again, a
    third of a simple chart's drawing time). For figures made with ``layout=None``."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=min(left / w, 0.6), right=1 - right / w, bottom=min(bottom / h, 0.45),
                        top=max(1 - top / h, 0.5))


@dataclass
class _Pending:
    token: str
    fig: MplFigure
    prefix: str
    tight_bbox: bool
    append: str


_DEFERRED: list[_Pending] | None = None     # set inside deferred(): to_svg hands out tokens


def to_svg(fig: MplFigure, prefix: str, *, tight_bbox: bool = False, append: str = "") -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), its ids prefixed so that several SVGs on
    one page never share an id (clip paths would cross-reference). ``tight_bbox`` crops to what was drawn
    (e.g. a figure legend below the axes) at the price of drawing the figure twice: the layout engine of
    :func:`figure` is the cheap way. ``append`` (SVG elements) goes in before ``</svg>``.

    Inside :func:`deferred` it returns a token that :func:`render_deferred` replaces: drawing is most of a
    report's time, and the figures are then drawn on every CPU at once."""
    if _DEFERRED is not None:
        token = f"<!--svg:{len(_DEFERRED)}:{prefix}-->"
        _DEFERRED.append(_Pending(token, fig, prefix, tight_bbox, append))
        return token
    return _render(fig, prefix, tight_bbox, append)


def _render(fig: MplFigure, prefix: str, tight_bbox: bool, append: str) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="svg", bbox_inches="tight" if tight_bbox else None,
                    metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(r'url\(#([^)]+)\)', lambda m: f"url(#{prefix}-{m.group(1)})", svg)
    svg = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{prefix}-{m.group(1)}"', svg)
    if append:
        cut = svg.rindex("</svg>")
        svg = svg[:cut] + append + svg[cut:]
    return svg.replace("<svg ", f'<svg role="img" aria-labelledby="{prefix}-title" ', 1)


@contextmanager
def deferred() -> Iterator[list[_Pending]]:
    """Collect the figures ``to_svg`` is asked for instead of drawing them (see :func:`render_deferred`)."""
    global _DEFERRED
    if _DEFERRED is not None:
        raise RuntimeError("plot.deferred() does not nest")
    pending: list[_Pending] = []
    _DEFERRED = pending
    try:
        yield pending
    finally:
        _DEFERRED = None


Task = _Pending | Callable[[], Any]
MAX_FORKED_TASKS = 8000            # task numbers are handed out through one pipe (4 bytes each, < 64 KiB)


def _run(task: Task) -> Any:
    if isinstance(task, _Pending):
        return _render(task.fig, task.prefix, task.tight_bbox, task.append)
    return task()


def run_all(tasks: list[Task], workers: int | None = None) -> list[Any]:
    """Every task's result, in order: a collected figure (:func:`deferred`) gives its SVG, a callable (a
    chart kind's figure built lazily) its return value (picklable).

    With several CPUs and enough tasks they run in forked children, which inherit everything in memory (the
    built figures, the report's runs: no store access, nothing pickled on the way in). Plain ``os.fork``, not
    a multiprocessing pool: a pool's helper threads and semaphores hung under a caller that runs threads or
    an event loop of its own (a browser driver, a web server). The task numbers wait in a pipe, heaviest
    first, and each child takes the next one when it is free (reads of 4 bytes are atomic); a child sends
    its results back pickled through its own pipe and leaves with ``os._exit``."""
    n = min(workers if workers is not None else min(os.cpu_count() or 1, 4), len(tasks))
    if n <= 1 or len(tasks) < 3 or len(tasks) > MAX_FORKED_TASKS or not hasattr(os, "fork"):
        return [_run(t) for t in tasks]
    order = sorted(range(len(tasks)), key=lambda i: (isinstance(tasks[i], _Pending), -_axes(tasks[i])))
    queue_r, queue_w = os.pipe()
    os.write(queue_w, b"".join(struct.pack("<I", i) for i in order))
    os.close(queue_w)
    children: list[tuple[int, int]] = []
    try:
        for _ in range(n):
            out_r, out_w = os.pipe()
            pid = os.fork()
            if pid == 0:                                   # the child: never returns
                os.close(out_r)
                _child(tasks, queue_r, out_w)
            os.close(out_w)
            children.append((pid, out_r))
    finally:
        os.close(queue_r)
    results: dict[int, Any] = {}
    failures: list[str] = []
    for pid, out_r in children:
        with os.fdopen(out_r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        try:
            done, error = pickle.loads(data)
        except Exception:
            failures.append(f"a drawing process ended with status {status} and no result")
            continue
        results.update(done)
        if error:
            failures.append(error)
    if failures:
        raise RuntimeError("drawing the report failed: " + " | ".join(failures))
    return [results[i] for i in range(len(tasks))]


def _child(tasks: list[Task], queue_r: int, out_w: int) -> NoReturn:
    done: dict[int, Any] = {}
    error = ""
    try:
        while len(raw := os.read(queue_r, 4)) == 4:
            i = struct.unpack("<I", raw)[0]
            done[i] = _run(tasks[i])
    except BaseException as e:   # reported to the parent, which raises it with the report's context
        error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
    try:
        payload = pickle.dumps((done, error))
        view = memoryview(payload)
        while view:
            view = view[os.write(out_w, view):]
    finally:
        os._exit(0)


def _axes(task: Task) -> int:
    return len(task.fig.axes) if isinstance(task, _Pending) else 0
