"""Against history (issue 16): each cell of a run that regressed against its history
(:func:`orchestrator.stats.history.regressions_for_run`, via :mod:`orchestrator.runhistory`): the figure's series
over the runs of the same host, device model, firmware and suite, this run marked, the means before and after the
change drawn as dashed lines; the table gives before -> after, the change, the confidence and the rule that
found it (a change point, or the last-point rule for the latest runs).

Only when the report's caller computed the history (``build_html(..., history=...)``: ``labctl report`` and
the web service do); a run without a regression gets no figure here, and its line in the runs table says why
("no regression against its 12-run history", "history too short").
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from orchestrator.cellmetrics import APP_METRICS, STORAGE_METRICS
from orchestrator.htmlreport import plot
from orchestrator.htmlreport.model import Figure, FigureItem, ReportContext, RunView, Table, register
from orchestrator.runhistory import RunHistory, describe, figure_text
from orchestrator.stats.history import Regression

MAX_FIGURES = 12        # per run: the largest changes first
TITLES = {m.name: m.title for m in (*STORAGE_METRICS, *APP_METRICS)} | {"gbps": "Gbps"}
RULES = {"change": "change point (E-Divisive)", "last": "last-point rule (mean ± max(3 sd, 5%))"}


def _figure(view: RunView, hist: RunHistory, reg: Regression, k: int) -> Figure | None:
    found = hist.series_of.get((reg.cell_key, reg.metric))
    if found is None or reg.run_id not in found[0]:
        return None
    run_ids, values = found
    at = run_ids.index(reg.run_id)
    xs = list(range(1, len(values) + 1))
    title = TITLES.get(reg.metric, reg.metric)
    fid = f"history-{view.index}-{k}"
    with plot.figure(7.5, 2.8, layout=None) as (fig, ax):
        plot.margins(fig, left=0.9, bottom=0.5, top=0.15)
        ax.plot(xs, values, "o-", color="#555555", markersize=3, linewidth=0.8, label="runs (mean of repeats)")
        ax.plot([xs[at]], [values[at]], "o", color="#d62728", markersize=7, label=f"this run ({view.id})")
        ax.hlines(reg.before, 1, xs[at] - 0.5, colors=view.colour, linestyles="--", linewidth=1.0,
                  label=f"mean before: {figure_text(reg.before)}")
        ax.hlines(reg.after, xs[at] - 0.5, len(values), colors="#d62728", linestyles="--", linewidth=1.0,
                  label=f"mean after: {figure_text(reg.after)}")
        ax.set_xlabel("run (oldest first)")
        ax.set_ylabel(title)
        ax.legend(loc="best", fontsize=7)
        svg = plot.to_svg(fig, fid)
    row = [reg.cell, title, figure_text(reg.before), figure_text(reg.after), f"{reg.change_pct:+.1f}%",
           f"{reg.confidence * 100:.0f}%", RULES.get(reg.rule, reg.rule)]
    return Figure("history", fid, f"{reg.cell} {title}: {reg.change_pct:+.1f}% against its history", svg,
                  Table(["cell", "figure", "before (mean)", "after (mean)", "change", "confidence", "found by"],
                        [row]),
                  f"n = {len(values)} runs of {reg.suite} on {reg.host}"
                  + (f" ({reg.model}{' ' + reg.firmware if reg.firmware else ''})" if reg.model else ""), len(values),
                  f"Regressed: {title} {describe(reg).removeprefix(reg.metric + ' ')}. Dots: this figure in every "
                  "run of the series (host, device model, firmware, suite, cell); red: this run; dashed: the "
                  "means before and after the change. Judged when the report was built: later runs can confirm or "
                  "clear it; an acknowledged regression is not shown (labctl regressions).")


class AgainstHistory:
    name = "history"
    title = "Against history: cells that regressed"
    order = 5

    def figures(self, ctx: ReportContext) -> Sequence[FigureItem]:
        out: list[FigureItem] = []
        for view in ctx.runs:
            hist = ctx.history.get(view.id)
            if hist is None:
                continue
            regs = sorted(hist.regressions, key=lambda r: -abs(r.change_pct))[:MAX_FIGURES]
            out += [functools.partial(_figure, view, hist, r, k) for k, r in enumerate(regs)]
        return out


register(AgainstHistory())
