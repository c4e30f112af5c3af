"""Latency distribution: exceedance curves from the merged fio json+ histogram (``Result.lat_hist``).

x = total latency (log scale, µs, or ms when a figure reaches 1 ms), y = the fraction of I/Os slower than x
(log scale, down to 1e-6): the tail a reviewer reads as "1 in 10,000 I/Os took over 2 ms". The curve is drawn
from the merged read + write bins; the table beneath gives p50, p90, p99, p99.9, p99.99, p99.999 (where 10 I/Os lie
beyond it) and the largest bin per direction (read, write, read + write), for the total latency and, beside it, the
completion latency (fio's ``clat``, from its own bins, ``lat_hist["clat"]``; results stored before it have none),
computed from the bins with
:func:`labcontract.fioresult.percentiles_from_bins`, so they equal what fio reports.

Which cells: one figure per profile, its cells overlaid, one line per run x cell. A profile with more lines
than :data:`MAX_LINES` (the 125-pattern sweep has 125 cells) is cut to its extremes: the cells with the lowest
and the highest p99 (half each, at least one of each), ranked by the worst p99 over the runs, and the caption
says how many were left out. ``ctx.options["latency_cells"]`` (``labctl report --latency-cell``) names cells
instead, comma-separated, each a cell name (``8k-7030.t16.q16``) or a key label (``8k-7030 iodepth=16
numjobs=16``); then only those are drawn.

Device groups: for a result whose histogram holds ``per_device`` bins of two devices or more, a second figure
per profile draws the drawn cell with the worst p99 (every named cell with ``latency_cells``) per device.

Results stored without a histogram (before migration 0009) fall back to fio's reported percentiles
(``metrics["combined"]["percentiles_ns"]``) drawn as points, which the caption says; nothing at all: no figure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from labcontract.fioresult import TAIL_BEYOND, percentiles_from_bins
from orchestrator.cells import CellKey, cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import (
    MODE_STYLES,
    PALETTE,
    Figure,
    FigureItem,
    ReportContext,
    RunView,
    Table,
    register,
)
from orchestrator.store.models import Result, Step

MAX_LINES = 8
MIN_FRACTION = 1e-6
POINTS = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999)
HEADERS = ["p50", "p90", "p99", "p99.9", "p99.99", "p99.999", "max"]
# a percentile is shown only when the histogram holds enough I/Os for it: at least 10 beyond it (p99.999: 1,000,000
# I/Os); below that it would be the largest few samples, which "max" already says (the rule of the stored figures)
BEYOND = TAIL_BEYOND
Bins = dict[int, int]


def bins_of(pairs: Any) -> Bins:
    """``[[ns, count], ...]`` (as stored) to a histogram; malformed pairs are skipped, not guessed."""
    out: Bins = {}
    for pair in pairs or []:
        if isinstance(pair, list | tuple) and len(pair) == 2:
            ns, count = int(pair[0]), int(pair[1])
            if count > 0:
                out[ns] = out.get(ns, 0) + count
    return out


def merge(*hists: Bins) -> Bins:
    out: Bins = {}
    for h in hists:
        for ns, c in h.items():
            out[ns] = out.get(ns, 0) + c
    return out


def exceedance(bins: Bins) -> tuple[list[float], list[float]]:
    """(latency ns, fraction of I/Os slower than it) per bin, down to :data:`MIN_FRACTION`."""
    total = sum(bins.values())
    xs, ys, cum = [], [], 0
    for ns in sorted(bins):
        cum += bins[ns]
        frac = (total - cum) / total
        if frac < MIN_FRACTION:
            break
        xs.append(float(ns))
        ys.append(frac)
    return xs, ys


def stats(bins: Bins) -> list[float | None]:
    """p50 … p99.999 and the largest bin (ns), by fio's percentile rule; a percentile the histogram has fewer than
    :data:`BEYOND` I/Os beyond is None (shown as "-")."""
    if not bins:
        return [None] * len(HEADERS)
    total = sum(bins.values())
    p = percentiles_from_bins(bins, POINTS)
    return [*(p.get(f"p{x:g}") if total * (100.0 - x) / 100.0 >= BEYOND else None for x in POINTS),
            float(max(bins))]


@dataclass(frozen=True)
class Entry:
    """One run's result for one cell: its histograms per direction (None: none stored)."""

    view: RunView
    step: Step
    key: CellKey
    res: Result
    hist: dict[str, Bins] | None          # read, write, total
    devices: dict[str, Bins]              # device path -> read + write bins
    clat: dict[str, Bins] | None = None   # completion latency's read, write, total (None: not stored)

    @property
    def op_mode(self) -> str:
        return str(self.step.cell.get("op_mode", "stock"))

    def reported(self) -> dict[str, dict[str, float]]:
        """fio's reported percentiles (ns) per direction, for a result without bins."""
        m: Mapping[str, Any] = self.res.metrics or {}
        out = {"read + write": dict((m.get("combined") or {}).get("percentiles_ns") or {})}
        for d in ("read", "write"):
            out[d] = dict(((m.get(d) or {}).get("lat") or {}).get("percentiles_ns") or {})
        return out

    def p99(self) -> float:
        if self.hist is not None:
            return percentiles_from_bins(self.hist["total"], (99.0,)).get("p99", 0.0)
        return float(self.reported()["read + write"].get("p99") or self.res.lat_p99_ns or 0.0)


