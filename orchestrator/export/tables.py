"""The export's tables: their columns (stable: docs/metrics.md "Export columns" is this list, a test checks
it) and their rows, built from the store only.

Every value is a number, a string or None (an empty CSV field, a JSON null); a field that holds several
values (a device group's devices, models) joins them with ``;``. Figures keep the store's precision and are
converted only in unit (ns -> µs, bytes/s -> MB/s, ms -> s) so a spreadsheet sees what the reports show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import units as unit
from orchestrator.cells import CellKey, cell_key, cell_label, key_label
from orchestrator.power import efficiency
from orchestrator.queries import (
    APP_FIGURES,
    RunDetail,
    app_metrics,
    app_series,
    cpu_figures,
    latency_figures,
    result_tool,
)
from orchestrator.store.models import Result, Step

Value = str | int | float | bool | None
WORKLOAD_DIMS = ("rw", "bs", "numjobs", "iodepth", "rwmixread", "percentage_random")
FIGURES = ("read_iops", "write_iops", "iops", "read_mb_s", "write_mb_s", "mb_s", "lat_mean_us", "lat_max_us",
           "lat_stddev_us", "lat_p99_us", "lat_p99_99_us", "lat_p99_999_us", "clat_mean_us", "clat_p99_us",
           "cpu_usr_pct", "cpu_sys_pct", "cpu_us_per_io", "host_cpu_pct", "host_iowait_pct",
           "host_cpu_us_per_io")
POWER_FIGURES = ("watts", "peak_w", "iops_per_w", "mb_s_per_w")   # a step's host power (orchestrator.power)
DEVICE_FACTS = ("device_model", "device_serial", "device_firmware")
STEP_HEAD = ("run", "suite", "host", "devices", "step", "kind", "round", "repeat", "cell", "dims", "op_mode",
             "profile")

APP_DIMS = ("app", "threads", "clients")
RESULT_COLUMNS = (*STEP_HEAD, *WORKLOAD_DIMS, "mtu", "paths", *APP_DIMS, *FIGURES, *POWER_FIGURES, *APP_FIGURES,
                  "runtime_s",
                  "fio_version", "result_kind", "tool", "tool_version", *DEVICE_FACTS)
DEVICE_COLUMNS = (*STEP_HEAD, "device", *DEVICE_FACTS, *FIGURES)
PATH_COLUMNS = ("run", "suite", "group", "cell", "dims", "profile", "mtu", "paths", "tool", "path", "host", "role",
                "path_name", "path_mtu", "gbps", "iops", "lat_mean_us", "tx_gbps", "rx_gbps", "window_s", "complete")
SERIES_COLUMNS = ("run", "step", "kind", "round", "cell", "t", "iops", "read_iops", "write_iops", "lat_mean_us",
                  "lat_max_us", "lat_stddev_us")
APP_SERIES_COLUMNS = ("run", "step", "cell", "op_mode", "app", "threads", "clients", "series", "t", "value")
CELL_COLUMNS = ("run", "suite", "host", "cell", "op_mode", "profile", "metric", "repeats", "planned", "mean",
                "median", "stdev", "ci_low", "ci_high", "cov_pct", "note")


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    rows: list[dict[str, Value]]


def _us(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1000


def _mb(b: Any) -> float | None:
    return None if b is None else float(b) / 1e6


def _joined(values: Sequence[Any]) -> str | None:
    """``a;b`` for a group; None when no value is known, ``unknown`` for one device's missing value."""
    if not values or all(v in (None, "") for v in values):
        return None
    return ";".join("unknown" if v in (None, "") else str(v) for v in values)


def _devices(res: Result) -> list[dict[str, Any]]:
    prov = res.provenance or {}
    return list(prov.get("devices") or ([prov["device"]] if prov.get("device") else []))


def _cell(cell: Mapping[str, Any], workload: Mapping[str, Any] | None) -> tuple[str, str]:
    """The cell's name (:func:`orchestrator.cells.cell_label`, as compare and the reports name it) and its dims
    ``k=v;...``. ``net_paths`` (the path names a path mode resolves to on one lab) is left out, as compare leaves
    it out: ``paths`` says the mode."""
    c = {k: v for k, v in cell.items() if k != "net_paths"}
    return cell_label(c, workload), ";".join(f"{k}={v}" for k, v in cell_key(c, with_op_mode=True))


