"""Several runs compared cell by cell with significance (issue 16): per headline figure (IOPS and average latency
for storage, TPS and p95 latency for an application run, Gbps for a network run) a forest plot of every run's
mean over the cell's repeats with the 95% confidence interval of the mean as an error bar, and the verdict of
each run against the first (:func:`orchestrator.compare.compare_details`, the numbers ``labctl compare``
prints): significant, no significant difference, or cannot be judged (a single run on either side).

Means are drawn in % of the first run's mean of the same cell, so a 4K cell of 500,000 IOPS and a 128K cell
of 20,000 share one axis and a difference reads the same everywhere; the table beneath gives the absolute
means and intervals, the test, p, effect size and the interval of the difference. Only reports of two or more
runs that ``compare`` accepts get these figures; a figure draws the first cells in plan order, at most
:data:`MAX_CELLS` and :data:`MAX_POINTS` points (10 runs: 16 cells), and says so.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from labcontract.errors import CompareError
from orchestrator.cellmetrics import HEADLINE, Metric
from orchestrator.compare import CANNOT_JUDGE, Comparison, compare_details, ref_name, verdict_fields
from orchestrator.comparetable import TEST_NAMES, fmt_value
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, Table, register
from orchestrator.htmlreport.plot import text_width

DRAWN = {"iops", "lat_mean_us", "tps", "lat_p95_ms", "gbps"}
MAX_CELLS = 40
MAX_POINTS = 160      # a point is a line of the figure (0.24 in): 160 make a figure about 40 inches tall

MAX_LABELS = 80       # verdicts written next to their points up to this many (a label costs ~2 ms to draw)
# how a point shows its verdict: marker and whether it is filled (the baseline: filled)
MARKERS = {"significant": ("o", True), "no significant difference": ("o", False), "cannot be judged": ("D", False),
           "": ("o", True)}


@dataclass(frozen=True)
class Point:
    """One run's mean of one cell, in % of the first run's mean."""

    cell: str
    run: int
    mean: float
    low: float | None      # the 95% interval of the mean (None: one repeat)
    high: float | None
    kind: str              # the verdict's kind ("": the baseline, or no verdict)
    text: str              # "+10.0% significantly better"


def _said(kind: str, diff: float | None, higher_better: bool) -> str:
    """The verdict as the terminal table says it (orchestrator.comparetable.verdict_text)."""
    if kind == "significant":
        return "significantly better" if ((diff or 0.0) > 0) == higher_better else "significantly worse"
    return CANNOT_JUDGE if kind == "cannot be judged" else kind


def _g(v: float | None, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _data(ctx: ReportContext, c: Comparison, metric: Metric) -> tuple[list[Point], list[list[str]], list[str], int]:
    """The drawn points, the table rows, the cells drawn and the most repeats a run has of one."""
    cap = min(MAX_CELLS, max(8, MAX_POINTS // len(c.details)))
    points: list[Point] = []
    rows: list[list[str]] = []
    cells: list[str] = []
    most = 0
    for row in c.rows:
        base = row.entries[0].values.get(metric.name)
        if not base or not any(e.values.get(metric.name) is not None for e in row.entries[1:]):
            continue
        if len(cells) == cap:
            cells.append("")            # marks "more cells than drawn"
            break
        cells.append(row.label)
        for i, e in enumerate(row.entries):
            s = row.summary(i, metric.name)
            if s is None:
                continue
            most = max(most, s.n)
            v = verdict_fields(row.verdict(i, metric.name))
            kind = _said(v["verdict"], v["diff"], HEADLINE.get(metric.name, True)) if v else ""
            diff = row.diff(i, metric.name)
            pct = f"{diff:+.1f}% " if diff is not None and i else ""
            lo, hi = s.ci_low, s.ci_high
            points.append(Point(row.label, i, s.mean / abs(base) * 100, None if lo is None else lo / abs(base) * 100,
                                None if hi is None else hi / abs(base) * 100, v["verdict"] if v else "",
                                f"{pct}{kind}".strip()))
            ci = s.note if s.too_noisy else \
                "-" if lo is None or hi is None else f"{fmt_value(metric, lo)} to {fmt_value(metric, hi)}"
            dci = ("-" if not v or v["diff_ci_low_pct"] is None or v["diff_ci_high_pct"] is None
                   else f"{v['diff_ci_low_pct']:+.1f}% to {v['diff_ci_high_pct']:+.1f}%")
            effect = "-" if not v or v["effect_size"] is None else f"{v['effect_name']} {v['effect_size']:.2f}"
            test = TEST_NAMES[v["test"]] if v and v["p"] is not None else "-"
            rows.append([row.label, f"{ref_name(i)}: {ctx.runs[i].label(e.op_mode)}", str(s.n),
                         fmt_value(metric, s.mean), ci, "-" if diff is None or not i else f"{diff:+.1f}%",
                         kind or "baseline", test, _g(v["p"] if v else None), effect, dci])
    return points, rows, cells, most


def _figure(ctx: ReportContext, c: Comparison, metric: Metric) -> Figure | None:
    points, rows, cells, most = _data(ctx, c, metric)
    more = bool(cells) and cells[-1] == ""
    cells = [name for name in cells if name]
    if not points:
        return None
    fid = f"compare-{metric.name.replace('.', '-')}"
    ys, ticks = plot.grouped_rows([p.cell for p in points], cells)
    runs = sorted({p.run for p in points})
    legend_h = plot.legend_height(len(runs))
    labelled = sum(1 for p in points if p.text) <= MAX_LABELS
    right = max(text_width(p.text, 7) for p in points) + 0.3 if labelled else 0.2
    with plot.figure(7.5 + right, 0.7 + legend_h + 0.24 * len(points) + 0.12 * len(cells), layout=None) as (fig, ax):
        plot.margins(fig, left=max(text_width(c) for c in cells) + 0.45, bottom=0.5, top=legend_h + 0.06,
                     right=right)
        for i in runs:        # one call per run and kind of point: a 10-run compare has 400 points
            view = ctx.runs[i]
            mine = [(yy, p) for yy, p in zip(ys, points, strict=True) if p.run == i]
            bars = [(yy, p) for yy, p in mine if p.low is not None and p.high is not None]
            if bars:
                ax.errorbar([p.mean for _, p in bars], [yy for yy, _ in bars], fmt="none", ecolor=view.colour,
                            capsize=3, elinewidth=1.0, xerr=[[p.mean - (p.low or 0.0) for _, p in bars],
                                                             [(p.high or 0.0) - p.mean for _, p in bars]])
            named = False
            for kind, (marker, filled) in MARKERS.items():
                these = [(yy, p) for yy, p in mine if p.kind == kind]
                if these:
                    ax.plot([p.mean for _, p in these], [yy for yy, _ in these], marker, color=view.colour,
                            markersize=4.5, markerfacecolor=view.colour if filled else "white",
                            label=None if named else f"{ref_name(i)}: {view.label()}")
                    named = True
        if labelled:
            for yy, p in zip(ys, points, strict=True):
                if p.text:
                    ax.annotate(p.text, xy=(1.01, yy), xycoords=("axes fraction", "data"), fontsize=7,
                                va="center", fontweight="bold" if p.kind == "significant" else "normal")
        ax.axvline(100.0, color="#555555", linewidth=0.8, linestyle="--")
        ax.margins(x=0.08)
        ax.set_yticks(ticks, cells)
        ax.set_ylim(ys[-1] + 0.8, -0.8)              # top to bottom in plan order, no margin growing with rows
        ax.set_xlabel(f"{metric.title}: mean in % of run A's mean (whisker: 95% CI of the mean)")
        ax.grid(axis="y", visible=False)
        fig.legend(loc="upper left", bbox_to_anchor=(0.005, 0.995), fontsize=7)   # the figure's width: long names
        svg = plot.to_svg(fig, fid)
    note = (f" The first {len(cells)} cells are drawn; labctl compare --format csv has every one." if more
            else "")
    return Figure("compare", fid, f"{metric.title}: each run against A, with significance", svg,
                  Table(["cell", "run", "repeats", f"mean {metric.title}", "95% CI of the mean", "vs A", "verdict",
                         "test", "p", "effect size", "95% CI of the difference"], rows),
                  f"n = {ctx.n_runs()}, {len(cells)} cell" + ("s" if len(cells) != 1 else "") +
                  f", up to {most} repeat" + ("s" if most != 1 else "") + " a cell", len(points),
                  "Dot: a run's mean over the cell's repeats in % of run A's; whisker: its 95% confidence interval "
                  "(Student's t). Verdict against A at 5%: Welch's t-test (Mann-Whitney U for tail figures) when "
                  "both runs have 2 or more repeats of the cell, else it cannot be judged (single run). Filled dot: "
                  "run A or a significant difference; hollow dot: no significant difference; hollow diamond: "
                  f"cannot be judged.{'' if labelled else ' The verdicts are in the table.'}{note}")


class Significance:
    name = "compare"
    title = "Compare: means, intervals and significance against the first run"
    order = 13

    def figures(self, ctx: ReportContext) -> Sequence[FigureItem]:
        if len(ctx.runs) < 2:
            return []
        try:
            c = compare_details([v.detail for v in ctx.runs])
        except CompareError:           # runs compare cannot match (no cell in common, storage with network)
            return []
        # drawn in the report's worker processes (forked: the comparison is not pickled on the way in)
        drawn = {"gbps"} if c.network else DRAWN          # a network run's IOPS: Gbps / block size
        return [functools.partial(_figure, ctx, c, m) for m in c.judged if m.name in drawn]


register(Significance())
