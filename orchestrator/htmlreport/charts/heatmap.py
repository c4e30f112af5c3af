"""The 125-pattern heat map (methodology §5): throughput per read share x block size x random share.

Recognised generically, not by suite name: a grid is the measured cells of one run that share everything
but (block size, read %, random %) — one profile under one OP mode, or one MTU x path mode of a network run —
when at least 8 of them vary at least two of those three dims. The three values come from the step's cell,
else its workload (``rw=read`` is read 100 %, sequential is random 0 %), so user suites get the chart too.

Layout: one panel per random share (100 % first), block size across, read share down (100 % on top), the
value printed in each cell, one colour scale for all panels whose ticks read in both units ("100 (0.80
Gbps)"; the table has both). A storage run shows MB/s in the cells (Result.bw_bytes); a network run shows
the initiator-side Gbps of the cell's window (NetGroup.total), the target-side Gbps in the table.
Performance: all panels are ONE ``imshow`` of the composed matrix in one axes (no layout engine), and the
cell values are written into the SVG as text at computed positions rather than as matplotlib texts — a
map builds in about 0.15 s, so a 10-run comparison (19 maps) stays within its budget.
With N ≥ 2 runs, every later run also gets a "difference vs run 1" map in % for the grid it shares with
run 1 (same cell key without the three dims).
"""

from __future__ import annotations

import functools
import html
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.colors import Normalize
from matplotlib.ticker import FuncFormatter

from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register

DIMS = ("bs", "rwmixread", "percentage_random")
MIN_CELLS = 8
Coord = tuple[int, int, int]          # block size (bytes), read %, random %


@dataclass(frozen=True)
class PatternCell:
    coord: Coord
    name: str
    bw_bytes: float                   # bytes/s: a storage cell's result, a network cell's initiator side
    iops: float | None
    target_gbps: float | None = None  # network cells: the target's NIC counters over the window

    @property
    def mbs(self) -> float:
        return self.bw_bytes / 1e6

    @property
    def gbps(self) -> float:
        return self.bw_bytes * 8 / 1e9


@dataclass
class Grid:
    """One run's pattern grid: cells sharing ``gkey`` (the cell key without the three pattern dims)."""

    run: RunView
    gkey: CellKey
    op_mode: str
    network: bool
    cells: dict[Coord, PatternCell] = field(default_factory=dict)
    keys: set[CellKey] = field(default_factory=set)      # the member cells' own keys (network.py skips them)

    @property
    def title(self) -> str:
        d = dict(self.gkey)
        parts = [d.pop("profile", "")]
        if "mtu" in d:
            parts.append(f"MTU {d.pop('mtu')}")
        if "paths" in d:
            parts.append(f"{d.pop('paths')} path")
        d.pop("net_paths", None)
        d.pop("op_mode", None)
        parts += [f"{k}={v}" for k, v in d.items()]
        return " · ".join(p for p in parts if p)

    def is_pattern(self) -> bool:
        if len(self.cells) < MIN_CELLS:
            return False
        varying = sum(1 for i in range(3) if len({c[i] for c in self.cells}) > 1)
        return varying >= 2


