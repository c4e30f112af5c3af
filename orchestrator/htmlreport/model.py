"""What a chart module gets (the runs of the report, each with its label and style) and what it gives back
(figures: an SVG, the data table beneath it, n), and the registry of chart kinds.

A chart kind is one module under :mod:`orchestrator.htmlreport.charts` that calls :func:`register` with an
object of :class:`ChartKind`; the report asks every registered kind, in ``order``, for its figures and
leaves out a kind that has none (a network run has no preconditioning). Charts are built from the store
only (results, series, histograms, precondition records, network groups), never by running anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.cells import CellKey, cell_key, needs_op_mode
from orchestrator.provenance import Provenance, ReadArtifact, describe
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step

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

    def measured(self, kind: str = "measure") -> Iterator[tuple[Step, Result]]:
        """Steps of ``kind`` with a stored result, in plan order."""
        for st in self.detail.steps:
            res = self.detail.results.get(st.id)
            if st.kind == kind and res is not None:
                yield st, res


@dataclass(frozen=True)
class ReportContext:
    runs: list[RunView]
    with_op_mode: bool = False      # cells are matched with their OP mode (a run holds several modes)
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, details: list[RunDetail], options: Mapping[str, str] | None = None,
           read_artifact: ReadArtifact | None = None) -> ReportContext:
        for d in details:
            for res in d.results.values():
                # loaded here, before the figures are drawn in forked processes: a deferred column (a compare's
                # light details) read in a child would use the parent's store connection
                _ = (res.series, res.lat_hist, res.per_device, res.per_path, res.metrics, res.provenance)
        views = [RunView(d, i, describe(d, read_artifact)) for i, d in enumerate(details)]
        return cls(views, needs_op_mode([st.cell for st in d.steps] for d in details), dict(options or {}))

    def key(self, step: Step) -> CellKey:
        return cell_key(step.cell, with_op_mode=self.with_op_mode)

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


CHART_KINDS: dict[str, ChartKind] = {}


def register(kind: ChartKind) -> ChartKind:
    if kind.name in CHART_KINDS:
        raise ValueError(f"chart kind {kind.name!r} registered twice")
    CHART_KINDS[kind.name] = kind
    return kind


def chart_kinds() -> list[ChartKind]:
    import orchestrator.htmlreport.charts  # noqa: F401  (registers the built-in kinds)

    return sorted(CHART_KINDS.values(), key=lambda k: (k.order, k.name))
