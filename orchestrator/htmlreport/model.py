"""What a chart module gets (the runs of the report, each with its label and style) and what it gives back
(figures: an SVG, the data table beneath it, n), and the registry of chart kinds.

A chart kind is one module under :mod:`orchestrator.htmlreport.charts` that calls :func:`register` with an
object of :class:`ChartKind`; the report asks every registered kind, in ``order``, for its figures and
leaves out a kind that has none (a network run has no preconditioning). Charts are built from the store
only (results, series, histograms, precondition records, network groups), never by running anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from labcontract.loadcurve import POINT
from labcontract.registry import Registry
from orchestrator.cells import CellKey, cell_key, cell_label, key_label, needs_op_mode
from orchestrator.provenance import Provenance, ReadArtifact, describe
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step

if TYPE_CHECKING:
    from orchestrator.runhistory import RunHistory

# one colour per device (run), one line style / hatch per OP mode: the legend names device, capacity, mode
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22")
MODE_STYLES = ("-", "--", ":", "-.")
MODE_HATCHES = ("", "//", "..", "xx")


def mode_rank(op_mode: str) -> int:
    """Line style / hatch of an OP mode, the same in every run of a report: stock solid, HP dashed."""
    return 0 if op_mode == "stock" else 1 if op_mode.startswith("hp") else 2


@dataclass(frozen=True)
class Table:
    """The data beneath a chart: exactly the numbers drawn, formatted for reading."""

    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Figure:
    chart: str           # the kind's name ("precondition", "scaling", ...): what tests and CSS select on
    id: str              # unique anchor in the page, e.g. "precondition-iops"
    title: str
    svg: str             # inline <svg> from plot.to_svg
    table: Table
    n: str               # "n = 2 runs, 41 rounds" / "n = 1 run, 16 cells"
    points: int          # data points drawn (> 0: a chart is never emitted empty)
    caption: str = ""    # one sentence: what is plotted, how values were computed


@dataclass(frozen=True)
class RunView:
    """One run of the report with how its series are drawn and named."""

    detail: RunDetail
    index: int
    provenance: Provenance

    @property
    def id(self) -> str:
        return self.detail.run.id

    @property
    def colour(self) -> str:
        return PALETTE[self.index % len(PALETTE)]

    def label(self, op_mode: str | None = None) -> str:
        """Legend text: device (model, capacity), OP mode, OS, and the run id when several runs share it."""
        p = self.provenance
        mode = op_mode or "/".join(p.op_modes)
        os_name = p.os.split(" (")[0]
        return " · ".join(part for part in (p.device_label, mode, os_name, self.id[-6:]) if part)

    def style(self, op_mode: str) -> str:
        return MODE_STYLES[mode_rank(op_mode)]

    def hatch(self, op_mode: str) -> str:
        return MODE_HATCHES[mode_rank(op_mode)]

    def measured(self, kind: str = "measure", *, load_points: bool = False) -> Iterator[tuple[Step, Result]]:
        """Steps of ``kind`` with a stored result, in plan order. A repeated cell (``repeat: N``) comes once, at
        its first measured repeat, with the mean of its repeats' results (:func:`mean_result`): every chart
        draws a repeated cell's mean, and the repeats section its interval. A load curve's points (rate-limited
        steps after a cell's maximum: labcontract.loadcurve) only with ``load_points``: they are the load-curve
        chart's, and would stand as cells of their own in every other chart."""
        repeats: dict[CellKey, list[tuple[Step, Result]]] = {}
        for st in self.detail.steps:
            if not load_points and POINT in st.cell:
                continue
            res = self.detail.results.get(st.id)
            if st.kind == kind and res is not None and (kind != "app" or st.cell.get("phase") != "prepare"):
                repeats.setdefault(cell_key(st.cell, with_op_mode=True), []).append((st, res))
            elif st.kind == kind and res is not None:
                yield st, res
        for found in repeats.values():
            yield found[0][0], found[0][1] if len(found) == 1 else mean_result([r for _, r in found])


def _mean_json(values: Sequence[Any]) -> Any:
    """The mean of same-shaped JSON values: numbers averaged, mappings key by key (keys all have), anything else
    (lists, text, a number missing somewhere) taken from the first."""
    first = values[0]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return math.fsum(values) / len(values)
    if all(isinstance(v, dict) for v in values):
        return {k: _mean_json([v[k] for v in values]) if all(k in v for v in values) else first[k] for k in first}
    return first


def mean_result(results: Sequence[Result]) -> Result:
    """A result (never stored) holding the mean of a repeated cell's results: each figure and each number of
    its metrics averaged (a percentile: the mean of the repeats' percentiles); its per-second series and
    latency histogram are the first repeat's."""
    first = results[0]
    cols = ("read_iops", "write_iops", "iops", "read_bw_bytes", "write_bw_bytes", "bw_bytes", "lat_mean_ns",
            "lat_max_ns", "lat_stddev_ns", "lat_p99_ns", "throughput")
    figures: dict[str, Any] = {}
    for c in cols:
        vals = [getattr(r, c) for r in results]
        figures[c] = None if any(v is None for v in vals) else math.fsum(vals) / len(vals)
    return Result(attempt_id=first.attempt_id, step_id=first.step_id, run_id=first.run_id, kind=first.kind,
                  tool=first.tool, tool_version=first.tool_version, throughput_unit=first.throughput_unit,
                  runtime_ms=first.runtime_ms, fio_version=first.fio_version,
                  metrics=_mean_json([r.metrics for r in results]),
                  per_device=_mean_json([r.per_device for r in results]) if all(r.per_device for r in results)
                  else first.per_device,
                  series=first.series, per_path=first.per_path, lat_hist=first.lat_hist,
                  provenance=first.provenance, created_at=first.created_at, **figures)


@dataclass(frozen=True)
class ReportContext:
    runs: list[RunView]
    with_op_mode: bool = False      # cells are matched with their OP mode (a run holds several modes)
    options: dict[str, str] = field(default_factory=dict)
    history: dict[str, RunHistory] = field(default_factory=dict)   # run id -> against its history (given)
    names: dict[CellKey, str] = field(default_factory=dict)        # ctx.key -> the cell's name, first run first

    @classmethod
    def of(cls, details: list[RunDetail], options: Mapping[str, str] | None = None,
           read_artifact: ReadArtifact | None = None) -> ReportContext:
        for d in details:
            for res in d.results.values():
                # loaded here, before the figures are drawn in forked processes: a deferred column (a compare's
                # light details) read in a child would use the parent's store connection
                _ = (res.series, res.lat_hist, res.per_device, res.per_path, res.metrics, res.provenance)
        views = [RunView(d, i, describe(d, read_artifact)) for i, d in enumerate(details)]
        with_mode = needs_op_mode([st.cell for st in d.steps] for d in details)
        names: dict[CellKey, str] = {}
        for d in details:
            for st in sorted(d.steps, key=lambda st: st.cell.get("role") == "target"):  # a network cell: initiators'
                names.setdefault(cell_key(st.cell, with_op_mode=with_mode),
                                 cell_label(st.cell, st.workload, with_op_mode=with_mode))
            workloads = {st.seq: st.workload for st in d.steps if st.cell.get("role") == "initiator"}
            for g in d.net_groups:
                names.setdefault(cell_key(g.cell, with_op_mode=with_mode),
                                 cell_label(g.cell, workloads.get(g.seq), with_op_mode=with_mode))
        return cls(views, with_mode, dict(options or {}), names=names)

    def key(self, step: Step) -> CellKey:
        return cell_key(step.cell, with_op_mode=self.with_op_mode)

    def label(self, step: Step, *, tq: bool = True) -> str:
        """The step's cell by its one name (:func:`orchestrator.cells.cell_label`: compare and the text report
        name it so too); ``tq=False``: without its T x Q (a ladder)."""
        return cell_label(step.cell, step.workload, with_op_mode=self.with_op_mode, tq=tq)

    def name(self, key: CellKey) -> str:
        """A cell key's name: the label of the first step of the report with that key (:meth:`label`)."""
        return self.names.get(key) or key_label(key)

    def n_runs(self) -> str:
        return f"{len(self.runs)} run" + ("s" if len(self.runs) != 1 else "")


# what a chart kind returns per figure: the figure, or a callable that builds it (None: no data after all).
# Callables run in the report's worker processes, so a kind whose figures are costly to build (many axes)
# returns callables; they must return a picklable Figure and must not touch the store.
FigureItem = Figure | Callable[[], Figure | None]


class ChartKind(Protocol):
    name: str       # stable id: figure ids, CSS, tests
    title: str      # section heading
    order: int      # position in the report

    def figures(self, ctx: ReportContext) -> Sequence[FigureItem]: ...


def materialize(items: Sequence[FigureItem]) -> list[Figure]:
    """A kind's figures built here, in order (lazy ones called; those without data dropped)."""
    out = [it if isinstance(it, Figure) else it() for it in items]
    return [f for f in out if f is not None]


CHART_KINDS: Registry[ChartKind] = Registry("chart kind")


def register(kind: ChartKind) -> ChartKind:
    return CHART_KINDS.add(kind.name, kind)

