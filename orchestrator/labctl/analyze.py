"""``labctl analyze``: steady state and change points of series from elsewhere (CSV files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.labctl.common import command_group, fails_cleanly
from orchestrator.labctl.groups import HELP

analyze_app = command_group(help=HELP["analyze"], no_args_is_help=True)


@analyze_app.command("steady-state")
@fails_cleanly
def analyze_steady_state(
    file: Annotated[Path, typer.Argument(help="CSV: one value per round per line (optional header; the last "
                                              "field of a line is the value).")],
    window: Annotated[int, typer.Option(help="Rounds in the window.")] = 5,
    max_range_pct: Annotated[float, typer.Option(help="Range limit, % of the window mean.")] = 20.0,
    max_excursion_pct: Annotated[float, typer.Option(help="Fitted-line excursion limit, % of mean.")] = 10.0,
) -> None:
    """SNIA PTS steady state of a series: prints 'steady at round N' or 'not steady'."""
    from labcontract.steady import SteadyCriteria
    from orchestrator.analysis import analyze_steady_state as analyze

    line, verdict = analyze(file, SteadyCriteria(window=window, max_range_pct=max_range_pct,
                                                 max_excursion_pct=max_excursion_pct))
    print(line)
    print(verdict.reason, file=sys.stderr)


@analyze_app.command("changes")
@fails_cleanly
def analyze_changes(
    file: Annotated[Path, typer.Argument(help="CSV with a header naming a 'value' column; one row per run, "
                                              "in time order (other columns are ignored).")],
) -> None:
    """Change points of a run history (E-Divisive means): prints 'change at row N: BEFORE -> AFTER'
    lines (N: the 1-based data row of the first run after the change) or 'no change'."""
    from orchestrator.stats.changes_csv import analyze_changes_detailed

    lines, how = analyze_changes_detailed(file)
    for line in lines:
        print(line)
    print(how, file=sys.stderr)


MAX_FIO_BYTES = 256 << 20     # a json+ report of a long run with many jobs: tens of MB


@analyze_app.command("fio")
@fails_cleanly
def analyze_fio(
    files: Annotated[list[Path], typer.Argument(help="fio --output-format=json+ (or json) output files: of a local "
                                                     "run, or of fio --client driving one or more fio --server.")],
    groups: Annotated[bool, typer.Option(help="Also one line per job group (per server with fio --client).")] = False,
) -> None:
    """The lab's figures of fio output made elsewhere, computed as the lab computes its own: IOPS and MB/s summed,
    latency mean over every I/O, percentiles from the merged histogram bins (with fio --client, the servers'
    entries merged; the 'All clients' sum checked against them). Total latency (submission + completion) in us, or
    completion latency when the job file binned only that (no lat_percentiles=1)."""
    from labcontract.errors import FioError
    from labcontract.fioresult import StepMetrics, parse_fio_groups, parse_fio_output

    def line(name: str, m: StepMetrics) -> str:
        c = m.combined
        pct, mean, what = c.percentiles_ns, c.lat_mean_ns, "latency"
        if not pct and c.clat_percentiles_ns:      # a job file without lat_percentiles=1: fio binned clat only
            pct, mean, what = c.clat_percentiles_ns, c.clat_mean_ns, "completion latency"

        def us(ns: float | None) -> str:
            return "-" if ns is None else f"{ns / 1000:,.1f}"
        return (f"{name}: {c.iops:,.0f} IOPS (read {m.read.iops:,.0f}, write {m.write.iops:,.0f}), "
                f"{c.bw_bytes / 1e6:,.1f} MB/s, {what} mean {us(mean)} us, p50 {us(pct.get('p50'))}, "
                f"p99 {us(pct.get('p99'))}, p99.9 {us(pct.get('p99.9'))}, p99.99 {us(pct.get('p99.99'))}")

    failed = 0
    for path in files:
        try:
            size = path.stat().st_size
            if size > MAX_FIO_BYTES:
                raise FioError(f"{size} bytes, over the {MAX_FIO_BYTES >> 20} MiB this reads", path=str(path))
            text = path.read_bytes()
            m = parse_fio_output(text, source=str(path))
            print(f"{line(str(path), m)} [fio {m.fio_version}, {m.jobs} job entr"
                  f"{'y' if m.jobs == 1 else 'ies'}]")
            if groups:
                for name, gm in parse_fio_groups(text, source=str(path)).items():
                    print("  " + line(name, gm))
        except OSError as e:
            print(f"error: {path}: cannot be read: {e.strerror or e}", file=sys.stderr)
            failed += 1
        except FioError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
    if failed:
        raise typer.Exit(1)
