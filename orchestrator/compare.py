"""Any number of runs side by side (stock vs HP, device A vs B, OS vs OS, single vs multipath), cell by cell.

Cells are matched with :mod:`orchestrator.cells` (the same identity the HTML report and the export use), so
a cell means the same thing everywhere. The first run is the baseline: every other run's figures get their
difference to it in %. A run still in progress is compared with what it has and marked partial; nothing is
filled in for a cell it has not measured. Output as a terminal table, or JSON / CSV whose fields are stable
for scripts (docs/metrics.md, "Comparing runs").
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from sqlalchemy.orm import Session

from labcontract.errors import CompareError
from orchestrator.cells import CellKey, cell_key, key_label, needs_op_mode, op_modes
from orchestrator.queries import RunDetail, app_metrics, is_app_run, run_detail
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.models import Result

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Metric:
    name: str          # JSON / CSV field
    title: str         # table heading
    fmt: str           # how the table prints it
    diff: bool = True  # gets a difference to the first run


STORAGE_METRICS = (Metric("iops", "IOPS", "{:,.0f}"), Metric("mb_s", "MB/s", "{:,.1f}"),
                   Metric("lat_mean_us", "avg lat µs", "{:,.1f}"), Metric("lat_max_us", "max lat µs", "{:,.1f}"),
                   Metric("lat_stddev_us", "lat stddev µs", "{:,.1f}"))
APP_METRICS = (Metric("tps", "TPS", "{:,.1f}"), Metric("qps", "QPS", "{:,.1f}"),
               Metric("lat_avg_ms", "avg lat ms", "{:,.2f}"), Metric("lat_p95_ms", "p95 lat ms", "{:,.2f}"),
               Metric("lat_p99_ms", "p99 lat ms", "{:,.2f}"), Metric("errors", "errors", "{:,.0f}", diff=False),
               Metric("reconnects", "reconnects", "{:,.0f}", diff=False))


@dataclass(frozen=True)
class Entry:
    """One run's figures for one cell."""

    step: str | None                  # the step (or network group) name in that run; None: the run lacks the cell
    op_mode: str | None
    values: dict[str, float | None]   # metric name -> value; None when not measured (yet)


@dataclass(frozen=True)
class Row:
    key: CellKey
    label: str                        # full cell name (orchestrator.cells.key_label), never truncated
    entries: list[Entry]              # one per run, in run order

    def diff(self, i: int, metric: str) -> float | None:
        """Run ``i`` against the first run in %: (x - first) / first x 100; None when either is missing or 0."""
        base, x = self.entries[0].values.get(metric), self.entries[i].values.get(metric)
        if base is None or x is None or base == 0:
            return None
        return (x - base) / base * 100


@dataclass(frozen=True)
class Comparison:
    details: list[RunDetail]
    network: bool
    with_op_mode: bool
    metrics: list[Metric]
    rows: list[Row]

    def partial(self, i: int) -> bool:
        return self.details[i].run.state not in TERMINAL_RUN


def ref_name(i: int) -> str:
    """A, B, ... Z, then R27, R28 ...: short run names for table columns."""
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1000


def storage_values(res: Result | None) -> dict[str, float | None]:
    if res is None:
        return {m.name: None for m in STORAGE_METRICS}
    return {"iops": res.iops, "mb_s": None if res.bw_bytes is None else res.bw_bytes / 1e6,
            "lat_mean_us": _us(res.lat_mean_ns),
            "lat_max_us": _us(res.lat_max_ns), "lat_stddev_us": _us(res.lat_stddev_ns)}


def _storage_cells(d: RunDetail, with_op_mode: bool) -> dict[CellKey, Entry]:
    cells: dict[CellKey, Entry] = {}
    for st in d.steps:
        if st.kind == "measure":
            cells.setdefault(cell_key(st.cell, with_op_mode=with_op_mode),
                             Entry(st.name, str(st.cell.get("op_mode", "stock")), storage_values(d.results.get(st.id))))
    return cells


def app_values(res: Result | None) -> dict[str, float | None]:
    m = app_metrics(res) if res is not None else {}
    return {k.name: m.get(k.name) for k in APP_METRICS}


def _app_cells(d: RunDetail, with_op_mode: bool) -> dict[CellKey, Entry]:
    """An application run's measured points (prepare steps make no row), keyed by profile, app and
    threads / clients (orchestrator.cells), so ``oltp_read_write.t8`` of a stock run meets that of an HP run."""
    cells: dict[CellKey, Entry] = {}
    for st in d.steps:
        if st.kind == "app" and st.cell.get("phase") != "prepare":
            cells.setdefault(cell_key(st.cell, with_op_mode=with_op_mode),
                             Entry(st.name, str(st.cell.get("op_mode", "stock")), app_values(d.results.get(st.id))))
    return cells


