"""Application workloads (sysbench OLTP, pgbench, external): what the reviews print for SysBench (methodology
section 4) -- TPS, average latency and 99th-percentile latency per thread count, a line per device x mode --
and the per-second TPS of each point over its measured time.

A ladder is one application test across the report (cells matched by orchestrator.cells without the OP mode
and the point dimension ``threads`` / ``clients``); each run x OP mode is a line, stock and HP of one device
sharing a colour and differing in line style (the RunView styles). Values are read from the result rows as the
controller stored them (``labcontract.apps.AppResult``), never recomputed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import PALETTE, Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.queries import POINT_DIMS, app_metrics, app_point, app_series, point_dim_of
from orchestrator.store.models import Result, Step

MISSING = "-"


@dataclass(frozen=True)
class AppMetric:
    key: str                                   # the AppResult metric
    title: str
    axis: str
    text: Callable[[float | None], str]


def _f(fmt: str) -> Callable[[float | None], str]:
    return lambda v: MISSING if v is None else fmt.format(v)


APP_METRICS = (AppMetric("tps", "Transactions per second", "TPS", _f("{:,.1f}")),
               AppMetric("lat_avg_ms", "Average latency", "average latency (ms)", _f("{:,.2f}")),
               AppMetric("lat_p99_ms", "99th percentile latency", "p99 latency (ms)", _f("{:,.2f}")))


def op_mode_of(step: Step) -> str:
    return str(step.cell.get("op_mode", "stock"))


@dataclass
class AppLadder:
    """One application test across the report: its points (ascending) and, per line (run, OP mode), the
    result of each point."""

    key: CellKey
    dim: str
    points: list[int] = field(default_factory=list)
    lines: dict[tuple[int, str], dict[int, tuple[Step, Result]]] = field(default_factory=dict)


def app_ladders(ctx: ReportContext) -> list[AppLadder]:
    found: dict[CellKey, AppLadder] = {}
    for view in ctx.runs:
        for st, res in view.measured("app"):
            point = app_point(st)
            if point is None:
                continue
            key = tuple((k, v) for k, v in cell_key(st.cell) if k not in POINT_DIMS)
            lad = found.setdefault(key, AppLadder(key, point_dim_of(st)))
            if point not in lad.points:
                lad.points.append(point)
            lad.lines.setdefault((view.index, op_mode_of(st)), {})[point] = (st, res)
    for lad in found.values():
        lad.points.sort()
    return list(found.values())


POINT_AXIS = {"threads": "sysbench threads", "clients": "pgbench clients"}


def ladder_name(key: CellKey) -> str:
    """``oltp_read_write (sysbench)``: the test and its tool, then any other identity of the cell."""
    return cell_label(dict(key), tq=False)


def _ladder_figure(ctx: ReportContext, lad: AppLadder, n_lad: int, m: AppMetric) -> Figure | None:
    name = ladder_name(lad.key)
    xs = list(range(len(lad.points)))
    views = {v.index: v for v in ctx.runs}
    headers = [lad.dim]
    columns: list[list[str]] = []
    points = 0
    legend_h = plot.legend_height(len(lad.lines))
    with plot.figure(7.5, 3.0 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.95, bottom=0.55, top=legend_h + 0.08)
        for (idx, mode), by_point in lad.lines.items():
            view: RunView = views[idx]
            vals = [app_metrics(by_point[p][1]).get(m.key) if p in by_point else None for p in lad.points]
            got = [(x, y) for x, y in zip(xs, vals, strict=True) if y is not None]
            if not got:
                continue
            points += len(got)
            ax.plot([x for x, _ in got], [y for _, y in got], color=view.colour, linestyle=view.style(mode),
                    marker="o", markersize=3, linewidth=1.3, label=view.label(mode))
            headers.append(view.label(mode))
            columns.append([m.text(v) for v in vals])
        if not points:
            return None
        ax.set_xticks(xs, [str(p) for p in lad.points])
        ax.set_xlabel(POINT_AXIS.get(lad.dim, lad.dim))
        ax.set_ylabel(m.axis)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7)
        fid = f"apps-{n_lad}-{m.key}"
        svg = plot.to_svg(fig, fid)
    rows = [[str(p), *(col[i] for col in columns)] for i, p in enumerate(lad.points)]
    title = f"{name}: {m.title} per {POINT_AXIS.get(lad.dim, lad.dim)} count"
    return Figure("apps", fid, title, svg, Table(headers, rows),
                  f"n = {ctx.n_runs()}, {len(lad.points)} points, {len(columns)} lines", points,
                  f"{m.title} of each point as the tool reports it over the point's measured time (after its "
                  f"warm-up); a line per run x OP mode.")


def _series_figure(ctx: ReportContext, lad: AppLadder, n_lad: int, line: tuple[int, str], n_line: int) -> Figure | None:
    """Per-second TPS of every point of one line (run x OP mode), a curve per point."""
    idx, mode = line
    view = next(v for v in ctx.runs if v.index == idx)
    by_point = lad.lines[line]
    rows: list[list[str]] = []
    points = 0
    legend_h = plot.legend_height(len(by_point), ncol=4)
    with plot.figure(7.5, 3.0 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.95, bottom=0.55, top=legend_h + 0.08)
        for k, p in enumerate(lad.points):
            if p not in by_point:
                continue
            tps = app_series(by_point[p][1]).get("tps") or []
            if not tps:
                continue
            points += len(tps)
            ax.plot(range(1, len(tps) + 1), tps, color=PALETTE[k % len(PALETTE)], linewidth=1.0,
                    label=f"{p} {lad.dim}")
            rows.append([str(p), str(len(tps)), f"{sum(tps) / len(tps):,.1f}", f"{min(tps):,.1f}",
                         f"{max(tps):,.1f}"])
        if not points:
            return None
        ax.set_xlabel("second of the measured time")
        ax.set_ylabel("TPS (per second)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7, ncol=4)
        fid = f"apps-{n_lad}-tps-series-{n_line}"
        svg = plot.to_svg(fig, fid)
    return Figure("apps", fid, f"{ladder_name(lad.key)}: TPS per second, {view.label(mode)}", svg,
                  Table([lad.dim, "seconds", "mean TPS", "min TPS", "max TPS"], rows),
                  f"n = 1 run, {len(rows)} points, {points} seconds", points,
                  "The tool's per-second report of each point's measured time (the warm-up is not drawn); the "
                  "table's mean is of the drawn seconds, the point's TPS is the tool's own figure.")


class AppsChart:
    name = "apps"
    title = "Application workloads"
    order = 15

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        out: list[FigureItem] = []
        for i, lad in enumerate(app_ladders(ctx)):
            out += [functools.partial(_ladder_figure, ctx, lad, i, m) for m in APP_METRICS]
            out += [functools.partial(_series_figure, ctx, lad, i, line, j) for j, line in enumerate(lad.lines)]
        return out


register(AppsChart())