def bs_label(bs: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if bs >= size and bs % size == 0:
            return f"{bs // size}{unit}"
    return f"{bs}B"


def coord_of(cell: Mapping[str, Any], workload: Mapping[str, Any] | None) -> Coord | None:
    """(bs, read %, random %) of a cell; None when its block size is unknown."""
    w = workload or {}
    bs = cell.get("bs", w.get("bs"))
    if bs is None:
        return None
    rw = str(w.get("rw") or cell.get("rw") or "randrw")
    read = cell.get("rwmixread", w.get("rwmixread"))
    if read is None:
        read = 100 if rw in ("read", "randread") else 0 if rw in ("write", "randwrite") else 50
    rand = cell.get("percentage_random", w.get("percentage_random"))
    if rand is None:
        rand = 100 if rw.startswith("rand") else 0
    try:
        return int(bs), int(read), int(rand)
    except (TypeError, ValueError):
        return None


def _gkey(ctx: ReportContext, cell: Mapping[str, Any]) -> CellKey:
    return tuple(kv for kv in cell_key(cell, with_op_mode=ctx.with_op_mode) if kv[0] not in DIMS)


Measured = tuple[Mapping[str, Any], Mapping[str, Any] | None, str, float, float | None, float | None]


def _measured(v: RunView) -> list[Measured]:
    """(cell, workload, name, bytes/s, IOPS, target Gbps) of each measured cell of a run; the name is the cell's
    (orchestrator.cells.cell_label), as every other section names it."""
    out: list[Measured] = []
    if v.detail.run.topology is None:
        return [(st.cell, st.workload, cell_label(st.cell, st.workload), res.bw_bytes or 0.0, res.iops, None)
                for st, res in v.measured()]
    workloads = {st.seq: st.workload for st in v.detail.steps
                 if st.kind == "net" and st.cell.get("role") == "initiator"}
    for ng in v.detail.net_groups:
        t = ng.total or {}
        if t.get("initiator_gbps") is not None:
            wl = workloads.get(ng.seq)
            out.append((ng.cell, wl, cell_label(ng.cell, wl), float(t["initiator_gbps"]) * 1e9 / 8,
                        t.get("initiator_iops"), t.get("target_gbps")))
    return out


def grids(ctx: ReportContext) -> list[Grid]:
    """Every pattern grid of the report's runs, run by run, in plan order."""
    out: list[Grid] = []
    for v in ctx.runs:
        found: dict[CellKey, Grid] = {}
        for cell, workload, name, bw, iops, target in _measured(v):
            coord = coord_of(cell, workload)
            if coord is None:
                continue
            gk = _gkey(ctx, cell)
            g = found.setdefault(gk, Grid(v, gk, str(cell.get("op_mode", "stock")), v.detail.run.topology is not None))
            g.cells[coord] = PatternCell(coord, name, bw, iops, target)
            g.keys.add(cell_key(cell, with_op_mode=ctx.with_op_mode))
        out += [g for g in found.values() if g.is_pattern()]
    return out


# geometry of a heat map figure (inches): cell size and the margins around the one axes holding every panel
CELL_W, CELL_H = 0.40, 0.22
LEFT, RIGHT, TOP, BOTTOM = 0.75, 2.15, 0.62, 0.55
GAP_X, GAP_Y = 1, 2          # empty columns / rows between panels (the rows hold block sizes and titles)
FONT = "'DejaVu Sans', 'Bitstream Vera Sans', 'Arial', 'Helvetica', sans-serif"


def _svg_text(x: float, y: float, s: str, size: float, fill: str = "#000000", weight: str = "normal") -> str:
    """A centred SVG text at (x, y) points from the top left, styled like matplotlib's (svg.fonttype none)."""
    return (f'<text x="{x:.2f}" y="{y:.2f}" dominant-baseline="central" style="font-size: {size}px; '
            f'font-family: {FONT}; font-weight: {weight}; text-anchor: middle; fill: {fill}">{html.escape(s)}</text>')


def _draw(g: Grid, values: dict[Coord, float], text: Callable[[float], str], cmap: str, norm: Normalize,
          unit: str, other: tuple[str, Callable[[float], float]] | None, suptitle: str,
          prefix: str) -> tuple[str, int]:
    """Every panel (one per random share) in ONE axes as ONE image of the composed matrix, NaN gaps between
    panels; the colour scale in a second axes. The cell values, block sizes and panel titles are written as
    SVG text at positions computed from the fixed geometry (no layout engine): matplotlib laying out 125+
    texts per map made a 10-run comparison (19 maps) take many seconds. Returns the SVG and the cells drawn."""
    bss = sorted({c[0] for c in g.cells})
    reads = sorted({c[1] for c in g.cells}, reverse=True)
    rands = sorted({c[2] for c in g.cells}, reverse=True)
    pcols = min(3, len(rands))
    prows = math.ceil(len(rands) / pcols)
    nb, nr = len(bss), len(reads)
    width, height = pcols * nb + (pcols - 1) * GAP_X, prows * nr + (prows - 1) * GAP_Y
    top = TOP + 0.16 * suptitle.count("\n")       # a two-line title (the difference maps) needs room
    fw, fh = LEFT + width * CELL_W + RIGHT, top + height * CELL_H + BOTTOM
    data = np.full((height, width), np.nan)
    texts: list[str] = []
    points = 0
    size = 6.5 if cmap == "viridis" else 5.8      # "+12.3%" is wider than "123.4"
    lo, span = float(norm.vmin or 0.0), float((norm.vmax or 1.0) - (norm.vmin or 0.0)) or 1.0

    def at(col: float, row: float) -> tuple[float, float]:   # matrix (column, row) -> SVG points
        return (LEFT + col * CELL_W) * 72, (top + row * CELL_H) * 72

    for p, rand in enumerate(rands):
        c0, r0 = (p % pcols) * (nb + GAP_X), (p // pcols) * (nr + GAP_Y)
        texts.append(_svg_text(*at(c0 + nb / 2, r0 - 0.6), f"random {rand}%", 8.5))
        for j, bs in enumerate(bss):
            texts.append(_svg_text(*at(c0 + j + 0.5, r0 + nr + 0.55), bs_label(bs), 7.5))
        for i, rd in enumerate(reads):
            for j, bs in enumerate(bss):
                val = values.get((bs, rd, rand))
                x, y = at(c0 + j + 0.5, r0 + i + 0.5)
                if val is None:
                    texts.append(_svg_text(x, y, fmt.MISSING, size, "#555555"))
                    continue
                data[r0 + i, c0 + j] = val
                points += 1
                shade = (val - lo) / span                   # norm(val), without its per-call overhead
                dark = shade < 0.55 if cmap == "viridis" else abs(shade - 0.5) > 0.3
                texts.append(_svg_text(x, y, text(val), size, "#ffffff" if dark else "#000000"))
    with plot.figure(fw, fh, layout=None) as (fig, ax):
        ax.set_position((LEFT / fw, BOTTOM / fh, width * CELL_W / fw, height * CELL_H / fh))
        im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest",
                       extent=(0, width, height, 0))
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)
        ax.set_xticks([])
        ys = [(p // pcols) * (nr + GAP_Y) + i + 0.5 for p in range(0, len(rands), pcols) for i in range(nr)]
        ax.set_yticks(ys, [f"{r}%" for _ in range(prows) for r in reads])
        ax.tick_params(length=0)
        ax.set_xlabel("block size (K = KiB)", labelpad=14)
        ax.set_ylabel("read share (% of I/Os)")
        ax.grid(False)
        for spine in ax.spines.values():
            spine.set_visible(False)
        cax = fig.add_axes(((fw - RIGHT + 0.25) / fw, BOTTOM / fh, 0.14 / fw, height * CELL_H / fh))
        cbar = fig.colorbar(im, cax=cax)
        cbar.set_label(unit)
        if other is not None:    # both units on one scale (a secondary axis costs a third of the build time)
            unit2, conv = other
            cbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{_num(x)} ({_num(conv(x))} {unit2})"))
            cbar.set_label(f"{unit} ({unit2})")
        fig.suptitle(suptitle, fontsize=9, y=1 - 0.12 / fh, va="top")
        svg = plot.to_svg(fig, prefix, append='<g class="cells">' + "".join(texts) + "</g>\n")
    return svg, points


def _num(x: float) -> str:
    """A colour-scale tick: no exponent, a few significant digits."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 1 or x == 0 else f"{x:.2f}"


def _slug(*parts: object) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(str(p) for p in parts).lower()).strip("-")


def _pattern_name(c: PatternCell) -> str:
    bs, rd, rand = c.coord
    return f"{bs_label(bs)} read {rd}% random {rand}%"


def _value_figure(ctx: ReportContext, g: Grid, seq: int) -> Figure:
    v = g.run
    unit_gbps = g.network
    vals = {c: (p.gbps if unit_gbps else p.mbs) for c, p in g.cells.items()}
    top = max(vals.values())
    norm = Normalize(0.0, top if top > 0 else 1.0)
    other: tuple[str, Callable[[float], float]]
    text: Callable[[float], str]
    if unit_gbps:
        other, text, unit = ("MB/s", lambda x: x * 1e3 / 8), fmt.gbps, "Gbps, initiator side"
    else:
        other, text, unit = ("Gbps", lambda x: x * 8 / 1e3), lambda x: fmt.mbs(x * 1e6), "MB/s"
    label = v.label(g.op_mode)
    fid = f"heatmap-{_slug('r', v.index + 1, g.title, g.op_mode if ctx.with_op_mode else '')}-{seq}"
    svg, points = _draw(g, vals, text, "viridis", norm, unit, other, f"{label} · {g.title}", fid)
    best = max(g.cells.values(), key=lambda p: p.bw_bytes)
    worst = min(g.cells.values(), key=lambda p: p.bw_bytes)

    def named(p: PatternCell) -> str:
        mbs, gbps = f"{fmt.mbs(p.bw_bytes)} MB/s", f"{fmt.gbps(p.gbps)} Gbps"
        return f"{_pattern_name(p)} " + (f"{gbps} ({mbs})" if g.network else f"{mbs} ({gbps})")

    headers = ["run", "pattern", "block size", "read %", "random %", "MB/s", "Gbps"]
    headers += ["target Gbps", "IOPS"] if g.network else ["IOPS"]
    rows = []
    for c in sorted(g.cells, key=lambda c: (-c[2], -c[1], c[0])):
        p = g.cells[c]
        row = [f"run {v.index + 1}", p.name, bs_label(c[0]), str(c[1]), str(c[2]), fmt.mbs(p.bw_bytes),
               fmt.gbps(p.gbps)]
        row += [fmt.gbps(p.target_gbps), fmt.iops(p.iops)] if g.network else [fmt.iops(p.iops)]
        rows.append(row)
    side = " at the initiators over the window where every host measured (target side in the table)" \
        if g.network else ""
    return Figure("heatmap", fid, f"Pattern throughput: {g.title} — run {v.index + 1}", svg, Table(headers, rows),
                  f"n = 1 run, {len(g.cells)} cells", points,
                  f"Throughput per pattern{side}; one shared colour scale (MB/s and Gbps). "
                  f"best: {named(best)}; worst: {named(worst)}.")


def _diff_figure(ctx: ReportContext, base: Grid, g: Grid, seq: int) -> Figure | None:
    common = [c for c in g.cells if c in base.cells and base.cells[c].bw_bytes > 0]
    if not common:
        return None
    diff = {c: (g.cells[c].bw_bytes / base.cells[c].bw_bytes - 1) * 100 for c in common}
    span = max(max(abs(d) for d in diff.values()), 1.0)
    v, v1 = g.run, base.run
    fid = f"heatmap-diff-{_slug('r', v.index + 1, g.title, g.op_mode if ctx.with_op_mode else '')}-{seq}"
    svg, points = _draw(g, diff, fmt.pct, "RdBu", Normalize(-span, span), "difference vs run 1 (%)", None,
                        f"{v.label(g.op_mode)}\nvs {v1.label(base.op_mode)} · {g.title}", fid)
    rows = [[_pattern_name(g.cells[c]), fmt.mbs(base.cells[c].bw_bytes), fmt.mbs(g.cells[c].bw_bytes),
             fmt.pct(diff[c])] for c in sorted(common, key=lambda c: (-c[2], -c[1], c[0]))]
    best = max(common, key=lambda c: diff[c])
    worst = min(common, key=lambda c: diff[c])
    return Figure("heatmap", fid, f"Pattern throughput: {g.title} — run {v.index + 1} vs run 1", svg,
                  Table(["pattern", "run 1 MB/s", f"run {v.index + 1} MB/s", "difference"], rows),
                  f"n = 2 runs, {len(common)} cells in common", points,
                  f"(run {v.index + 1} / run 1 - 1) x 100 per pattern; blue: run {v.index + 1} faster. "
                  f"best: {_pattern_name(g.cells[best])} {fmt.pct(diff[best])}; "
                  f"worst: {_pattern_name(g.cells[worst])} {fmt.pct(diff[worst])}.")


class HeatmapChart:
    name = "heatmap"
    title = "125-pattern heat map"
    order = 40

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        found = grids(ctx)
        figs: list[FigureItem] = [functools.partial(_value_figure, ctx, g, i) for i, g in enumerate(found)]
        first = {g.gkey: g for g in found if g.run.index == 0}
        for i, g in enumerate(found):
            base = first.get(g.gkey)
            if g.run.index > 0 and base is not None:
                figs.append(functools.partial(_diff_figure, ctx, base, g, i))
        return figs


register(HeatmapChart())
