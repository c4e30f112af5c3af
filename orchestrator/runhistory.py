"""A run against its history: which of its cells regressed (:func:`orchestrator.stats.history.regressions_for_run`)
and how much history there was to say so. What the HTML report's "Against history" section and the web run
page's "regressed" badges show.

Computed by a caller that has a store session (``labctl report``, the web service's drawing subprocess, the run
page) and handed to the report as plain data: the report's chart kinds never touch the store (their figures are
drawn in forked processes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from orchestrator.cells import CellKey, cell_key
from orchestrator.stats.changepoints import min_points
from orchestrator.stats.history import Regression, Series, find_regressions, load_series
from orchestrator.stats.noise import Noise
from orchestrator.store.models import Run

MEASURED = ("measure", "app", "net")


@dataclass(frozen=True)
class RunHistory:
    run_id: str
    regressions: tuple[Regression, ...]   # unacknowledged, landing at this run
    series: int                           # the run's series long enough to be judged
    too_short: int                        # ... and those that are not
    runs: int                             # the longest of the run's series, in runs
    # (cell key, metric) of each regression -> its series: run ids and values, in run order
    series_of: dict[tuple[CellKey, str], tuple[list[str], list[float]]] = field(default_factory=dict)
    changed_on: str | None = None         # the run where the suite changed and the run's short series began
    noise: Noise | None = None            # the noisiest of the run's judged series: what it cannot see

    @property
    def regressed_keys(self) -> set[CellKey]:
        return {r.cell_key for r in self.regressions}

    def summary(self) -> str:
        """One line: what was found, or why nothing could be."""
        if self.regressions:
            cells = len(self.regressed_keys)
            return (f"{len(self.regressions)} regression{'s' if len(self.regressions) != 1 else ''} in {cells} "
                    f"cell{'s' if cells != 1 else ''} against a history of up to {self.runs} runs")
        if not self.series and not self.too_short:
            return "no figure of this run is in a history yet (it has not ended, or measured nothing)"
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        if not self.series and self.changed_on:
            return f"the suite changed on {self.changed_on}: new series, history too short ({runs}, the detector " \
                   f"needs {min_points()})"
        if not self.series:
            return f"history too short: {runs} (the detector needs {min_points()})"
        short = f"; {self.too_short} series too short" if self.too_short else ""
        if self.too_short and self.changed_on:
            short += f" (the suite changed on {self.changed_on}: new series)"
        noise = f"; noisiest series: {self.noise.line()}" if self.noise is not None else ""
        return f"no regression against its {self.runs}-run history ({self.series} series judged{short}){noise}"

    def step_marks(self, steps: Iterable[tuple[str, str, Mapping[str, Any]]]) -> dict[str, str]:
        """step id -> what regressed in its cell (``iops -23.1% (120,000 -> 92,280), confidence 99%``), for
        the steps given as (id, kind, cell): every repeat of a regressed cell is marked."""
        by_key: dict[CellKey, list[Regression]] = {}
        for r in self.regressions:
            by_key.setdefault(r.cell_key, []).append(r)
        out: dict[str, str] = {}
        for sid, kind, cell in steps:
            if kind not in MEASURED or cell.get("phase") == "prepare":
                continue
            regs = by_key.get(cell_key(cell, with_op_mode=True))
            if regs:
                out[sid] = "; ".join(describe(r) for r in regs)
        return out


def describe(r: Regression) -> str:
    return (f"{r.metric} {r.change_pct:+.1f}% ({figure_text(r.before)} -> {figure_text(r.after)}), "
            f"confidence {r.confidence * 100:.0f}%")


def figure_text(v: float) -> str:
    """A history figure in a line or a table: whole numbers from 100 up, three digits below."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


def run_history(s: Session, run_id: str,
                loaded: dict[tuple[str, str], list[Series]] | None = None) -> RunHistory | None:
    """None for a run that is not in the store. ``loaded``: the series already read per (host, suite), shared by
    the runs of one report (filled here)."""
    run = s.get(Run, run_id)
    if run is None:
        return None
    need = min_points()
    key = (run.host, run.suite_name)
    every = loaded.get(key) if loaded is not None else None
    if every is None:
        every = load_series(s, host=run.host, suite=run.suite_name)
        if loaded is not None:
            loaded[key] = every
    mine = [ser for ser in every if run_id in ser.run_ids]
    judged = sum(1 for ser in mine if len(ser.values) >= need)
    changed = [ser.changed_from for ser in mine if len(ser.values) < need and ser.changed_from]
    noises = [n for ser in mine if (n := ser.noise()) is not None]
    regs = find_regressions(s, host=run.host, suite=run.suite_name, run_id=run_id, series=mine)[0] if judged else []
    drawn = {(r.cell_key, r.metric, r.model, r.firmware) for r in regs}
    series_of = {(ser.ident.cell_key, ser.ident.metric): (list(ser.run_ids), list(ser.values)) for ser in mine
                 if (ser.ident.cell_key, ser.ident.metric, ser.ident.model, ser.ident.firmware) in drawn}
    return RunHistory(run_id, tuple(regs), judged, len(mine) - judged,
                      max((len(x.values) for x in mine), default=0), series_of, changed[0] if changed else None,
                      max(noises, key=lambda n: n.detectable_pct, default=None))


class HistoryCache:
    """Run histories of ended runs for a while (the web run page): judging a run loads its host's series of that
    suite, about 0.5 s at 10,000 runs, too slow for every view of a page. A history changes only when another
    run of that host and suite ends or a regression is acknowledged, so a view may be ``ttl_s`` behind that.
    Bounded: the oldest entries go first."""

    def __init__(self, ttl_s: float = 30.0, max_entries: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_entries, self.clock = ttl_s, max_entries, clock
        self._entries: dict[str, tuple[float, RunHistory | None]] = {}
        self._lock = threading.Lock()

    def get(self, s: Session, run_id: str,
            guard: Callable[[], AbstractContextManager[None]] | None = None) -> RunHistory | None:
        """The run's history, read again when older than ``ttl_s``; a read holds ``guard()`` (the web service's
        bounded history slots: it may raise Busy) while a cached one does not."""
        now = self.clock()
        with self._lock:
            hit = self._entries.get(run_id)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        with guard() if guard is not None else nullcontext():
            value = run_history(s, run_id)
        with self._lock:
            self._entries.pop(run_id, None)
            self._entries[run_id] = (now, value)
            while len(self._entries) > self.max_entries:
                self._entries.pop(next(iter(self._entries)))
        return value


def histories(s: Session, run_ids: Iterable[str]) -> dict[str, RunHistory]:
    """run id -> its history, for a report's runs (the series of each host and suite read once)."""
    loaded: dict[tuple[str, str], list[Series]] = {}
    return {rid: h for rid in dict.fromkeys(run_ids) if (h := run_history(s, rid, loaded)) is not None}
