"""A run's repeated cells: every figure of a cell that ran N times (``repeat:``) as its N values and their
:class:`~orchestrator.stats.summary.Summary` (mean, median, 95% interval, CoV). What ``run show``, the HTML
report, the export and compare print for repeats.

A repeat that failed or is not measured yet gives no value: a cell summarizes the repeats it has, and says
how many of how many planned (``n`` / ``planned``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from labcontract.rounds import round_of
from orchestrator.cellmetrics import Metric, cell_entries, result_kind
from orchestrator.cells import CellKey, key_label
from orchestrator.queries import RunDetail
from orchestrator.stats.summary import Summary, summarize

MAX_FIGURE = 1e18    # beyond any IOPS, byte rate or latency in ns; larger stored values are not summarized


@dataclass
class CellSamples:
    key: CellKey
    label: str
    op_mode: str | None
    steps: list[str] = field(default_factory=list)                  # one per repeat, in plan order
    values: dict[str, list[float]] = field(default_factory=dict)    # metric -> one value per measured repeat

    @property
    def planned(self) -> int:
        return len(self.steps)

    def n(self, metric: str) -> int:
        return len(self.values.get(metric, []))

    def summary(self, metric: str) -> Summary | None:
        """None when no repeat measured it."""
        vals = self.values.get(metric) or []
        return summarize(vals, f"{self.label} {metric}") if vals else None


def run_samples(d: RunDetail, with_op_mode: bool = False) -> dict[CellKey, CellSamples]:
    """The run's cells in plan order, each with the values of all its repeats."""
    out: dict[CellKey, CellSamples] = {}
    for key, entry in cell_entries(d, with_op_mode):
        cs = out.get(key)
        if cs is None:
            cs = out[key] = CellSamples(key, entry.label or key_label(key), entry.op_mode)
        if entry.step is not None:
            cs.steps.append(entry.step)
        for name, v in entry.values.items():
            # a stored figure that is not finite or absurd (an agent's fio JSON may say Infinity; 1e308s overflow
            # the sums) is no value, as a missing one: summarize() refuses it, and a report must still draw
            if v is not None and math.isfinite(v) and abs(v) <= MAX_FIGURE:
                cs.values.setdefault(name, []).append(float(v))
    return out


def is_repeated(d: RunDetail) -> bool:
    """Whether some cell of the run was planned more than once (a rounds run's cells: once per round)."""
    return any(s.cell.get("repeat", 1) != 1 or (round_of(s.cell) or 0) > 1 for s in d.steps)


def summary_metrics(d: RunDetail) -> Sequence[Metric]:
    """The figures a repeated cell is summarized on (a network run: its total Gbps, target Gbps and IOPS): its
    result kind's (orchestrator.cellmetrics.RESULT_KINDS)."""
    return result_kind(d).summary


def fmt_summary(s: Summary | None, fmt: str) -> str:
    """``12,345 ± 1.9% (CoV 2.1%, n=5)``: the mean, the 95% interval's half width in % of it, the CoV."""
    if s is None:
        return "-"
    mean = fmt.format(s.mean)
    if s.too_noisy:
        return f"{mean} ({s.note})"
    if s.n < 2 or s.ci_low is None or s.ci_high is None:
        return f"{mean} (n={s.n})"
    cov = f"CoV {s.cov_pct:.1f}%, " if s.cov_pct is not None else ""
    return f"{mean} {interval_text(s, fmt)} ({cov}n={s.n})"


def interval_text(s: Summary, fmt: str) -> str:
    """The 95% interval in % of the mean: ``± 1.9%``, or ``-18.0% +21.9%`` when the log-scale interval of a
    positive figure leans visibly to the high side; the note of a cell too noisy to have one."""
    if s.too_noisy:
        return s.note
    if s.ci_low is None or s.ci_high is None:
        return "-"
    if not s.mean:
        return f"± {fmt.format((s.ci_high - s.ci_low) / 2)}"
    below, above = (s.mean - s.ci_low) / abs(s.mean) * 100, (s.ci_high - s.mean) / abs(s.mean) * 100
    if round(below, 1) == round(above, 1):
        return f"± {above:.1f}%"
    return f"-{below:.1f}% +{above:.1f}%"


def summary_rows(d: RunDetail) -> tuple[list[str], list[list[str]]]:
    """The repeated cells as text: ``cell | n | <metric> | ±95% | CoV`` per summary metric; the interval's
    half width and the CoV in % of the mean. No rows when the run has no repeats."""
    metrics = [m for m in summary_metrics(d) if m.name in ("iops", "lat_mean_us", "tps", "lat_p95_ms", "gbps")]
    heads = ["cell", "n"]
    for m in metrics:
        heads += [m.title, "±95%", "CoV"]
    rows: list[list[str]] = []
    if not is_repeated(d):
        return heads, rows
    for cs in run_samples(d, with_op_mode=True).values():
        row = [cs.label, f"{max((cs.n(m.name) for m in metrics), default=0)}/{cs.planned}"]
        for m in metrics:
            s = cs.summary(m.name)
            if s is None:
                row += ["-", "-", "-"]
                continue
            row += [m.fmt.format(s.mean), interval_text(s, m.fmt).removeprefix("± "),
                    "-" if s.cov_pct is None else f"{s.cov_pct:.1f}%"]
        rows.append(row)
    return heads, rows
