"""Network runs (methodology §6): Gbps over time, per path, single vs multipath, MTU 1500 vs 9000, measured
at both ends (the target's NIC counters and the initiators' tools).

Three charts, all from the store (``NetGroup`` per cell, each host's ``Result``):

(a) **Gbps over time** per cell: the initiators' total and the target's total (NIC counters), one line per
    path when the cell is multipath, the window where every host measured shaded (the window the cell's
    totals cover), and a line at the link speed when a path declares it (``link_gbps`` in its figures or
    ``speed_mbit`` in the host's declared path), else none. The per-second values are the hosts' stored
    interval series (``Result.per_path[path]["series"]``: ``[t_start, t_end, bytes, ...]`` epoch seconds, as
    in net.json) cut into whole seconds from the cell's first start; a second less than half covered is left
    out. A cell without stored series has no such chart (bars and totals still are).
(b) **Per-path Gbps** per profile: MTU x path mode side by side, one bar per initiator path and run.
(c) **Totals** per cell at the initiators and at the target ("measured on both ends").

Cells are matched across runs by their key (profile, swept values, MTU, path mode; not the tool), so an fio
run and an iSCSI run overlay. Cells that belong to a pattern grid are in the heat map (heatmap.py), not here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from orchestrator.cells import CellKey, cell_key
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.charts.heatmap import grids
from orchestrator.htmlreport.model import MODE_HATCHES, Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.store.models import NetGroup, Result

MAX_TIME_FIGURES = 12      # profiles with a Gbps-over-time figure
MAX_PANELS = 8             # cells (panels) per such figure
MAX_CELLS = 12
MAX_BINS = 600            # points per line of a Gbps-over-time chart (longer cells: wider bins)
PATH_STYLES = (":", "-.", (0, (5, 1)), (0, (1, 3)))


@dataclass(frozen=True)
class NetCell:
    run: RunView
    group: NetGroup
    results: list[tuple[str, Result]]      # (role, result) of each host's step in this cell

    @property
    def t_ref(self) -> float | None:
        """The cell's first host start (epoch s): time zero of its chart."""
        starts = [float(t) for t in (self.group.starts or {}).values()]
        return min(starts) if starts else None if self.group.window_start is None else float(self.group.window_start)


def _cells(ctx: ReportContext) -> tuple[dict[CellKey, list[NetCell]], int]:
    """Non-pattern network cells by key, and how many pattern cells were left to the heat map."""
    in_grid = {(g.run.index, k) for g in grids(ctx) if g.network for k in g.keys}
    out: dict[CellKey, list[NetCell]] = {}
    for v in ctx.runs:
        if v.detail.run.topology is None:
            continue
        for g in v.detail.net_groups:
            key = cell_key(g.cell, with_op_mode=ctx.with_op_mode)
            if (v.index, key) in in_grid:
                continue
            res = [(str(st.cell.get("role", "")), v.detail.results[st.id]) for st in v.detail.steps
                   if st.kind == "net" and st.seq == g.seq and st.id in v.detail.results]
            out.setdefault(key, []).append(NetCell(v, g, res))
    return out, len(in_grid)


def per_second(intervals: Iterable[Sequence[float]], t_ref: float, n: int, width: int = 1) -> list[float | None]:
    """Gbps in each bin [i*width, (i+1)*width) s after ``t_ref`` from byte-count intervals, prorated at the
    edges; a bin less than half covered is None."""
    got = [0.0] * n
    cover = [0.0] * n
    for iv in intervals:
        if len(iv) < 3:
            continue
        a, b = (float(iv[0]) - t_ref) / width, (float(iv[1]) - t_ref) / width
        if b <= a:
            continue
        rate = float(iv[2]) / (b - a)            # bytes per bin
        for s in range(max(0, math.floor(a)), min(n, math.ceil(b))):
            ov = min(b, s + 1) - max(a, s)
            if ov > 0:
                got[s] += rate * ov
                cover[s] += ov
    return [got[s] * 8 / 1e9 / width / cover[s] if cover[s] >= 0.5 else None for s in range(n)]


def _sum(lines: list[list[float | None]]) -> list[float | None]:
    out: list[float | None] = []
    for vals in zip(*lines, strict=True):
        got = [x for x in vals if x is not None]
        out.append(sum(got) if got else None)
    return out


Line = tuple[str, Any, float, list[float | None]]     # legend suffix, line style, line width, Gbps per bin


@dataclass(frozen=True)
class Series:
    t_ref: float          # time zero (epoch s)
    width: int            # seconds per bin: 1, or more for cells longer than MAX_BINS seconds
    lines: list[Line]


