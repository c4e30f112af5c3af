"""SNIA PTS-E's report pages for a rounds run (:mod:`labcontract.rounds`; the built-in ``snia-iops``,
``snia-throughput``, ``snia-throughput-1m`` and ``snia-latency``), per run and OP mode, laid out as the
specification lays them out:

- **steady-state convergence**: the tracked figure of every round, one line per block size of the tracked cell's
  mix (or per cell when the matrix has no block-size dimension), the reported window shaded;
- **steady-state measurement window**: the tracked cell over the window with its mean, the 90%/110% lines and the
  least-squares line (the rule of :mod:`labcontract.steady`), the verdict in the caption;
- **the matrix**: each cell's figure as the mean over the window's rounds -- IOPS (IOPS test), MB/s (throughput),
  average latency and, beside it, maximum latency (the largest of the window's rounds) for the latency test --
  in a table of block size x read/write mix and a plot of the figure against the block size, a line per mix.

Built from the run's results (the window's; the earlier rounds' for the convergence plot) and its rounds record.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from matplotlib.ticker import MaxNLocator

from labcontract.rounds import round_of, track_key
from labcontract.steady import SteadyCriteria, check_window, fit_line
from orchestrator.cells import size_label
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import PALETTE, Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.queries import round_windows
from orchestrator.store.models import PreconditionRecord, Result, Step

_TRACK_TITLE = {"iops": "IOPS", "bw": "MB/s", "lat_mean": "average latency (µs)"}
NUM = {"iops": "{:,.0f}", "bw": "{:,.1f}", "lat_mean": "{:,.1f}"}


@dataclass
class Matrix:
    """One run x OP mode of a rounds run: its cells' results by round, the record, the window."""

    view: RunView
    op_mode: str
    record: PreconditionRecord
    window: range
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)        # cell name -> dims
    by_round: dict[str, dict[int, Result]] = field(default_factory=dict)  # cell name -> round -> result

    @property
    def track(self) -> str:
        return str(self.record.criteria.get("track", "iops"))

    @property
    def tracked(self) -> str:
        return str(self.record.criteria.get("cell_name", ""))

    @property
    def label(self) -> str:
        return self.view.label(self.op_mode)


def figure_of(res: Result, track: str) -> float | None:
    """A round's figure as the report prints it: IOPS, MB/s or average latency in µs."""
    v = {"iops": res.iops, "bw": res.bw_bytes, "lat_mean": res.lat_mean_ns}[track]
    if v is None or not math.isfinite(v):
        return None
    return v / 1e6 if track == "bw" else v / 1000 if track == "lat_mean" else v


def matrices(ctx: ReportContext) -> list[Matrix]:
    out = []
    for view in ctx.runs:
        d = view.detail
        windows = round_windows(d.preconditions)
        records = [r for r in d.preconditions if (r.criteria or {}).get("form") == "rounds"]
        for rec in records:
            mode = str(rec.criteria.get("op_mode", "stock"))
            m = Matrix(view, mode, rec, windows.get(mode) or range(0))
            for st in d.steps:
                r = round_of(st.cell)
                res = d.results.get(st.id) or d.earlier_rounds.get(st.id)
                if st.kind != "measure" or r is None or str(st.cell.get("op_mode", "stock")) != mode or res is None:
                    continue
                name = _cell_name(st)
                dims = {k: v for k, v in st.cell.items() if k not in ("op_mode", "profile", "round")}
                m.cells.setdefault(name, {"bs": (st.workload or {}).get("bs"), **dims})   # a fixed bs: its row
                m.by_round.setdefault(name, {})[r] = res
            if m.by_round:
                out.append(m)
    return out


def _cell_name(st: Step) -> str:
    return st.name.rsplit(".round", 1)[0]


