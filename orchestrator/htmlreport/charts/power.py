"""IOPS per watt: per run whose host's power was read from its BMC during its steps (docs/power.md), a bar per
measured step with its IOPS over the host's average watts, and beneath it the table of every measured step: the
host's power (average, peak, how many seconds were read), IOPS/W, MB/s/W, its drives' temperature before and
after and the thermal throttle transitions during it; a step whose power was not read says "not measured". A run
none of whose steps had its power read draws nothing (its steps read "not measured" in the text reports)."""

from __future__ import annotations

from orchestrator import power
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.htmlreport.plot import text_width


def _figure(view: RunView) -> Figure | None:
    rows = power.rows(view.detail)
    drawn = [(st.name, eff) for st in view.detail.steps if st.kind == "measure" and st.id in view.detail.results
             and (eff := power.efficiency(view.detail.results[st.id]))["iops_per_w"] is not None]
    if not drawn:
        return None
    fid = f"power-{view.index}"
    labels = [name for name, _ in drawn]
    values = [float(eff["iops_per_w"] or 0.0) for _, eff in drawn]
    with plot.figure(7.5, 0.9 + 0.28 * len(drawn), layout=None) as (fig, ax):
        plot.margins(fig, left=max(text_width(lab) for lab in labels) + 0.45, bottom=0.5, top=0.15)
        ys = list(range(len(drawn)))
        ax.barh(ys, values, height=0.7, color=view.colour)
        for y, v in zip(ys, values, strict=True):
            ax.annotate(f"{v:,.1f}", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(ys, labels)
        ax.invert_yaxis()
        ax.set_xlabel("IOPS per watt (the host's average power during the step)")
        ax.set_xlim(0, max(values) * 1.18 or 1)
        ax.grid(axis="y", visible=False)
        svg = plot.to_svg(fig, fid)
    return Figure("power", fid, f"IOPS per watt · {view.label()}", svg, Table(list(power.COLUMNS), rows),
                  f"n = {len(drawn)} of {len(rows)} steps with the host's power", len(drawn),
                  "IOPS / W: the step's IOPS over the host's average power read from its BMC (Redfish) once a "
                  "second while it ran; the whole host's power, CPUs and fans included.")


class Power:
    name = "power"
    title = "Power: IOPS per watt, drive temperature"
    order = 35

    def figures(self, ctx: ReportContext) -> list[FigureItem]:
        return [f for view in ctx.runs if (f := _figure(view)) is not None]


register(Power())
