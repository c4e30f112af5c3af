"""Any number of runs side by side (stock vs HP, device A vs B, OS vs OS, single vs multipath), cell by cell.

Cells are matched with :mod:`orchestrator.cells` (the same identity the HTML report and the export use), so
a cell means the same thing everywhere. A run's figure for a cell is the mean over the cell's repeats (a
suite's ``repeat: N``; one value when it ran once). The first run is the baseline: every other run's figures
get their difference to it in %, and, when both runs have at least 2 repeats of the cell, the verdict of
:func:`orchestrator.stats.significance.judge` (significant or not, the test, p, effect size and the 95%
interval of the difference); with a single run on either side the difference cannot be judged and is said
so. A run still in progress is compared with what it has and marked partial; nothing is filled in for a cell
it has not measured. Output as a terminal table (:mod:`orchestrator.comparetable`), or JSON / CSV whose
fields are stable for scripts (docs/metrics.md, "Comparing runs"; docs/statistics.md, "Compare").
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from labcontract.errors import CompareError, InputError
from labcontract.registry import Registry
from orchestrator.cellmetrics import HEADLINE, Entry, Metric, result_kind
from orchestrator.cells import CellKey, key_label, needs_op_mode, op_modes
from orchestrator.queries import RunDetail, resolve_run_id, run_detail
from orchestrator.states import TERMINAL_RUN
from orchestrator.stats.samples import CellSamples, run_samples
from orchestrator.stats.significance import Verdict, judge, test_for
from orchestrator.stats.summary import Summary

FORMAT_VERSION = 1
ALPHA = 0.05           # two-sided level of every verdict (95% intervals)
CANNOT_JUDGE = "single run: cannot judge"


@dataclass(frozen=True)
class Row:
    key: CellKey
    label: str                          # full cell name (orchestrator.cells.cell_label), never truncated
    entries: list[Entry]                # one per run, in run order: the mean over the cell's repeats
    samples: list[CellSamples | None]   # one per run: every repeat's values; None: the run lacks the cell
    _verdicts: dict[tuple[int, str], Verdict | None] = field(default_factory=dict, repr=False, compare=False)

    def diff(self, i: int, metric: str) -> float | None:
        """Run ``i``'s mean against the first run's in %: (x - first) / first x 100; None when either is
        missing or the first is 0."""
        base, x = self.entries[0].values.get(metric), self.entries[i].values.get(metric)
        if base is None or x is None or base == 0:
            return None
        return (x - base) / base * 100

    def values(self, i: int, metric: str) -> list[float]:
        """Run ``i``'s value of each measured repeat of the cell."""
        cs = self.samples[i]
        return cs.values.get(metric, []) if cs is not None else []

    def repeats(self, i: int) -> int:
        """Repeats of the cell run ``i`` measured (the most any metric has)."""
        cs = self.samples[i]
        return max((len(v) for v in cs.values.values()), default=0) if cs is not None else 0

    def summary(self, i: int, metric: str) -> Summary | None:
        cs = self.samples[i]
        return cs.summary(metric) if cs is not None else None

    def verdict(self, i: int, metric: str) -> Verdict | None:
        """Run ``i`` (not the first) against the first on ``metric``: the test :func:`test_for` picks, at
        :data:`ALPHA`; kind "cannot be judged" when either side has a single repeat; None when either has no
        value (or for the first run). Computed when first asked (a 10-run compare of 125 cells has 5,000)."""
        if (i, metric) not in self._verdicts:
            a, b = self.values(0, metric), self.values(i, metric)
            v: Verdict | None = None
            if i > 0 and a and b:
                try:
                    v = judge(a, b, ALPHA, test_for(metric))
                except (InputError, ValueError):      # a non-finite value: no verdict rather than a wrong one
                    v = None
            self._verdicts[(i, metric)] = v
        return self._verdicts[(i, metric)]


@dataclass(frozen=True)
class Comparison:
    details: list[RunDetail]
    network: bool
    with_op_mode: bool
    metrics: list[Metric]
    rows: list[Row]

    def partial(self, i: int) -> bool:
        return self.details[i].run.state not in TERMINAL_RUN

    @property
    def judged(self) -> list[Metric]:
        """The metrics whose verdict the table shows (cellmetrics.HEADLINE); JSON and CSV carry every one."""
        return [m for m in self.metrics if m.diff and m.name in HEADLINE]

    @functools.cached_property
    def oses(self) -> list[tuple[str | None, str | None]]:
        """Each run's (os, os_family) as its results recorded the host (:func:`run_os`), once per comparison."""
        return [run_os(d) for d in self.details]

    @property
    def repeated(self) -> bool:
        """Whether some cell of some run has more than one repeat."""
        return any(row.repeats(i) > 1 for row in self.rows for i in range(len(row.entries)))


def ref_name(i: int) -> str:
    """A, B, ... Z, then R27, R28 ...: short run names for table columns."""
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def _mean(values: list[float] | None) -> float | None:
    return math.fsum(values) / len(values) if values else None


