"""``labctl report RUN [RUN...] --html FILE``: a review-grade, self-contained HTML report of one or more runs.

Several runs are overlaid on every chart (stock vs HP, device A vs B, Linux vs another OS, single vs
multipath), cells matched by :mod:`orchestrator.cells`. See docs/reports.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.htmlreport import plot
from orchestrator.htmlreport.charts import chart_kinds
from orchestrator.htmlreport.model import ChartKind, Figure, FigureItem, ReportContext
from orchestrator.htmlreport.page import render
from orchestrator.provenance import ReadArtifact
from orchestrator.queries import RunDetail

if TYPE_CHECKING:
    from orchestrator.runhistory import RunHistory

__all__ = ["HtmlReport", "build_html", "write_html"]


@dataclass(frozen=True)
class HtmlReport:
    html: str
    figures: list[Figure]


def build_html(details: Sequence[RunDetail], *, title: str | None = None,
               options: Mapping[str, str] | None = None, read_artifact: ReadArtifact | None = None,
               workers: int | None = None, history: Mapping[str, RunHistory] | None = None) -> HtmlReport:
    """The report of ``details`` (one run: its report; several: overlaid on every chart). ``options`` reach
    the chart kinds (e.g. ``latency_cells``: comma-separated cell names whose latency distribution is drawn);
    ``read_artifact`` lets the provenance name what an artifact says (the purge commands); ``workers``:
    processes that draw the figures (default: one per CPU, at most 4; 1 draws in this process); ``history``:
    run id -> the run against its history (:func:`orchestrator.runhistory.histories`, by a caller with a
    session), shown as the "Against history" section."""
    if not details:
        raise ValueError("a report needs at least one run")
    ctx = ReportContext.of(list(details), options, read_artifact)
    if history:
        ctx = replace(ctx, history=dict(history))
    built: list[tuple[ChartKind, list[FigureItem]]] = []
    with plot.deferred() as pending:          # chart kinds build their figures; drawing comes after, in parallel
        for kind in chart_kinds():
            built.append((kind, list(kind.figures(ctx))))
    lazy: list[Callable[[], Figure | None]] = [it for _, items in built for it in items if not isinstance(it, Figure)]
    done = plot.run_all([*lazy, *pending], workers)
    made = {id(fn): fig for fn, fig in zip(lazy, done, strict=False)}
    svgs = {p.token: svg for p, svg in zip(pending, done[len(lazy):], strict=True)}
    sections: list[tuple[ChartKind, list[Figure]]] = []
    for kind, items in built:
        figs = [it if isinstance(it, Figure) else made[id(it)] for it in items]
        figs = [replace(f, svg=svgs.get(f.svg, f.svg)) for f in figs if f is not None]
        if figs:
            sections.append((kind, figs))
    if title is None:
        runs = ", ".join(f"{d.run.suite_name} {d.run.id}" for d in details[:4])
        title = ("Storage report: " if len(details) == 1 else "Comparison: ") + runs + \
            (f" and {len(details) - 4} more" if len(details) > 4 else "")
    return HtmlReport(render(ctx, sections, title), [f for _, figs in sections for f in figs])


def write_html(details: Sequence[RunDetail], path: Path, *, title: str | None = None,
               options: Mapping[str, str] | None = None, read_artifact: ReadArtifact | None = None,
               workers: int | None = None, history: Mapping[str, RunHistory] | None = None) -> HtmlReport:
    """Write the report to ``path`` (parents created); returns what was written."""
    report = build_html(details, title=title, options=options, read_artifact=read_artifact, workers=workers,
                        history=history)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.html, encoding="utf-8")
    return report