def _step_head(d: RunDetail, st: Step) -> dict[str, Value]:
    label, dims = _cell(st.cell, st.workload)
    return {"run": d.run.id, "suite": d.run.suite_name, "host": st.host or d.run.host,
            "devices": _joined(d.run.devices or [d.run.device]), "step": st.name, "kind": st.kind,
            "round": st.round, "repeat": st.cell.get("repeat"), "cell": label, "dims": dims,
            "op_mode": st.cell.get("op_mode"), "profile": st.cell.get("profile")}


def _metrics_figures(m: Mapping[str, Any]) -> dict[str, Value]:
    """The figures of a StepMetrics dump (a device of a group)."""
    c, r, w = m.get("combined") or {}, m.get("read") or {}, m.get("write") or {}
    return {"read_iops": r.get("iops"), "write_iops": w.get("iops"), "iops": c.get("iops"),
            "read_mb_s": _mb(r.get("bw_bytes")), "write_mb_s": _mb(w.get("bw_bytes")), "mb_s": _mb(c.get("bw_bytes")),
            "lat_mean_us": _us(c.get("lat_mean_ns")), "lat_max_us": _us(c.get("lat_max_ns")),
            "lat_stddev_us": _us(c.get("lat_stddev_ns")),
            "lat_p99_us": _us((c.get("percentiles_ns") or {}).get("p99")), **latency_figures(m), **cpu_figures(m)}


def power_figures(res: Result) -> dict[str, Value]:
    """The host's average and peak watts during the step and the step's figures per watt (empty: not measured)."""
    eff = efficiency(res)
    return {"watts": eff["watts"], "peak_w": eff["peak_w"], "iops_per_w": eff["iops_per_w"],
            "mb_s_per_w": eff["mbs_per_w"]}


def _measured(d: RunDetail) -> Iterator[tuple[Step, Result]]:
    for st in d.steps:
        res = d.results.get(st.id)
        if res is not None:
            yield st, res


def result_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    for st, res in _measured(d):
        w = st.workload or {}
        devs = _devices(res)
        tool, tool_version = result_tool(res)
        app = app_metrics(res) if st.kind == "app" else {}
        yield {**_step_head(d, st), **{k: w.get(k, st.cell.get(k)) for k in WORKLOAD_DIMS},
               "mtu": st.cell.get("mtu"), "paths": st.cell.get("paths"), **{k: st.cell.get(k) for k in APP_DIMS},
               **{k: app.get(k) for k in APP_FIGURES}, "result_kind": getattr(res, "kind", None) or None,
               "tool": tool, "tool_version": tool_version or None,
               "read_iops": res.read_iops, "write_iops": res.write_iops, "iops": res.iops,
               "read_mb_s": _mb(res.read_bw_bytes), "write_mb_s": _mb(res.write_bw_bytes), "mb_s": _mb(res.bw_bytes),
               "lat_mean_us": _us(res.lat_mean_ns), "lat_max_us": _us(res.lat_max_ns),
               "lat_stddev_us": _us(res.lat_stddev_ns), "lat_p99_us": _us(res.lat_p99_ns),
               **latency_figures(res.metrics), **cpu_figures(res.metrics), **power_figures(res),
               "runtime_s": res.runtime_ms / 1000, "fio_version": res.fio_version or None,
               **{f: _joined([dv.get(f.removeprefix("device_")) for dv in devs]) for f in DEVICE_FACTS}}


def device_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    for st, res in _measured(d):
        facts = {dv.get("path"): dv for dv in _devices(res)}
        for path, m in (res.per_device or {}).items():
            dv = facts.get(path, {})
            yield {**_step_head(d, st), "device": path,
                   **{f: dv.get(f.removeprefix("device_")) or None for f in DEVICE_FACTS}, **_metrics_figures(m)}


def path_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    workloads = {st.seq: st.workload for st in d.steps if st.kind == "net" and st.cell.get("role") == "initiator"}
    for g in d.net_groups:
        label, dims = _cell(g.cell, workloads.get(g.seq))
        window = g.window_end - g.window_start if g.window_start is not None and g.window_end is not None else None
        for path, e in g.per_path.items():
            yield {"run": d.run.id, "suite": d.run.suite_name, "group": g.name, "cell": label, "dims": dims,
                   "profile": g.cell.get("profile"),
                   "mtu": g.cell.get("mtu"), "paths": g.cell.get("paths"), "tool": g.cell.get("tool"), "path": path,
                   "host": e.get("host"), "role": e.get("role"), "path_name": e.get("path"),
                   "path_mtu": e.get("mtu"), "gbps": e.get("gbps"), "iops": e.get("iops"),
                   "lat_mean_us": _us(e.get("lat_mean_ns")), "tx_gbps": e.get("tx_gbps"),
                   "rx_gbps": e.get("rx_gbps"), "window_s": window, "complete": g.complete}