def _series(nc: NetCell) -> Series | None:
    """The cell's lines (totals per side, per path when multipath); None without stored series."""
    paths = {(role, name): p["series"] for role, r in nc.results for name, p in sorted((r.per_path or {}).items())
             if isinstance(p.get("series"), list) and p["series"]}
    ivs = [iv for s in paths.values() for iv in s if len(iv) > 2]
    if not ivs:
        return None
    t_ref = nc.t_ref if nc.t_ref is not None else min(float(iv[0]) for iv in ivs)
    span = max(float(iv[1]) for iv in ivs) - t_ref
    width = max(1, math.ceil(span / MAX_BINS))
    n = max(1, math.ceil(span / width))
    secs = {k: per_second(s, t_ref, n, width) for k, s in paths.items()}
    lines: list[Line] = []
    ini = [v for (role, _), v in secs.items() if role == "initiator"]
    tgt = [v for (role, _), v in secs.items() if role == "target"]
    if ini:
        lines.append(("initiator total", "-", 1.6, _sum(ini)))
    if tgt:
        lines.append(("target total (NIC counters)", "--", 1.2, _sum(tgt)))
    ini_paths = sorted(name for role, name in secs if role == "initiator")
    if len(ini_paths) > 1:
        for i, name in enumerate(ini_paths):
            lines.append((f"initiator path {name}", PATH_STYLES[i % len(PATH_STYLES)], 0.9, secs[("initiator", name)]))
    return Series(t_ref, width, lines)


def link_gbps(nc: NetCell) -> float | None:
    """One path's link speed when a host declares it; None when unknown (then no line is drawn)."""
    names = set(nc.group.cell.get("net_paths") or [])
    for _role, r in nc.results:
        for p in (r.per_path or {}).values():
            if p.get("link_gbps"):
                return float(p["link_gbps"])
        for decl in ((r.provenance or {}).get("host") or {}).get("net_paths") or []:
            if isinstance(decl, dict) and decl.get("name") in names and decl.get("speed_mbit"):
                return float(decl["speed_mbit"]) / 1000
    return None


def _variant(k: CellKey) -> tuple[int, int, str]:
    """MTU first, single path before multipath: the order the review compares them in."""
    d = dict(k)
    return (int(d.get("mtu", 0)), 0 if d.get("paths") == "single" else 1, str(k))


def _panel_title(k: CellKey) -> str:
    d = dict(k)
    extra = [f"{a}={b}" for a, b in k if a not in ("profile", "mtu", "paths", "net_paths", "op_mode")]
    return " · ".join([f"MTU {d.get('mtu', '-')}", f"{d.get('paths', '-')} path", *extra])