def compare_details(details: Sequence[RunDetail], units: str = "decimal") -> Comparison:
    """Match the runs' cells (see the module docstring); CompareError when they cannot be compared. ``units``:
    bandwidth in MB/s (``decimal``) or MiB/s (``binary``, its metric then ``mib_s``: :mod:`orchestrator.units`)."""
    from orchestrator import units as unit

    details = list(details)
    if len(details) < 2:
        raise CompareError(f"compare needs at least 2 runs, got {len(details)}")
    kinds = [result_kind(d) for d in details]       # orchestrator.cellmetrics.RESULT_KINDS
    if len({k.name for k in kinds}) > 1:
        i = next(j for j, k in enumerate(kinds) if k.name != "storage")
        o = next(j for j, k in enumerate(kinds) if k is not kinds[i])
        title = kinds[i].title
        raise CompareError(f"run {details[i].run.id} (suite {details[i].run.suite_name}) is "
                           f"{'an' if title[0] in 'aeiou' else 'a'} {title} run and run {details[o].run.id} (suite "
                           f"{details[o].run.suite_name}) is not: {title} runs compare only with {title} runs")
    with_mode = needs_op_mode([st.cell for st in d.steps] for d in details)
    per_run = [run_samples(d, with_mode) for d in details]
    metrics = kinds[0].compare_metrics(details)
    if unit.check_units(units) != "decimal":
        metrics = unit.metrics_in(metrics, units)
        for cells in per_run:
            for cs in cells.values():
                cs.values = {unit.named(k, units): [unit.value(k, x, units) or 0.0 for x in v]
                             for k, v in cs.values.items()}
    first = details[0]
    for d, cells in zip(details[1:], per_run[1:], strict=True):
        if not cells.keys() & per_run[0].keys():
            raise CompareError(f"no cell in common between {first.run.id} (suite {first.run.suite_name}: "
                               f"{len(per_run[0])} cells) and {d.run.id} (suite {d.run.suite_name}: "
                               f"{len(cells)} cells)")
    order: dict[CellKey, None] = {}
    for cells in per_run:
        order.update(dict.fromkeys(cells))

    def entry(cs: CellSamples | None) -> Entry:   # every metric present, None where the run has no figure
        if cs is None:
            return Entry(None, None, {m.name: None for m in metrics})
        return Entry(cs.steps[0] if cs.steps else None, cs.op_mode,
                     {m.name: _mean(cs.values.get(m.name)) for m in metrics})

    rows = []
    for k in order:
        samples = [cells.get(k) for cells in per_run]
        label = next((cs.label for cs in samples if cs is not None), key_label(k))
        rows.append(Row(k, label, [entry(cs) for cs in samples], samples))
    return Comparison(details, kinds[0].name == "net", with_mode, metrics, rows)


def baseline_first(ids: Sequence[str], baseline: str | None) -> list[str]:
    """``ids`` with ``baseline`` first, the others in their order (none given: as they are): what ``labctl compare
    --baseline``, ``GET /api/compare?baseline=`` and the compare page call. CompareError when it is not one of
    them."""
    ids = list(ids)
    if not baseline:
        return ids
    if baseline not in ids:
        raise CompareError(f"baseline {baseline[:64]!r} is not one of the compared runs "
                           f"({', '.join(ids) or 'none picked'})")
    return [baseline, *(rid for rid in ids if rid != baseline)]


def compare_runs(s: Session, refs: Sequence[str], units: str = "decimal", baseline: str | None = None) -> Comparison:
    """Resolve the run references (id, unique prefix, ``last``) and compare them, ``baseline`` (a reference to one
    of them) first; StoreError for an unknown one."""
    if len(refs) < 2:
        raise CompareError(f"compare needs at least 2 runs, got {len(refs)}")
    ids = [resolve_run_id(s, ref) for ref in refs]
    ids = baseline_first(ids, resolve_run_id(s, baseline) if baseline else None)
    return compare_details([run_detail(s, rid, light=True) for rid in ids], units)


# --- JSON and CSV -------------------------------------------------------------------------------------

def _pct_of(x: float | None, base: float) -> float | None:
    return None if x is None or base == 0 else x / abs(base) * 100


def verdict_fields(v: Verdict | None) -> dict[str, Any] | None:
    """A verdict as JSON fields (docs/metrics.md); the interval of the difference also in % of the baseline."""
    if v is None:
        return None
    return {"verdict": v.kind, "test": v.test, "n_a": v.n_a, "n_b": v.n_b, "p": v.p,
            "effect_size": v.effect_size, "effect_name": v.effect_name or None, "diff": v.diff,
            "diff_pct": v.rel_diff_pct, "diff_ci_low": v.ci_low, "diff_ci_high": v.ci_high,
            "diff_ci_low_pct": _pct_of(v.ci_low, v.mean_a), "diff_ci_high_pct": _pct_of(v.ci_high, v.mean_a),
            "reason": v.reason}


