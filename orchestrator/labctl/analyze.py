"""``labctl analyze``: steady state and change points of series from elsewhere (CSV files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.labctl.common import fails_cleanly

analyze_app = typer.Typer(help="Analyse series from elsewhere.", no_args_is_help=True)


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
