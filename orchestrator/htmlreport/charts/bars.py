"""Bar charts of the reviews' fixed points, recognised by workload (rw, bs, rwmixread, numjobs, iodepth,
percentage_random) and never by profile name, so a user suite measuring the same workloads gets the same charts:

* 4K random at 16T16Q, read 100% and write 100%: IOPS, average, max and stddev latency (ms);
* 4K random at 1T1Q, read and write: average latency (µs when every bar is under 1 ms) and IOPS;
* sequential 8K and 128K, read and write, any TxQ: bandwidth in MB/s, or GB/s when a bar reaches 1 GB/s;
* everything else measured that neither these nor the TxQ ladder charts draw: IOPS and MB/s per cell
  ("all measured cells"), so every run kind gets a chart. A profile of more than :data:`MAX_FALLBACK` cells
  (the 125-pattern sweep) is left to the heat map: 125 bars per run are not readable.

Bars are horizontal, grouped per workload (the y label), one bar per run x OP mode (colour per run, hatch per
mode), sorted within a group best first (highest IOPS / bandwidth, lowest latency) and labelled with the value,
so the rank reads at once; the table beneath lists the same bars in the same order with their rank.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.charts.scaling import REVIEW_METRICS, ladder_step_ids, op_mode_of, tq
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.htmlreport.plot import text_width
from orchestrator.store.models import Result, Step

MAX_FALLBACK = 40
MIXED = ("randrw", "rw", "readwrite")


@dataclass(frozen=True)
class Bar:
    category: str
    view: RunView
    op_mode: str
    raw: float          # store units (IOPS, ns, bytes/s)


def _wl(step: Step) -> dict[str, object]:
    return step.workload or {}


def is_random(step: Step) -> bool:
    wl = _wl(step)
    pr = wl.get("percentage_random")
    return pr == 100 or (str(wl.get("rw", "")).startswith("rand") and pr in (None, 100))


def is_sequential(step: Step) -> bool:
    wl = _wl(step)
    pr = wl.get("percentage_random")
    return pr == 0 or (wl.get("rw") in ("read", "write", "rw", "readwrite") and pr in (None, 0))


def direction(step: Step) -> str | None:
    """``read`` / ``write`` for a 100% read / write workload, else None (mixed)."""
    wl = _wl(step)
    rw, mix = wl.get("rw"), wl.get("rwmixread")
    if rw in ("read", "randread") or (rw in MIXED and mix == 100):
        return "read"
    if rw in ("write", "randwrite") or (rw in MIXED and mix == 0):
        return "write"
    return None


def collect(ctx: ReportContext, match: Callable[[Step], bool],
            value: Callable[[Result], float | None]) -> list[Bar]:
    """A bar per measured step ``match`` takes, in plan order, grouped by the cell's name (``ctx.label``)."""
    out = []
    for view in ctx.runs:
        for st, res in view.measured():
            v = value(res) if match(st) else None
            if v is not None:
                out.append(Bar(ctx.label(st), view, op_mode_of(st), v))
    return out


def bar_figure(ctx: ReportContext, fid: str, title: str, axis: str, bars: list[Bar], scale: float,
               text: Callable[[float | None], str], higher_better: bool, caption: str) -> Figure | None:
    """Horizontal bars, grouped by category, best first in each group, each labelled with its table value."""
    if not bars:
        return None
    cats = list(dict.fromkeys(b.category for b in bars))
    ordered = [b for c in cats for b in sorted((b for b in bars if b.category == c),
                                                 key=lambda b: -b.raw if higher_better else b.raw)]
    ys, ticks = plot.grouped_rows([b.category for b in ordered], cats)
    rows: list[list[str]] = []
    rank, prev = 0, None
    legend_h = plot.legend_height(len({b.view.label(b.op_mode) for b in ordered}))
    with plot.figure(7.5, 0.7 + legend_h + 0.24 * len(ordered) + 0.12 * len(cats), layout=None) as (fig, ax):
        plot.margins(fig, left=max(text_width(c) for c in cats) + 0.45, bottom=0.5, top=legend_h + 0.06)
        seen: set[str] = set()
        for yy, b in zip(ys, ordered, strict=True):
            lab = b.view.label(b.op_mode)
            cont = ax.barh([yy], [b.raw / scale], height=0.85, color=b.view.colour, hatch=b.view.hatch(b.op_mode),
                           edgecolor="white", linewidth=0.4, label=None if lab in seen else lab)
            seen.add(lab)
            ax.bar_label(cont, labels=[text(b.raw)], padding=2, fontsize=7)
            rank = 1 if b.category != prev else rank + 1
            prev = b.category
            rows.append([b.category, lab, str(rank), text(b.raw)])
        ax.set_yticks(ticks, cats)
        ax.invert_yaxis()
        ax.set_xlabel(axis)
        ax.set_ylabel("workload")
        ax.set_xlim(0, max(b.raw / scale for b in ordered) * 1.18 or 1)
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=7)   # above the bars: never on one
        svg = plot.to_svg(fig, fid)
    return Figure("bars", fid, title, svg, Table(["workload", "run", "rank", axis], rows),
                  f"n = {ctx.n_runs()}, {len(cats)} workload" + ("s" if len(cats) != 1 else "") +
                  f", {len(ordered)} bars", len(ordered), caption)