def compare_details(details: Sequence[RunDetail]) -> Comparison:
    """Match the runs' cells (see the module docstring); CompareError when they cannot be compared."""
    from orchestrator.netreport import net_cells, net_metrics

    details = list(details)
    if len(details) < 2:
        raise CompareError(f"compare needs at least 2 runs, got {len(details)}")
    network = [bool(d.run.topology) for d in details]
    if any(network) and not all(network):
        net, other = details[network.index(True)], details[network.index(False)]
        raise CompareError(f"run {net.run.id} (suite {net.run.suite_name}) is a network run and run {other.run.id} "
                           f"(suite {other.run.suite_name}) is not: network runs compare only with network runs")
    apps = [is_app_run(d) for d in details]
    if any(apps) and not all(apps):
        app, other = details[apps.index(True)], details[apps.index(False)]
        raise CompareError(f"run {app.run.id} (suite {app.run.suite_name}) is an application run and run "
                           f"{other.run.id} (suite {other.run.suite_name}) is not: application runs compare only "
                           f"with application runs")
    with_mode = needs_op_mode([st.cell for st in d.steps] for d in details)
    if apps[0]:
        per_run = [_app_cells(d, with_mode) for d in details]
        metrics = list(APP_METRICS)
    elif network[0]:
        per_run = [net_cells(d, with_mode) for d in details]
        metrics = net_metrics(details)
    else:
        per_run = [_storage_cells(d, with_mode) for d in details]
        metrics = list(STORAGE_METRICS)
    first = details[0]
    for d, cells in zip(details[1:], per_run[1:], strict=True):
        if not cells.keys() & per_run[0].keys():
            raise CompareError(f"no cell in common between {first.run.id} (suite {first.run.suite_name}: "
                               f"{len(per_run[0])} cells) and {d.run.id} (suite {d.run.suite_name}: "
                               f"{len(cells)} cells)")
    order: dict[CellKey, None] = {}
    for cells in per_run:
        order.update(dict.fromkeys(cells))
    missing = Entry(None, None, {})

    def entry(e: Entry) -> Entry:   # every metric present, None where the run has no figure
        return Entry(e.step, e.op_mode, {m.name: e.values.get(m.name) for m in metrics})

    rows = [Row(k, key_label(k), [entry(cells.get(k, missing)) for cells in per_run]) for k in order]
    return Comparison(details, network[0], with_mode, metrics, rows)


def compare_runs(s: Session, refs: Sequence[str]) -> Comparison:
    """Resolve the run references (id, unique prefix, ``last``) and compare them; StoreError for an unknown one."""
    if len(refs) < 2:
        raise CompareError(f"compare needs at least 2 runs, got {len(refs)}")
    return compare_details([run_detail(s, ref, light=True) for ref in refs])


# --- output -------------------------------------------------------------------------------------------

def run_line(c: Comparison, i: int) -> str:
    d = c.details[i]
    r = d.run
    modes = "/".join(op_modes(st.cell for st in d.steps)) or "-"
    where = (f"{(r.topology or {}).get('target', r.host)} <- {', '.join((r.topology or {}).get('initiators', []))}"
             if c.network else f"{r.host}:{','.join(r.devices or [r.device])}")
    line = f"{ref_name(i)}: {r.id} (suite {r.suite_name}, {where}, {modes}, {r.state})"
    if c.partial(i):
        done = sum(1 for row in c.rows if any(v is not None for v in row.entries[i].values.values()))
        line += f" (partial: {done} of {sum(1 for row in c.rows if row.entries[i].step)} cells measured so far)"
    return line


def _fmt(metric: Metric, v: float | None) -> str:
    return "-" if v is None else metric.fmt.format(v)


