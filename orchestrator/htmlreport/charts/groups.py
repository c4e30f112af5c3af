"""Device groups (several devices tested together, each with its own fio job): per cell, one bar per device
and the group's total, for IOPS and for bandwidth, so a reader sees both the aggregate a review ranks and
the per-device split behind it (methodology §3, "Device groups").

Per-device figures are ``Result.per_device`` (device path -> StepMetrics dump); the total is the step's own
result (fio over every job), drawn as the solid "Σ" bar. The two agree (the tests check that the
per-device bars add up to it); where a stored total differs from the sum by more than 0.5 %, the caption
says so rather than hiding it. Devices are named by the run's provenance (model, serial tail, path) and
numbered in group order; the number is printed over each bar. A run with one device has no figure here.
Cells are matched across runs by :meth:`ReportContext.key`; at most 12 cells per figure (fewer when many
runs or devices share it), split into parts beyond.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from matplotlib.patches import Patch
from matplotlib.ticker import StrMethodFormatter

from orchestrator.cells import CellKey
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.provenance import UNKNOWN
from orchestrator.store.models import Result, Step

MAX_CELLS = 12
MAX_BARS = 60
TOLERANCE = 0.005


@dataclass(frozen=True)
class Entry:
    """One run's measurement of one cell on a device group."""

    run: RunView
    step: Step
    result: Result
    devices: list[tuple[str, dict[str, Any]]]     # (path, StepMetrics dump) in group order


def device_name(run: RunView, path: str) -> str:
    """'P5800X …000X (/dev/nvme0n1)': model and serial tail from the run's provenance, and the path."""
    dev = next((d for d in run.provenance.devices if d.get("path") == path), {})
    model, serial = dev.get("model", UNKNOWN), dev.get("serial", UNKNOWN)
    parts = [m for m in (model,) if m != UNKNOWN] + ([f"…{serial[-4:]}"] if serial != UNKNOWN else [])
    return " ".join([*parts, f"({path})"])