def _random_at(bs: int, t: int, q: int) -> Callable[[Step], bool]:
    def match(st: Step) -> bool:
        return _wl(st).get("bs") == bs and tq(st) == (t, q) and is_random(st) and direction(st) is not None
    return match


def _sequential(st: Step) -> bool:
    return _wl(st).get("bs") in (8192, 131072) and is_sequential(st) and direction(st) is not None


def _latency_unit(bars: Iterable[Bar]) -> tuple[float, Callable[[float | None], str], str]:
    return (1e3, fmt.us, "µs") if all(b.raw < 1e6 for b in bars) else (1e6, fmt.ms, "ms")


class BarsChart:
    name = "bars"
    title = "Fixed-point bars: 4K random, low queue depth, sequential"
    order = 30

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        out: list[FigureItem] = []
        covered: set[str] = set(ladder_step_ids(ctx))
        for bs, t, q, tag in ((4096, 16, 16, "4k-16t16q"), (4096, 1, 1, "4k-1t1q")):
            match = _random_at(bs, t, q)
            covered |= {st.id for v in ctx.runs for st, _ in v.measured() if match(st)}
            metrics = REVIEW_METRICS if tag == "4k-16t16q" else (REVIEW_METRICS[1], REVIEW_METRICS[0])
            for m in metrics:
                bars = collect(ctx, match, m.raw)
                scale, text, axis = m.scale, m.text, m.axis
                if m.key != "iops" and tag == "4k-1t1q" and bars:
                    scale, text, unit = _latency_unit(bars)
                    axis = f"average latency ({unit})"
                out.append(functools.partial(
                    bar_figure, ctx, f"bars-{tag}-{m.key}", f"4K random {t}T{q}Q: {m.title}", axis, bars, scale, text,
                    m.key == "iops", f"{m.title} of the 100% read and 100% write 4K random cells at {t}T{q}Q "
                    "(the result over the cell's runtime), best first."))
        covered |= {st.id for v in ctx.runs for st, _ in v.measured() if _sequential(st)}
        seq = collect(ctx, _sequential, lambda r: r.bw_bytes)
        gb = any(b.raw >= 1e9 for b in seq)
        out.append(functools.partial(bar_figure, ctx, "bars-seq-bw", "Sequential 8K / 128K bandwidth",
                              "bandwidth (GB/s)" if gb else "bandwidth (MB/s)", seq, 1e9 if gb else 1e6,
                              fmt.gbs if gb else fmt.mbs, True,
                              "Read + write bandwidth of the sequential 8K and 128K cells (decimal units), "
                              "best first."))
        out.extend(self._fallback(ctx, covered))
        return out

    def _fallback(self, ctx: ReportContext, covered: set[str]) -> list[FigureItem]:
        per_profile: dict[str, set[str]] = {}
        names: dict[str, str] = {}
        for v in ctx.runs:
            for st, _ in v.measured():
                if st.id not in covered:
                    label = ctx.label(st)
                    names[st.id] = label
                    per_profile.setdefault(str(st.cell.get("profile", "")), set()).add(label)
        keep = {st for st, lab in names.items()
                if any(lab in labs and len(labs) <= MAX_FALLBACK for labs in per_profile.values())}
        if not keep:
            return []

        def match(st: Step) -> bool:
            return st.id in keep

        iops = collect(ctx, match, lambda r: r.iops)
        bw = collect(ctx, match, lambda r: r.bw_bytes)
        gb = any(b.raw >= 1e9 for b in bw)
        cap = "of every measured cell no chart above draws (result over the cell's runtime), best first."
        return [functools.partial(bar_figure, ctx, "bars-all-iops", "All measured cells: IOPS",
                                  "IOPS (read + write)", iops, 1.0, fmt.iops, True, f"IOPS {cap}"),
                functools.partial(bar_figure, ctx, "bars-all-bw", "All measured cells: bandwidth",
                           "bandwidth (GB/s)" if gb else "bandwidth (MB/s)", bw, 1e9 if gb else 1e6,
                           fmt.gbs if gb else fmt.mbs, True, f"Read + write bandwidth {cap}")]


register(BarsChart())