def _time_figure(ctx: ReportContext, profile: str, keys: list[CellKey], cells: dict[CellKey, list[NetCell]],
                 idx: int) -> Figure | None:
    """One panel per cell of the profile (MTU down, path mode across), shared Gbps axis."""
    panels = [(k, [(nc, ls) for nc in cells[k] if (ls := _series(nc))]) for k in sorted(keys, key=_variant)]
    panels = [(k, d) for k, d in panels if d]
    if not panels:
        return None
    fid = f"network-time-{idx}"
    headers = ["t (s)"]
    cols: list[dict[int, float | None]] = []     # bin start (s) -> Gbps, one per line drawn
    points = 0
    widths: set[int] = set()
    ncols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / ncols)
    link = None
    with plot.figure(7.5 if ncols == 2 else 6.0, 2.2 * nrows + 1.4, nrows=nrows, ncols=ncols, sharey=True,
                     layout="constrained") as (fig, axes):      # constrained: room for the legend below
        flat = list(np.ravel(axes))
        runs: dict[str, Any] = {}       # legend: a colour per run, a line style per kind of line (drawn in grey)
        kinds: dict[str, Any] = {}
        for ax, (k, drawn) in zip(flat, panels, strict=False):
            for nc, ser in drawn:
                v, g, w = nc.run, nc.group, ser.width
                widths.add(w)
                runs.setdefault(v.label(), Line2D([], [], color=v.colour, linewidth=2))
                for suffix, style, lw, vals in ser.lines:
                    xs = [(t + 0.5) * w for t, y in enumerate(vals) if y is not None]
                    ys = [y for y in vals if y is not None]
                    ax.plot(xs, ys, color=v.colour, linestyle=style, linewidth=lw)
                    kinds.setdefault(suffix, Line2D([], [], color="#555", linestyle=style, linewidth=lw))
                    points += len(ys)
                    headers.append(f"{ctx.name(k)} run {v.index + 1} {suffix} Gbps")
                    cols.append({t * w: y for t, y in enumerate(vals)})
                if g.window_start is not None and g.window_end is not None:
                    ax.axvspan(g.window_start - ser.t_ref, g.window_end - ser.t_ref, color=v.colour, alpha=0.08, lw=0)
                    kinds.setdefault("window where every host measured (shaded)",
                                     Patch(facecolor="#555", alpha=0.15))
                for f in g.failures or []:
                    at = float(f["stopped_at"]) - ser.t_ref
                    kinds.setdefault("a path stopped (red line)",
                                     ax.axvline(at, color="#c62828", linestyle=":", linewidth=1.2))
                    if f.get("io_stalled_s"):
                        ax.axvspan(at, at + float(f["io_stalled_s"]), color="#c62828", alpha=0.15, lw=0)
                        kinds.setdefault("no I/O completed: the failover window (red)",
                                         Patch(facecolor="#c62828", alpha=0.25))
                link = link or link_gbps(nc)
            if link:
                kinds.setdefault(f"link speed {fmt.gbps(link)} Gbps (one path)",
                                 ax.axhline(link, color="#999", linestyle=(0, (8, 3)), linewidth=0.8))
            ax.set_title(_panel_title(k), fontsize=8.5)
            ax.set_xlabel("time since the cell's first host started (s)")
            if flat.index(ax) % ncols == 0:
                ax.set_ylabel("throughput (Gbps)")
        flat[0].set_ylim(bottom=0)      # once all panels are drawn: the shared axis fits the highest line
        for ax in flat[len(panels):]:
            ax.axis("off")
        fig.legend([*runs.values(), *kinds.values()], [*runs, *kinds], loc="outside lower center", ncol=2)
        svg = plot.to_svg(fig, fid)
    times = sorted({t for c in cols for t in c})
    rows = [[str(t)] + [fmt.gbps(c.get(t)) for c in cols] for t in times]
    n = (times[-1] + max(widths)) if times else 0
    run_ids = {nc.run.index for _k, d in panels for nc, _ in d}
    per = "Per-second" if widths == {1} else f"Per {max(widths)} s (bins widened to keep {MAX_BINS} points a line)"
    return Figure("network", fid, f"Gbps over time: {profile}, single vs multipath, MTU 1500 vs 9000", svg,
                  Table(headers, rows), f"n = {len(run_ids)} run" + ("s" if len(run_ids) != 1 else "")
                  + f", {len(panels)} cells, {n} s", points,
                  f"{per} Gbps from each host's stored series: the initiators' tool (solid) and the target's "
                  "NIC counters (dashed), a line per path when multipath; the shaded window is the one the cell's "
                  "totals cover; a path that stopped is marked in red, with the failover window (no I/O completed) "
                  "where the tool measured it."
                  + ("" if link else " Link speed unknown (not declared): no line drawn."))


def _bars(ax: Any, x: float, val: float | None, colour: str, hatch: str, alpha: float = 1.0) -> int:
    if val is None:
        return 0
    ax.bar(x, val, 0.9, color=colour, hatch=hatch, alpha=alpha, edgecolor="white", linewidth=0.3)
    ax.text(x, val, fmt.gbps(val), ha="center", va="bottom", fontsize=5.5, rotation=90)
    return 1


def _path_figure(ctx: ReportContext, profile: str, keys: list[CellKey], cells: dict[CellKey, list[NetCell]],
                 idx: int) -> Figure | None:
    keys = sorted(keys, key=_variant)
    names = sorted({str(p.get("path")) for k in keys for nc in cells[k] for p in nc.group.per_path.values()
                    if p.get("role") == "initiator"})
    rows: list[list[str]] = []
    points = 0
    fid = f"network-paths-{idx}"
    with plot.figure(7.5, 3.8, layout="constrained") as (fig, ax):
        centres = []
        x = 0.0
        for k in keys:
            start = x
            for nc in cells[k]:
                v, g = nc.run, nc.group
                for name, p in sorted(g.per_path.items()):
                    if p.get("role") != "initiator":
                        continue
                    hatch = MODE_HATCHES[names.index(str(p.get("path"))) % len(MODE_HATCHES)]
                    points += _bars(ax, x, p.get("gbps"), v.colour, hatch)
                    rows.append([f"run {v.index + 1}", ctx.name(k), str(g.cell.get("mtu")), str(g.cell.get("paths")),
                                 name,
                                 str(p.get("mtu", fmt.MISSING)), fmt.gbps(p.get("gbps")), fmt.iops(p.get("iops"))])
                    x += 1
                x += 0.3
            centres.append((start + x - 1.3) / 2)
            x += 1
        d0 = [dict(k) for k in keys]
        ax.set_xticks(centres, [f"MTU {d.get('mtu')}\n{d.get('paths')} path" for d in d0])
        ax.set_xlabel("MTU (bytes) and path mode")
        ax.set_ylabel("throughput per path (Gbps)")
        ax.margins(y=0.15)
        ax.grid(axis="x", visible=False)
        runs = {nc.run.index: nc.run for k in keys for nc in cells[k]}
        handles = [Patch(facecolor=v.colour, label=v.label()) for v in runs.values()]
        handles += [Patch(facecolor="white", edgecolor="#333", hatch=MODE_HATCHES[i % len(MODE_HATCHES)],
                          label=f"path {n.split('.')[-1] if '.' in n else n}") for i, n in enumerate(names)]
        fig.legend(handles=handles, loc="outside lower center", ncol=2)
        svg = plot.to_svg(fig, fid)
    if not points:
        return None
    return Figure("network", fid, f"Per-path Gbps: {profile}, single vs multipath, MTU 1500 vs 9000", svg,
                  Table(["run", "cell", "MTU", "paths", "path", "path MTU", "Gbps", "IOPS"], rows),
                  f"n = {len(runs)} run" + ("s" if len(runs) != 1 else "") + f", {len(keys)} cells", points,
                  "Each initiator path's Gbps over the window where every host measured (NetGroup.per_path).")


