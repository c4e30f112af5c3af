"""Latency against load: a cell's load curve (suite key ``load_curve``, labcontract.loadcurve), average and p99
latency against the IOPS each point achieved, the cell's own measurement (its maximum) as the last point.

One chart per curve and latency figure; each run x OP mode is one line (stock vs HP, device A vs B overlaid),
its points in ascending load. The x axis is the IOPS the point *achieved*, not the rate it asked for: a device
that cannot hold the asked rate shows it, and two devices' curves meet on one axis. The table gives each
point's asked share, achieved IOPS, average and p99 latency per line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from labcontract.loadcurve import POINT
from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.charts.scaling import op_mode_of
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, Table, register
from orchestrator.store.models import Result

MAXIMUM = 100          # the cell's own measurement stands as the curve's 100% point


@dataclass
class Curve:
    """One curve across the report: per line (run, OP mode), load % -> result."""

    key: CellKey
    name: str
    lines: dict[tuple[int, str], dict[int, Result]] = field(default_factory=dict)

    @property
    def loads(self) -> list[int]:
        return sorted({pct for pts in self.lines.values() for pct in pts})


def curves(ctx: ReportContext) -> list[Curve]:
    """Every cell with a load curve in some run of the report (a point measured, the maximum with it)."""
    found: dict[CellKey, Curve] = {}
    maxima: dict[tuple[CellKey, int, str], Result] = {}
    for view in ctx.runs:
        for st, res in view.measured(load_points=True):
            key = tuple((k, v) for k, v in cell_key(st.cell) if k != POINT)
            line = (view.index, op_mode_of(st))
            if POINT not in st.cell:
                maxima[(key, *line)] = res
                continue
            curve = found.setdefault(key, Curve(key, cell_label(st.cell, st.workload).replace(
                f" at {st.cell[POINT]}% load", "")))
            curve.lines.setdefault(line, {})[int(st.cell[POINT])] = res
    for curve in found.values():
        for line, pts in curve.lines.items():
            if (top := maxima.get((curve.key, *line))) is not None:
                pts[MAXIMUM] = top
    return list(found.values())


def _figure(ctx: ReportContext, curve: Curve, n: int, tail: bool) -> Figure | None:
    what = "p99 latency" if tail else "average latency"
    views = {v.index: v for v in ctx.runs}
    loads = curve.loads
    headers = ["load (% of max)"]
    columns: list[list[str]] = []
    points = 0
    top_x = top_y = 0.0
    legend_h = plot.legend_height(len(curve.lines))
    with plot.figure(7.5, 3.2 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.95, bottom=0.55, top=legend_h + 0.08)
        for (idx, mode), by_load in curve.lines.items():
            view = views[idx]
            got = [(float(r.iops), float(lat) / 1e6) for pct in sorted(by_load) if (r := by_load[pct]).iops is not None
                   and (lat := r.lat_p99_ns if tail else r.lat_mean_ns) is not None]
            if not got:
                continue
            points += len(got)
            top_x, top_y = max(top_x, *(x for x, _ in got)), max(top_y, *(y for _, y in got))
            ax.plot([x for x, _ in got], [y for _, y in got], color=view.colour, linestyle=view.style(mode),
                    marker="o", markersize=3.5, linewidth=1.3, label=view.label(mode))
            headers += [f"{view.label(mode)} IOPS", f"{what} (ms)"]
            at = [by_load.get(p) for p in loads]
            columns.append([fmt.iops(None if r is None else r.iops) for r in at])
            columns.append([fmt.ms(None if r is None else (r.lat_p99_ns if tail else r.lat_mean_ns)) for r in at])
        if not points:
            return None
        ax.set_xlabel("IOPS achieved (read + write)")
        ax.set_ylabel(f"{what} (ms)")
        ax.set_xlim(0, top_x * 1.06 or 1)          # room for the last marker (never on the frame)
        ax.set_ylim(0, top_y * 1.12 or 1)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7)   # above the plot: never on a line
        fid = f"loadcurve-{n}-{'p99' if tail else 'mean'}"
        svg = plot.to_svg(fig, fid)
    rows = [[f"{p}%" if p != MAXIMUM else "100% (maximum)", *(col[i] for col in columns)] for i, p in enumerate(loads)]
    return Figure("loadcurve", fid, f"{curve.name}: {what} against load", svg, Table(headers, rows),
                  f"n = {ctx.n_runs()}, {len(loads)} load points, {len(curve.lines)} line"
                  + ("s" if len(curve.lines) != 1 else ""), points,
                  f"{what.capitalize()} of each point of the load curve against the IOPS it achieved: the cell "
                  f"measured unthrottled (100%), then rate-limited (fio rate_iops) to each share of that maximum.")


class LoadCurveChart:
    name = "loadcurve"
    title = "Latency against load"
    order = 22

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        return [functools.partial(_figure, ctx, c, i, tail) for i, c in enumerate(curves(ctx))
                for tail in (False, True)]


register(LoadCurveChart())
