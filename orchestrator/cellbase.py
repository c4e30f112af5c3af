"""What a measured cell's figures are made of: a metric (how a figure is named, headed and printed) and an entry (one
run's figures for one cell). Apart from :mod:`orchestrator.cellmetrics`, which picks the figures of each run kind, so
that a kind's own module (:mod:`orchestrator.netreport`) builds entries without importing the module that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str          # JSON / CSV field
    title: str         # table heading
    fmt: str           # how the table prints it
    diff: bool = True  # gets a difference to the first run


@dataclass(frozen=True)
class Entry:
    """One run's figures for one cell (one repeat of it)."""

    step: str | None                  # the step (or network group) name in that run; None: the run lacks the cell
    op_mode: str | None
    values: dict[str, float | None]   # metric name -> value; None when not measured (yet)
    label: str = ""                   # the cell's name (orchestrator.cells.cell_label, from the step's workload)
