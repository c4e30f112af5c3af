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
from orchestrator.labctl.common import State, fail, out
from orchestrator.labctl.common import sessions_or_fail as _sessions
from orchestrator.states import TERMINAL_RUN


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


def _write_html(details: Any, path: Path, options: dict[str, str] | None, history: Any = None) -> None:
    from orchestrator import htmlreport
    from orchestrator.report import artifact_reader

    try:
        htmlreport.write_html(details, path, options=options,
                              read_artifact=artifact_reader(State.config.artifact_dir), history=history)
    except OSError as e:
        raise LabError(f"{path}: cannot write the HTML report: {e.strerror or e}") from e


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
    from orchestrator.compare import FORMATS, compare_runs
    from orchestrator.comparetable import print_table as print_comparison

    if format not in ("table", *FORMATS):
        raise CompareError(f"--format: unknown format {format!r} (choose from table, {', '.join(FORMATS)})")
    from orchestrator.labctl.apicmds import api_client

    if reference is not None:
        return _compare_reference(runs, reference, format, units)

    if (api_ := api_client()) is not None:
        return _compare_through(api_, runs, format, units, html, baseline)
    with _sessions()() as s:
        c = compare_runs(s, runs, units, baseline)
        if format == "table":
            print_comparison(out, c)
        else:
            sys.stdout.write(FORMATS[format](c))
        for i in range(len(c.details)):
            if c.partial(i):
                print(f"warning: run {c.details[i].run.id} is {c.details[i].run.state}: partial", file=sys.stderr)
        if html is not None:
            _write_html(c.details, html, None)
            print(f"HTML report: {html}", file=sys.stderr if format != "table" else sys.stdout)


def _compare_reference(runs: list[str], suite: str, format: str, units: str) -> None:
    from labcontract.errors import CompareError
    from orchestrator.labctl.apicmds import api_client
    from orchestrator.reference import as_json, reference_set, table_lines

    if len(runs) != 1:
        raise CompareError(f"--reference compares one run with the reference set, got {len(runs)} runs")
    if format not in ("table", "json"):
        raise CompareError(f"--reference: --format table or json, not {format!r}")
    if (api_ := api_client()) is not None:
        from orchestrator.units import check_units

        check_units(units)
        print(api_.reference(api_.resolve(runs[0]), suite, format, units))
        return
    with _sessions()() as s:
        ref = reference_set(s, runs[0], suite, units)
    print(as_json(ref) if format == "json" else "\n".join(table_lines(ref)))


def _compare_through(api: Any, runs: list[str], format: str, units: str, html: Path | None,
                     baseline: str | None) -> None:
    """``labctl --api … compare``: the web service compares (the same code) and draws the table for this terminal's
    width and colours, so that the output is what the command prints against the store."""
    from labcontract.errors import CompareError
    from orchestrator.units import check_units

    check_units(units)
    if len(runs) < 2:                       # (as compare_runs words it)
        raise CompareError(f"compare needs at least 2 runs, got {len(runs)}")
    from orchestrator.compare import baseline_first

    ids = [api.resolve(r) for r in runs]
    ids = baseline_first(ids, api.resolve(baseline) if baseline else None)   # refused here as against the store
    from orchestrator.textout import terminal_of

    width, color = terminal_of(out)
    text, partial = api.compare(ids, format, units, width=width, color=color, baseline=ids[0])
    sys.stdout.write(text)
    sys.stdout.flush()
    for rid in partial:
        print(f"warning: run {rid} is {api.run(rid).get('state')}: partial", file=sys.stderr)
    if html is not None:
        page, _ = api.compare(ids, "html", units, baseline=ids[0])
        try:
            html.write_text(page, encoding="utf-8")
        except OSError as e:
            raise LabError(f"{html}: cannot write the HTML report: {e.strerror or e}") from e
        print(f"HTML report: {html}", file=sys.stderr if format != "table" else sys.stdout)


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
    from orchestrator.labctl.apicmds import api_client, write_report
    from orchestrator.queries import run_detail
    from orchestrator.report import write_markdown

    if (api_ := api_client()) is not None:
        if html is None or markdown or latency_cell:
            raise LabError("through --api: the runs' HTML report with --html FILE (no --markdown, --latency-cell)")
        return write_report(api_, runs, html)
    with _sessions()() as s:
        details = [run_detail(s, ref) for ref in runs]
        for d in details:
            if d.run.state not in TERMINAL_RUN:
                print(f"warning: run {d.run.id} is {d.run.state}: partial report (what was measured so far)",
                      file=sys.stderr)
        if html is not None:
            from orchestrator.runhistory import histories

            _write_html(details, html, {"latency_cells": ",".join(latency_cell)} if latency_cell else None,
                        histories(s, [d.run.id for d in details]))
            print(html)
        if html is None or markdown:
            for d in details:
                print(write_markdown(d, State.config.report_dir, State.config.artifact_dir))


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
    from orchestrator.export import export as write_export
    from orchestrator.labctl.apicmds import api_client
    from orchestrator.labctl.apicmds import export as api_export
    from orchestrator.queries import run_detail

    if format == "lab":
        return _export_lab(runs, output, lab)
    if (api_ := api_client()) is not None:
        return api_export(api_, runs, format, table, output, units)
    with _sessions()() as s:
        details = [run_detail(s, ref) for ref in runs]
        for path in write_export(details, format, table, output, sys.stdout, units):
            print(path)


def _export_lab(runs: list[str], output: Path | None, lab: str | None) -> None:
    import re

    from labcontract.errors import ExportError
    from labcontract.rundoc import LAB_RE
    from orchestrator.export.bundle import documents, load_runs, write_bundle
    from orchestrator.labctl.apicmds import api_client
    from orchestrator.queries import resolve_run_id

    if api_client() is not None:
        raise ExportError("--format lab reads the store and the artifact directory: not through --api")
    if output is None:
        raise ExportError("--format lab: give --output DIR (or FILE.tar.gz)")
    if lab is not None and not re.match(LAB_RE, lab):
        raise ExportError(f"--lab {lab[:80]!r}: a lab name is 1-64 letters, digits, '_', '.', '-'")
    with _sessions()() as s:
        docs, files = documents(s, load_runs(s, [resolve_run_id(s, r) for r in runs]), State.config.artifact_dir)
    print(write_bundle(docs, files, output, lab))