def _columns(m: Matrix) -> tuple[list[str], list[Any], dict[str, tuple[str, Any]]]:
    """The matrix's columns (the cells' dims but the block size: ``R/W 65/35``), its rows (block sizes, largest
    first) and each cell's place."""
    place: dict[str, tuple[str, Any]] = {}
    for name, dims in m.cells.items():
        rest = {k: v for k, v in dims.items() if k != "bs"}
        col = " ".join(_dim_text(k, v) for k, v in rest.items()) or "all"
        place[name] = (col, dims.get("bs"))
    cols = list(dict.fromkeys(c for c, _ in place.values()))
    rows = sorted(dict.fromkeys(b for _, b in place.values()), key=lambda b: -int(b) if isinstance(b, int) else 0)
    return cols, rows, place


def _dim_text(key: str, value: Any) -> str:
    if key == "rwmixread":
        return f"R/W {value}/{100 - int(value)}"
    return f"{value}" if key == "rw" else f"{key}={value}"


def _window_values(m: Matrix, name: str, track: str) -> list[float]:
    return [v for r, res in sorted(m.by_round.get(name, {}).items()) if r in m.window
            and (v := figure_of(res, track)) is not None]


def _matrix_figure(ctx: ReportContext, m: Matrix, n: int, track: str, peak: bool = False) -> Figure | None:
    """The matrix of window means (``peak``: the largest maximum latency of the window's rounds)."""
    cols, rows, place = _columns(m)
    value: dict[tuple[str, Any], float] = {}
    for name, where in place.items():
        if peak:
            maxima = [res.lat_max_ns / 1000 for r, res in m.by_round.get(name, {}).items()
                      if r in m.window and res.lat_max_ns is not None]
            if maxima:
                value[where] = max(maxima)
        elif vals := _window_values(m, name, track):
            value[where] = sum(vals) / len(vals)
    if not value:
        return None
    what = "maximum latency (µs)" if peak else _TRACK_TITLE[track]
    num = "{:,.1f}" if peak else NUM[track]
    table = Table(["block size", *cols], [[size_label(b), *(num.format(value[(c, b)]) if (c, b) in value else "-"
                                                           for c in cols)] for b in rows])
    with plot.figure(7.5, 3.4 + plot.legend_height(len(cols), ncol=4), layout="tight") as (fig, ax):
        for i, col in enumerate(cols):
            pts = [(int(b), value[(col, b)]) for b in rows if (col, b) in value and isinstance(b, int)]
            if pts:
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1.1,
                        color=PALETTE[i % len(PALETTE)], label=col)
        if all(isinstance(b, int) for b in rows) and len(rows) > 1:
            ax.set_xscale("log", base=2)
            ax.set_xticks([int(b) for b in rows], [size_label(b) for b in rows])
        ax.set_xlabel("block size")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7, ncol=4)
        fid = f"pts-{n}-{'max' if peak else track}"
        svg = plot.to_svg(fig, fid)
    rounds = f"rounds {m.window.start}-{m.window.stop - 1}" if m.window else "no round"
    how = "the largest of the window's rounds" if peak else "the mean over the steady-state window"
    return Figure("pts", fid, f"{m.label}: {what} by block size and read/write mix ({rounds})", svg, table,
                  f"n = {len(value)} cells, {len(m.window)} rounds", len(value),
                  f"Each cell's {what}: {how} ({rounds}); {m.record.verdict}")


