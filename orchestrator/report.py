"""Tables and reports of a run's results (terminal and Markdown).

Both show the run's provenance as :func:`orchestrator.provenance.describe` gives it (platform, every device
of a group, how the OP mode was set, purge, preconditioning, overrides with their warnings), so the terminal,
the Markdown file and the HTML report say the same thing, and a missing value reads "unknown", never "None".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from labcontract.registry import Registry
from orchestrator import power
from orchestrator.cellmetrics import run_kind
from orchestrator.cells import cell_label
from orchestrator.provenance import DEVICE_COLUMNS, Provenance, ReadArtifact, describe
from orchestrator.queries import (
    APP_FIGURES,
    RunDetail,
    app_metrics,
    app_point,
    cpu_figures,
    latency_figures,
    point_dim_of,
    result_tool,
)
from orchestrator.runfacts import precondition_labels, precondition_line, steady_word
from orchestrator.store.models import Result, Step

# The four review metrics come first: throughput (read + write IOPS), average latency over all
# I/Os, max latency, latency standard deviation over all I/Os (docs/metrics.md).
COLUMNS = ("step", "state", "workload", "IOPS", "avg lat us", "max lat us", "lat stddev us",
           "read IOPS", "write IOPS", "MB/s", "p99 lat us", "p99 clat us", "CPU us/IO")
# (lat: fio's total latency, lat_ns: submission + completion; clat: its completion latency, clat_ns; CPU is fio's
# own, user + system, per I/O)


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def _n(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def metric_cells(m: dict[str, Any]) -> list[str]:
    """The table's figures from a StepMetrics dict (used for per-device rows)."""
    c = m["combined"]
    return [f"{c['iops']:,.0f}", _us(c.get("lat_mean_ns")), _us(c.get("lat_max_ns")), _us(c.get("lat_stddev_ns")),
            f"{m['read']['iops']:,.0f}", f"{m['write']['iops']:,.0f}", f"{c['bw_bytes'] / 1e6:,.1f}",
            _us(c.get("percentiles_ns", {}).get("p99")), _us((c.get("clat_percentiles_ns") or {}).get("p99")),
            _cpu_per_io(m)]


def _clat_p99(m: dict[str, Any] | None) -> str:
    v = latency_figures(m)["clat_p99_us"]
    return "-" if v is None else f"{v:,.1f}"


def _cpu_per_io(m: dict[str, Any] | None) -> str:
    v = cpu_figures(m)["cpu_us_per_io"]
    return "-" if v is None else f"{v:,.2f}"


def _fio_figures(result: Result) -> list[str]:
    bw = None if result.bw_bytes is None else result.bw_bytes / 1e6
    return [_n(result.iops), _us(result.lat_mean_ns), _us(result.lat_max_ns),
            _us(result.lat_stddev_ns), _n(result.read_iops), _n(result.write_iops), _n(bw, "{:,.1f}"),
            _us(result.lat_p99_ns), _clat_p99(result.metrics), _cpu_per_io(result.metrics)]


def _headline_figures(result: Result) -> list[str]:
    """Any other kind of result in a step's row: its kind-neutral headline rate (``throughput`` in its own unit)."""
    rate = "-" if result.throughput is None else f"{result.throughput:,.1f} {result.throughput_unit}".strip()
    return [rate] + ["-"] * (len(COLUMNS) - 4)


# a step's figures in the results table by its result's kind (Result.kind); a kind not registered: its headline rate
STEP_FIGURES: Registry[Callable[[Result], list[str]]] = Registry("step figures of a result kind")
STEP_FIGURES.add("fio", _fio_figures)


def step_row(step: Step, result: Result | None) -> list[str]:
    head = [step.name, step.state if step.kind == "measure" else f"{step.kind} {step.state}",
            cell_label(step.cell, step.workload) if step.workload else "-"]
    if result is None:
        return head + ["-"] * (len(COLUMNS) - len(head))
    return [*head, *STEP_FIGURES.get(result.kind, _headline_figures)(result)]


