"""Write saturation (SNIA PTS-E WSAT, the built-in suite ``snia-wsat``): a random-write cell measured from fresh out of
the box, its IOPS against time and against the total bytes written (TGBW), where the write cliff shows.

Generic on purpose: any measured cell that writes at random only (``randwrite``, or a mixed mode with
``rwmixread: 0``) and runs right after a purge of its device (the step before it in the plan is a purge, so it
starts from FOB) is drawn, from its result's per-interval series (``Result.series``: per second, coarser for a
step of hours, orchestrator.kinds.fio.status_interval). Each run x OP mode is one line (device A vs B, stock vs
HP overlaid). A long step's series is drawn in at most :data:`MAX_POINTS` points, each the IOPS averaged over its
span (SNIA records one-minute rounds); the table holds exactly the points drawn.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.charts.scaling import op_mode_of
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.store.models import Step

MAX_POINTS = 360            # six hours in one-minute points
PURGES = ("purge", "dut_state")


@dataclass(frozen=True)
class Point:
    seconds: float          # end of the span, seconds of the step's runtime
    tgbw: float             # total GB written (decimal) at the end of the span
    iops: float             # read + write IOPS averaged over the span


@dataclass
class Saturation:
    key: CellKey
    name: str
    lines: dict[tuple[int, str], list[Point]] = field(default_factory=dict)


def random_write_only(step: Step) -> bool:
    w: dict[str, Any] = step.workload or {}
    return w.get("rw") == "randwrite" or (w.get("rw") == "randrw" and w.get("rwmixread") == 0)


def from_fob(view: RunView, step: Step) -> bool:
    """The step before ``step`` in plan order is a purge of the run's devices."""
    before = [st for st in view.detail.steps if (st.seq, st.round) < (step.seq, step.round)]
    if not before:
        return False
    prev = max(before, key=lambda st: (st.seq, st.round))
    return prev.kind == "purge" or (prev.kind == "dut_state" and bool(prev.cell.get("purge")))


def points(series: dict[str, Any] | None, bs: int) -> list[Point]:
    """The series in at most MAX_POINTS spans: IOPS averaged over each, bytes written summed to its end."""
    s = series or {}
    ts, iops, writes = s.get("t") or [], s.get("iops") or [], s.get("write_iops") or []
    n = min(len(ts), len(iops), len(writes))
    if n < 2:
        return []
    per = math.ceil(n / MAX_POINTS)
    out: list[Point] = []
    written = 0.0
    prev_t = 0.0
    ios = span = 0.0
    for i in range(n):
        t = float(ts[i] or 0.0)
        dt = max(t - prev_t, 0.0)
        prev_t = t
        ios += float(iops[i] or 0.0) * dt
        span += dt
        written += float(writes[i] or 0.0) * dt * bs
        if (i + 1) % per == 0 or i == n - 1:
            out.append(Point(t, written / 1e9, ios / span if span else 0.0))
            ios = span = 0.0
    return out


def saturations(ctx: ReportContext) -> list[Saturation]:
    found: dict[CellKey, Saturation] = {}
    for view in ctx.runs:
        for st, res in view.measured():
            if not random_write_only(st) or not from_fob(view, st):
                continue
            pts = points(res.series, int((st.workload or {}).get("bs") or 0))
            if not pts:
                continue
            key = cell_key(st.cell)
            sat = found.setdefault(key, Saturation(key, cell_label(st.cell, st.workload)))
            sat.lines[(view.index, op_mode_of(st))] = pts
    return list(found.values())


def _figure(ctx: ReportContext, sat: Saturation, n: int, against_bytes: bool) -> Figure | None:
    views = {v.index: v for v in ctx.runs}
    rows: list[list[str]] = []
    drawn = 0
    minutes = max(p.seconds for pts in sat.lines.values() for p in pts) > 600     # else seconds on the axis
    legend_h = plot.legend_height(len(sat.lines))
    with plot.figure(7.5, 3.2 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.95, bottom=0.55, top=legend_h + 0.08)
        for (idx, mode), pts in sat.lines.items():
            view = views[idx]
            xs = [p.tgbw if against_bytes else p.seconds / (60 if minutes else 1) for p in pts]
            ax.plot(xs, [p.iops for p in pts], color=view.colour, linestyle=view.style(mode), linewidth=1.1,
                    marker="o" if len(pts) <= 60 else None, markersize=2.5, label=view.label(mode))
            drawn += len(pts)
            rows += [[view.label(mode), f"{p.seconds:,.1f}", f"{p.tgbw:,.3f}", fmt.iops(p.iops)] for p in pts]
        if not drawn:
            return None
        ax.set_xlabel("total GB written (TGBW, decimal)" if against_bytes else
                      f"time ({'minutes' if minutes else 'seconds'} of the step)")
        ax.set_ylabel("IOPS")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7)   # above the plot: never on a line
        fid = f"wsat-{n}-{'tgbw' if against_bytes else 'time'}"
        svg = plot.to_svg(fig, fid)
    what = "total GB written" if against_bytes else "time"
    return Figure("wsat", fid, f"{sat.name}: write saturation, IOPS against {what}", svg,
                  Table(["run", "seconds", "TGBW (GB)", "IOPS"], rows),
                  f"n = {ctx.n_runs()}, {len(sat.lines)} line" + ("s" if len(sat.lines) != 1 else "")
                  + f", {drawn} points", drawn,
                  "IOPS of a random-write cell measured right after a purge (from FOB), each point averaged over "
                  "its span of the step's series; TGBW sums the bytes written to the end of each span.")


class WsatChart:
    name = "wsat"
    title = "Write saturation from FOB"
    order = 24

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        return [functools.partial(_figure, ctx, sat, i, by_bytes) for i, sat in enumerate(saturations(ctx))
                for by_bytes in (False, True)]


register(WsatChart())
