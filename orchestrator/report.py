"""Tables and reports of a run's results (terminal and Markdown)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from labcontract.units import format_size
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step

# The four review metrics come first: throughput (read + write IOPS), average latency over all
# I/Os, max latency, latency standard deviation over all I/Os (docs/metrics.md).
COLUMNS = ("step", "state", "rw", "bs", "T x Q", "IOPS", "avg lat us", "max lat us", "lat stddev us",
           "read IOPS", "write IOPS", "MB/s", "p99 us")


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def _workload_cells(w: dict[str, Any] | None) -> list[str]:
    if not w:
        return ["-", "-", "-"]
    rw = w["rw"] + (f" {w['rwmixread']}/{100 - w['rwmixread']}" if w.get("rwmixread") is not None else "")
    if w.get("percentage_random") is not None:
        rw += f" rand{w['percentage_random']}%"
    return [rw, format_size(int(w["bs"])), f"{w['numjobs']} x {w['iodepth']}"]


def metric_cells(m: dict[str, Any]) -> list[str]:
    """The table's figures from a StepMetrics dict (used for per-device rows)."""
    c = m["combined"]
    return [f"{c['iops']:,.0f}", _us(c.get("lat_mean_ns")), _us(c.get("lat_max_ns")), _us(c.get("lat_stddev_ns")),
            f"{m['read']['iops']:,.0f}", f"{m['write']['iops']:,.0f}", f"{c['bw_bytes'] / 1e6:,.1f}",
            _us(c.get("percentiles_ns", {}).get("p99"))]


def step_row(step: Step, result: Result | None) -> list[str]:
    head = [step.name, step.state if step.kind == "measure" else f"{step.kind} {step.state}",
            *_workload_cells(step.workload)]
    if result is None:
        return head + ["-"] * (len(COLUMNS) - len(head))
    return [*head, f"{result.iops:,.0f}", _us(result.lat_mean_ns), _us(result.lat_max_ns),
            _us(result.lat_stddev_ns), f"{result.read_iops:,.0f}", f"{result.write_iops:,.0f}",
            f"{result.bw_bytes / 1e6:,.1f}", _us(result.lat_p99_ns)]


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
        res = detail.results.get(st.id)
        rows.append(step_row(st, res))
        if res is not None and res.per_device and st.kind == "measure":
            for dev, m in res.per_device.items():
                rows.append([f"  {dev}", "", "", "", "", *metric_cells(m)])
    return rows


def results_table(detail: RunDetail, *, rounds: bool = False) -> Table:
    run = detail.run
    table = Table(title=f"run {run.id}  suite {run.suite_name}  {run.host}:{run.device}  {run.state}",
                  title_justify="left")
    for i, col in enumerate(COLUMNS):
        table.add_column(col, justify="right" if i >= 4 else "left", no_wrap=i == 0)
    for row in table_rows(detail, rounds=rounds):
        table.add_row(*row)
    return table


def print_run(console: Console, detail: RunDetail, *, rounds: bool = False) -> None:
    if detail.run.topology:
        from orchestrator.netreport import print_net_run

        print_net_run(console, detail)
        return
    console.print(results_table(detail, rounds=rounds))
    run = detail.run
    for pc in detail.preconditions:
        state = "running" if pc.steady is None else "steady" if pc.steady else "NOT steady"
        console.print(f"precondition {pc.name}: {state}, {len(pc.rounds)} round(s): {pc.verdict}", highlight=False)
    notes = sorted({st.note for st in detail.steps if st.note})
    for note in notes:
        console.print(f"note: {note}", highlight=False)
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
        for line in provisioning_lines(prov.provenance):
            console.print(line, highlight=False)


def provisioning_lines(provenance: dict[str, Any]) -> list[str]:
    """What Ansible did to the DUTs and the DUT facts it recorded (suites with phases.provision)."""
    lines = [f"provisioned: {note}" for note in provenance.get("provisioning", []) if note]
    facts = provenance.get("dut_facts") or {}
    for dut in facts.get("duts", []):
        health = dut.get("health") or {}
        driver = dut.get("driver") or {}
        lines.append(f"DUT facts ({facts.get('phase')}): {dut.get('name')} {dut.get('real_path') or dut.get('path')} "
                     f"{dut.get('interface')} model={dut.get('model')} fw={dut.get('firmware')} "
                     f"driver={driver.get('name')} {driver.get('version') or ''} "
                     f"capacity={dut.get('capacity_bytes')} health={health or 'n/a'}")
    return lines


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
    for row in table_rows(detail):
        lines.append("| " + " | ".join(row) + " |")
    if detail.preconditions:
        lines += ["", "## Preconditioning", "", "| group | rounds | steady | reached at | verdict |",
                  "|---|---|---|---|---|"]
        for pc in detail.preconditions:
            lines.append(f"| {pc.name} | {len(pc.rounds)} | {pc.steady} | {pc.reached_round or '-'} | "
                         f"{pc.verdict} |")
    lines += ["", "## Artifacts", ""]
    for step in detail.steps:
        for att in step.attempts:
            for art in att.artifacts:
                lines.append(f"- {step.name} attempt {att.number}: [{art.name}]({artifact_root / art.path}) "
                             f"sha256 `{art.sha256}`")
    path.write_text("\n".join(lines) + "\n")
    return path