def table_rows(detail: RunDetail, *, rounds: bool = False) -> list[list[str]]:
    """Rows of the results table: measured cells (with a row per device of a group), purges, and
    precondition rounds (only the last round of each group unless ``rounds``)."""
    rows = []
    last_round: dict[int, int] = {}
    for st in detail.steps:
        if st.kind == "precondition":
            last_round[st.seq] = max(last_round.get(st.seq, 0), st.round)
    for st in detail.steps:
        if st.kind == "precondition" and not rounds and st.round != last_round[st.seq]:
            continue
        if st.kind == "app":
            continue               # the application table (app_table)
        res = detail.results.get(st.id) or detail.earlier_rounds.get(st.id)   # a round before the reported window too
        rows.append(step_row(st, res))
        if res is not None and res.per_device and st.kind == "measure":
            for dev, m in res.per_device.items():
                rows.append([f"  {dev}", "", "", *metric_cells(m)])
    return rows


def results_table(detail: RunDetail, *, rounds: bool = False) -> Table:
    run = detail.run
    table = Table(title=f"run {run.id}  suite {run.suite_name}  {run.host}:{','.join(run.devices or [run.device])}  "
                       f"{run.state}",
                  title_justify="left")
    for i, col in enumerate(COLUMNS):
        table.add_column(col, justify="right" if i >= 3 else "left", no_wrap=i in (0, 2),
                         min_width=12 if i == 1 else None)
    for row in table_rows(detail, rounds=rounds):
        table.add_row(*row)
    return table


# an application run (sysbench / pgbench / external): a row per step, the figures of labcontract.apps.AppResult
APP_COLUMNS = ("step", "state", "op mode", "threads / clients", "TPS", "QPS", "avg lat ms", "p95 lat ms",
               "p99 lat ms", "errors", "reconnects")
_APP_FMT = {"tps": "{:,.1f}", "qps": "{:,.1f}", "lat_avg_ms": "{:,.2f}", "lat_p95_ms": "{:,.2f}",
            "lat_p99_ms": "{:,.2f}", "errors": "{:,.0f}", "reconnects": "{:,.0f}"}


def app_rows(detail: RunDetail) -> list[list[str]]:
    """Rows of the application table: each step in plan order (purges and prepares with their state only),
    each measured point with its figures; an external workload's other metrics are named after its row."""
    rows = []
    for st in detail.steps:
        if st.kind in ("provision", "facts"):
            continue
        res = detail.results.get(st.id)
        state = st.state if st.kind == "app" and st.cell.get("phase") != "prepare" else \
            f"{st.cell.get('phase', st.kind)} {st.state}"
        point = app_point(st)
        head = [st.name, state, str(st.cell.get("op_mode", "-")),
                "-" if point is None else f"{point} {point_dim_of(st)}"]
        if res is None or st.kind != "app":
            rows.append(head + ["-"] * (len(APP_COLUMNS) - len(head)))
            continue
        m = app_metrics(res)
        rows.append(head + [_n(m.get(k), _APP_FMT[k]) for k in APP_FIGURES if k in _APP_FMT])
        extra = {k: v for k, v in m.items() if k not in APP_FIGURES and k != "transactions"}
        if extra:
            rows.append(["  " + ", ".join(f"{k} {v:,.6g}" for k, v in extra.items())] + [""] * (len(APP_COLUMNS) - 1))
    return rows


def app_tools(detail: RunDetail) -> str:
    """``sysbench 1.0.20 / MariaDB 10.11.6``: what measured the run's application results."""
    seen: dict[str, None] = {}
    for res in detail.results.values():
        tool, version = result_tool(res)
        server = (res.metrics or {}).get("server_version") if isinstance(res.metrics, dict) else None
        label = " ".join(x for x in (tool, version) if x) + (f" / {server}" if server else "")
        seen.setdefault(label, None)
    return ", ".join(seen) or "unknown"


def app_table(detail: RunDetail) -> Table:
    run = detail.run
    table = Table(title=f"run {run.id}  suite {run.suite_name}  {run.host}:{','.join(run.devices or [run.device])}  "
                        f"{run.state}  ({app_tools(detail)})", title_justify="left")
    for i, col in enumerate(APP_COLUMNS):
        table.add_column(col, justify="right" if i >= 3 else "left", no_wrap=i == 0)
    for row in app_rows(detail):
        table.add_row(*row)
    return table


