"""TxQ scaling: the thread x queue-depth ladder (the reviews' 8K 70/30 2T2Q … 16T16Q), one chart per metric.

Generic on purpose: any profile whose measured cells differ only in ``numjobs`` and/or ``iodepth`` and has at
least 3 such points is a ladder, so a user suite's ladder gets the same charts as the built-in one. Cells are
matched across runs by their identity without the OP mode, numjobs and iodepth (orchestrator.cells), and each
run x OP mode is one line: stock and HP of one device share a colour and differ in line style.

The four review metrics (:data:`REVIEW_METRICS`) are shared with the bar charts: IOPS (read + write), average,
max and stddev latency in ms, read from the result row exactly as the store holds them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.store.models import Result, Step

LADDER_DIMS = ("numjobs", "iodepth")
MIN_POINTS = 3


@dataclass(frozen=True)
class Metric:
    """One review metric: how it is read from a result, drawn (axis units) and printed (table)."""

    key: str
    title: str
    axis: str
    raw: Callable[[Result], float | None]     # store units (IOPS, ns)
    scale: float                             # raw / scale = the value drawn
    text: Callable[[float | None], str]      # the table's format of the raw value

    def drawn(self, res: Result) -> float | None:
        v = self.raw(res)
        return None if v is None else v / self.scale


REVIEW_METRICS = (
    Metric("iops", "IOPS (read + write)", "IOPS", lambda r: r.iops, 1.0, fmt.iops),
    Metric("lat_mean", "Average latency", "average latency (ms)", lambda r: r.lat_mean_ns, 1e6, fmt.ms),
    Metric("lat_max", "Max latency", "max latency (ms)", lambda r: r.lat_max_ns, 1e6, fmt.ms),
    Metric("lat_stddev", "Latency standard deviation", "latency stddev (ms)", lambda r: r.lat_stddev_ns, 1e6,
           fmt.ms),
)


def op_mode_of(step: Step) -> str:
    return str(step.cell.get("op_mode", "stock"))


def tq(step: Step) -> tuple[int, int]:
    """Threads and queue depth of a measured step: its workload's (always set), else its cell's."""
    wl = step.workload or {}
    return int(wl.get("numjobs", step.cell.get("numjobs", 1))), int(wl.get("iodepth", step.cell.get("iodepth", 1)))


def tq_label(point: tuple[int, int]) -> str:
    return f"{point[0]}T{point[1]}Q"


@dataclass
class Ladder:
    """One ladder across the report: its points in plan order and, per line (run, OP mode), point -> result."""

    key: CellKey
    name: str           # the cells' name without their T x Q (orchestrator.cells.cell_label)
    points: list[tuple[int, int]] = field(default_factory=list)
    lines: dict[tuple[int, str], dict[tuple[int, int], Result]] = field(default_factory=dict)


def ladders(ctx: ReportContext) -> list[Ladder]:
    """Every ladder of the report (profiles whose cells vary numjobs/iodepth with >= 3 points)."""
    found: dict[CellKey, Ladder] = {}
    for view in ctx.runs:
        for st, res in view.measured():
            if not any(d in st.cell for d in LADDER_DIMS):
                continue
            key = tuple((k, v) for k, v in cell_key(st.cell) if k not in LADDER_DIMS)
            lad = found.setdefault(key, Ladder(key, cell_label(st.cell, st.workload, tq=False)))
            point = tq(st)
            if point not in lad.points:
                lad.points.append(point)
            lad.lines.setdefault((view.index, op_mode_of(st)), {})[point] = res
    return [lad for lad in found.values() if len(lad.points) >= MIN_POINTS]


def ladder_step_ids(ctx: ReportContext) -> set[str]:
    """Ids of the measured steps the ladder charts draw (the bar charts' fallback leaves them out)."""
    keys = {lad.key for lad in ladders(ctx)}
    return {st.id for v in ctx.runs for st, _ in v.measured()
            if any(d in st.cell for d in LADDER_DIMS)
            and tuple((k, val) for k, val in cell_key(st.cell) if k not in LADDER_DIMS) in keys}


def _figure(ctx: ReportContext, lad: Ladder, n_lad: int, m: Metric) -> Figure | None:
    name = lad.name
    xs = list(range(len(lad.points)))
    labels = [tq_label(p) for p in lad.points]
    views = {v.index: v for v in ctx.runs}
    headers = ["TxQ"]
    columns: list[list[str]] = []
    points = 0
    legend_h = plot.legend_height(len(lad.lines))
    with plot.figure(7.5, 3.0 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.95, bottom=0.8 if len(xs) > 8 else 0.55, top=legend_h + 0.08)
        for (idx, mode), by_point in lad.lines.items():
            view: RunView = views[idx]
            ys = [by_point.get(p) for p in lad.points]
            vals = [None if r is None else m.drawn(r) for r in ys]
            got = [(x, y) for x, y in zip(xs, vals, strict=True) if y is not None]
            if not got:
                continue
            points += len(got)
            ax.plot([x for x, _ in got], [y for _, y in got], color=view.colour, linestyle=view.style(mode),
                    marker="o", markersize=3, linewidth=1.3, label=view.label(mode))
            headers.append(view.label(mode))
            columns.append([m.text(None if r is None else m.raw(r)) for r in ys])
        if not points:
            return None
        ax.set_xticks(xs, labels, rotation=45 if len(xs) > 8 else 0)
        ax.set_xlabel("threads x queue depth per thread (TxQ)")
        ax.set_ylabel(m.axis)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7)   # above the plot: never on a line
        fid = f"scaling-{n_lad}-{m.key}"
        svg = plot.to_svg(fig, fid)
    rows = [[lab, *(col[i] for col in columns)] for i, lab in enumerate(labels)]
    return Figure("scaling", fid, f"{name} TxQ scaling: {m.title}", svg, Table(headers, rows),
                  f"n = {ctx.n_runs()}, {len(lad.points)} TxQ points, {len(columns)} lines", points,
                  f"{m.title} of each measured cell of the ladder (the run's result over the cell's whole "
                  f"runtime); a line per run x OP mode, in ladder order.")


class ScalingChart:
    name = "scaling"
    title = "Thread x queue scaling"
    order = 20

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        return [functools.partial(_figure, ctx, lad, i, m) for i, lad in enumerate(ladders(ctx))
                for m in REVIEW_METRICS]


register(ScalingChart())
