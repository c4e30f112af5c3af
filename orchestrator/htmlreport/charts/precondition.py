"""Preconditioning curves: the four review series over time across all rounds, with the SNIA steady-state window.

One figure per precondition group (the steps of one ``seq``, rounds 1..N), four stacked axes sharing the time
axis: read + write IOPS, average, max and stddev latency (ms). x is minutes since the group's first round: each
round's per-second series (``Result.series``) is shifted by the summed duration of the rounds before it, so the
burst at the start and the fall to steady state read as one curve; thin vertical lines mark round boundaries.

Groups of several runs are overlaid when they are the same cell: the group's cell key (orchestrator.cells,
without the round) plus its workload identity (rw, bs, read share, random share), because the two 4K groups of
a profile swept over ``rwmixread`` share a cell key but are distinct precondition groups.

On the tracked metric's axis (``criteria.track``: iops or lat_mean) the SNIA window is drawn per run from the
precondition record: the window's rounds shaded, the range band (window mean ± max_range_pct / 2 %) and the
least-squares line over the per-round values (labcontract.steady.fit_line / check_window): the window that
reached steady state, else the last full window. The per-round values (from the record, which the verdict was
judged on) are the dots and the table; the verdict is in the caption.

Size: a per-second line over 40 rounds of 60 s is 2,400 points; each line is cut to at most
:data:`MAX_POINTS` (fewer when many runs share an axis: :data:`AXIS_POINTS` per axis, so a 10-run compare stays
small) by averaging buckets of consecutive seconds (max latency keeps each bucket's maximum, so no spike is
lost), and the caption says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from matplotlib.ticker import MaxNLocator, NullLocator

from labcontract.steady import SteadyCriteria, WindowCheck, check_window, fit_line
from orchestrator.cells import CellKey
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.store.models import PreconditionRecord, Result, Step

MAX_POINTS = 600        # per line ...
AXIS_POINTS = 2400      # ... and per axis: a 10-run compare draws 240 per line, not 600 (file size)
MIN_POINTS = 150
# (series column in µs or IOPS, record key in ns or IOPS, axis title, divisor series -> drawn, record -> drawn)
SERIES = (
    ("iops", "iops", "IOPS (read + write)", 1.0, 1.0),
    ("lat_mean_us", "lat_mean_ns", "avg latency (ms)", 1e3, 1e6),
    ("lat_max_us", "lat_max_ns", "max latency (ms)", 1e3, 1e6),
    ("lat_stddev_us", "lat_stddev_ns", "latency stddev (ms)", 1e3, 1e6),
)


@dataclass
class Member:
    """One run's rounds of a group: per round (number, start offset s, duration s, result or None)."""

    view: RunView
    op_mode: str
    record: PreconditionRecord | None
    rounds: list[tuple[int, float, float, Result | None]] = field(default_factory=list)

    def round_values(self) -> list[dict[str, Any]]:
        """Per-round values: the record's (what the verdict judged), else each round's result."""
        if self.record is not None and self.record.rounds:
            return [dict(r) for r in self.record.rounds]
        return [{"round": n, "iops": r.iops, "lat_mean_ns": r.lat_mean_ns, "lat_max_ns": r.lat_max_ns,
                 "lat_stddev_ns": r.lat_stddev_ns} for n, _, _, r in self.rounds if r is not None]

    def mid_minutes(self, round_no: int) -> float | None:
        for n, start, dur, _ in self.rounds:
            if n == round_no:
                return (start + dur / 2) / 60
        return None


@dataclass
class Group:
    key: CellKey
    label: str
    members: list[Member] = field(default_factory=list)