def _convergence_figure(ctx: ReportContext, m: Matrix, n: int) -> Figure | None:
    """The tracked figure per round: the tracked cell's mix at every block size (the specification's plot)."""
    track, tracked = m.track, m.tracked
    cols, _rows, place = _columns(m)
    col = place.get(tracked, ("", None))[0]
    names = [name for name, (c, _b) in place.items() if c == col] if len(cols) > 1 else list(place)
    rows: list[list[str]] = []
    drawn = 0
    with plot.figure(7.5, 3.4 + plot.legend_height(len(names), ncol=4), layout="tight") as (fig, ax):
        for i, name in enumerate(names):
            pts = [(r, v) for r, res in sorted(m.by_round[name].items()) if (v := figure_of(res, track)) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1.1,
                    color=PALETTE[i % len(PALETTE)], label=name + (" (tracked)" if name == tracked else ""))
            rows += [[name, str(r), (NUM[track]).format(v)] for r, v in pts]
            drawn += len(pts)
        if not drawn:
            return None
        if m.window:
            ax.axvspan(m.window.start - 0.5, m.window.stop - 0.5, color="#2ca02c", alpha=0.08, label="window")
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(_TRACK_TITLE[track])
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7, ncol=4)
        fid = f"pts-{n}-convergence"
        svg = plot.to_svg(fig, fid)
    return Figure("pts", fid, f"{m.label}: steady-state convergence ({_TRACK_TITLE[track]} per round)", svg,
                  Table(["cell", "round", _TRACK_TITLE[track]], rows), f"n = {drawn} rounds of {len(names)} cells",
                  drawn, f"The tracked figure of every round; the shaded rounds are the reported window. "
                         f"{m.record.verdict}")


def _window_figure(ctx: ReportContext, m: Matrix, n: int) -> Figure | None:
    """The tracked cell over the window: its values, their mean, 90% and 110% of it and the least-squares line."""
    track = m.track
    key = track_key(track)
    scale = 1e6 if track == "bw" else 1000 if track == "lat_mean" else 1
    vals = [(int(r["round"]), float(r[key]) / scale) for r in m.record.rounds
            if int(r.get("round") or 0) in m.window and r.get(key) is not None]
    if len(vals) < 2:
        return None
    c = m.record.criteria
    crit = SteadyCriteria(window=len(vals), max_range_pct=float(c.get("max_range_pct", 20.0)),
                          max_excursion_pct=float(c.get("max_excursion_pct", 10.0)))
    chk = check_window([v for _, v in vals], vals[0][0], crit)
    slope, intercept = fit_line([v for _, v in vals])
    xs = [r for r, _ in vals]
    with plot.figure(7.5, 3.6, layout="tight") as (fig, ax):
        ax.plot(xs, [v for _, v in vals], marker="o", markersize=4, linewidth=1.2, color="#1f77b4",
                label=m.tracked)
        ax.axhline(chk.mean, color="#333333", linewidth=1, label=f"mean {chk.mean:,.1f}")
        for f in (1.1, 0.9):
            ax.axhline(chk.mean * f, color="#999999", linewidth=0.8, linestyle="--",
                       label="110% / 90% of the mean" if f > 1 else None)
        ax.plot(xs, [intercept + slope * i for i in range(len(xs))], color="#d62728", linewidth=1, linestyle=":",
                label="least-squares line")
        ax.set_xticks(xs)
        ax.set_xlabel("round")
        ax.set_ylabel(_TRACK_TITLE[track])
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7, ncol=4)
        fid = f"pts-{n}-window"
        svg = plot.to_svg(fig, fid)
    rows = [[str(r), NUM[track].format(v)] for r, v in vals]
    return Figure("pts", fid, f"{m.label}: steady-state measurement window ({m.tracked})", svg,
                  Table(["round", _TRACK_TITLE[track]], rows), f"n = {len(vals)} rounds", len(vals),
                  f"range {chk.range_pct:.1f}% and excursion {chk.excursion_pct:.1f}% of the mean "
                  f"(limits {crit.max_range_pct:g}% and {crit.max_excursion_pct:g}%). "
                  f"{m.record.verdict}")


class PtsChart:
    name = "pts"
    title = "SNIA PTS-E: steady state and the test matrix"
    order = 23

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        out: list[FigureItem] = []
        for i, m in enumerate(matrices(ctx)):
            out += [functools.partial(_convergence_figure, ctx, m, i), functools.partial(_window_figure, ctx, m, i),
                    functools.partial(_matrix_figure, ctx, m, i, m.track)]
            if m.track == "lat_mean":
                out.append(functools.partial(_matrix_figure, ctx, m, i, m.track, True))
        return out


register(PtsChart())