def summary_fields(s: Summary | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"n": s.n, "mean": s.mean, "median": s.median, "stdev": s.stdev, "ci_low": s.ci_low,
            "ci_high": s.ci_high, "cov_pct": s.cov_pct, "note": s.note or None}


def run_os(d: RunDetail) -> tuple[str | None, str | None]:
    """The OS a run measured on, as its results' provenance recorded the host (``os``, ``os_family``: ``linux`` or
    ``windows``); (None, None) before any result. Compares of one device under Linux and Windows tell them apart
    by this, not by the host's facts now."""
    for res in d.results.values():
        host = (res.provenance or {}).get("host") or {}
        if isinstance(host, dict) and (host.get("os") or host.get("os_family")):
            name, family = host.get("os"), host.get("os_family")
            return (str(name) if name else None, str(family) if family else None)
    return None, None


def _kind(c: Comparison) -> str:
    return "network" if c.network else "application" if c.metrics and c.metrics[0].name == "tps" else "storage"


def as_json(c: Comparison) -> str:
    """The comparison as one JSON document (fields in docs/metrics.md); missing values are null."""
    runs = [{"ref": ref_name(i), "id": d.run.id, "suite": d.run.suite_name, "host": d.run.host,
             "devices": list(d.run.devices or [d.run.device]), "op_modes": op_modes(st.cell for st in d.steps),
             "state": d.run.state, "partial": c.partial(i), "os": c.oses[i][0], "os_family": c.oses[i][1],
             "lab": d.run.lab or ""}
            for i, d in enumerate(c.details)]
    diffed = [m for m in c.metrics if m.diff]
    cells = [{"cell": row.label, "key": dict(row.key),
              "runs": [{"run": c.details[i].run.id, "step": e.step, "op_mode": e.op_mode, **e.values,
                        "vs_first_pct": {m.name: row.diff(i, m.name) if i else None for m in diffed},
                        "repeats": row.repeats(i), "steps": list(cs.steps) if (cs := row.samples[i]) else [],
                        "stats": {m.name: summary_fields(row.summary(i, m.name)) for m in c.metrics},
                        "verdicts": {m.name: verdict_fields(row.verdict(i, m.name)) for m in diffed}}
                       for i, e in enumerate(row.entries)]} for row in c.rows]
    judged = {m.name for m in c.judged}
    doc = {"format_version": FORMAT_VERSION, "kind": _kind(c), "match_op_mode": c.with_op_mode, "alpha": ALPHA,
           "runs": runs,
           "metrics": [{"name": m.name, "title": m.title, "vs_first": m.diff,
                        "test": test_for(m.name) if m.diff else None, "headline": m.name in judged}
                       for m in c.metrics], "cells": cells}
    return json.dumps(doc, indent=2, ensure_ascii=False)


CSV_HEAD = ("cell", "run_ref", "run", "suite", "state", "partial", "step", "op_mode")
# per metric with a difference, after the existing columns: the run's repeats and the verdict against the first
CSV_STATS = ("n", "ci_low", "ci_high", "cov_pct", "note", "verdict", "test", "p", "effect_size", "diff_ci_low_pct",
             "diff_ci_high_pct")


def csv_columns(c: Comparison) -> list[str]:
    diffed = [m.name for m in c.metrics if m.diff]
    return [*CSV_HEAD, *(m.name for m in c.metrics), *(f"{m}_vs_first_pct" for m in diffed), "repeats",
            *(f"{m}_{s}" for m in diffed for s in CSV_STATS)]


def _stats_cells(row: Row, i: int, metric: str) -> list[Any]:
    s, v = row.summary(i, metric), verdict_fields(row.verdict(i, metric))
    return [s.n if s else None, s.ci_low if s else None, s.ci_high if s else None, s.cov_pct if s else None,
            (s.note or None) if s else None,
            *((v[k] for k in ("verdict", "test", "p", "effect_size", "diff_ci_low_pct", "diff_ci_high_pct"))
              if v else [None] * 6)]


def as_csv(c: Comparison) -> str:
    """One line per cell and run (long format: a spreadsheet pivots it); missing values are empty fields."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_columns(c))
    diffed = [m.name for m in c.metrics if m.diff]

    def cell(v: Any) -> Any:
        return "" if v is None else v

    for row in c.rows:
        for i, e in enumerate(row.entries):
            d = c.details[i].run
            w.writerow([row.label, ref_name(i), d.id, d.suite_name, d.state, str(c.partial(i)).lower(),
                        cell(e.step), cell(e.op_mode), *(cell(e.values.get(m.name)) for m in c.metrics),
                        *(cell(row.diff(i, m) if i else None) for m in diffed), row.repeats(i),
                        *(cell(x) for m in diffed for x in _stats_cells(row, i, m))])
    return buf.getvalue()


# compare's output formats besides its table (labctl compare --format, the web's compare downloads)
FORMATS: Registry[Callable[[Comparison], str]] = Registry("compare format")
FORMATS.add("json", as_json)
FORMATS.add("csv", as_csv)