def downsample(ts: Sequence[float], ys: Sequence[float | None], peak: bool,
               limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most ``limit`` points: buckets of consecutive samples, x their mean, y their mean (``peak``: max).
    Missing values (no I/O completed that second) are left out, not drawn as zero."""
    pts = [(t, y) for t, y in zip(ts, ys, strict=False) if y is not None and math.isfinite(y)]
    if len(pts) <= limit:
        return [t for t, _ in pts], [y for _, y in pts]
    size = math.ceil(len(pts) / limit)
    xs, out = [], []
    for i in range(0, len(pts), size):
        chunk = pts[i:i + size]
        xs.append(sum(t for t, _ in chunk) / len(chunk))
        vals = [y for _, y in chunk]
        out.append(max(vals) if peak else sum(vals) / len(vals))
    return xs, out


def groups(ctx: ReportContext) -> list[Group]:
    """The report's precondition groups, same-cell groups of several runs merged, in plan order."""
    found: dict[CellKey, Group] = {}
    for view in ctx.runs:
        records = {r.seq: r for r in view.detail.preconditions}
        by_seq: dict[int, list[Step]] = {}
        for st in view.detail.steps:
            if st.kind == "precondition":
                by_seq.setdefault(st.seq, []).append(st)
        for seq, steps in by_seq.items():
            steps.sort(key=lambda s: s.round)
            first = steps[0]
            wl = first.workload or {}
            ident = tuple((f"workload.{k}", str(wl.get(k))) for k in ("rw", "bs", "rwmixread", "percentage_random"))
            key = ctx.key(first) + ident
            grp = found.setdefault(key, Group(key, ctx.label(first)))
            mem = Member(view, str(first.cell.get("op_mode", "stock")), records.get(seq))
            offset = 0.0
            for st in steps:
                res = view.detail.results.get(st.id)
                if res is None:
                    continue
                ts = (res.series or {}).get("t") or []
                dur = max(float(ts[-1]) if ts else 0.0, res.runtime_ms / 1000)
                mem.rounds.append((st.round, offset, dur, res))
                offset += dur
            if mem.rounds:
                grp.members.append(mem)
    return [g for g in found.values() if g.members]


def _criteria(rec: PreconditionRecord) -> tuple[SteadyCriteria, str]:
    c = rec.criteria or {}
    return (SteadyCriteria(window=int(c.get("window", 5)), max_range_pct=float(c.get("max_range_pct", 20.0)),
                           max_excursion_pct=float(c.get("max_excursion_pct", 10.0))), str(c.get("track", "iops")))


def window_of(mem: Member) -> tuple[WindowCheck, str] | None:
    """The SNIA window to draw: the one that reached steady state, else the last full one; with the track."""
    if mem.record is None:
        return None
    crit, track = _criteria(mem.record)
    rkey = "iops" if track == "iops" else "lat_mean_ns"
    vals = mem.round_values()
    if len(vals) < crit.window:
        return None
    last = mem.record.reached_round if mem.record.steady and mem.record.reached_round else len(vals)
    first = max(1, last - crit.window + 1)
    window = [float(v.get(rkey) or 0.0) for v in vals[first - 1:first - 1 + crit.window]]
    if len(window) != crit.window:
        return None
    return check_window(window, first, crit), track


def _slope(slope: float, divisor: float) -> str:
    return f"{slope:+,.0f} IOPS" if divisor == 1 else f"{slope / divisor:+,.4f} ms"


def _draw_window(ax: Any, mem: Member, chk: WindowCheck, divisor: float, crit_range: float) -> int:
    x0, x1 = mem.mid_minutes(chk.first_round), mem.mid_minutes(chk.last_round)
    if x0 is None or x1 is None:
        return 0
    c = mem.view.colour
    ax.axvspan(x0, x1, color=c, alpha=0.07, linewidth=0)
    mean = chk.mean / divisor
    half = mean * crit_range / 200
    ax.fill_between([x0, x1], [mean - half] * 2, [mean + half] * 2, color=c, alpha=0.15, linewidth=0,
                    label=f"range band ±{crit_range / 2:g}% · {mem.view.id[-6:]}")
    slope, icpt = fit_line(chk.values)
    xs = [mem.mid_minutes(r) for r in range(chk.first_round, chk.last_round + 1)]
    n = len(xs) - 1
    ax.plot([x0, x1], [icpt / divisor, (icpt + slope * n) / divisor], color=c, linewidth=1.6,
            linestyle=(0, (4, 1.5)), label=f"slope {_slope(slope, divisor)}/round · {mem.view.id[-6:]}")
    return 2


def _figure(ctx: ReportContext, gi: int, grp: Group) -> Figure | None:
    points = 0
    rows: list[list[str]] = []
    verdicts: list[str] = []
    n_rounds = sum(len(m.rounds) for m in grp.members)
    fid = f"precondition-{gi}"
    limit = max(MIN_POINTS, min(MAX_POINTS, AXIS_POINTS // len(grp.members)))
    # a fixed layout: the layout engine measured every tick label again and took half the drawing time
    with plot.figure(7.5, 8.4, nrows=4, ncols=1, layout=None) as (fig, grid):
        fig.subplots_adjust(left=0.12, right=0.985, top=0.9, bottom=0.055, hspace=0.12)
        axes = list(grid.flat)
        for mem in grp.members:
            label = mem.view.label(mem.op_mode)
            vals = mem.round_values()
            chk = window_of(mem)
            for ai, (col, rkey, _title, sdiv, rdiv) in enumerate(SERIES):
                ax = axes[ai]
                ts: list[float] = []
                ys: list[float | None] = []
                for _, start, _, res in mem.rounds:
                    s = (res.series if res is not None else None) or {}
                    for t, y in zip(s.get("t") or [], s.get(col) or [], strict=False):
                        ts.append((start + float(t)) / 60)
                        ys.append(None if y is None else float(y) / sdiv)
                xs, yd = downsample(ts, ys, peak=col == "lat_max_us", limit=limit)
                if xs:
                    ax.plot(xs, yd, color=mem.view.colour, linestyle=mem.view.style(mem.op_mode), linewidth=0.8,
                            label=label if ai == 0 else None)
                    points += len(xs)
                rx = [mem.mid_minutes(int(v.get("round", 0))) for v in vals]
                ry = [v.get(rkey) for v in vals]
                dots = [(x, float(y) / rdiv) for x, y in zip(rx, ry, strict=True) if x is not None and y is not None]
                if dots:
                    ax.plot([x for x, _ in dots], [y for _, y in dots], linestyle="none", marker="o", markersize=2.2,
                            color=mem.view.colour, label=(f"per-round value · {mem.view.id[-6:]}"
                                                          if ai == 0 and not xs else None))
                    points += len(dots)
                ax.vlines([start / 60 for _, start, _, _ in mem.rounds[1:]], 0, 1,
                          transform=ax.get_xaxis_transform(), colors=mem.view.colour, linewidth=0.3, alpha=0.35)
                if chk is not None and mem.record is not None and \
                        (chk[1] == "iops") == (rkey == "iops") and rkey in ("iops", "lat_mean_ns"):
                    points += _draw_window(ax, mem, chk[0], rdiv, _criteria(mem.record)[0].max_range_pct)
            for v in vals:
                rows.append([label, str(v.get("round", fmt.MISSING)), fmt.iops(v.get("iops")),
                             fmt.ms(v.get("lat_mean_ns")), fmt.ms(v.get("lat_max_ns")), fmt.ms(v.get("lat_stddev_ns"))])
            rec = mem.record
            verdict = (rec.verdict or ("running" if rec.steady is None else fmt.MISSING)) if rec else "no record"
            verdicts.append(f"{label}: {verdict}")
        if not points:
            return None
        for ax, (_, _, title, _, _) in zip(axes, SERIES, strict=True):
            ax.set_ylabel(title)
            ax.set_ylim(bottom=0)
            ax.yaxis.set_major_locator(MaxNLocator(4))    # ticks are most of a figure's drawing time
        # x ticks only on the bottom axes (not shared: sharing shares the locator too); the others take its range
        axes[-1].xaxis.set_major_locator(MaxNLocator(8))
        lo, hi = min(ax.get_xlim()[0] for ax in axes), max(ax.get_xlim()[1] for ax in axes)
        for ax in axes:
            ax.set_xlim(lo, hi)
        for ax in axes[:-1]:
            ax.xaxis.set_major_locator(NullLocator())
        handles = [h for ax in axes for h in ax.get_legend_handles_labels()[0]]
        # one legend above the top axis (runs, then each run's window band and slope): never on a curve
        axes[0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=2, fontsize=6.5)
        axes[-1].set_xlabel("time since the group's first round (minutes)")
        svg = plot.to_svg(fig, fid)
    return Figure("precondition", fid, f"Preconditioning {grp.label}", svg,
                  Table(["run", "round", "IOPS", "avg lat (ms)", "max lat (ms)", "stddev (ms)"], rows),
                  f"n = {ctx.n_runs()}, {n_rounds} round" + ("s" if n_rounds != 1 else ""), points,
                  f"Per-second series of every round, concatenated (lines, at most {limit} points each: "
                  f"buckets of seconds averaged, max latency keeps each bucket's maximum); dots and table: "
                  f"per-round values; shaded: the SNIA window with its range band and least-squares line on the "
                  f"tracked metric. Verdict — " + "; ".join(verdicts))


class PreconditionChart:
    name = "precondition"
    title = "Preconditioning to steady state"
    order = 10

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # four axes per group: each figure is built in a worker of its own (htmlreport.model.FigureItem)
        return [functools.partial(_figure, ctx, i, grp) for i, grp in enumerate(groups(ctx))]


register(PreconditionChart())