def print_comparison(console: Console, c: Comparison) -> None:
    """A header line per run, then a row per run under each cell, each metric with its difference to A."""
    for i in range(len(c.details)):
        console.print(run_line(c, i), highlight=False, soft_wrap=True, markup=False)
    match = ("profile, MTU and path mode" if c.network else "test and threads / clients"
             if c.metrics and c.metrics[0].name == "tps" else "profile and swept values")
    common = sum(1 for row in c.rows if all(e.step for e in row.entries))
    console.print(f"cells matched by {match}{' and OP mode' if c.with_op_mode else ''}: {len(c.rows)} cells, "
                  f"{common} in every run; differences are against A", highlight=False, soft_wrap=True, markup=False)
    lines: list[tuple[list[str], bool]] = []
    for row in c.rows:
        for i, e in enumerate(row.entries):
            cells = [row.label if i == 0 else "", f"{ref_name(i)} {e.op_mode or ''}".rstrip()]
            for m in c.metrics:
                cells.append(_fmt(m, e.values.get(m.name)))
                if m.diff:
                    d = row.diff(i, m.name) if i else None
                    cells.append("-" if d is None else f"{d:+.1f}%")
            lines.append((cells, i == len(row.entries) - 1))
    heads = ["cell", "run", *(h for m in c.metrics for h in ((m.title, "vs A") if m.diff else (m.title,)))]
    content = [max([len(cells[j]) for cells, _end in lines], default=1) for j in range(len(heads))]
    widths = [max(n, len(h)) for n, h in zip(content, heads, strict=True)]          # headers on one line
    if sum(widths[1:]) + 3 * len(heads) + 1 + min(widths[0], 32) > console.width:    # else wrapped by words
        widths = [max(n, *(len(w) for w in h.split())) for n, h in zip(content, heads, strict=True)]
    # nothing is ever cut: every column gets the width of its longest figure (a header wraps between words
    # instead), the cell name whatever the terminal leaves (at least 32: a longer name wraps inside its
    # column), and a table wider than the terminal is written wider (the terminal wraps its lines).
    frame = sum(widths[1:]) + 3 * len(heads) + 1
    widths[0] = min(widths[0], max(32, console.width - frame))
    console.out("\n".join(grid(heads, widths, lines, left={0, 1})), highlight=False)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def grid(heads: list[str], widths: list[int], rows: list[tuple[list[str], bool]], left: set[int]) -> list[str]:
    """A boxed text table (rich's look) drawn directly: rich measures every cell again, which takes seconds
    for a 10-run pattern-125 compare (1,280 rows); here each line is a join."""
    def rule(a: str, mid: str, b: str, fill: str) -> str:
        return a + mid.join(fill * (w + 2) for w in widths) + b

    def block(cells: list[str], bar: str, bottom: bool) -> list[str]:
        cols = [_wrap(c, w) for c, w in zip(cells, widths, strict=True)]
        height = max(len(c) for c in cols)
        cols = [[""] * (height - len(c)) + c if bottom else c + [""] * (height - len(c)) for c in cols]
        return [bar + bar.join(f" {col[k].ljust(w) if j in left else col[k].rjust(w)} "
                               for j, (col, w) in enumerate(zip(cols, widths, strict=True))) + bar
                for k in range(height)]

    out = [rule("┏", "┳", "┓", "━"), *block(heads, "┃", True), rule("┡", "╇", "┩", "━")]
    for i, (cells, end) in enumerate(rows):
        out += block(cells, "│", False)
        if end and i < len(rows) - 1:
            out.append(rule("├", "┼", "┤", "─"))
    out.append(rule("└", "┴", "┘", "─"))
    return out


def as_json(c: Comparison) -> str:
    """The comparison as one JSON document (fields in docs/metrics.md); missing values are null."""
    runs = [{"ref": ref_name(i), "id": d.run.id, "suite": d.run.suite_name, "host": d.run.host,
             "devices": list(d.run.devices or [d.run.device]), "op_modes": op_modes(st.cell for st in d.steps),
             "state": d.run.state, "partial": c.partial(i)} for i, d in enumerate(c.details)]
    cells = [{"cell": row.label, "key": dict(row.key),
              "runs": [{"run": c.details[i].run.id, "step": e.step, "op_mode": e.op_mode, **e.values,
                        "vs_first_pct": {m.name: row.diff(i, m.name) if i else None for m in c.metrics if m.diff}}
                       for i, e in enumerate(row.entries)]} for row in c.rows]
    kind = "network" if c.network else "application" if c.metrics and c.metrics[0].name == "tps" else "storage"
    doc = {"format_version": FORMAT_VERSION, "kind": kind,
           "match_op_mode": c.with_op_mode, "runs": runs,
           "metrics": [{"name": m.name, "title": m.title, "vs_first": m.diff} for m in c.metrics], "cells": cells}
    return json.dumps(doc, indent=2, ensure_ascii=False)


CSV_HEAD = ("cell", "run_ref", "run", "suite", "state", "partial", "step", "op_mode")


def csv_columns(c: Comparison) -> list[str]:
    return [*CSV_HEAD, *(m.name for m in c.metrics), *(f"{m.name}_vs_first_pct" for m in c.metrics if m.diff)]


def as_csv(c: Comparison) -> str:
    """One line per cell and run (long format: a spreadsheet pivots it); missing values are empty fields."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_columns(c))

    def cell(v: Any) -> Any:
        return "" if v is None else v

    for row in c.rows:
        for i, e in enumerate(row.entries):
            d = c.details[i].run
            w.writerow([row.label, ref_name(i), d.id, d.suite_name, d.state, str(c.partial(i)).lower(),
                        cell(e.step), cell(e.op_mode), *(cell(e.values.get(m.name)) for m in c.metrics),
                        *(cell(row.diff(i, m.name) if i else None) for m in c.metrics if m.diff)])
    return buf.getvalue()


FORMATS: dict[str, Callable[[Comparison], str]] = {"json": as_json, "csv": as_csv}
