"""Drive temperature beside the per-second IOPS: per measured step whose DUTs' temperature was read every second
(a drive with a hwmon sensor: NVMe, SATA with drivetemp; labcontract.drivetemp), the step's IOPS per second (its
result's series) and each DUT's °C on a second axis, so that a throttle shows as IOPS falling while the drive is
hot. At most :data:`MAX_FIGURES` steps per run (in plan order; the text reports give every step's range)."""

from __future__ import annotations

import functools

from orchestrator import power
from orchestrator.cells import cell_label
from orchestrator.htmlreport import fmt, plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.store.models import Result, Step

MAX_FIGURES = 24
TEMP_COLOURS = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2")


def steps_with_temps(view: RunView) -> list[tuple[Step, Result]]:
    out = [(st, res) for st, res in view.measured()
           if any(len(d.get("c") or []) >= 2 for d in power.drive_temps(res).values())]
    return out[:MAX_FIGURES]


def _figure(ctx: ReportContext, view: RunView, st: Step, res: Result, n: int) -> Figure | None:
    temps = {name: d for name, d in power.drive_temps(res).items() if len(d.get("c") or []) >= 2}
    series = res.series or {}
    ts, iops = series.get("t") or [], series.get("iops") or []
    rows: list[list[str]] = []
    drawn = 0
    with plot.figure(7.5, 3.4 + plot.legend_height(len(temps) + 1, ncol=3), layout="tight") as (fig, ax):
        pts = [(float(t), float(v)) for t, v in zip(ts, iops, strict=False) if t is not None and v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=view.colour, linewidth=1.1, label="IOPS")
            rows += [["IOPS", f"{t:,.1f}", fmt.iops(v)] for t, v in pts]
            drawn += len(pts)
        ax.set_xlabel("seconds of the step")
        ax.set_ylabel("IOPS")
        ax.set_ylim(bottom=0)
        hot = ax.twinx()
        for i, (name, d) in enumerate(temps.items()):
            xs, cs = [float(x) for x in d["t"]], [float(c) for c in d["c"]]
            hot.plot(xs, cs, color=TEMP_COLOURS[i % len(TEMP_COLOURS)], linewidth=1.1, linestyle="--",
                     label=f"{name} °C")
            rows += [[f"{name} °C", f"{x:,.1f}", f"{c:.1f}"] for x, c in zip(xs, cs, strict=True)]
            drawn += len(cs)
        hot.set_ylabel("drive temperature (°C)")
        hot.grid(False)
        lines = ax.get_legend_handles_labels()[0] + hot.get_legend_handles_labels()[0]
        ax.legend(lines, [str(ln.get_label()) for ln in lines], loc="lower left", bbox_to_anchor=(0, 1.01),
                  fontsize=7, ncol=3)
        fid = f"thermal-{view.index}-{n}"
        svg = plot.to_svg(fig, fid)
    if not drawn:
        return None
    label = cell_label(st.cell, st.workload)
    return Figure("thermal", fid, f"{label}: IOPS and drive temperature per second · {view.label()}", svg,
                  Table(["series", "seconds", "value"], rows), f"n = {drawn} points", drawn,
                  f"{power.during(res)}; the drive's own sensor (hwmon) read every second while the step ran.")


class Thermal:
    name = "thermal"
    title = "Drive temperature during the steps"
    order = 36

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        return [functools.partial(_figure, ctx, view, st, res, i) for view in ctx.runs
                for i, (st, res) in enumerate(steps_with_temps(view))]


register(Thermal())