def _total_figure(ctx: ReportContext, keys: list[CellKey], cells: dict[CellKey, list[NetCell]], part: str,
                  idx: int) -> Figure | None:
    rows: list[list[str]] = []
    points = 0
    fid = f"network-total-{idx}"
    runs: dict[int, RunView] = {}
    n_bars = 2 * sum(len(cells[k]) for k in keys)
    with plot.figure(min(11.0, max(7.5, 0.17 * n_bars + 2.0)), 4.4, layout="constrained") as (fig, ax):
        centres = []
        x = 0.0
        for k in keys:
            start = x
            for nc in cells[k]:
                v, g, t = nc.run, nc.group, nc.group.total or {}
                runs[v.index] = v
                points += _bars(ax, x, t.get("initiator_gbps"), v.colour, "")
                points += _bars(ax, x + 1, t.get("target_gbps"), v.colour, "//", 0.55)
                x += 2.3
                window = None if g.window_start is None or g.window_end is None else g.window_end - g.window_start
                rows.append([f"run {v.index + 1}", ctx.name(k), str(g.cell.get("mtu")), str(g.cell.get("paths")),
                             fmt.gbps(t.get("initiator_gbps")), fmt.gbps(t.get("target_gbps")),
                             fmt.iops(t.get("initiator_iops")), fmt.MISSING if window is None else f"{window:.1f}",
                             fmt.MISSING if g.skew_ms is None else f"{g.skew_ms:.1f}",
                             "ok" if g.complete else f"incomplete: {g.reason}"])
            centres.append((start + x - 1.3) / 2)
            x += 1
        ax.set_xticks(centres, [ctx.name(k) for k in keys], rotation=20, ha="right", fontsize=7)
        ax.set_xlabel("cell")
        ax.set_ylabel("total throughput (Gbps)")
        ax.margins(y=0.15)
        ax.grid(axis="x", visible=False)
        handles = [Patch(facecolor=v.colour, label=v.label()) for v in runs.values()]
        handles += [Patch(facecolor="#999", label="initiator side (the tool)"),
                    Patch(facecolor="#999", alpha=0.55, hatch="//", label="target side (NIC counters)")]
        fig.legend(handles=handles, loc="outside lower center", ncol=2)
        svg = plot.to_svg(fig, fid)
    if not points:
        return None
    return Figure("network", fid, f"Total Gbps per cell, measured on both ends{part}", svg,
                  Table(["run", "cell", "MTU", "paths", "initiator Gbps", "target Gbps", "IOPS", "window s",
                         "skew ms", "state"], rows),
                  f"n = {ctx.n_runs()}, {len(keys)} cells", points,
                  "Totals over the window where every host measured: the initiators' tool (solid) and the "
                  "target's NIC counters (hatched).")


class NetworkChart:
    name = "network"
    title = "Network: Gbps over time, per path, both ends"
    order = 70

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        cells, _in_heatmap = _cells(ctx)
        if not cells:
            return []
        keys = list(cells)
        figs: list[FigureItem] = []
        profiles: dict[str, list[CellKey]] = {}
        for k in keys:
            profiles.setdefault(str(dict(k).get("profile", "")), []).append(k)
        for i, (profile, pkeys) in enumerate(list(profiles.items())[:MAX_TIME_FIGURES]):
            figs.append(functools.partial(_time_figure, ctx, profile, pkeys[:MAX_PANELS], cells, i))
        for i, (profile, pkeys) in enumerate(profiles.items()):
            figs.append(functools.partial(_path_figure, ctx, profile, pkeys, cells, i))
        chunks = [keys[i:i + MAX_CELLS] for i in range(0, len(keys), MAX_CELLS)]
        for i, chunk in enumerate(chunks):
            part = f" (part {i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
            figs.append(functools.partial(_total_figure, ctx, chunk, cells, part, i))
        return figs


register(NetworkChart())