def _entries(ctx: ReportContext) -> dict[CellKey, list[Entry]]:
    cells: dict[CellKey, list[Entry]] = {}
    for v in ctx.runs:
        order = list(v.detail.run.devices or [])
        for st, res in v.measured():
            per = res.per_device or {}
            if len(per) < 2:
                continue
            devs = sorted(per.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
            cells.setdefault(ctx.key(st), []).append(Entry(v, st, res, devs))
    return cells


def _combined(d: dict[str, Any], k: str) -> float | None:
    v = (d.get("combined") or {}).get(k)
    return None if v is None else float(v)


@dataclass(frozen=True)
class Metric:
    id: str
    title: str
    axis: str
    device: Callable[[dict[str, Any]], float | None]
    total: Callable[[Result], float | None]
    scale: float
    text: Callable[[float | None], str]


def _metrics(entries: list[Entry]) -> list[Metric]:
    top = max(e.result.bw_bytes or 0.0 for e in entries)
    gb = top >= 1e9
    return [
        Metric("iops", "IOPS per device and in total", "IOPS (read + write)", lambda d: _combined(d, "iops"),
               lambda r: r.iops, 1.0, fmt.iops),
        Metric("bw", f"{'GB/s' if gb else 'MB/s'} per device and in total",
               f"bandwidth ({'GB/s' if gb else 'MB/s'}, decimal)", lambda d: _combined(d, "bw_bytes"),
               lambda r: r.bw_bytes, 1e9 if gb else 1e6, fmt.gbs if gb else fmt.mbs),
    ]


def _chunks(keys: list[CellKey], per_cell: int) -> list[list[CellKey]]:
    size = max(1, min(MAX_CELLS, MAX_BARS // max(per_cell, 1)))
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def _figure(ctx: ReportContext, m: Metric, keys: list[CellKey], cells: dict[CellKey, list[Entry]], part: str,
            fid: str) -> Figure:
    per_cell = max(sum(len(e.devices) + 1 for e in cells[k]) for k in keys)
    rows: list[list[str]] = []
    points = 0
    mismatch: list[str] = []
    legend: dict[str, Patch] = {}
    with plot.figure(min(10.0, max(7.5, 0.16 * per_cell * len(keys) + 2.0)), 4.2, layout="constrained") as (fig, ax):
        centres = []
        for ci, key in enumerate(keys):
            x = ci * (per_cell + 1.5)
            start = x
            for e in cells[key]:
                v, mode = e.run, str(e.step.cell.get("op_mode", "stock"))
                cell_name = ctx.name(key)
                values: list[float] = []
                for di, (path, d) in enumerate(e.devices, start=1):
                    val = m.device(d)
                    rows.append([f"run {v.index + 1}", cell_name, f"{di}: {device_name(v, path)}", m.text(val),
                                 fmt.ms(_combined(d, "lat_mean_ns")), fmt.ms(_combined(d, "lat_max_ns"))])
                    if val is None:
                        x += 1
                        continue
                    values.append(val)
                    ax.bar(x, val / m.scale, 0.9, color=v.colour, alpha=0.5, hatch=v.hatch(mode), edgecolor="white",
                           linewidth=0.3)
                    ax.text(x, val / m.scale, str(di), ha="center", va="bottom", fontsize=6)
                    points += 1
                    x += 1
                total = m.total(e.result) or 0.0     # a measured fio cell always has its totals
                rows.append([f"run {v.index + 1}", cell_name, "total (Σ)", m.text(total),
                             fmt.ms(e.result.lat_mean_ns), fmt.ms(e.result.lat_max_ns)])
                ax.bar(x, total / m.scale, 0.9, color=v.colour, hatch=v.hatch(mode), edgecolor="black", linewidth=0.4)
                ax.text(x, total / m.scale, "Σ", ha="center", va="bottom", fontsize=6.5)
                points += 1
                x += 1
                if values and abs(sum(values) - total) > TOLERANCE * max(total, 1e-9):
                    mismatch.append(f"run {v.index + 1} {cell_name}: devices sum to {m.text(sum(values))}")
                lab = v.label(mode)
                legend.setdefault(lab, Patch(facecolor=v.colour, hatch=v.hatch(mode), label=lab))
            centres.append((start + x - 1) / 2)
        ax.set_xticks(centres, [ctx.name(k) for k in keys], rotation=20, ha="right", fontsize=7.5)
        ax.set_xlabel("cell")
        ax.set_ylabel(m.axis)
        ax.margins(y=0.12)
        ax.grid(axis="x", visible=False)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}" if m.id == "iops" else "{x:,.2f}"))
        kinds = [Patch(facecolor="#777", alpha=0.5, label="per device (numbered as in the table)"),
                 Patch(facecolor="#777", edgecolor="black", label="total (Σ)")]
        fig.legend(handles=[*legend.values(), *kinds], loc="outside lower center", ncol=2)
        svg = plot.to_svg(fig, fid)
    unit = m.axis.split("(")[1].split(",")[0].rstrip(")") if "(" in m.axis else m.axis
    header = "IOPS" if m.id == "iops" else unit
    note = (" Stored totals differ from the per-device sum: " + "; ".join(mismatch) + ".") if mismatch else \
        " The per-device bars add up to the total."
    n_dev = max(len(e.devices) for k in keys for e in cells[k])
    return Figure("groups", fid, f"Device group: {m.title}{part}", svg,
                  Table(["run", "cell", "device", header, "avg lat ms", "max lat ms"], rows),
                  f"n = {ctx.n_runs()}, {len(keys)} cells, up to {n_dev} devices", points,
                  "Per device (lighter bars, numbered as in the table) and the step's total (Σ, fio over every job)."
                  + note)


class GroupsChart:
    name = "groups"
    title = "Device groups"
    order = 50

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        # built lazily: each figure is drawn in one of the report's worker processes
        cells = _entries(ctx)
        if not cells:
            return []
        keys = list(cells)
        per_cell = max(sum(len(e.devices) + 1 for e in es) for es in cells.values())
        chunks = _chunks(keys, per_cell)
        figs: list[FigureItem] = []
        for m in _metrics([e for es in cells.values() for e in es]):
            for i, chunk in enumerate(chunks):
                part = f" (part {i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
                figs.append(functools.partial(_figure, ctx, m, chunk, cells, part, f"groups-{m.id}-{i + 1}"))
        return figs


register(GroupsChart())