def _entry(view: RunView, ctx: ReportContext, st: Step, res: Result) -> Entry | None:
    raw = res.lat_hist
    hist = clat = None
    devices: dict[str, Bins] = {}
    if isinstance(raw, dict):
        r, w = bins_of(raw.get("read")), bins_of(raw.get("write"))
        hist = {"read": r, "write": w, "total": merge(r, w)} if r or w else None
        for path, d in (raw.get("per_device") or {}).items():
            b = merge(bins_of((d or {}).get("read")), bins_of((d or {}).get("write")))
            if b:
                devices[str(path)] = b
        c = raw.get("clat")
        if isinstance(c, dict):
            cr, cw = bins_of(c.get("read")), bins_of(c.get("write"))
            clat = {"read": cr, "write": cw, "total": merge(cr, cw)} if cr or cw else None
    e = Entry(view, st, ctx.key(st), res, hist, devices, clat if isinstance(raw, dict) else None)
    return e if hist is not None or any(e.reported().values()) else None


def _selected(ctx: ReportContext, entries: list[Entry]) -> tuple[list[CellKey], int]:
    """The cells a profile's figure draws (plan order) and how many were left out."""
    keys = list(dict.fromkeys(e.key for e in entries))
    wanted = {w.strip() for w in ctx.options.get("latency_cells", "").split(",") if w.strip()}
    if wanted:
        hit = [k for k in keys if any(e.key == k and (e.step.name in wanted or ctx.name(k) in wanted or
                                                      cell_label(e.step.cell, e.step.workload,
                                                                 with_op_mode=True) in wanted)
                                      for e in entries)]
        return hit, len(keys) - len(hit)
    runs = len({e.view.index for e in entries})
    if len(keys) * runs <= MAX_LINES:
        return keys, 0
    worst = {k: max(e.p99() for e in entries if e.key == k) for k in keys}
    ranked = sorted(keys, key=lambda k: worst[k])
    n = max(2, MAX_LINES // runs)
    chosen = set(ranked[:(n + 1) // 2] + ranked[-(n // 2):])
    return [k for k in keys if k in chosen], len(keys) - len(chosen)


def _plain(v: float, _pos: int | None = None) -> str:
    return f"{v:g}"


def _log_axes(ax: Any) -> None:
    """Log scales with plain decade labels ("0.001", "100") and unlabelled minor ticks: mathtext labels
    ("$10^{-3}$") cost most of a figure's drawing time and render as tiny text runs in the SVG."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, numticks=12))
        axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_minor_locator(NullLocator())


def _unit(max_ns: float) -> tuple[float, Callable[[float | None], str], str]:
    return (1e3, fmt.us, "µs") if max_ns < 1e6 else (1e6, fmt.ms, "ms")


@dataclass(frozen=True)
class Line:
    label: str
    colour: str
    style: str
    bins: Bins | None                   # a curve from the histogram ...
    reported: dict[str, float] | None   # ... or fio's reported percentiles ("p99" -> ns) as points

    def top(self) -> float:
        if self.bins:
            return float(max(self.bins))
        return max((float(v) for v in (self.reported or {}).values()), default=0.0)


def _draw(fid: str, title: str, lines: Sequence[Line], rows: list[list[Any]], caption: str,
          n: str) -> Figure | None:
    """An exceedance figure; rows: [run, cell, direction, latency (total / completion), ns values of HEADERS]."""
    top = max((ln.top() for ln in lines), default=0.0)
    if top <= 0:
        return None
    scale, text, unit = _unit(top)
    points = 0
    legend_h = plot.legend_height(len(lines), fontsize=6.5)
    with plot.figure(7.5, 3.2 + legend_h, layout=None) as (fig, ax):
        plot.margins(fig, left=0.8, bottom=0.55, top=legend_h + 0.06)
        for ln in lines:
            if ln.bins:
                xs, ys = exceedance(ln.bins)
                if xs:
                    ax.step([x / scale for x in xs], ys, where="post", color=ln.colour, linestyle=ln.style,
                            linewidth=1.0, label=ln.label)
                    points += len(xs)
            elif ln.reported:
                pts = sorted((float(v), 1 - float(k[1:]) / 100) for k, v in ln.reported.items())
                pts = [(x, y) for x, y in pts if y >= MIN_FRACTION]
                ax.plot([x / scale for x, _ in pts], [y for _, y in pts], color=ln.colour, linestyle=":",
                        marker="o", markersize=3, linewidth=0.8, label=f"{ln.label} (fio percentiles)")
                points += len(pts)
        if not points:
            return None
        _log_axes(ax)
        ax.set_ylim(MIN_FRACTION, 1.2)
        ax.set_xlabel(f"total latency ({unit}, log scale)")
        ax.set_ylabel("fraction of I/Os slower (log scale)")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=6.5)   # above the plot: never on a curve
        svg = plot.to_svg(fig, fid)
    table = Table(["run", "cell", "direction", "latency", *(f"{h} ({unit})" for h in HEADERS)],
                  [[str(r[0]), str(r[1]), str(r[2]), str(r[3]), *(text(v) for v in r[4:])] for r in rows])
    return Figure("latency", fid, title, svg, table, n, points, caption)


def _rows(e: Entry, cell: str) -> list[list[Any]]:
    """The table rows of a cell's entry (``cell``: its name, ``ReportContext.name``)."""
    out: list[list[Any]] = []
    label = e.view.label(e.op_mode)
    if e.hist is not None:
        for d, k in (("read", "read"), ("write", "write"), ("read + write", "total")):
            if e.hist[k]:
                out.append([label, cell, d, "total", *stats(e.hist[k])])
            if e.clat is not None and e.clat[k]:
                out.append([label, cell, d, "completion", *stats(e.clat[k])])
        return out
    m: Mapping[str, Any] = e.res.metrics or {}
    for d, p in e.reported().items():
        if p:
            mx = (m.get("combined") or {}).get("lat_max_ns") if d == "read + write" else \
                (((m.get(d) or {}).get("lat") or {}).get("max_ns"))
            out.append([label, cell, f"{d} (fio)", "total", *(p.get(f"p{x:g}") for x in POINTS), mx])
    return out


class LatencyChart:
    name = "latency"
    title = "Latency distribution"
    order = 60

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        by_profile: dict[str, list[Entry]] = {}
        for view in ctx.runs:
            for st, res in view.measured():
                e = _entry(view, ctx, st, res)
                if e is not None:
                    by_profile.setdefault(str(st.cell.get("profile", "")), []).append(e)
        out: list[FigureItem] = []
        for pi, (profile, entries) in enumerate(by_profile.items()):
            keys, left = _selected(ctx, entries)
            drawn = [e for k in keys for e in entries if e.key == k]
            if not drawn:
                continue
            fallback = any(e.hist is None for e in drawn)
            one_run = len(ctx.runs) == 1       # then a colour per cell, else per run (and a line style per cell)
            lines = [Line(f"{ctx.name(e.key)} · {e.view.label(e.op_mode)}",
                          PALETTE[keys.index(e.key) % len(PALETTE)] if one_run else e.view.colour,
                          MODE_STYLES[keys.index(e.key) % len(MODE_STYLES)] if len(keys) > 1
                          else e.view.style(e.op_mode),
                          e.hist["total"] if e.hist is not None else None,
                          None if e.hist is not None else e.reported()["read + write"]) for e in drawn]
            cap = ("Fraction of I/Os slower than each latency, from fio's json+ total-latency histogram (submission + "
                   "completion) merged over the step's jobs and both directions; table: percentiles by fio's rule "
                   "from the same bins, and the completion latency (fio's clat, its own bins) beside the total.")
            if fallback:
                cap += " Dotted points: a result stored without histogram, fio's reported percentiles."
            if left:
                cap += (f" {left} other cell(s) of {profile} left out: the lowest and highest p99 are drawn "
                        f"(--latency-cell names others).")
            out.append(functools.partial(_draw, f"latency-{pi}", f"Latency distribution: {profile}", lines,
                             [r for e in drawn for r in _rows(e, ctx.name(e.key))], cap,
                             f"n = {ctx.n_runs()}, {len(keys)} cell" + ("s" if len(keys) != 1 else "")))
            grouped = [e for e in drawn if len(e.devices) > 1]
            if grouped:
                out.append(functools.partial(self._per_device, ctx, pi, profile, grouped))
        return out

    def _per_device(self, ctx: ReportContext, pi: int, profile: str, entries: list[Entry]) -> Figure | None:
        if not ctx.options.get("latency_cells"):
            worst = max(entries, key=lambda e: e.p99()).key
            entries = [e for e in entries if e.key == worst]
        lines: list[Line] = []
        rows: list[list[Any]] = []
        for e in entries:
            for di, (path, b) in enumerate(sorted(e.devices.items())):
                lab = f"{path} · {ctx.name(e.key)} · {e.view.label(e.op_mode)}"
                lines.append(Line(lab, e.view.colour, MODE_STYLES[di % len(MODE_STYLES)], b, None))
                rows.append([e.view.label(e.op_mode), f"{ctx.name(e.key)} {path}", "read + write", "total", *stats(b)])
        n_dev = len({p for e in entries for p in e.devices})
        return _draw(f"latency-{pi}-devices", f"Latency distribution per device: {profile}", lines, rows,
                     "Per device of the group (its own fio job's json+ histogram, read + write), the cell with the "
                     "worst p99 unless --latency-cell names cells; line style per device, colour per run.",
                     f"n = {ctx.n_runs()}, {n_dev} devices")


register(LatencyChart())