def app_markdown(detail: RunDetail) -> list[str]:
    """The application section of the Markdown report: a row per point (docs/apps.md)."""
    return ["## Application results", "", f"Measured with {_cell(app_tools(detail))}; TPS and QPS over each "
            "point's measured time (after its warm-up), latencies in ms as the tool reports them.", "",
            "| " + " | ".join(APP_COLUMNS) + " |", "|" + "---|" * len(APP_COLUMNS),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in app_rows(detail))]


def artifact_reader(artifact_root: Path | None) -> ReadArtifact | None:
    """Read an artifact by its path under ``artifact_root`` (None: the report names no artifact content)."""
    if artifact_root is None:
        return None
    root = artifact_root
    return lambda rel: (root / rel).read_bytes()


def provenance_lines(p: Provenance) -> list[str]:
    """The provenance for the terminal: warnings first, then each section's rows and the devices."""
    lines = [f"WARNING: {w}" for w in p.warnings]
    if p.partial:
        lines.append("PARTIAL: the run has not ended; figures are what has been measured so far")
    for title, rows in p.sections:
        if title == "Run":
            rows = [(k, v) for k, v in rows if k != "warning"]
        width = max((len(k) for k, _v in rows), default=0)
        lines += [f"{title}:", *(f"  {k:<{width}}  {v}" for k, v in rows)]
    if p.devices:
        lines.append(f"Devices ({p.device_label}):")
        lines += ["  " + " | ".join(f"{c} {d[c]}" for c in DEVICE_COLUMNS) for d in p.devices]
    return lines


@dataclass(frozen=True)
class ResultsView:
    """How ``run show`` and the Markdown report give a run's results, per result kind (orchestrator.cellmetrics
    RESULT_KINDS): its console tables, its Markdown sections, and whether the general sections follow (a network run
    prints its own, then its provenance)."""

    console: Callable[[Console, RunDetail, bool], None]
    markdown: Callable[[RunDetail], list[str]]
    general: bool = True


def _storage_console(console: Console, detail: RunDetail, rounds: bool) -> None:
    console.print(results_table(detail, rounds=rounds))
    if (watts := power_table(detail)) is not None:
        console.print(watts)


def _storage_markdown(detail: RunDetail) -> list[str]:
    lines = ["## Results", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table_rows(detail)]
    if watts := power.rows(detail):
        lines += ["", "## Power and drive temperature", "", "| " + " | ".join(power.COLUMNS) + " |",
                  "|" + "---|" * len(power.COLUMNS), *("| " + " | ".join(_cell(c) for c in r) + " |" for r in watts)]
    return lines


def _net_console(console: Console, detail: RunDetail, _rounds: bool) -> None:
    from orchestrator.netreport import print_net_run

    print_net_run(console, detail)


VIEWS: Registry[ResultsView] = Registry("results view")
VIEWS.add("storage", ResultsView(_storage_console, _storage_markdown))
VIEWS.add("app", ResultsView(lambda console, detail, _r: console.print(app_table(detail)),
                             app_markdown))
VIEWS.add("net", ResultsView(_net_console, _storage_markdown, general=False))


def print_run(console: Console, detail: RunDetail, *, rounds: bool = False, artifact_root: Path | None = None) -> None:
    prov = describe(detail, artifact_reader(artifact_root))
    view = VIEWS.get_or_fail(run_kind(detail))
    view.console(console, detail, rounds)
    if not view.general:
        for line in provenance_lines(prov):
            console.print(line, highlight=False, markup=False)
        return
    repeats = repeats_table(detail)
    if repeats is not None:
        console.print(repeats)
    run = detail.run
    labels = precondition_labels(detail.steps)
    for pc in detail.preconditions:
        console.print(precondition_line(pc, labels.get(pc.seq)), highlight=False, markup=False)
    notes = sorted({st.note for st in detail.steps if st.note})
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    if run.reason:
        console.print(f"reason: {run.reason}")
    if run.set_aside:
        console.print(f"set aside by the controller: {run.set_aside}", highlight=False, markup=False)
    for step in detail.steps:
        if step.state != "SUCCEEDED" and step.reason:
            console.print(f"  {step.name}: {step.reason}")
    for line in provenance_lines(prov):
        console.print(line, highlight=False, markup=False)


