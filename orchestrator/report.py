"""Tables and reports of a run's results (terminal and Markdown)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labcontract.units import format_size
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step

COLUMNS = ("step", "state", "rw", "bs", "T x Q", "read IOPS", "write IOPS", "total IOPS", "MB/s",
           "lat mean us", "p99 us", "max us", "stddev us")


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def step_row(step: Step, result: Result | None) -> list[str]:
    w = step.workload
    rw = w["rw"] + (f" {w['rwmixread']}/{100 - w['rwmixread']}" if w.get("rwmixread") is not None else "")
    head = [step.name, step.state, rw, format_size(int(w["bs"])), f"{w['numjobs']} x {w['iodepth']}"]
    if result is None:
        return head + ["-"] * (len(COLUMNS) - len(head))
    return [*head, f"{result.read_iops:,.0f}", f"{result.write_iops:,.0f}", f"{result.iops:,.0f}",
            f"{result.bw_bytes / 1e6:,.1f}", _us(result.lat_mean_ns), _us(result.lat_p99_ns),
            _us(result.lat_max_ns), _us(result.lat_stddev_ns)]


def results_table(detail: RunDetail) -> Table:
    run = detail.run
    table = Table(title=f"run {run.id}  suite {run.suite_name}  {run.host}:{run.device}  {run.state}",
                  title_justify="left")
    for i, col in enumerate(COLUMNS):
        table.add_column(col, justify="right" if i >= 4 else "left", no_wrap=i == 0)
    for step in detail.steps:
        table.add_row(*step_row(step, detail.results.get(step.id)))
    return table


def print_run(console: Console, detail: RunDetail) -> None:
    console.print(results_table(detail))
    run = detail.run
    if run.reason:
        console.print(f"reason: {run.reason}")
    for step in detail.steps:
        if step.state != "SUCCEEDED" and step.reason:
            console.print(f"  {step.name}: {step.reason}")
    prov = next(iter(detail.results.values()), None)
    if prov is not None:
        h, d = prov.provenance.get("host", {}), prov.provenance.get("device", {})
        console.print(f"platform: {h.get('hostname')} | {h.get('cpu_model')} ({h.get('cpu_cores')} cores) | "
                      f"{(h.get('memory_bytes') or 0) / 2**30:.1f} GiB | {h.get('os')} | kernel {h.get('kernel')} | "
                      f"{prov.fio_version}")
        console.print(f"device:   {d.get('name')} {d.get('path')} ({d.get('kind')}, "
                      f"{(d.get('size_bytes') or 0) / 2**30:.2f} GiB) model={d.get('model')} "
                      f"serial={d.get('serial')} fw={d.get('firmware')}")


def write_markdown(detail: RunDetail, report_dir: Path, artifact_root: Path) -> Path:
    run = detail.run
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / f"{run.id}.md"
    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.submitted_at))
    lines = [f"# Run {run.id}: suite `{run.suite_name}`", "",
             f"- target: `{run.host}` : `{run.device}`",
             f"- submitted: {ts}; state: **{run.state}** {run.reason}",
             f"- suite sha256: `{run.suite_sha256}`", ""]
    prov = next(iter(detail.results.values()), None)
    if prov is not None:
        h, d = prov.provenance.get("host", {}), prov.provenance.get("device", {})
        lines += ["## Platform", "",
                  "| host | CPU | cores | memory | OS | kernel | fio |", "|---|---|---|---|---|---|---|",
                  f"| {h.get('hostname')} | {h.get('cpu_model')} | {h.get('cpu_cores')} | "
                  f"{(h.get('memory_bytes') or 0) / 2**30:.1f} GiB | {h.get('os')} | {h.get('kernel')} | "
                  f"{prov.fio_version} |", "",
                  f"Device: `{d.get('path')}` ({d.get('kind')}, {(d.get('size_bytes') or 0) / 2**30:.2f} GiB), "
                  f"model {d.get('model')}, serial {d.get('serial')}, firmware {d.get('firmware')}", ""]
    lines += ["## Results", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for step in detail.steps:
        lines.append("| " + " | ".join(step_row(step, detail.results.get(step.id))) + " |")
    lines += ["", "## Artifacts", ""]
    for step in detail.steps:
        for att in step.attempts:
            for art in att.artifacts:
                lines.append(f"- {step.name} attempt {att.number}: [{art.name}]({artifact_root / art.path}) "
                             f"sha256 `{art.sha256}`")
    path.write_text("\n".join(lines) + "\n")
    return path
