"""Repeated cells (a suite's ``repeat: N``): per cell the mean of its repeats with the 95% confidence interval
of the mean as an error bar, and beneath it the table of mean, interval, coefficient of variation and how many
repeats were measured of how many planned (:mod:`orchestrator.stats.samples`). One figure per run that has
repeats and per headline figure (IOPS and average latency for storage, TPS and p95 latency for an application
run, Gbps for a network run). The other charts draw a repeated cell's mean; this one says how much to trust it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from orchestrator.cellmetrics import Metric
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.htmlreport.plot import text_width
from orchestrator.stats.samples import CellSamples, is_repeated, run_samples, summary_metrics

DRAWN = {"iops", "lat_mean_us", "tps", "lat_p95_ms", "gbps"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _figure(view: RunView, metric: Metric, cells: Sequence[CellSamples]) -> Figure | None:
    drawn = [(c, s) for c in cells if (s := c.summary(metric.name)) is not None]
    if not drawn:
        return None
    labels = [c.label for c, _ in drawn]
    fid = f"repeats-{view.index}-{metric.name}"
    rows = []
    for c, s in drawn:
        ci = s.note if s.too_noisy else "-" if s.ci_low is None or s.ci_high is None else \
            f"{metric.fmt.format(s.ci_low)} to {metric.fmt.format(s.ci_high)}"
        rows.append([c.label, f"{s.n} of {c.planned}", metric.fmt.format(s.mean), ci, _pct(s.cov_pct)])
    with plot.figure(7.5, 0.9 + 0.28 * len(drawn), layout=None) as (fig, ax):
        plot.margins(fig, left=max(text_width(lab) for lab in labels) + 0.45, bottom=0.5, top=0.15)
        ys = list(range(len(drawn)))
        means = [s.mean for _, s in drawn]
        lo = [s.mean - s.ci_low if s.ci_low is not None else 0.0 for _, s in drawn]
        hi = [s.ci_high - s.mean if s.ci_high is not None else 0.0 for _, s in drawn]
        ax.barh(ys, means, height=0.7, color=view.colour, xerr=[lo, hi], capsize=3,
                error_kw={"elinewidth": 1.0, "ecolor": "#222222"})
        for (c, _), y in zip(drawn, ys, strict=True):
            vals = c.values.get(metric.name, [])
            ax.plot(vals, [y] * len(vals), "o", markersize=2.5, color="#222222", alpha=0.6)
        ax.set_yticks(ys, labels)
        ax.invert_yaxis()
        ax.set_xlabel(metric.title + " (mean, 95% CI, each repeat a dot)")
        ax.set_xlim(0, max(max([*c.values.get(metric.name, [0.0]), s.ci_high or s.mean])
                           for c, s in drawn) * 1.12 or 1)
        ax.grid(axis="y", visible=False)
        svg = plot.to_svg(fig, fid)
    n = max(c.planned for c, _ in drawn)
    return Figure("repeats", fid, f"{metric.title} over repeats · {view.label()}", svg,
                  Table(["cell", "repeats", f"mean {metric.title}", "95% CI of the mean", "CoV"], rows),
                  f"n = {len(drawn)} cells x up to {n} repeats", len(drawn),
                  "Bar: the mean of the cell's repeats; whisker: the 95% confidence interval of the mean "
                  "(Student's t); dots: each repeat. CoV = standard deviation / mean.")


class Repeats:
    name = "repeats"
    title = "Repeats: means with 95% confidence intervals"
    order = 12

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        out: list[FigureItem] = []
        for view in ctx.runs:
            if not is_repeated(view.detail):
                continue
            cells = list(run_samples(view.detail, with_op_mode=True).values())
            for m in summary_metrics(view.detail):
                if m.name in DRAWN:
                    out.append(functools.partial(_figure, view, m, cells))
        return out


register(Repeats())