def power_table(detail: RunDetail) -> Table | None:
    """Per measured step: the host's power, IOPS and MB/s per watt, its drives' temperature and thermal throttling
    (orchestrator.power); None when the run has no measured step."""
    rows = power.rows(detail)
    if not rows:
        return None
    table = Table(title="power and drive temperature", title_justify="left")
    for i, col in enumerate(power.COLUMNS):
        table.add_column(col, justify="right" if i in (2, 3) else "left", no_wrap=i == 0)
    for row in rows:
        table.add_row(*row)
    return table


def repeats_table(detail: RunDetail) -> Table | None:
    """The repeated cells: mean, the 95% interval's half width and the CoV (both in % of the mean), n measured
    of planned (orchestrator.stats.samples); None when no cell was repeated."""
    from orchestrator.stats.samples import summary_rows

    heads, rows = summary_rows(detail)
    if not rows:
        return None
    table = Table(title="repeated cells: mean, 95% confidence interval (± % of the mean), CoV", title_justify="left")
    for i, h in enumerate(heads):
        table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def provenance_markdown(p: Provenance) -> list[str]:
    """The provenance as Markdown: warnings as a quote, a table per section, the devices table."""
    lines = [f"> **Warning:** {_cell(w)}" for w in p.warnings]
    if p.partial:
        lines.append("> **Partial:** the run has not ended; figures are what has been measured so far.")
    lines += [""] if lines else []
    for title, rows in p.sections:
        if title == "Run":
            rows = [(k, v) for k, v in rows if k != "warning"]
        lines += [f"## {title}", "", "| | |", "|---|---|", *(f"| {_cell(k)} | {_cell(v)} |" for k, v in rows), ""]
        if title.startswith("Platform") and p.devices:
            lines += [f"## Devices: {_cell(p.device_label)}", "", "| " + " | ".join(DEVICE_COLUMNS) + " |",
                      "|" + "---|" * len(DEVICE_COLUMNS),
                      *("| " + " | ".join(_cell(d[c]) for c in DEVICE_COLUMNS) + " |" for d in p.devices), ""]
    return lines


def write_markdown(detail: RunDetail, report_dir: Path, artifact_root: Path) -> Path:
    run = detail.run
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / f"{run.id}.md"
    prov = describe(detail, artifact_reader(artifact_root))
    modes = ", ".join(prov.op_modes) or "-"
    lines = [f"# Run {run.id}: suite `{run.suite_name}` ({modes}) on {prov.device_label}", "",
             f"- target: `{run.host}` : `{', '.join(run.devices or [run.device])}`",
             f"- state: **{run.state}** {run.reason}".rstrip(), ""]
    lines += provenance_markdown(prov)
    lines += VIEWS.get_or_fail(run_kind(detail)).markdown(detail)
    from orchestrator.stats.samples import summary_rows

    heads, rows = summary_rows(detail)
    if rows:
        lines += ["", "## Repeated cells", "", "Mean of the repeats, the 95% confidence interval's half width and "
                  "the coefficient of variation, both in % of the mean; n measured of planned.", "",
                  "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
                  *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)]
    if detail.preconditions:
        lines += ["", "## Preconditioning", "", "| group | rounds | steady | reached at | verdict |",
                  "|---|---|---|---|---|"]
        labels = precondition_labels(detail.steps)
        for pc in detail.preconditions:
            lines.append(f"| {_cell(labels.get(pc.seq, pc.name))} | {len(pc.rounds)} | {steady_word(pc.steady)} | "
                         f"{pc.reached_round or '-'} | {_cell(pc.verdict) or '-'} |")
    lines += ["", "## Artifacts", ""]
    for step in detail.steps:
        for att in step.attempts:
            for art in att.artifacts:
                lines.append(f"- {step.name} attempt {att.number}: [{art.name}]({artifact_root / art.path}) "
                             f"sha256 `{art.sha256}`")
    path.write_text("\n".join(lines) + "\n")
    return path
