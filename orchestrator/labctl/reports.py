"""``labctl compare``, ``labctl report`` and ``labctl export``: the morning-after commands that read runs from
the store and write what people publish (tables, HTML and Markdown reports, CSV / JSON for scripts)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from labcontract.errors import LabError
from orchestrator.labctl.backend import backend
from orchestrator.labctl.common import fail, out


def add_report_commands(app: typer.Typer) -> None:
    """Register the commands of this module as top-level ``labctl`` commands."""
    from orchestrator.labctl.artifacts import artifacts
    from orchestrator.labctl.imports import import_, import_fio

    for fn in (compare, report, export, artifacts):
        app.command()(fn)
    app.command("import")(import_)
    app.command("import-fio")(import_fio)


RUNS_HELP = "Run ids, unique prefixes, or 'last'."
UNITS_HELP = ("decimal (MB/s: 10^6 bytes/s, as reviews print) or binary (MiB/s: 2^20 bytes/s, fio's family): every "
              "bandwidth figure, named for its unit (mb_s / mib_s).")


def _input_fails_2(fn: Callable[..., None]) -> Callable[..., None]:
    """Bad input to compare / report / export (an unknown run, runs with no cell in common, fewer than 2
    runs, an output that cannot be written): its one-line reason and exit code 2, as a usage error."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except LabError as e:
            fail(str(e))
            raise typer.Exit(2) from None

    return wrapper


@_input_fails_2
def compare(
    runs: Annotated[list[str], typer.Argument(metavar="RUN", help=RUNS_HELP + " The first is the "
                                              "baseline (e.g. stock): the others get their difference to it in % "
                                              "and its verdict (significant or not; single run: cannot "
                                              "judge); --baseline picks another.")],
    format: Annotated[str, typer.Option("--format", help="table, json or csv (fields: docs/metrics.md).")]
    = "table",
    html: Annotated[Path | None, typer.Option(help="Also write the comparison as an HTML report (charts with "
                                                   "the runs overlaid) to this file.")] = None,
    units: Annotated[str, typer.Option(help=UNITS_HELP)] = "decimal",
    reference: Annotated[str | None, typer.Option(help="Compare one RUN with the reference set of this suite: "
                                                       "every device any lab measured with it (imported runs "
                                                       "too), each by its latest run: min / median / max and "
                                                       "the run's percentile rank per headline figure "
                                                       "(--format table or json).")] = None,
    baseline: Annotated[str | None, typer.Option(metavar="RUN", help="The run the others are compared against "
                                                 "(one of the RUNs; default: the first).")] = None,
) -> None:
    """Runs side by side, cell by cell (profile, swept values; OP mode when a run holds several; network:
    MTU and path mode): the four review metrics and MB/s (network: Gbps), each the mean over the cell's
    repeats and against the first run, with the verdict on the headline figures (Welch's t-test or
    Mann-Whitney U when both runs have 2+ repeats; docs/statistics.md "Compare"). An unknown run, fewer than
    2 runs or runs with no cell in common exit with code 2."""
    from labcontract.errors import CompareError
    from orchestrator.compare import FORMATS

    if format not in ("table", *FORMATS):
        raise CompareError(f"--format: unknown format {format!r} (choose from table, {', '.join(FORMATS)})")
    if reference is not None:
        return _compare_reference(runs, reference, format, units)
    backend().compare(runs, format, units, html, baseline, out)
    if html is not None:
        print(f"HTML report: {html}", file=sys.stderr if format != "table" else sys.stdout)


def _compare_reference(runs: list[str], suite: str, format: str, units: str) -> None:
    from labcontract.errors import CompareError

    if len(runs) != 1:
        raise CompareError(f"--reference compares one run with the reference set, got {len(runs)} runs")
    if format not in ("table", "json"):
        raise CompareError(f"--reference: --format table or json, not {format!r}")
    print(backend().reference(runs[0], suite, format, units))


@_input_fails_2
def report(
    runs: Annotated[list[str], typer.Argument(metavar="RUN", help=RUNS_HELP)],
    html: Annotated[Path | None, typer.Option(help="Write one self-contained HTML file for the runs (one run: "
                                                   "its report; several: overlaid on every chart).")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Also write the Markdown report of each run "
                                                              "(the default without --html).")] = False,
    latency_cell: Annotated[list[str] | None, typer.Option(
        help="Cell (full name, as compare prints it) whose latency distribution is drawn (repeat).")] = None,
) -> None:
    """Write the report(s) of runs and print the paths: the HTML report with --html, else (or also, with
    --markdown) the Markdown report of each run in the lab's report directory."""
    for path in backend().report(runs, html, markdown, latency_cell):
        print(path)


@_input_fails_2
def export(
    runs: Annotated[list[str], typer.Argument(metavar="RUN", help=RUNS_HELP)],
    format: Annotated[str, typer.Option("--format", help="csv (one file per table), json (one document), or lab "
                                                         "(everything another lab needs to hold the runs, with "
                                                         "their artifacts, for labctl import: a directory or "
                                                         ".tar.gz given with --output).")],
    output: Annotated[Path | None, typer.Option(help="Directory (csv: TABLE.csv each; json: export.json) or "
                                                     "file; default: standard output (csv: one table).")] = None,
    table: Annotated[str, typer.Option(help="results, devices (device groups), paths (network), series "
                                            "(per second), or all.")] = "results",
    units: Annotated[str, typer.Option(help=UNITS_HELP)] = "decimal",
    lab: Annotated[str | None, typer.Option(help="With --format lab: the name of this lab, carried by the export "
                                                 "(labctl import tags the runs with it).")] = None,
) -> None:
    """Export runs' figures for scripts and spreadsheets; the columns are listed in docs/metrics.md
    ("Export columns"); a missing value is an empty CSV field or a JSON null. --format lab exports the runs for
    another lab (docs/reports.md, "Labs that share results")."""
    b = backend()
    if format == "lab":
        print(b.export_lab(runs, output, lab))
        return
    for path in b.export(runs, format, table, output, units):
        print(path)