def series_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    for st, res in _measured(d):
        cols = res.series or {}
        label = _cell(st.cell, st.workload)[0]
        for i, t in enumerate(cols.get("t") or []):
            yield {"run": d.run.id, "step": st.name, "kind": st.kind, "round": st.round, "cell": label, "t": t,
                   **{c: _at(cols.get(c), i) for c in SERIES_COLUMNS[6:]}}


def app_series_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    """An application result's per-second series (``tps``, ...), long format: a row per series and second."""
    for st, res in _measured(d):
        if st.kind != "app":
            continue
        label = _cell(st.cell, st.workload)[0]
        for name, values in app_series(res).items():
            for t, v in enumerate(values, start=1):
                yield {"run": d.run.id, "step": st.name, "cell": label, "op_mode": st.cell.get("op_mode"),
                       "app": st.cell.get("app"), "threads": st.cell.get("threads"), "clients": st.cell.get("clients"),
                       "series": name, "t": t, "value": v}


def cell_rows(d: RunDetail) -> Iterator[dict[str, Value]]:
    """Every measured cell's figures over its repeats (orchestrator.stats.samples), one row per cell and
    metric: a cell run once has n 1 and no spread or interval."""
    from orchestrator.stats.samples import run_samples, summary_metrics

    metrics = summary_metrics(d)
    names: dict[CellKey, str] = {}          # the cell's name without its OP mode (a column of its own)
    for st in sorted(d.steps, key=lambda st: st.cell.get("role") == "target"):    # a network cell: its initiators'
        names.setdefault(cell_key(st.cell, with_op_mode=True), cell_label(st.cell, st.workload))
    for cs in run_samples(d, with_op_mode=True).values():
        head = {"run": d.run.id, "suite": d.run.suite_name, "host": d.run.host, "cell": names.get(cs.key) or key_label(
            tuple(kv for kv in cs.key if kv[0] != "op_mode")), "op_mode": cs.op_mode,
            "profile": dict(cs.key).get("profile"), "planned": cs.planned}
        for m in metrics:
            s = cs.summary(m.name)
            if s is not None:
                yield {**head, "metric": m.name, "repeats": s.n, "mean": s.mean, "median": s.median,
                       "stdev": s.stdev, "ci_low": s.ci_low, "ci_high": s.ci_high, "cov_pct": s.cov_pct,
                       "note": s.note or None}


def _at(col: Any, i: int) -> Value:
    return col[i] if isinstance(col, list) and i < len(col) else None


TABLES: dict[str, tuple[tuple[str, ...], Callable[[RunDetail], Iterator[dict[str, Value]]]]] = {
    "results": (RESULT_COLUMNS, result_rows), "devices": (DEVICE_COLUMNS, device_rows),
    "paths": (PATH_COLUMNS, path_rows), "series": (SERIES_COLUMNS, series_rows),
    "app_series": (APP_SERIES_COLUMNS, app_series_rows), "cells": (CELL_COLUMNS, cell_rows)}


def build(details: Sequence[RunDetail], names: Sequence[str], units: str = "decimal") -> list[Table]:
    """The named tables over every run, rows in run then plan order, keys in column order; bandwidth in
    ``units`` (:mod:`orchestrator.units`: MB/s, or MiB/s with its columns named ``*_mib_s``)."""
    out = []
    for name in names:
        columns, rows = TABLES[name]
        out.append(in_units(Table(name, columns, [{c: r.get(c) for c in columns} for d in details for r in rows(d)]),
                            units))
    return out


SUMMARY_FIGURES = ("mean", "median", "stdev", "ci_low", "ci_high")   # a cells row's figures, in its metric's unit


def in_units(table: Table, units: str) -> Table:
    """The table with its bandwidth columns (and the cells table's bandwidth rows) in ``units``."""
    if unit.check_units(units) == "decimal":
        return table
    rows = []
    for r in table.rows:
        row: dict[str, Value] = {unit.named(c, units): _scaled(c, v, units) for c, v in r.items()}
        metric = r.get("metric")
        if isinstance(metric, str) and unit.is_bandwidth(metric):
            row |= {"metric": unit.named(metric, units), **{f: _scaled(metric, r.get(f), units)
                                                            for f in SUMMARY_FIGURES}}
        rows.append(row)
    return Table(table.name, tuple(unit.named(c, units) for c in table.columns), rows)


def _scaled(name: str, v: Value, units: str) -> Value:
    if unit.is_bandwidth(name) and isinstance(v, int | float) and not isinstance(v, bool):
        return unit.value(name, float(v), units)
    return v
