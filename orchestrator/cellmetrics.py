"""A measured cell's figures, one entry per step (per repeat): what compare, the repeat summaries
(:mod:`orchestrator.stats.samples`) and history (:mod:`orchestrator.stats.history`) read from a run.

Storage cells give IOPS, MB/s and latency; application points TPS, QPS and latency; a network cell the
window totals of its group (:mod:`orchestrator.netreport`). A cell is keyed by :func:`orchestrator.cells.cell_key`,
which never holds the ``repeat`` number: the repeats of a cell are entries with the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from labcontract.registry import Registry
from orchestrator.cellbase import Entry, Metric
from orchestrator.cells import CellKey, cell_key, cell_label
from orchestrator.netreport import net_entries, net_metrics
from orchestrator.power import efficiency
from orchestrator.queries import (
    RunDetail,
    app_metrics,
    cpu_figures,
    in_window,
    is_app_run,
    latency_figures,
    round_windows,
)
from orchestrator.store.models import Result

__all__ = ["APP_METRICS", "HEADLINE", "RESULT_KINDS", "STORAGE_METRICS", "Entry", "Metric", "ResultKind", "app_values",
           "cell_entries", "metrics_of", "result_kind", "run_kind", "storage_values"]


# "lat" is fio's total latency (submission + completion), "clat" its completion latency, as fio names them
STORAGE_METRICS = (Metric("iops", "IOPS", "{:,.0f}"), Metric("mb_s", "MB/s", "{:,.1f}"),
                   Metric("lat_mean_us", "avg lat µs", "{:,.1f}"), Metric("lat_max_us", "max lat µs", "{:,.1f}"),
                   Metric("lat_stddev_us", "lat stddev µs", "{:,.1f}"),
                   Metric("lat_p99_us", "p99 lat µs", "{:,.1f}"), Metric("lat_p99_99_us", "p99.99 lat µs", "{:,.1f}"),
                   Metric("clat_p99_us", "p99 clat µs", "{:,.1f}"),
                   # fio's own CPU over the step, in % of one CPU, and CPU µs per I/O (StepMetrics.cpu)
                   Metric("cpu_usr_pct", "usr CPU %", "{:,.1f}"), Metric("cpu_sys_pct", "sys CPU %", "{:,.1f}"),
                   Metric("cpu_us_per_io", "CPU µs/IO", "{:,.2f}"),
                   # the whole host's CPU over the step, in % of all its CPUs (StepMetrics.host_cpu)
                   Metric("host_cpu_pct", "host CPU %", "{:,.1f}"),
                   # the host's power from its BMC during the step, and the figures per watt (orchestrator.power)
                   Metric("watts", "W", "{:,.0f}"), Metric("iops_per_w", "IOPS/W", "{:,.1f}"),
                   Metric("mb_s_per_w", "MB/s/W", "{:,.3f}"))
APP_METRICS = (Metric("tps", "TPS", "{:,.1f}"), Metric("qps", "QPS", "{:,.1f}"),
               Metric("lat_avg_ms", "avg lat ms", "{:,.2f}"), Metric("lat_p95_ms", "p95 lat ms", "{:,.2f}"),
               Metric("lat_p99_ms", "p99 lat ms", "{:,.2f}"), Metric("errors", "errors", "{:,.0f}", diff=False),
               Metric("reconnects", "reconnects", "{:,.0f}", diff=False))
# what a cell is judged on (compare's significance, history's regressions): the main figure of each kind and
# whether higher is better
HEADLINE = {"iops": True, "mb_s": True, "mib_s": True, "lat_mean_us": False, "tps": True, "lat_p95_ms": False,
            "gbps": True}


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1000


def storage_values(res: Result | None) -> dict[str, float | None]:
    if res is None:
        return {m.name: None for m in STORAGE_METRICS}
    values = {"iops": res.iops, "mb_s": None if res.bw_bytes is None else res.bw_bytes / 1e6,
              "lat_mean_us": _us(res.lat_mean_ns), "lat_max_us": _us(res.lat_max_ns),
              "lat_stddev_us": _us(res.lat_stddev_ns), "lat_p99_us": _us(res.lat_p99_ns),
              **latency_figures(res.metrics), **cpu_figures(res.metrics)}
    eff = efficiency(res)
    values.update(watts=eff["watts"], iops_per_w=eff["iops_per_w"], mb_s_per_w=eff["mbs_per_w"])
    return {m.name: values.get(m.name) for m in STORAGE_METRICS}


def app_values(res: Result | None) -> dict[str, float | None]:
    m = app_metrics(res) if res is not None else {}
    return {k.name: m.get(k.name) for k in APP_METRICS}


@dataclass(frozen=True)
class ResultKind:
    """What the read side knows of one kind of stored result, keyed by its name in :data:`RESULT_KINDS`: its
    figures, how a result row becomes them, which runs hold it and how their cells are read. compare, the repeats
    summaries, history and the reports ask the run's kind (:func:`result_kind`) instead of branching on it."""

    name: str                                         # "storage", "app", "net"
    title: str                                        # in messages: "a network run", "an application run"
    metrics: tuple[Metric, ...]                       # every figure of a cell, in table order
    summary: tuple[Metric, ...]                       # what a repeated cell is summarized on
    step_kind: str                                    # the step kind whose results it reads
    holds: Callable[[RunDetail], bool]                # whether a run is of this kind (asked in registration order)
    values: Callable[[Result | None], dict[str, float | None]]
    entries: Callable[[RunDetail, bool], Iterator[tuple[CellKey, Entry]]] | None = None   # None: step by step
    # the figures compare puts side by side for these runs (None: ``metrics``)
    compared: Callable[[Sequence[RunDetail]], list[Metric]] | None = None

    def compare_metrics(self, details: Sequence[RunDetail]) -> list[Metric]:
        return self.compared(details) if self.compared is not None else list(self.metrics)

    def cell_entries(self, d: RunDetail, with_op_mode: bool = False) -> Iterator[tuple[CellKey, Entry]]:
        if self.entries is not None:
            yield from self.entries(d, with_op_mode)
            return
        windows = round_windows(d.preconditions)     # a rounds run: its cells' reported rounds (labcontract.rounds)
        for st in d.steps:
            if st.kind != self.step_kind or (self.name == "app" and st.cell.get("phase") == "prepare"):
                continue
            if windows and not in_window(st.cell, windows):
                continue
            yield cell_key(st.cell, with_op_mode=with_op_mode), Entry(
                st.name, str(st.cell.get("op_mode", "stock")), self.values(d.results.get(st.id)),
                cell_label(st.cell, st.workload, with_op_mode=with_op_mode))


RESULT_KINDS: Registry[ResultKind] = Registry("result kind")


def register(kind: ResultKind) -> ResultKind:
    return RESULT_KINDS.add(kind.name, kind)


register(ResultKind("net", "network", (Metric("gbps", "Gbps", "{:.3f}"), Metric("target_gbps", "target Gbps", "{:.3f}"),
                            Metric("iops", "IOPS", "{:,.0f}")),
                    (Metric("gbps", "Gbps", "{:.3f}"), Metric("target_gbps", "target Gbps", "{:.3f}"),
                     Metric("iops", "IOPS", "{:,.0f}")),
                    "net", lambda d: bool(d.run.topology), lambda _res: {}, net_entries, net_metrics))
register(ResultKind("app", "application", APP_METRICS, tuple(m for m in APP_METRICS if m.diff), "app", is_app_run,
                    app_values))
register(ResultKind("storage", "storage", STORAGE_METRICS, tuple(m for m in STORAGE_METRICS if m.diff), "measure",
                    lambda _d: True, storage_values))


def result_kind(d: RunDetail) -> ResultKind:
    """The kind of ``d``'s results: the first registered kind that holds it (storage last: any other run)."""
    return next(k for k in RESULT_KINDS.values() if k.holds(d))


def run_kind(d: RunDetail) -> str:
    """``net``, ``app`` or ``storage``."""
    return result_kind(d).name


def cell_entries(d: RunDetail, with_op_mode: bool = False) -> Iterator[tuple[CellKey, Entry]]:
    """Every measured step of the run (each repeat) as (cell key, entry), in plan order. A network run: its
    groups (a cell planned but not measured yet comes once, with no figures)."""
    return result_kind(d).cell_entries(d, with_op_mode)


def metrics_of(kind: str) -> tuple[Metric, ...]:
    return RESULT_KINDS.get_or_fail(kind).metrics
